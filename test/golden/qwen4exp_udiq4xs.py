#!/usr/bin/env python3
"""The UD-IQ4_XS layout of qwen4exp: quantised weights against their F32 copy.

unsloth's UD-IQ4_XS files keep the trunk at Q6_K and store the routed
experts as IQ3_S (gate, up) and IQ4_NL (down). This check builds that layout
on the tiny random qwen4exp (strata-gguf synth; 1-D tensors, routers,
hyper-connection, ssm_alpha / ssm_beta and conv weights stay F32), writes the
same weights dequantised to F32 (strata-gguf dequant-all), compiles
models/qwen4exp.strata for each file and runs both plans on the same prompts.
A matmul over a quantised weight means "dequantise to f32, accumulate in
f32", so the two plans must agree up to f32 rounding: NMSE <= 1e-6 over all
T x vocab logits of each prompt. So that the check cannot pass vacuously,
the same seed's unquantised model (synth without --types) must differ: its
NMSE against the F32 copy (the quantisation error, printed) must be > 0.
Prints every measurement; exit 1 if a bar
fails, 77 if numpy is missing.
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from golden_common import ROOT, end_to_end_args, nmse, run  # noqa: E402
BAR = 1e-6
# The PLE table's rows (64 values in the tiny model) take no 256-element
# block: Q8_0, as the published file stores it.
TYPES = ("q6_k,*ffn_gate_exps*=iq3_s,*ffn_up_exps*=iq3_s,*ffn_down_exps*=iq4_nl,"
         "per_layer_token_embd*=q8_0")
MAX_TOKENS = 64

try:
    import numpy as np
except ImportError as e:  # pragma: no cover
    print(f"SKIPPED: {e}")
    sys.exit(77)


def prompts():
    """A full-length prompt (the QSA indexer selects blocks; the EOS id 997
    resets the PLE n-grams) and a short dense one; ids below the vocab 1000."""
    rng = np.random.default_rng(20260)
    long = [int(x) for x in rng.integers(0, 997, MAX_TOKENS)]
    long[23] = 997
    return {"long": long, "short": [11, 42, 7, 300, 5, 99, 123, 8, 11, 42, 7]}


def main():
    a, tool = end_to_end_args()
    w = lambda n: os.path.join(a.workdir, n)
    model = os.path.join(ROOT, "models", "qwen4exp.strata")

    run([tool("strata-gguf"), "synth", "--arch", "qwen4exp", "--preset", "tiny",
         "--seed", "7", "--types", TYPES, "-o", w("ud.gguf")])
    run([tool("strata-gguf"), "dequant-all", w("ud.gguf"), w("f32.gguf")])
    run([tool("strata-gguf"), "synth", "--arch", "qwen4exp", "--preset", "tiny",
         "--seed", "7", "-o", w("orig.gguf")])
    types = {}
    for line in run([tool("strata-gguf"), "inspect", w("ud.gguf")]).split(
            "tensors (")[1].splitlines()[2:]:
        name, ty = line.split()[:2]
        types[ty] = types.get(ty, 0) + 1
    print("ud.gguf tensor types:",
          ", ".join(f"{t} {n}" for t, n in sorted(types.items())))

    for f in ("ud", "f32", "orig"):
        run([tool("strata-compile"), model, "--gguf", w(f + ".gguf"),
             "--max-tokens", str(MAX_TOKENS), "--target", "host",
             "-o", w(f + ".plan")])
    failed = 0
    for name, tokens in prompts().items():
        logits = {}
        for f in ("ud", "f32", "orig"):
            out = w(f"logits_{f}_{name}.f32")
            run([tool("strata-run"), w(f + ".plan"), "--gguf", w(f + ".gguf"),
                 "--tokens", ",".join(map(str, tokens)), "--dump-logits", out])
            logits[f] = np.fromfile(out, dtype="<f4").astype(np.float64)
        ref, got, orig = logits["f32"], logits["ud"], logits["orig"]
        if not all(np.isfinite(x).all() for x in (ref, got, orig)):
            print(f"{name}: FAIL: non-finite logits")
            failed += 1
            continue
        err = nmse(got, ref)
        quant = nmse(orig, ref)
        print(f"{name}: quantisation error (unquantised vs F32 copy) NMSE "
              f"{quant:.3e}: {'ok' if quant > 0 else 'FAIL (vacuous)'}")
        failed += not quant > 0
        ok = err <= BAR
        failed += not ok
        print(f"{name} ({len(tokens)} tokens): NMSE {err:.3e} "
              f"(bar {BAR:.0e}), max |diff| {np.max(np.abs(got - ref)):.3e}: "
              f"{'ok' if ok else 'FAIL'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
