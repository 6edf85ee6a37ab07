#!/usr/bin/env python3
"""Roofline picture of a strata plan's run: per kernel family, achieved
TFLOP/s against arithmetic intensity (FLOP per byte), log-log, under the
target's roofline as the plan records it (plan.json "roofline": memory GB/s,
matrix-unit and vector TFLOP/s), with the peers measured in the same run
drawn as hollow markers.

Why: the performance table says how fast each component is; this picture says
why, by showing which families sit on the memory roof, which are compute-bound
and which are far under both. Bytes and FLOPs are the compiler's counts
(strata-run --profile=json), times are CUDA events, so nothing here is
estimated after the fact.

  python3 bench/roofline.py bench/results/bench-X.json [-o DIR] [--all-runs]

It reads report.py's JSON (or strata_bench.py's, with --peers for the peers)
and needs matplotlib (pip install matplotlib where it is missing).
"""
import argparse
import gzip
import json
import math
import os
import sys


class NoPlot(Exception):
    """Why no picture could be made (one line, no traceback)."""


CATEGORIES = (  # (name, colour, test on the label)
    ("hyper-connection", "tab:blue", lambda s: "hc_" in s),
    ("routed experts", "tab:orange", lambda s: s.startswith("moe_")),
    ("attention / indexer", "tab:red", lambda s: "attention" in s or "qsa" in s or "block_mean" in s),
    ("gated delta rule", "tab:purple", lambda s: "gated_delta" in s),
    ("dense GEMM", "tab:green", lambda s: "matmul" in s),
    ("other", "tab:gray", lambda s: True),
)


def category(label):
    for name, colour, test in CATEGORIES:
        if test(label):
            return name, colour
    return "other", "tab:gray"


def runs_of(doc):
    strata = doc.get("strata", doc)
    return strata, [r for r in strata.get("runs", []) if r.get("status") == "ok"]


def boxes_overlap(a, b):
    """Whether two display-space boxes (x0, y0, x1, y1) share any area."""
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


# Where a label may go, in points from its marker: right above, right
# below, left above, left below, straight above, straight below.
TABLE_ROWS = 20  # rows of the table under the picture (6.5 pt)
OFFSETS = ((5, 4, "left"), (5, -10, "left"), (-5, 4, "right"), (-5, -10, "right"),
           (0, 9, "center"), (0, -15, "center"))


def place_labels(fig, ax, items, obstacles=()):
    """Annotates each item (dicts of x, y, text, color, size; in priority
    order) at the first offset where its drawn box overlaps no box placed
    before it and stays inside the axes; an item without one gets a number
    (placed the same way where it fits) and is returned for the table under
    the picture. Boxes are measured from the rendered text, so the
    guarantee (no two labels overlap, none covers an obstacle such as the
    legend) holds for the fonts drawn. Sets
    item["box"] (the label's box, or None) and item["number"]."""
    renderer = fig.canvas.get_renderer()
    frame = ax.get_window_extent(renderer)
    frame = (frame.x0, frame.y0, frame.x1, frame.y1)
    placed, table = list(obstacles), []

    def try_place(item, text, size):
        for dx, dy, ha in OFFSETS:
            t = ax.annotate(text, (item["x"], item["y"]), fontsize=size, color=item["color"],
                            xytext=(dx, dy), textcoords="offset points", ha=ha, zorder=4)
            e = t.get_window_extent(renderer)
            # Two pixels of air around each label, so neighbours read apart.
            box = (e.x0 - 2, e.y0 - 2, e.x1 + 2, e.y1 + 2)
            inside = box[0] >= frame[0] and box[2] <= frame[2] and box[1] >= frame[1] and box[3] <= frame[3]
            if inside and not any(boxes_overlap(box, b) for b in placed):
                placed.append(box)
                return box
            t.remove()
        return None

    for item in items:
        item["number"] = None
        item["box"] = try_place(item, item["text"], item["size"])
        if item["box"] is None:
            item["number"] = len(table) + 1
            table.append(item)
            item["box"] = try_place(item, str(item["number"]), 6)
    return table


def write_pngs(doc, out_dir, stamp="", all_runs=False, peers=None, layouts=None):
    """Writes one PNG per plan at the seed prompt length (or one per run with
    all_runs); returns the paths. With layouts (a list), appends each
    picture's label layout (place_labels' items and table) to it."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception as e:  # noqa: BLE001 - any import failure means: no picture here
        raise NoPlot(f"matplotlib cannot be imported ({type(e).__name__}: {e}); "
                     "run bench/roofline.py on the results JSON where it can")
    strata, runs = runs_of(doc)
    if not runs:
        raise NoPlot("no successful strata run in the results")
    seed_T = strata.get("seed_tokens")
    if not all_runs:
        runs = [r for r in runs if r["T"] == seed_T] or runs[:1]
    peers = peers if peers is not None else doc.get("peers")
    meta = doc.get("meta", {})
    plan = strata.get("plan", {})
    roof = plan.get("roofline") or {}
    mem, mat, vec = roof.get("mem_gbs"), roof.get("mat_tflops"), roof.get("vec_tflops")
    tag = stamp[len("bench-"):] if stamp.startswith("bench-") else stamp
    os.makedirs(out_dir, exist_ok=True)
    paths = []
    for run in runs:
        fams = [f for f in run["families"] if f["flops"] > 0 and f["bytes"] > 0 and f["seconds"] > 0]
        zero = [f for f in run["families"] if not (f["flops"] > 0 and f["bytes"] > 0 and f["seconds"] > 0)]
        if not fams:
            continue
        # A fixed layout (no tight_layout after the labels: moving the axes
        # would move the markers under labels placed for their positions):
        # the picture above, the table of the labels that did not fit below.
        fig = plt.figure(figsize=(12, 10), dpi=110)
        ax = fig.add_axes((0.07, 0.37, 0.91, 0.55))
        xs = [f["flops"] / f["bytes"] for f in fams]
        ys = [f["tflops"] for f in fams]
        pts = [(x, y) for x, y in zip(xs, ys)]
        peer_pts = []
        if peers and run["T"] == seed_T:
            for p in peers.get("results", []):
                if p.get("status") == "ok" and p.get("flops", 0) > 0 and p.get("bytes", 0) > 0:
                    peer_pts.append((p["flops"] / p["bytes"], p["tflops"], p))
        allx = [x for x, _ in pts] + [x for x, _, _ in peer_pts]
        ally = [y for _, y in pts] + [y for _, y, _ in peer_pts]
        xlo = 10 ** math.floor(math.log10(min(allx)) - 0.3)
        xhi = 10 ** math.ceil(math.log10(max(allx)) + 0.3)
        top = max([v for v in (mat, vec) if v] + ally)
        ylo = 10 ** math.floor(math.log10(max(min(ally), 1e-6)) - 0.3)
        yhi = 10 ** math.ceil(math.log10(top) + 0.2)
        # Roofs: min(memory bandwidth x intensity, peak).
        if mem:
            grid = [xlo * (xhi / xlo) ** (i / 200) for i in range(201)]
            for peak, name, style in ((mat, "matrix units", "-"), (vec, "vector fp32", "--")):
                if peak:
                    ax.plot(grid, [min(mem * x / 1e3, peak) for x in grid], style, color="black", lw=1.2,
                            label=f"roof: {mem:,.0f} GB/s, {name} {peak:g} TFLOP/s")
        total = sum(f["seconds"] for f in run["families"]) or 1.0
        seen = set()
        for f, (x, y) in zip(fams, pts):
            cat, colour = category(f["label"])
            size = 30 + 1500 * f["seconds"] / total
            ax.scatter([x], [y], s=size, color=colour, alpha=0.75, edgecolors="black", linewidths=0.5,
                       label=cat if cat not in seen else None, zorder=3)
            seen.add(cat)
        for x, y, p in peer_pts:
            ax.scatter([x], [y], s=70, facecolors="none", edgecolors="tab:cyan", linewidths=1.6,
                       marker="D", label="peers (same run)" if "peers" not in seen else None, zorder=3)
            seen.add("peers")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlim(xlo, xhi)
        ax.set_ylim(ylo, yhi)
        ax.set_xlabel("arithmetic intensity (FLOP per byte, the compiler's counts)")
        ax.set_ylabel("achieved TFLOP/s")
        ax.grid(True, which="both", alpha=0.25)
        ax.set_title(f"{plan.get('name') or 'plan'} ({plan.get('target')}), T = {run['T']}: "
                     f"{run['kernel_seconds'] * 1e3:.1f} ms in {run['kernels']} kernels, floors "
                     f"{run['floor_seconds'] * 1e3:.1f} ms\n{meta.get('gpu')}, driver {meta.get('driver')}, "
                     f"{meta.get('date')}, commit {meta.get('commit')}; marker area = share of time",
                     fontsize=9)
        # Labels, slowest family first, then the peers: each at the first
        # free one of a few offsets around its marker, else a number there
        # and its row in the table under the axes (the dense cluster of
        # small row kernels put a dozen labels on one spot).
        items = []
        for f, (x, y) in sorted(zip(fams, pts), key=lambda t: -t[0]["seconds"]):
            share = 100 * f["seconds"] / total
            items.append(dict(x=x, y=y, color="black", size=7,
                              text=f"{f['label']} ({share:.0f} %)" if share >= 1
                              else f"{f['label']} ({share:.1f} %)",
                              row=(f["label"], f"{share:.1f} %", f"{1e3 * f['seconds']:.3f}",
                                   f"{x:.3g}", f"{y:.3g}")))
        for x, y, p in peer_pts:
            items.append(dict(x=x, y=y, color="teal", size=6.5,
                              text=f"{p['group']}/{p['name']}: {p['impl']}",
                              row=(f"peer {p['group']}/{p['name']}: {p['impl']}", "", "",
                                   f"{x:.3g}", f"{y:.3g}")))
        leg = ax.legend(loc="lower right", fontsize=7.5)
        for h in getattr(leg, "legend_handles", None) or getattr(leg, "legendHandles", []):
            if hasattr(h, "set_sizes"):
                h.set_sizes([40])
        renderer = fig.canvas.get_renderer()
        e = leg.get_window_extent(renderer)
        legend_box = (e.x0, e.y0, e.x1, e.y1)
        table = place_labels(fig, ax, items, obstacles=[legend_box])
        if layouts is not None:
            layouts.append(dict(T=run["T"], items=items, table=table, legend=legend_box))
        tax = fig.add_axes((0.07, 0.035, 0.91, 0.27))
        tax.axis("off")
        if table:
            rows = [[str(i["number"])] + list(i["row"]) for i in table]
            if len(rows) > TABLE_ROWS:
                more = len(rows) - (TABLE_ROWS - 1)
                rows = rows[:TABLE_ROWS - 1] + [["", f"... and {more} more (results JSON)", "", "", "", ""]]
            tb = tax.table(cellText=rows, colLabels=["#", "kernel family (no room for its label)", "share",
                                                     "ms", "FLOP/B", "TFLOP/s"],
                           loc="upper center", cellLoc="left", colWidths=[0.04, 0.56, 0.1, 0.1, 0.1, 0.1])
            tb.auto_set_font_size(False)
            tb.set_fontsize(6.5)
            tb.scale(1, 0.9)
        if zero:
            names = ", ".join(f"{f['label']} {f['ms']:.2f} ms" for f in
                              sorted(zero, key=lambda f: -f["seconds"])[:6])
            fig.text(0.01, 0.005, f"not drawn (no FLOPs counted): {names}"
                     + (" ..." if len(zero) > 6 else ""), fontsize=6.5)
        name = f"roofline-{plan.get('name') or 'plan'}-T{run['T']}" + (f"-{tag}" if tag else "") + ".png"
        path = os.path.join(out_dir, name)
        fig.savefig(path)
        plt.close(fig)
        paths.append(path)
    if not paths:
        raise NoPlot("no kernel family with bytes, FLOPs and time to draw")
    return paths


def open_results(path):
    """A results JSON, or its gzipped copy (bench/results keeps the runs
    before the latest as .json.gz)."""
    return gzip.open(path, "rt") if path.endswith(".gz") else open(path)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results", help="report.py's JSON (or strata_bench.py's)")
    ap.add_argument("--peers", help="peers.py's JSON when RESULTS is strata_bench.py's")
    ap.add_argument("--all-runs", action="store_true", help="one picture per prompt length")
    ap.add_argument("-o", "--out-dir", help="default: beside RESULTS")
    a = ap.parse_args()
    try:
        with open_results(a.results) as f:
            doc = json.load(f)
        peers = None
        if a.peers:
            with open_results(a.peers) as f:
                peers = json.load(f)
    except (OSError, ValueError) as e:
        print(f"roofline: error: {e}", file=sys.stderr)
        return 1
    stem = os.path.basename(a.results).removesuffix(".gz").removesuffix(".json")
    out = a.out_dir or os.path.dirname(os.path.abspath(a.results))
    try:
        for p in write_pngs(doc, out, stamp=stem, all_runs=a.all_runs, peers=peers):
            print(f"roofline: wrote {p}")
    except NoPlot as e:
        print(f"roofline: error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
