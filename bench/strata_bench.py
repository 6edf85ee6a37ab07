#!/usr/bin/env python3
"""strata's side of the benchmark: runs a compiled plan with strata-run
--profile=json at several prompt lengths and turns the per-kernel profile into
the per-layer component times that bench/peers.py measures the peers for.

Why: the performance issue compares strata's kernels with the libraries a user
would otherwise pick (torch eager / torch.compile, torch._grouped_mm, SDPA,
flash-linear-attention) at the seed shape. strata's numbers come from the
whole qwen4exp prefill plan (synthetic weights), so each component below is a
sum of named kernels of that profile, picked out by label and by position in
the launch order (which is the plan's order):

  hc_k1         fused:hc_write_norm, one call (K1 after an attention or delta
                sublayer: R += lambda*F, per-stream RMSNorm, 16-bit image)
  hc_k1_moe     fused:hc_combine_write_norm, one call (the MoE site's K1 with
                the routed/shared combine folded in)
  hc_site       one gated-residual site = K1 + K2 + K3: each fused:hc_up_mix
                (K3) closes a site, the nearest fused:hc_down_inject or
                fused:hc_down before it is K2 and the kernel launched just
                before K2 is K1; sites are grouped by K1's label
  moe_gemms     one layer's moe_grouped_swiglu + moe_grouped_down (gate/up
                GEMM with the SwiGLU epilogue, down GEMM)
  moe_routed    one layer's moe_route + moe_sort + moe_grouped_swiglu +
                moe_grouped_down (the scatter/combine runs inside K1, the
                router logits and the shared expert are dense matmuls: not
                counted)
  qsa_attention fused:slice+attention, one call (one QSA layer's attention)
  qsa_select    qsa_select, one call (the indexer's block selection)
  qsa_layer     qsa_attention + qsa_select of the same layer
  delta         fused:slice+gated_delta_rule, one call (one layer)
  prefill       every kernel: seconds in kernels, wall run time, tokens/s,
                sum of per-kernel floors

Subcommands:
  run     run strata-run per prompt length, write the results JSON
  parse   parse saved strata-run --profile=json output (dry runs, re-analysis)
  tokens  write a prompt file the way build-full's prompts were made
"""
import argparse
import json
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time

# Kernel labels of the qwen4exp plan (strata-run --profile prints them).
K1 = "fused:hc_write_norm"
K1_MOE = "fused:hc_combine_write_norm"
K2 = ("fused:hc_down_inject", "fused:hc_down")
K3 = "fused:hc_up_mix"
MOE_ROUTE, MOE_SORT = "moe_route", "moe_sort"
MOE_GATE_UP, MOE_DOWN = "moe_grouped_swiglu", "moe_grouped_down"
ATTENTION, QSA_SELECT = "fused:slice+attention", "qsa_select"
DELTA = "fused:slice+gated_delta_rule"

# build-full's prompts: ids drawn with random.seed(T), randrange(1, vocab),
# keeping those below 248000 (the top of the vocabulary is special tokens).
SPECIAL_FROM = 248000


class BenchError(Exception):
    """An expected failure: printed as one line, no traceback."""


def prompt_ids(T, vocab):
    rng = random.Random(T)
    limit = min(vocab, SPECIAL_FROM) if vocab > SPECIAL_FROM else vocab
    ids = []
    while len(ids) < T:
        v = rng.randrange(1, vocab)
        if v < limit:
            ids.append(v)
    return ids


def write_tokens(path, T, vocab):
    with open(path, "w") as f:
        f.write(",".join(map(str, prompt_ids(T, vocab))) + "\n")


def plan_info(plan_dir):
    """The plan facts the report needs (target, roofline, vocabulary...)."""
    path = os.path.join(plan_dir, "plan.json")
    try:
        with open(path) as f:
            plan = json.load(f)
    except (OSError, ValueError) as e:
        raise BenchError(f"cannot read {path}: {e}")
    vocab = None
    for w in plan.get("weights", []):
        if w.get("name") == "token_embd.weight":
            vocab = w["dims"][-1]
    return {
        "dir": plan_dir,
        "name": os.path.basename(os.path.normpath(plan_dir)),
        "target": plan.get("target"),
        "arch": plan.get("arch"),
        "max_tokens": plan.get("max_tokens"),
        "kernels": len(plan.get("kernels", [])),
        "options": plan.get("options", {}),
        "roofline": plan.get("roofline", {}),
        "arena_bytes": plan.get("arena", {}).get("bytes"),
        "vocab": vocab,
    }


def parse_output(text):
    """Splits strata-run --profile=json output into the time line and the
    profile object (the JSON starts at the line beginning with {"backend")."""
    m = re.search(r"^time: load ([\d.]+) ms, run ([\d.]+) ms on (\S+) \((\d+) tokens, (\d+) kernels",
                  text, re.M)
    timing = None
    if m:
        timing = {"load_ms": float(m.group(1)), "run_ms": float(m.group(2)),
                  "backend": m.group(3), "tokens": int(m.group(4)), "kernels": int(m.group(5))}
    start = text.find('{"backend"')
    if start < 0:
        raise BenchError("no --profile=json object in strata-run's output")
    try:
        profile, _ = json.JSONDecoder().raw_decode(text[start:])
    except ValueError as e:
        raise BenchError(f"strata-run's profile JSON does not parse: {e}")
    return timing, profile


def stats(values):
    if not values:
        return None
    return {"n": len(values), "mean": statistics.fmean(values), "median": statistics.median(values),
            "min": min(values), "max": max(values)}


def summarize(rows):
    """rows: dicts with ms, bytes, flops, floor_ms (one per instance)."""
    if not rows:
        return None
    ms = [r["ms"] for r in rows]
    out = {"count": len(rows), "ms_mean": statistics.fmean(ms), "ms_median": statistics.median(ms),
           "ms_min": min(ms), "ms_max": max(ms),
           "bytes": statistics.fmean(r["bytes"] for r in rows),
           "flops": statistics.fmean(r["flops"] for r in rows),
           "floor_ms": statistics.fmean(r["floor_ms"] for r in rows)}
    t = out["ms_mean"] / 1e3
    out["gbs"] = out["bytes"] / t / 1e9 if t > 0 else 0.0
    out["tflops"] = out["flops"] / t / 1e12 if t > 0 else 0.0
    out["roofline_pct"] = 100.0 * out["floor_ms"] / out["ms_mean"] if out["ms_mean"] > 0 else 0.0
    return out


def kernel_row(k):
    return {"ms": k["seconds"] * 1e3, "bytes": k["bytes"], "flops": k["flops"],
            "floor_ms": k["floor_seconds"] * 1e3}


def add_rows(rows, labels):
    return {"ms": sum(r["ms"] for r in rows), "bytes": sum(r["bytes"] for r in rows),
            "flops": sum(r["flops"] for r in rows), "floor_ms": sum(r["floor_ms"] for r in rows),
            "labels": labels}


def components(profile):
    """The per-layer component times (see the module docstring)."""
    ks = profile["kernels"]
    labels = [k["label"] for k in ks]
    out = {}
    for name, label in (("hc_k1", K1), ("hc_k1_moe", K1_MOE), ("qsa_attention", ATTENTION),
                        ("qsa_select", QSA_SELECT), ("delta", DELTA)):
        out[name] = summarize([kernel_row(k) for k in ks if k["label"] == label])
        if out[name]:
            out[name]["kernels"] = [label]

    # Gated-residual sites: K3 closes a site, K2 is the nearest K2-labelled
    # kernel before it, K1 the kernel launched just before K2.
    sites = {}
    all_sites = []
    for i, lab in enumerate(labels):
        if lab != K3:
            continue
        j = i - 1
        while j >= 0 and labels[j] not in K2:
            j -= 1
        if j < 0:
            continue
        k1 = j - 1 if j >= 1 else None
        parts = ([k1] if k1 is not None else []) + [j, i]
        row = add_rows([kernel_row(ks[p]) for p in parts], [labels[p] for p in parts])
        kind = labels[k1] if k1 is not None else "(none)"
        sites.setdefault(kind, []).append(row)
        all_sites.append(row)
    out["hc_sites_by_k1"] = {}
    for kind, rows in sites.items():
        s = summarize(rows)
        s["kernels"] = rows[0]["labels"]
        out["hc_sites_by_k1"][kind] = s
    out["hc_site"] = out["hc_sites_by_k1"].get(K1)
    out["hc_site_moe"] = out["hc_sites_by_k1"].get(K1_MOE)
    all_sum = summarize(all_sites)
    if all_sum:
        all_sum["total_ms"] = sum(r["ms"] for r in all_sites)
        all_sum["kernels"] = ["K1 (the kernel before K2)"] + list(K2) + [K3]
    out["hc_all_sites"] = all_sum

    # MoE layers: each moe_route opens a layer; the layer's sort and grouped
    # GEMMs follow it before the next moe_route.
    gemms, routed = [], []
    starts = [i for i, lab in enumerate(labels) if lab == MOE_ROUTE] + [len(ks)]
    for a, b in zip(starts, starts[1:]):
        found = {}
        for p in range(a, b):
            if labels[p] in (MOE_ROUTE, MOE_SORT, MOE_GATE_UP, MOE_DOWN) and labels[p] not in found:
                found[labels[p]] = p
        if MOE_GATE_UP in found and MOE_DOWN in found:
            g = [found[MOE_GATE_UP], found[MOE_DOWN]]
            gemms.append(add_rows([kernel_row(ks[p]) for p in g], [MOE_GATE_UP, MOE_DOWN]))
            r = [found[x] for x in (MOE_ROUTE, MOE_SORT, MOE_GATE_UP, MOE_DOWN) if x in found]
            routed.append(add_rows([kernel_row(ks[p]) for p in r], [labels[p] for p in r]))
    out["moe_gemms"] = summarize(gemms)
    if out["moe_gemms"]:
        out["moe_gemms"]["kernels"] = [MOE_GATE_UP, MOE_DOWN]
    out["moe_routed"] = summarize(routed)
    if out["moe_routed"]:
        out["moe_routed"]["kernels"] = [MOE_ROUTE, MOE_SORT, MOE_GATE_UP, MOE_DOWN]

    # QSA layers: the i-th qsa_select goes with the i-th attention kernel.
    att = [kernel_row(k) for k in ks if k["label"] == ATTENTION]
    sel = [kernel_row(k) for k in ks if k["label"] == QSA_SELECT]
    if att and len(att) == len(sel):
        out["qsa_layer"] = summarize([add_rows([a, s], [ATTENTION, QSA_SELECT]) for a, s in zip(att, sel)])
        out["qsa_layer"]["kernels"] = [ATTENTION, QSA_SELECT]
    else:
        out["qsa_layer"] = None
    return out


def families(profile):
    """Per kernel label: calls, ms, share, GB/s, TFLOP/s, floor ms, % of
    roofline (the table strata-run --profile prints), slowest first."""
    fam = {}
    for k in profile["kernels"]:
        f = fam.setdefault(k["label"], {"label": k["label"], "calls": 0, "seconds": 0.0,
                                        "bytes": 0.0, "flops": 0.0, "floor_seconds": 0.0})
        f["calls"] += 1
        for key in ("seconds", "bytes", "flops", "floor_seconds"):
            f[key] += k[key]
    total = sum(f["seconds"] for f in fam.values())
    rows = []
    for f in fam.values():
        s = f["seconds"]
        rows.append({**f, "ms": s * 1e3, "share_pct": 100 * s / total if total else 0.0,
                     "gbs": f["bytes"] / s / 1e9 if s else 0.0,
                     "tflops": f["flops"] / s / 1e12 if s else 0.0,
                     "floor_ms": f["floor_seconds"] * 1e3,
                     "roofline_pct": 100 * f["floor_seconds"] / s if s else 0.0})
    rows.sort(key=lambda r: (-r["seconds"], r["label"]))
    return rows


def analyse(text, T, plan):
    timing, profile = parse_output(text)
    run = {"T": T, "status": "ok", "timing": timing,
           "kernel_seconds": profile["seconds"], "floor_seconds": profile["floor_seconds"],
           "tokens_per_second_kernels": profile["tokens_per_second"],
           "backend": profile["backend"], "kernels": len(profile["kernels"]),
           "families": families(profile), "components": components(profile),
           "profile": profile}
    if timing and timing["run_ms"] > 0:
        run["tokens_per_second_wall"] = T * 1e3 / timing["run_ms"]
    if profile["tokens"] != T:
        raise BenchError(f"the profile is for {profile['tokens']} tokens, expected {T}")
    return run


def cmd_run(a):
    plan = plan_info(a.plan)
    exe = os.path.join(a.bin, "strata-run")
    if not os.access(exe, os.X_OK):
        raise BenchError(f"{exe} is missing (build the runtime first)")
    if not os.path.exists(a.gguf):
        raise BenchError(f"{a.gguf} is missing")
    seed_T = a.seed_tokens
    Ts = [seed_T] + [t for t in a.prefill_tokens if t != seed_T]
    for T in Ts:
        if plan["max_tokens"] and T > plan["max_tokens"]:
            raise BenchError(f"T = {T} is over the plan's max_tokens {plan['max_tokens']}")
    tmp = tempfile.mkdtemp(prefix="strata-bench-")
    result = {"plan": plan, "gguf": a.gguf, "synthetic_weights": a.synthetic_weights,
              "seed_tokens": seed_T, "prefill_tokens": a.prefill_tokens, "runs": []}
    raw = open(a.raw, "a") if a.raw else None
    try:
        for T in Ts:
            tok = os.path.join(a.tokens_dir, f"tokens-{T}.txt") if a.tokens_dir else ""
            if not os.path.exists(tok):
                if not plan["vocab"]:
                    raise BenchError(f"no tokens-{T}.txt and no token_embd.weight to size a prompt")
                tok = os.path.join(tmp, f"tokens-{T}.txt")
                write_tokens(tok, T, plan["vocab"])
            cmd = [exe, a.plan, "--gguf", a.gguf, "--tokens-file", tok, "--profile=json", "--top", "1"]
            if a.synthetic_weights is not None:
                cmd += ["--synthetic-weights", str(a.synthetic_weights)]
            if a.backend:
                cmd += ["--backend", a.backend]
            print(f"strata: T = {T}: {' '.join(cmd)}", flush=True)
            t0 = time.time()
            try:
                p = subprocess.run(cmd, capture_output=True, text=True, timeout=a.timeout)
                text, rc = p.stdout + p.stderr, p.returncode
            except subprocess.TimeoutExpired as e:
                text = (e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
                text, rc = text + f"\n(timed out after {a.timeout} s)", 124
            wall = time.time() - t0
            if raw:
                raw.write(f"### strata-run T = {T} (rc {rc}, {wall:.1f} s): {' '.join(cmd)}\n{text}\n")
                raw.flush()
            if rc != 0:
                tail = " | ".join(text.strip().splitlines()[-3:])
                result["runs"].append({"T": T, "status": "failed", "reason": f"exit {rc}: {tail}"})
                print(f"strata: T = {T}: FAILED (exit {rc}): {tail}", flush=True)
                continue
            try:
                run = analyse(text, T, plan)
            except BenchError as e:
                result["runs"].append({"T": T, "status": "failed", "reason": str(e)})
                print(f"strata: T = {T}: FAILED: {e}", flush=True)
                continue
            run["wall_seconds"] = wall
            result["runs"].append(run)
            print(f"strata: T = {T}: {run['timing']['run_ms'] if run['timing'] else float('nan'):.1f} ms run, "
                  f"{run['kernel_seconds'] * 1e3:.1f} ms in kernels, floors {run['floor_seconds'] * 1e3:.1f} ms",
                  flush=True)
            write_json(a.output, result)  # partial results survive a later timeout
    finally:
        if raw:
            raw.close()
    write_json(a.output, result)
    return 0 if all(r["status"] == "ok" for r in result["runs"]) else 1


def cmd_parse(a):
    plan = plan_info(a.plan) if a.plan else {}
    result = {"plan": plan, "seed_tokens": None, "prefill_tokens": [], "runs": []}
    for path in a.outputs:
        with open(path) as f:
            text = f.read()
        timing, profile = parse_output(text)
        run = analyse(text, profile["tokens"], plan)
        result["runs"].append(run)
    result["seed_tokens"] = result["runs"][0]["T"] if result["runs"] else None
    result["prefill_tokens"] = [r["T"] for r in result["runs"][1:]]
    write_json(a.output, result)
    return 0


def write_json(path, obj):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1)
    os.replace(tmp, path)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="run strata-run per prompt length and write the results JSON")
    r.add_argument("--bin", default="build-rt/bin", help="folder holding strata-run")
    r.add_argument("--plan", default="build-full/plan-last")
    r.add_argument("--gguf", default="build-full/full.gguf")
    r.add_argument("--tokens-dir", default="build-full", help="where tokens-T.txt are (made when missing)")
    r.add_argument("--seed-tokens", type=int, default=16058, help="the prompt length of the component table")
    r.add_argument("--prefill-tokens", type=lambda s: [int(x) for x in s.split(",") if x],
                   default=[1024, 4096, 16384], help="comma-separated prompt lengths for tokens/s")
    r.add_argument("--synthetic-weights", type=int, default=1, help="seed (-1: read the GGUF's weights)")
    r.add_argument("--backend", default="", help="strata-run --backend (default: the plan's)")
    r.add_argument("--timeout", type=float, default=300, help="seconds per strata-run")
    r.add_argument("--raw", help="append strata-run's whole output to this file")
    r.add_argument("-o", "--output", required=True)
    p = sub.add_parser("parse", help="parse saved strata-run --profile=json outputs (first = seed shape)")
    p.add_argument("outputs", nargs="+")
    p.add_argument("--plan", help="the plan folder (for its roofline and target)")
    p.add_argument("-o", "--output", required=True)
    t = sub.add_parser("tokens", help="write a prompt of T ids as build-full's prompts are made")
    t.add_argument("--T", type=int, required=True)
    t.add_argument("--vocab", type=int, default=248320)
    t.add_argument("-o", "--output", required=True)
    a = ap.parse_args()
    try:
        if a.cmd == "run":
            if a.synthetic_weights is not None and a.synthetic_weights < 0:
                a.synthetic_weights = None
            return cmd_run(a)
        if a.cmd == "parse":
            return cmd_parse(a)
        write_tokens(a.output, a.T, a.vocab)
        return 0
    except BenchError as e:
        print(f"strata_bench: error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
