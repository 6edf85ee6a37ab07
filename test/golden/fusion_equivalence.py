#!/usr/bin/env python3
"""A fused plan computes what the unfused plan computes, on every arch.

For each arch (qwen3, qwen3moe, qwen3next, qwen4exp), tiny synthetic model,
F32 weights and the quantised mix of llama_golden.py:
  strata-compile (default pipeline, fusion on)  -> plan A
  strata-compile --no-fusion (one kernel per op) -> plan B
  strata-run A and B on the same random prompt, all logits compared:
  NMSE <= 1e-12 (the CPU interprets fused bodies with the same recipes, so
  the logits are in fact equal), A has fewer kernels than B, and A's arena
  (and that of the gfx1151 and sm_90 plans, bf16 storage) is at most 1.05 x
  its lower bound (in-place outputs included).
Prints every measurement; exit 1 if any bar fails.
"""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from golden_common import ROOT, end_to_end_args, nmse, run  # noqa: E402
from llama_golden import ARCH_MIX, ARCHS, MIX, SYNTH_ARGS  # noqa: E402

try:
    import numpy as np
except ImportError as e:  # pragma: no cover
    print(f"SKIPPED: {e}")
    sys.exit(77)

BAR = 1e-12


def main():
    def options(ap):
        ap.add_argument("--tokens", type=int, default=48)
        ap.add_argument("--seed", type=int, default=3)
    a, tool = end_to_end_args(options)
    failed = 0
    for arch in ARCHS:
        for kind in ["f32", "mix"]:
            tag = f"{arch}-{kind}"
            gguf = os.path.join(a.workdir, tag + ".gguf")
            types = "f32" if kind == "f32" else ARCH_MIX.get(arch, (MIX, None))[0]
            run([tool("strata-gguf"), "synth", "--arch", arch, "--preset", "tiny",
                 "--seed", str(a.seed), "--types", types, "-o", gguf]
                + SYNTH_ARGS.get(arch, []))
            logits, kernels = {}, {}
            rng = np.random.default_rng(a.seed)
            tokens = ",".join(map(str, rng.integers(0, 200, size=a.tokens)))
            for mode, extra in [("fused", []), ("unfused", ["--no-fusion"])]:
                plan = os.path.join(a.workdir, f"{tag}-{mode}.plan")
                run([tool("strata-compile"), os.path.join(ROOT, "models", arch + ".strata"),
                     "--gguf", gguf, "--max-tokens", str(a.tokens), "-o", plan] + extra)
                with open(os.path.join(plan, "plan.json")) as f:
                    pj = json.load(f)
                kernels[mode] = len(pj["kernels"])
                if mode == "fused":
                    arena = pj["arena"]["bytes"] / pj["arena"]["lower_bound"]
                out = os.path.join(a.workdir, f"{tag}-{mode}.f32")
                run([tool("strata-run"), plan, "--gguf", gguf, "--tokens", tokens,
                     "--dump-logits", out])
                logits[mode] = np.fromfile(out, dtype="<f4")
            # The GPU targets' plans (bf16 storage) pack as tightly.
            for target in ["gfx1151", "sm_90"]:
                plan = os.path.join(a.workdir, f"{tag}-{target}.plan")
                run([tool("strata-compile"), os.path.join(ROOT, "models", arch + ".strata"),
                     "--gguf", gguf, "--max-tokens", str(a.tokens), "--target", target, "--no-codegen",
                     "-o", plan])
                with open(os.path.join(plan, "plan.json")) as f:
                    pj = json.load(f)
                arena = max(arena, pj["arena"]["bytes"] / pj["arena"]["lower_bound"])
            err = nmse(logits["fused"], logits["unfused"])
            ok = (err <= BAR and kernels["fused"] < kernels["unfused"]
                  and arena <= 1.05)
            failed += not ok
            print(f"{tag:16s} kernels {kernels['fused']:4d} fused / "
                  f"{kernels['unfused']:4d} unfused  arena/bound {arena:.3f}  "
                  f"NMSE={err:.3e} (bar {BAR:g}) "
                  f"{'ok' if ok else 'FAIL'}", flush=True)
    print("fusion equivalence:", "FAIL" if failed else "ok")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
