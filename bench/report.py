#!/usr/bin/env python3
"""Puts strata's component times (bench/strata_bench.py) and the peers'
(bench/peers.py) side by side: one results JSON (every number, both inputs
whole) and one text file (GPU, driver, date, commit, the comparison table with
floors, ratios and the performance issue's bars, each peer's status, the
per-kernel profile tables), plus the roofline PNG (bench/roofline.py).

Why: the performance issue's table must come from one run on one GPU, with
every figure traceable to a results file; this script is the one place that
defines which strata kernels a row sums, which peer it is compared with, and
how each bar is checked. It runs on the GPU machine at the end of
bench/run.sh, and here on results fetched from it:

  python3 bench/report.py --strata S.json --peers P.json -o bench/results/bench-X
"""
import argparse
import datetime
import gzip
import json
import os
import platform
import subprocess
import sys

# The performance issue's bars.
BAR_K1_COPY = 0.90          # HC K1 >= 90 % of the measured copy rate
BAR_EXPERTS = 0.60          # routed experts >= 60 % of the grouped_mm rate
BAR_DELTA = 1.5             # delta layer within 1.5x of fla
BAR_TOKENS_PER_S = 5000.0   # full prefill >= 5,000 tokens/s


def load(path, what):
    if not path:
        return None
    try:
        with (gzip.open(path, "rt") if path.endswith(".gz") else open(path)) as f:
            return json.load(f)
    except FileNotFoundError:
        print(f"report: no {what} results ({path}): its rows say 'not measured'", file=sys.stderr)
    except ValueError as e:
        print(f"report: {path} is not JSON ({e}): its rows say 'not measured'", file=sys.stderr)
    return None


def peer(peers, group, name, impl):
    for r in (peers or {}).get("results", []):
        if r["group"] == group and r["name"] == name and r["impl"] == impl:
            return r
    return None


def ok(r):
    return r is not None and r.get("status") == "ok"


def fmt_ms(ms):
    if ms is None:
        return "-"
    return f"{ms:.3f} ms" if ms < 100 else f"{ms:.1f} ms"


def verdict(passed):
    return "PASS" if passed else "FAIL"


def seed_run(strata):
    if not strata:
        return None
    for r in strata.get("runs", []):
        if r.get("T") == strata.get("seed_tokens") and r.get("status") == "ok":
            return r
    return None


def ours_entry(comp, key, label=None):
    c = (comp or {}).get(key)
    if not c:
        return None
    return {"what": label or " + ".join(c.get("kernels", [])), "ms": c["ms_mean"], "count": c["count"],
            "ms_median": c["ms_median"], "ms_min": c["ms_min"], "ms_max": c["ms_max"],
            "gbs": c["gbs"], "tflops": c["tflops"], "floor_ms": c["floor_ms"],
            "roofline_pct": c["roofline_pct"], "bytes": c["bytes"], "flops": c["flops"]}


def peer_entry(r, label=None):
    if r is None:
        return None
    e = {"what": label or r["impl"], "status": r["status"]}
    if ok(r):
        e.update(ms=r["ms_median"], gbs=r.get("gbs"), tflops=r.get("tflops"), reps=r.get("reps"),
                 mode=r.get("mode"))
    else:
        e["reason"] = r.get("reason")
    return e


def build_rows(strata, peers):
    """The comparison table: one dict per row (see docs/PERFORMANCE.md)."""
    run = seed_run(strata)
    comp = run["components"] if run else None
    T = (strata.get("seed_tokens") if strata else None) or ((peers or {}).get("shapes") or {}).get("T")
    rows = []

    def row(key, title, ours, peers_, ratio=None, bar=None, note=None):
        rows.append({"key": key, "title": title, "T": T, "ours": ours,
                     "peers": [p for p in peers_ if p is not None], "ratio": ratio, "bar": bar,
                     "floor_ms": ours["floor_ms"] if ours else None, "note": note})

    # HC K1 against the copy rate.
    ours = ours_entry(comp, "hc_k1")
    copy = peer(peers, "hc", "k1", "copy_ D2D")
    eager, comp_ = peer(peers, "hc", "k1", "torch eager"), peer(peers, "hc", "k1", "torch.compile")
    ratio = bar = None
    if ours and ok(copy):
        frac = ours["gbs"] / copy["gbs"]
        ratio = {"text": f"ours {ours['gbs']:.0f} GB/s = {100 * frac:.1f} % of the copy rate "
                         f"({copy['gbs']:.0f} GB/s)", "value": frac}
        bar = {"text": f">= {100 * BAR_K1_COPY:.0f} % of the copy rate", "passed": frac >= BAR_K1_COPY}
    row("hc_k1", "HC K1 (R += lambda*F, per-stream RMSNorm, bf16 image), one call", ours,
        [peer_entry(copy, "copy_ D2D of K1's bytes"), peer_entry(eager), peer_entry(comp_)], ratio, bar)

    ours = ours_entry(comp, "hc_k1_moe")
    ratio = None
    if ours and ok(copy):
        ratio = {"text": f"ours {ours['gbs']:.0f} GB/s = {100 * ours['gbs'] / copy['gbs']:.1f} % of the copy rate",
                 "value": ours["gbs"] / copy["gbs"]}
    row("hc_k1_moe", "HC K1 with the MoE combine folded in, one call", ours,
        [peer_entry(copy, "copy_ D2D (of plain K1's bytes)")], ratio, None,
        "no peer does this fusion; shown against the copy rate")

    # One whole site against torch.compile.
    ours = ours_entry(comp, "hc_site")
    eager, comp_ = peer(peers, "hc", "site", "torch eager"), peer(peers, "hc", "site", "torch.compile")
    ratio = bar = None
    if ours and ok(comp_):
        ratio = {"text": f"torch.compile / ours = {comp_['ms_median'] / ours['ms']:.2f}x",
                 "value": comp_["ms_median"] / ours["ms"]}
        bar = {"text": "faster than torch.compile", "passed": ours["ms"] < comp_["ms_median"]}
    row("hc_site", "HC whole site K1 + K2 + K3 (after an attention/delta sublayer)", ours,
        [peer_entry(eager), peer_entry(comp_)], ratio, bar)
    ours = ours_entry(comp, "hc_site_moe")
    row("hc_site_moe", "HC whole site with the MoE-combine K1", ours, [], None, None,
        "same K2/K3; peers as the row above")

    # Routed experts.
    gmm = peer(peers, "moe", "gemms", "torch._grouped_mm bf16")
    pipe = peer(peers, "moe", "pipeline", "torch._grouped_mm bf16 + SwiGLU")
    dense = peer(peers, "moe", "gemms", "dense bf16 matmul (equal FLOPs)")
    for key, title in (("moe_gemms", "Routed experts of one layer: grouped gate/up (+SwiGLU) and down GEMMs"),
                       ("moe_routed", "Routed experts of one layer incl. moe_route + moe_sort")):
        ours = ours_entry(comp, key)
        ratio = bar = None
        if ours and ok(gmm):
            frac = gmm["ms_median"] / ours["ms"]
            ratio = {"text": f"ours at {100 * frac:.1f} % of the grouped_mm rate"
                             + (f"; {100 * dense['ms_median'] / ours['ms']:.1f} % of the dense rate"
                                if ok(dense) else ""), "value": frac}
            if key == "moe_gemms":
                bar = {"text": f">= {100 * BAR_EXPERTS:.0f} % of the bf16 grouped_mm rate",
                       "passed": frac >= BAR_EXPERTS}
        row(key, title, ours, [peer_entry(gmm, "torch._grouped_mm bf16 (gate/up + down)"),
                               peer_entry(pipe), peer_entry(dense)], ratio, bar,
            "strata's weights are IQ3_S/IQ4_NL, the peers' bf16; the scatter/combine runs in K1"
            if key == "moe_gemms" else None)

    # QSA attention.
    flash = peer(peers, "attn", "causal", "SDPA flash")
    cudnn = peer(peers, "attn", "causal", "SDPA cuDNN")
    for key, title in (("qsa_attention", "QSA attention, one layer (sparse, budget 2048, block 4)"),
                       ("qsa_select", "QSA indexer block selection, one layer"),
                       ("qsa_layer", "QSA attention + indexer selection, one layer")):
        ours = ours_entry(comp, key)
        ratio = bar = None
        if ours and ok(cudnn) and key != "qsa_select":
            ratio = {"text": f"cuDNN dense causal / ours = {cudnn['ms_median'] / ours['ms']:.2f}x",
                     "value": cudnn["ms_median"] / ours["ms"]}
            # Both the attention alone and the whole QSA layer (selection +
            # attention: issue 35's bar) against cuDNN's dense causal.
            bar = {"text": "faster than cuDNN dense causal", "passed": ours["ms"] < cudnn["ms_median"]}
        row(key, title, ours, [] if key == "qsa_select" else [peer_entry(flash), peer_entry(cudnn)], ratio, bar)

    # Gated delta rule.
    fla_e = peer(peers, "delta", "layer", "fla chunk_gated_delta_rule (q/k expanded)")
    fla_g = peer(peers, "delta", "layer", "fla chunk_gated_delta_rule (GVA)")
    hf = peer(peers, "delta", "layer", "HF torch_chunk_gated_delta_rule")
    ours = ours_entry(comp, "delta")
    ratio = bar = None
    best = min([r["ms_median"] for r in (fla_e, fla_g) if ok(r)], default=None)
    if ours and best:
        ratio = {"text": f"ours / best fla = {ours['ms'] / best:.2f}x", "value": ours["ms"] / best}
        bar = {"text": f"within {BAR_DELTA}x of fla (its faster variant)", "passed": ours["ms"] <= BAR_DELTA * best}
    row("delta", "Gated delta rule, one layer", ours,
        [peer_entry(fla_e), peer_entry(fla_g), peer_entry(hf)], ratio, bar)

    # Full prefill.
    for r in sorted((strata or {}).get("runs", []), key=lambda r: r["T"]):
        if r.get("status") != "ok":
            rows.append({"key": f"prefill_T{r['T']}", "title": f"Full prefill, T = {r['T']}", "T": r["T"],
                         "ours": None, "peers": [], "ratio": None, "bar": None, "floor_ms": None,
                         "note": f"failed: {r.get('reason')}"})
            continue
        tps = r.get("tokens_per_second_wall") or r["tokens_per_second_kernels"]
        run_ms = r["timing"]["run_ms"] if r.get("timing") else None
        ours = {"what": "every kernel of the plan", "ms": run_ms, "kernel_ms": r["kernel_seconds"] * 1e3,
                "tokens_per_second": tps, "tokens_per_second_kernels": r["tokens_per_second_kernels"],
                "floor_ms": r["floor_seconds"] * 1e3, "kernels": r["kernels"],
                "roofline_pct": 100 * r["floor_seconds"] / r["kernel_seconds"] if r["kernel_seconds"] else 0}
        bar = {"text": f">= {BAR_TOKENS_PER_S:,.0f} tokens/s", "passed": tps >= BAR_TOKENS_PER_S}
        ratio = {"text": f"sum of floors {ours['floor_ms']:.1f} ms = {ours['roofline_pct']:.1f} % of the kernel time",
                 "value": ours["roofline_pct"] / 100}
        rows.append({"key": f"prefill_T{r['T']}", "title": f"Full prefill, T = {r['T']}", "T": r["T"],
                     "ours": ours, "peers": [], "ratio": ratio, "bar": bar, "floor_ms": ours["floor_ms"],
                     "note": "seed shape of the component rows" if r["T"] == T else None})
    return rows


def gpu_facts():
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30)
        if out.returncode == 0 and out.stdout.strip():
            name, driver = [x.strip() for x in out.stdout.strip().splitlines()[0].split(",")[:2]]
            return name, driver
    except (OSError, subprocess.SubprocessError, ValueError):
        pass
    return None, None


def collect_meta(a, strata, peers):
    pm = (peers or {}).get("meta", {})
    gpu, driver = gpu_facts()
    meta = {"date": a.date or datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "commit": a.commit or pm.get("commit"), "host": pm.get("host") or platform.node(),
            "gpu": gpu or pm.get("gpu") or pm.get("torch_device"), "driver": driver or pm.get("driver")}
    for k in ("torch", "torch_cuda", "cudnn", "triton", "fla_core", "transformers", "sm_count", "capability"):
        if pm.get(k) is not None:
            meta[k] = pm[k]
    if strata:
        p = strata.get("plan", {})
        meta["plan"] = {k: p.get(k) for k in ("dir", "target", "max_tokens", "kernels", "roofline", "options")}
        meta["synthetic_weights"] = strata.get("synthetic_weights")
    if peers:
        meta["peers_shapes"] = peers.get("shapes")
        meta["peers_timing"] = peers.get("timing")
    warnings = []
    seed = (strata or {}).get("seed_tokens")
    pT = ((peers or {}).get("shapes") or {}).get("T")
    if seed and pT and seed != pT:
        warnings.append(f"the peers ran at T = {pT}, strata's components at T = {seed}: rows do not compare")
    if (peers or {}).get("meta", {}).get("small"):
        warnings.append("the peers ran at --small shapes (a dry run): no row compares with the seed shape")
    if not meta.get("gpu"):
        warnings.append("no GPU: a dry run of the scripts; the bars mean nothing here")
    meta["warnings"] = warnings
    return meta


def describe(e, short=False):
    if e is None:
        return "not measured"
    if e.get("status", "ok") != "ok":
        why = str(e.get("reason"))
        if short and len(why) > 60:
            why = why[:57] + "..."
        return f"{e['status']}: {why}"
    parts = [fmt_ms(e.get("ms"))]
    if e.get("gbs"):
        parts.append(f"{e['gbs']:.0f} GB/s")
    if e.get("tflops"):
        parts.append(f"{e['tflops']:.2f} TFLOP/s")
    if e.get("mode"):
        parts.append(e["mode"])
    return ", ".join(parts)


def text_report(meta, rows, strata, peers):
    L = []
    L.append("# strata bench: strata's kernels and their peers, one run")
    L.append(f"# date {meta['date']}, GPU {meta.get('gpu')}, driver {meta.get('driver')}, "
             f"commit {meta.get('commit')}, host {meta.get('host')}")
    sw = ", ".join(f"{k} {meta[k]}" for k in ("torch", "torch_cuda", "cudnn", "triton", "fla_core", "transformers")
                   if meta.get(k) is not None)
    if sw:
        L.append(f"# software: {sw}")
    if meta.get("plan"):
        p = meta["plan"]
        L.append(f"# strata plan {p.get('dir')} (target {p.get('target')}, max_tokens {p.get('max_tokens')}, "
                 f"{p.get('kernels')} kernels, options {p.get('options')}), synthetic weights seed "
                 f"{meta.get('synthetic_weights')}; roofline {p.get('roofline')}")
    if meta.get("peers_timing"):
        L.append(f"# peers' timing: {meta['peers_timing'].get('method')}")
    if (peers or {}).get("meta", {}).get("error"):
        L.append(f"# peers: {peers['meta']['error']}")
    for w in meta.get("warnings", []):
        L.append(f"# WARNING: {w}")
    L.append("# strata's times: CUDA events per kernel (strata-run --profile=json), the mean over the "
             "layers' calls; ratios > 1x favour strata")
    L.append("")
    L.append("## Summary")
    L.append("")
    L.append("| row | ours | peers | floor | ratio | bar |")
    L.append("|---|---|---|---:|---|---|")
    for r in rows:
        o = r["ours"]
        if r["key"].startswith("prefill"):
            ours = (f"{o['tokens_per_second']:,.0f} tokens/s ({fmt_ms(o['ms'])} run, "
                    f"{fmt_ms(o['kernel_ms'])} in kernels)") if o else "not measured"
        else:
            ours = describe(o) if o else "not measured"
        peers_ = "; ".join(f"{p['what']}: {describe(p, short=True)}" for p in r["peers"]) or "-"
        bar = f"{r['bar']['text']}: {verdict(r['bar']['passed'])}" if r["bar"] else "-"
        L.append(f"| {r['title']} | {ours} | {peers_} | {fmt_ms(r['floor_ms'])} | "
                 f"{r['ratio']['text'] if r['ratio'] else '-'} | {bar} |")
    L.append("")
    L.append("## What each row sums (strata) and measures (peers)")
    L.append("")
    for r in rows:
        o = r["ours"]
        L.append(f"{r['title']} (T = {r['T']})")
        if o:
            extra = (f" (instances {o['count']}: median {fmt_ms(o['ms_median'])}, min {fmt_ms(o['ms_min'])}, "
                     f"max {fmt_ms(o['ms_max'])}; {o['bytes']:.4g} B, {o['flops']:.4g} FLOP per instance; "
                     f"{o['roofline_pct']:.1f} % of its floor)") if "count" in o else ""
            L.append(f"  ours   {o['what']}: {describe(o) if 'count' in o else fmt_ms(o.get('ms'))}{extra}")
        else:
            L.append("  ours   not measured")
        for p in r["peers"]:
            L.append(f"  peer   {p['what']}: {describe(p)}")
        if r["ratio"]:
            L.append(f"  ratio  {r['ratio']['text']}")
        if r["bar"]:
            L.append(f"  bar    {r['bar']['text']}: {verdict(r['bar']['passed'])}")
        if r.get("note"):
            L.append(f"  note   {r['note']}")
        L.append("")
    if peers:
        L.append("## Peers, every measurement")
        L.append("")
        L.append(f"shapes: {peers.get('shapes')}")
        for p in peers.get("results", []):
            head = f"{p['group']}/{p['name']} {p['impl']}"
            if ok(p):
                checks = ", ".join(f"{k} {v:.3g}" for k, v in p.items()
                                   if k.startswith("nmse") and isinstance(v, float))
                L.append(f"  {head}: median {p['ms_median']:.4f} ms (min {p['ms_min']:.4f}, max "
                         f"{p['ms_max']:.4f}, {p['reps']} calls after {p['warmup']} warm-ups; first call "
                         f"{p['first_call_s']:.2f} s); {p['bytes']:.4g} B, {p['flops']:.4g} FLOP -> "
                         f"{p['gbs']:.1f} GB/s, {p['tflops']:.2f} TFLOP/s"
                         + (f"; {p['mode']}" if p.get("mode") else "") + (f"; {checks}" if checks else ""))
            else:
                L.append(f"  {head}: {p['status']}: {p.get('reason')}")
        L.append("")
    for r in (strata or {}).get("runs", []):
        if r.get("status") != "ok":
            L.append(f"## strata-run T = {r['T']}: FAILED: {r.get('reason')}")
            L.append("")
            continue
        t = r.get("timing") or {}
        L.append(f"## strata-run --profile, T = {r['T']}: run {t.get('run_ms', 0):.1f} ms (load "
                 f"{t.get('load_ms', 0):.1f} ms), {r['kernels']} kernels, {r['kernel_seconds'] * 1e3:.3f} ms in "
                 f"kernels, sum of per-kernel floors {r['floor_seconds'] * 1e3:.3f} ms")
        L.append("")
        L.append(f"  {'kernel':<38} {'calls':>6} {'ms':>10} {'share':>7} {'GB/s':>9} {'TFLOP/s':>9} "
                 f"{'floor ms':>10} {'%roof':>7}")
        for f in r["families"]:
            L.append(f"  {f['label']:<38} {f['calls']:>6} {f['ms']:>10.3f} {f['share_pct']:>6.1f}% "
                     f"{f['gbs']:>9.1f} {f['tflops']:>9.2f} {f['floor_ms']:>10.3f} {f['roofline_pct']:>6.1f}%")
        L.append("")
    return "\n".join(L) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--strata", help="bench/strata_bench.py's results JSON")
    ap.add_argument("--peers", help="bench/peers.py's results JSON")
    ap.add_argument("--commit", help="the commit measured (default: the peers' record)")
    ap.add_argument("--date", help="the run's date (default: now, UTC)")
    ap.add_argument("--png-dir", help="write the roofline PNG(s) here (default: beside -o)")
    ap.add_argument("--no-png", action="store_true")
    ap.add_argument("-o", "--output", required=True, help="prefix: writes PREFIX.json and PREFIX.txt")
    a = ap.parse_args()
    strata, peers = load(a.strata, "strata"), load(a.peers, "peers")
    if strata is None and peers is None:
        print("report: error: neither strata nor peer results to report", file=sys.stderr)
        return 1
    rows = build_rows(strata, peers)
    meta = collect_meta(a, strata, peers)
    doc = {"meta": meta, "rows": rows, "strata": strata, "peers": peers}
    os.makedirs(os.path.dirname(os.path.abspath(a.output)), exist_ok=True)
    with open(a.output + ".json", "w") as f:
        json.dump(doc, f, indent=1)
    text = text_report(meta, rows, strata, peers)
    with open(a.output + ".txt", "w") as f:
        f.write(text)
    print(f"report: wrote {a.output}.txt and {a.output}.json")
    if not a.no_png and strata:
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import roofline
        png_dir = a.png_dir or os.path.dirname(os.path.abspath(a.output))
        try:
            for p in roofline.write_pngs(doc, png_dir, stamp=os.path.basename(a.output)):
                print(f"report: wrote {p}")
        except roofline.NoPlot as e:
            print(f"report: no roofline PNG: {e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
