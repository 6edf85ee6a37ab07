#!/usr/bin/env python3
"""strata's CPU plan of models/qwen4exp.strata against HF transformers.

The tiny qwen4exp model in test/golden/qwen4exp/ (3 layers: GDN, GDN + PLE,
QSA; made by qwen4exp_oracle.py) is compiled once for the long prompt's
length, then run with the long (72 tokens: an EOS inside, sparse attention
from query 19 on) and the short (11 tokens, dense) prompt of logits.json.
All T x vocab logits are compared with HF's (logits_long.f32,
logits_short.f32) and five intermediate activations of the long prompt
(strata-run --dump-buffer: first HC read u and injection gates, first GDN
output, first MoE output, final mixer output): NMSE <= 1e-5 each. Prints every measurement; exit 1 if a
bar fails, 77 if numpy is missing.
"""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from golden_common import ROOT, end_to_end_args, nmse, run  # noqa: E402
GOLDEN = os.path.join(HERE, "qwen4exp")
BAR = 1e-5

try:
    import numpy as np
except ImportError as e:  # pragma: no cover
    print(f"SKIPPED: {e}")
    sys.exit(77)


def main():
    a, tool = end_to_end_args()
    gguf = os.path.join(GOLDEN, "model.gguf")
    with open(os.path.join(GOLDEN, "logits.json")) as f:
        meta = json.load(f)
    prompts = meta["prompts"]
    max_tokens = max(len(p["tokens"]) for p in prompts.values())
    plan = os.path.join(a.workdir, "qwen4exp.plan")
    run([tool("strata-compile"), os.path.join(ROOT, "models", "qwen4exp.strata"),
         "--gguf", gguf, "--max-tokens", str(max_tokens), "--target", "host",
         "-o", plan])
    # Intermediate activations of the long prompt: HF hook (activations.json)
    # -> the IR value that holds the same tensor in the expanded model.
    with open(os.path.join(GOLDEN, "activations.json")) as f:
        acts = json.load(f)["activations"]
    intermediates = {
        "hc0_attn_read_u": "u",     # first gated-residual read: u [T, D]
        "hc0_attn_inject": "lam",   # its injection gates [T, HC]
        "gdn0_out": "o2",           # first GDN output, after ssm_out [T, D]
        "moe0_out": "m",            # first MoE block output [T, D]
        "final_hidden": "u.6",      # final mixer output, the LM head's input
    }
    failed = 0
    checks = 0
    for name in ("long", "short"):
        p = prompts[name]
        tokens = p["tokens"]
        theirs = np.fromfile(os.path.join(GOLDEN, p["file"]),
                             dtype="<f4").reshape(p["shape"])
        ours_path = os.path.join(a.workdir, f"logits_{name}.f32")
        dumps = []
        if name == "long":
            for act, value in intermediates.items():
                dumps += ["--dump-buffer",
                          f"{value}={os.path.join(a.workdir, act + '.f32')}"]
        run([tool("strata-run"), plan, "--gguf", gguf, "--tokens",
             ",".join(map(str, tokens)), "--dump-logits", ours_path] + dumps)
        if name == "long":
            for act, value in intermediates.items():
                info = acts[act]
                ref = np.fromfile(os.path.join(GOLDEN, info["file"]),
                                  dtype="<f4").astype(np.float64)
                got = np.fromfile(os.path.join(a.workdir, act + ".f32"),
                                  dtype="<f4").astype(np.float64)
                checks += 1
                if got.size != ref.size:
                    print(f"{act:16s} (%{value}) FAIL: {got.size} values, "
                          f"expected {ref.size}")
                    failed += 1
                    continue
                err = nmse(got, ref)
                ok = bool(np.isfinite(got).all()) and err <= BAR
                failed += not ok
                print(f"{act:16s} (%{value}) shape={info['shape']} "
                      f"NMSE={err:.3e} (bar {BAR:g}) {'ok' if ok else 'FAIL'}")
        ours = np.fromfile(ours_path, dtype="<f4")
        if ours.size != theirs.size:
            print(f"{name:6s} FAIL: {ours.size} logits, expected {theirs.size}")
            failed += 1
            continue
        ours = ours.reshape(theirs.shape)
        ref = theirs.astype(np.float64)
        diff = ours.astype(np.float64) - ref
        err = nmse(ours, ref)
        top1 = float((ours.argmax(1) == theirs.argmax(1)).mean())
        ok = bool(np.isfinite(ours).all()) and err <= BAR
        failed += not ok
        print(f"{name:6s} T={len(tokens)} vocab={theirs.shape[1]} "
              f"NMSE={err:.3e} (bar {BAR:g}) max|diff|={np.abs(diff).max():.2e} "
              f"top1={top1 * 100:.1f}% {'ok' if ok else 'FAIL'}", flush=True)
    checks += 2
    print(f"{checks - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
