#!/usr/bin/env python3
"""Byte identity of the generated code: every plan.json and every emitted
kernel source of the bundled models, for both GPU targets, hashed into a
manifest, so a change that should not alter the emitted code (a move, a
refactor, a new option left at its default) is checked to leave all of it
byte-identical.

usage: identity.py record|check MANIFEST [--full] [--bin DIR] [--work DIR]

The manifest in this folder (identity-manifest.txt, recorded with --full)
is checked in CI (ctest codegen_identity); after a change that is meant to
alter the emitted code, record it again and say so in the commit.

  record   compile and write MANIFEST (one line per file: sha256, path)
  check    compile and compare with MANIFEST; print each differing file;
           exit 1 if any differs
  --full   also the real-size Qwen4-Exp (shapes-only, UD-IQ4_XS layout) at
           T = 16,384 for both targets (minutes of device compiles)
  --bin    where strata-gguf and strata-compile are (default: build/bin)

The tiny models are synthesised with seed 1 (qwen4exp with compress ratio 4)
in the quantised mix of test/golden (Q8_0 trunk, IQ3_S/IQ4_NL experts ...)
and compiled at T = 64, and again as generation plans (T = 8, a context of
64 positions, 2 slots: the state kernels and the decode forms; qwen4exp
also with the int8 KV cache). Code objects and cubins follow from the sources and
the compiler's version, so they are not hashed (CI has no ptxas: module
paths are normalised to .ptx).
"""
import argparse
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(
    __file__))))
TINY_TYPES = {
    "qwen3": "q8_0",
    "qwen3moe": "q8_0,*_exps*=iq4_nl",
    "qwen3next": "q8_0,*_exps*=iq4_xs",
    "qwen4exp": "q6_k,*ffn_gate_exps*=iq3_s,*ffn_up_exps*=iq3_s,"
                "*ffn_down_exps*=iq4_nl",
}
# The benchmark's UD-IQ4_XS-like layout (bench/prepare.sh): the
# hyper-connection projections in F16 and the trunk in Q4_K, as the
# production plans run them.
FULL_TYPES = ("q4_k,*hc_*down*=f16,*hc_*up*=f16,output.weight=q6_k,"
              "per_layer_token_embd*=q8_0,*ple_key*=q8_0,*ple_value*=q8_0,"
              "*attn_v*=q6_k,*indexer*=q8_0,*ffn_gate_exps*=iq3_s,"
              "*ffn_up_exps*=iq3_s,*ffn_down_exps*=iq4_nl,"
              "*ffn_down_shexp*=q8_0")


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"identity: {' '.join(cmd)} failed:\n{r.stderr}")


def hash_plan(plan_dir, tag, out):
    for root, _, files in os.walk(plan_dir):
        for f in sorted(files):
            path = os.path.join(root, f)
            rel = os.path.relpath(path, plan_dir)
            if not (f == "plan.json" or f.endswith((".cu", ".hip"))):
                continue
            data = open(path, "rb").read()
            if f == "plan.json":
                data = re.sub(rb'\.cubin"', b'.ptx"', data)
            out[f"{tag}/{rel}"] = hashlib.sha256(data).hexdigest()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["record", "check"])
    ap.add_argument("manifest")
    ap.add_argument("--full", action="store_true")
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "bin"))
    ap.add_argument("--work")
    a = ap.parse_args()
    if not (os.environ.get("STRATA_DEVICE_CC") or shutil.which("clang-19")):
        print("identity: SKIPPED (no clang-19 to compile device code)")
        return 77
    work = a.work or tempfile.mkdtemp(prefix="strata-identity-")
    os.makedirs(work, exist_ok=True)
    gguf_tool = os.path.join(a.bin, "strata-gguf")
    compile_tool = os.path.join(a.bin, "strata-compile")
    cache = os.path.join(work, "cache")
    hashes = {}
    jobs = []
    for arch, types in TINY_TYPES.items():
        gguf = os.path.join(work, f"{arch}.gguf")
        extra = ["--compress-ratio", "4"] if arch == "qwen4exp" else []
        run([gguf_tool, "synth", "--arch", arch, "--preset", "tiny", "--seed",
             "1", "--types", types, *extra, "-o", gguf])
        jobs.append((f"{arch}-tiny", arch, gguf, ["--max-tokens", "64"]))
        state = ["--max-tokens", "8", "--max-context", "64", "--max-batch",
                 "2"]
        jobs.append((f"{arch}-tiny-decode", arch, gguf, state))
        if arch == "qwen4exp":
            jobs.append((f"{arch}-tiny-decode-int8", arch, gguf,
                         state + ["--kv", "int8"]))
    if a.full:
        gguf = os.path.join(work, "full.gguf")
        run([gguf_tool, "synth", "--arch", "qwen4exp", "--preset", "full",
             "--seed", "1", "--shapes-only", "--types", FULL_TYPES, "-o",
             gguf])
        jobs.append(("qwen4exp-full", "qwen4exp", gguf,
                     ["--max-tokens", "16384"]))
    for tag, arch, gguf, args in jobs:
        for target in ["gfx1151", "sm_90"]:
            plan = os.path.join(work, f"{tag}.{target}")
            # strata-compile writes into the folder without emptying it: a
            # kept --work folder would otherwise hash the kernels of earlier
            # runs too (reported as "new").
            shutil.rmtree(plan, ignore_errors=True)
            run([compile_tool, os.path.join(ROOT, "models", arch + ".strata"),
                 "--gguf", gguf, *args, "--target", target,
                 "--cache-dir", cache, "-o", plan])
            hash_plan(plan, f"{tag}.{target}", hashes)
    lines = [f"{h}  {p}" for p, h in sorted(hashes.items())]
    if a.mode == "record":
        open(a.manifest, "w").write("\n".join(lines) + "\n")
        print(f"identity: recorded {len(lines)} files in {a.manifest}")
        return 0
    want = {}
    for line in open(a.manifest):
        h, p = line.split()
        want[p] = h
    # A manifest recorded with --full also lists the full model's files;
    # a check without --full looks only at what it compiled.
    scope = {p: h for p, h in want.items()
             if a.full or not p.startswith("qwen4exp-full")}
    bad = [p for p in sorted(set(scope) | set(hashes))
           if scope.get(p) != hashes.get(p)]
    for p in bad:
        what = ("missing" if p not in hashes else
                "new" if p not in scope else "differs")
        print(f"identity: {p}: {what}")
    print(f"identity: {len(hashes) - len([p for p in bad if p in hashes])} "
          f"of {len(scope)} files byte-identical")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
