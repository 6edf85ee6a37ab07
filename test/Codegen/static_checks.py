#!/usr/bin/env python3
"""Static checks of the generated kernels (no GPU): the codegen issue's bars.

For every bundled model (tiny GGUFs with the quantised mix the goldens use;
qwen4exp also in its stateful form, --max-context 128 --max-batch 4, with
the KV caches in f32, bf16 and int8) and the
full-size shapes-only qwen4exp (UD-IQ4_XS-like layout, T = 16384; and its
decode plan with the decode options at their costliest: row-loads=8,
gemm-decode-grid=1056 with gemm-decode-prefetch, moe-sort-one, the Q6_K
wide pieces),
for gfx1151 and sm_90:
  - strata-compile generates and compiles every kernel (cold, into a fresh
    cache), then again warm (the cache answers: the second run's time is
    stated and must stay under 5 s for the full model);
  - every kernel has code, its module exists, modules are distinct per
    specialisation;
  - --report=json lists every kernel's resources (gfx1151 always; sm_90 where
    ptxas is installed);
  - gfx1151: zero scratch and zero spills in the hyper-connection, expert,
    matmul and attention kernels (every kernel, in fact);
  - the matrix-unit kernels (matmul and grouped experts on a wmma_* variant,
    and bf16 attention)
    disassemble (llvm-objdump --mcpu=gfx1151) to v_wmma instructions; on
    sm_90 (mma_bf16_* variants) their PTX holds mma.sync.
Writes the measured compile times to stdout (and --results FILE if given).
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "test", "golden"))
from llama_golden import ARCH_MIX, MIX  # noqa: E402  (the goldens' type mixes)

ARCHS = ["qwen3", "qwen3moe", "qwen3next", "qwen4exp"]
# The full-size layout of test/Tools/strata-gguf-synth-shapes-only.test
# (UD-IQ4_XS-like: IQ3_S gate/up and IQ4_NL down experts).
FULL_TYPES = ("q4_k,*hc_*down*=f16,*hc_*up*=f16,output.weight=q6_k,"
              "per_layer_token_embd*=q8_0,*ple_key*=q8_0,*ple_value*=q8_0,"
              "*attn_v*=q6_k,*indexer*=q8_0,*ffn_gate_exps*=iq3_s,"
              "*ffn_up_exps*=iq3_s,*ffn_down_exps*=iq4_nl,*ffn_down_shexp*=q8_0")


def run(cmd, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if r.returncode != 0:
        sys.exit(f"FAIL: {' '.join(cmd)}\n{r.stdout}{r.stderr}")
    return r.stdout


def objdump():
    for name in ("llvm-objdump-19", "llvm-objdump"):
        if shutil.which(name):
            return name
    p = "/usr/lib/llvm-19/bin/llvm-objdump"
    return p if os.path.exists(p) else None


def check_plan(tag, target, plan_dir, report, failures):
    plan = json.load(open(os.path.join(plan_dir, "plan.json")))
    kernels = plan["kernels"]
    symbols = set()
    for i, k in enumerate(kernels):
        code = k.get("code")
        if not code:
            failures.append(f"{tag}/{target}: kernel {i} has no code")
            continue
        symbols.add(code["symbol"])
        if not os.path.exists(os.path.join(plan_dir, code["module"])):
            failures.append(f"{tag}/{target}: kernel {i}: {code['module']} missing")
    # The synthetic weight fill is one more module, not a launch.
    fill = plan.get("synthetic_fill")
    if not fill:
        failures.append(f"{tag}/{target}: no synthetic_fill")
    else:
        symbols.add(fill["symbol"])
        if not os.path.exists(os.path.join(plan_dir, fill["module"])):
            failures.append(f"{tag}/{target}: synthetic_fill: {fill['module']} missing")
    mods = [f for f in os.listdir(os.path.join(plan_dir, "kernels"))
            if f.endswith(".hip" if target == "gfx1151" else ".cu")]
    if len(mods) != len(symbols):
        failures.append(f"{tag}/{target}: {len(mods)} sources for {len(symbols)} symbols")
    rows = report["kernels"]
    have_res = target == "gfx1151" or any(r["resources"] for r in rows)
    if have_res:
        for r in rows:
            res = r["resources"]
            if res is None:
                failures.append(f"{tag}/{target}: kernel {r['index']} has no resources")
                continue
            spills = res["vgpr_spills"] + res["sgpr_spills"] + res["spill_store_bytes"]
            if target == "gfx1151" and (res["scratch_bytes"] or spills):
                failures.append(f"{tag}/{target}: kernel {r['index']} ({r['label']}) "
                                f"scratch {res['scratch_bytes']} spills {spills}")
            if res["occupancy"] <= 0:
                failures.append(f"{tag}/{target}: kernel {r['index']} ({r['label']}) "
                                f"cannot be resident (occupancy {res['occupancy']})")
    # gfx1151: every entry point of every code object (the kernels' own
    # code, their alternates and pre-launches: the report's rows show the
    # own code only) with zero scratch and zero spills.
    if target == "gfx1151":
        readelf = shutil.which("llvm-readelf-19") or shutil.which("llvm-readelf")
        if readelf is None:
            failures.append("llvm-readelf-19 not found")
        else:
            for mod in sorted(os.listdir(os.path.join(plan_dir, "kernels"))):
                if not mod.endswith(".co"):
                    continue
                notes = run([readelf, "--notes",
                             os.path.join(plan_dir, "kernels", mod)])
                name = None
                for line in notes.splitlines():
                    key, _, value = line.strip().partition(":")
                    value = value.strip()
                    if key == ".name":
                        name = value
                    elif key in (".private_segment_fixed_size",
                                 ".vgpr_spill_count", ".sgpr_spill_count") \
                            and value not in ("0", ""):
                        failures.append(f"{tag}/{target}: {mod}: {name}: "
                                        f"{key[1:]} {value}")
    # Matrix-unit GEMMs: v_wmma in the code object; mma.sync or (tiles of
    # one warpgroup per 64 rows) wgmma in the PTX. Not in decode plans of
    # 64-row runs: their GEMMs take the warp and row-block forms at every
    # T they run (the variant names the prefill tile).
    if tag.endswith("decodeopts"):
        return len(symbols), have_res
    od = objdump()
    checked = 0
    for i, k in enumerate(kernels):
        v = k.get("variant", "").split(",")[0]
        if not (v.startswith("wmma_") or v.startswith("mma_bf16")):
            continue
        base = os.path.join(plan_dir, "kernels", k["code"]["symbol"])
        if target == "gfx1151":
            if od is None:
                failures.append("llvm-objdump-19 not found")
                return
            dis = run([od, "-d", "--mcpu=gfx1151", base + ".co"])
            if "v_wmma_f32_16x16x16_f16" not in dis:
                failures.append(f"{tag}/{target}: kernel {i} ({k.get('fused', k.get('recipe'))}, "
                                f"{v}) has no v_wmma")
        else:
            ptx = open(base + ".ptx").read()
            if "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32" not in ptx and \
                    "wgmma.mma_async.sync.aligned.m64n" not in ptx:
                failures.append(f"{tag}/{target}: kernel {i} ({v}) has neither mma.sync "
                                "nor wgmma")
        checked += 1
    # Attention (bf16 activations on GPU targets) runs on the matrix units too.
    for i, k in enumerate(kernels):
        body = [b["recipe"] for b in k.get("body", [])] or [k.get("recipe")]
        if "attention" not in body:
            continue
        base = os.path.join(plan_dir, "kernels", k["code"]["symbol"])
        if target == "gfx1151":
            ok = "v_wmma_f32_16x16x16_f16" in run([od, "-d", "--mcpu=gfx1151", base + ".co"])
        else:
            # sm_90: the warpgroup form (wgmma for both products) where its
            # tiles fit, else mma.sync.
            ptx = open(base + ".ptx").read()
            ok = "wgmma.mma_async.sync.aligned.m64n" in ptx or \
                "mma.sync.aligned.m16n8k16" in ptx
        if not ok:
            failures.append(f"{tag}/{target}: attention kernel {i} is not on the matrix units")
        checked += 1
    if checked == 0:
        failures.append(f"{tag}/{target}: no matrix-unit kernel to check")
    return len(symbols), have_res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--results", help="append the measured times here")
    ap.add_argument("--skip-full", action="store_true",
                    help="only the tiny models")
    a = ap.parse_args()
    tool = lambda n: os.path.join(a.bin, n)  # noqa: E731
    if not shutil.which("clang-19"):
        print("SKIPPED: clang-19 is not installed (scripts/install-deps.sh installs it)")
        return 77
    shutil.rmtree(a.workdir, ignore_errors=True)
    os.makedirs(a.workdir)
    cases = []
    for arch in ARCHS:
        gguf = os.path.join(a.workdir, f"{arch}.gguf")
        mix = ARCH_MIX.get(arch, (MIX, None))[0]
        run([tool("strata-gguf"), "synth", "--arch", arch, "--preset", "tiny",
             "--seed", "3", "--types", mix, "-o", gguf])
        cases.append((arch, gguf, 64, []))
    # The stateful form of qwen4exp (generation: every state op, the state
    # family's kernels).
    cases.append(("qwen4exp-state", os.path.join(a.workdir, "qwen4exp.gguf"), 64,
                  ["--max-context", "128", "--max-batch", "4"]))
    # The same with the KV caches in bf16 and int8 (strata-compile --kv: the
    # state family reading and writing them natively).
    for kv in ("bf16", "int8"):
        cases.append((f"qwen4exp-state-kv{kv}",
                      os.path.join(a.workdir, "qwen4exp.gguf"), 64,
                      ["--max-context", "128", "--max-batch", "4", "--kv", kv]))
    # Runs of 4,096 rows: the long-run alternates (sm_90's TMA tiles from
    # 512 rows; gfx1151's dequantise-once tiles from 2,112), and of 1,024
    # under portable-forms (sm_90 running the dequantise-once tiles from
    # 512).
    cases.append(("qwen4exp-long", os.path.join(a.workdir, "qwen4exp.gguf"),
                  4096, []))
    cases.append(("qwen4exp-portable", os.path.join(a.workdir, "qwen4exp.gguf"),
                  1024, ["--codegen-opt", "portable-forms=on"]))
    if not a.skip_full:
        full = os.path.join(a.workdir, "qwen4exp-full.gguf")
        run([tool("strata-gguf"), "synth", "--arch", "qwen4exp", "--preset", "full",
             "--seed", "0", "--types", FULL_TYPES, "--shapes-only", "-o", full])
        cases.append(("qwen4exp-full", full, 16384, []))
        # Its decode plan with row-loads=8 (the row family's loads in
        # chunks: more registers a thread, which must not spill) and the
        # GEMV chains' column loops with the next group's L2 prefetch, and
        # moe_sort in one launch (the counts beside the ranks' arrays in
        # static shared memory), and Q6_K's wide pieces (the LM head).
        cases.append(("qwen4exp-decodeopts", full, 64,
                       ["--max-context", "4096", "--max-batch", "16",
                        "--codegen-opt", "row-loads=8",
                        "--codegen-opt", "gemm-decode-grid=1056",
                        "--codegen-opt", "gemm-decode-prefetch=1",
                        "--codegen-opt", "moe-sort-one=1",
                        "--codegen-opt", "gemm-decode-wide=2"]))
    failures = []
    lines = []
    for target in ["gfx1151", "sm_90"]:
        cache = os.path.join(a.workdir, f"cache-{target}")
        for tag, gguf, t, extra in cases:
            arch = tag.split("-")[0]
            plan_dir = os.path.join(a.workdir, f"{tag}.{target}")
            cmd = [tool("strata-compile"), os.path.join(ROOT, "models", arch + ".strata"),
                   "--gguf", gguf, "--max-tokens", str(t), "--target", target,
                   "--cache-dir", cache, "-o", plan_dir, "--report=json", *extra]
            t0 = time.time()
            report = json.loads(run(cmd))
            cold = time.time() - t0
            t0 = time.time()
            report = json.loads(run(cmd))
            warm = time.time() - t0
            distinct, res = check_plan(tag, target, plan_dir, report, failures) or (0, False)
            lines.append(f"{target} {tag} T={t} kernels={len(report['kernels'])} "
                         f"distinct={distinct} cold_s={cold:.2f} warm_s={warm:.2f} "
                         f"resources={'yes' if res else 'no (no ptxas)'}")
            # The report names the tile the running code takes where it is
            # not the plan's variant: f32 weights under bf16 activations on
            # the matrix units as three terms (gfx1151's scaled f16 terms;
            # sm_90's bf16 ones, its portable counterpart under
            # portable-forms), priced by that row.
            want = {("gfx1151", "qwen4exp-full"): "wmma_f16_split3",
                    ("gfx1151", "qwen4exp-long"): "wmma_f16_split3",
                    ("sm_90", "qwen4exp-full"): "mma_bf16_split3",
                    ("sm_90", "qwen4exp-portable"): "mma_bf16_split3p"}.get((target, tag))
            if want and not any((r["variant"].split() or [""])[-1].split("=")[-1] == want
                                for r in report["kernels"]):
                failures.append(f"{tag}/{target}: no kernel's report row names {want}")
            if tag.endswith("full") and warm > 5:
                failures.append(f"{tag}/{target}: warm compile {warm:.1f} s > 5 s")
            if tag.endswith("full") and cold > 300:
                failures.append(f"{tag}/{target}: cold compile {cold:.1f} s > 300 s")
    print("\n".join(lines))
    if a.results:
        with open(a.results, "a") as f:
            f.write("\n".join(lines) + "\n")
    if failures:
        print("FAIL:\n  " + "\n  ".join(failures))
        return 1
    print("codegen static checks: PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
