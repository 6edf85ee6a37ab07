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


def write_pngs(doc, out_dir, stamp="", all_runs=False, peers=None):
    """Writes one PNG per plan at the seed prompt length (or one per run with
    all_runs); returns the paths."""
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
        fig, ax = plt.subplots(figsize=(12, 8), dpi=110)
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
        for f, (x, y) in sorted(zip(fams, pts), key=lambda t: -t[0]["seconds"])[:14]:
            share = 100 * f["seconds"] / total
            ax.annotate(f"{f['label']} ({share:.0f} %)" if share >= 1 else f"{f['label']} ({share:.1f} %)",
                        (x, y), fontsize=7,
                        xytext=(5, 4), textcoords="offset points", zorder=4)
        for x, y, p in peer_pts:
            ax.scatter([x], [y], s=70, facecolors="none", edgecolors="tab:cyan", linewidths=1.6,
                       marker="D", label="peers (same run)" if "peers" not in seen else None, zorder=3)
            seen.add("peers")
            ax.annotate(f"{p['group']}/{p['name']}: {p['impl']}", (x, y), fontsize=6.5, color="teal",
                        xytext=(5, -9), textcoords="offset points", zorder=4)
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
        leg = ax.legend(loc="lower right", fontsize=7.5)
        for h in getattr(leg, "legend_handles", None) or getattr(leg, "legendHandles", []):
            if hasattr(h, "set_sizes"):
                h.set_sizes([40])
        if zero:
            names = ", ".join(f"{f['label']} {f['ms']:.2f} ms" for f in
                              sorted(zero, key=lambda f: -f["seconds"])[:6])
            fig.text(0.01, 0.005, f"not drawn (no FLOPs counted): {names}"
                     + (" ..." if len(zero) > 6 else ""), fontsize=6.5)
        fig.tight_layout(rect=(0, 0.02, 1, 1))
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
