#!/usr/bin/env python3
"""strata's CPU plan of models/qwen4exp.strata against HF transformers.

The tiny qwen4exp model in test/golden/qwen4exp_llama/ (3 layers: GDN,
GDN + PLE, QSA; qwen4exp_llama_convert.py builds it in HF transformers and
writes its GGUFs with llama.cpp's own converter, in both kinds found in the
wild): model_ratios.gguf holds attention.compress_ratios [0, 0, 4],
model_zero.gguf holds 0 everywhere. Each file is compiled unchanged for the
long prompt's length and run on the long (72 tokens: an EOS inside, sparse
attention from query 19 on) and the short (11 tokens, dense) prompt of
logits.json; all T x vocab logits and five intermediate activations of the
long prompt (strata-run --dump-buffer: first HC read u and injection gates,
first GDN output, first MoE output, final mixer output) are compared with
HF's: NMSE <= 1e-5 each.
  - model_ratios.gguf: both prompts;
  - model_zero.gguf with --qsa-compress-ratio 4 (the checkpoint's
    indexer_compress_ratio): both prompts;
  - model_zero.gguf as is: dense attention, which equals HF on the short
    prompt; strata-compile says so in one remark line.
With --precision bf16 the plans store activations in bf16 (the GPU
targets' precision policy; residual streams and logits stay f32) and the
bars are NMSE <= 1e-3 and top-1 agreement >= 97 % on the logits (NMSE
<= 1e-3 on the intermediates).
Prints every measurement; exit 1 if a bar fails, 77 if numpy is missing.
"""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from golden_common import ROOT, end_to_end_args, nmse, run  # noqa: E402
GOLDEN = os.path.join(HERE, "qwen4exp_llama")
BAR = 1e-5

try:
    import numpy as np
except ImportError as e:  # pragma: no cover
    print(f"SKIPPED: {e}")
    sys.exit(77)


BF16_BAR, BF16_TOP1 = 1e-3, 0.97


def compare(tag, got, ref, bar):
    """NMSE of \p got against \p ref; prints a line; returns (ok, nmse)."""
    ok = got.size == ref.size
    err = nmse(got, ref.reshape(got.shape)) if ok else float("inf")
    ok = ok and bool(np.isfinite(got).all()) and err <= bar
    print(f"{tag:34s} NMSE={err:.3e} (bar {bar:g}) {'ok' if ok else 'FAIL'}", flush=True)
    return ok, err


def main():
    a, tool = end_to_end_args(lambda ap: ap.add_argument(
        "--precision", default="f32", choices=["f32", "bf16"]))
    bar = BF16_BAR if a.precision == "bf16" else BAR
    with open(os.path.join(GOLDEN, "logits.json")) as f:
        prompts = json.load(f)["prompts"]
    with open(os.path.join(GOLDEN, "activations.json")) as f:
        acts = json.load(f)["activations"]
    max_tokens = max(len(p["tokens"]) for p in prompts.values())
    model = os.path.join(ROOT, "models", "qwen4exp.strata")
    # Intermediate activations of the long prompt: HF hook (activations.json)
    # -> the IR value that holds the same tensor in the expanded model.
    intermediates = {
        "hc0_attn_read_u": "u",     # first gated-residual read: u [T, D]
        "hc0_attn_inject": "lam",   # its injection gates [T, HC]
        "gdn0_out": "o2",           # first GDN output, after ssm_out [T, D]
        "moe0_out": "m",            # first MoE block output [T, D]
        "final_hidden": "u.6",      # final mixer output, the LM head's input
    }
    # (file, strata-compile flags, prompts that must match HF). The file
    # with ratio 0 runs dense attention unless told the checkpoint's ratio:
    # then only the short (dense-regime) prompt matches HF.
    cases = [("model_ratios.gguf", [], ["long", "short"]),
             ("model_zero.gguf", ["--qsa-compress-ratio", "4"], ["long", "short"]),
             ("model_zero.gguf", [], ["short"])]
    failed = checks = 0
    for gguf_name, flags, names in cases:
        tag = gguf_name.split(".")[0] + ("+ratio4" if flags else "")
        gguf = os.path.join(GOLDEN, gguf_name)
        plan = os.path.join(a.workdir, tag + ".plan")
        err = run([tool("strata-compile"), model, "--gguf", gguf, "--max-tokens",
                   str(max_tokens), "--target", "host", "--precision", a.precision,
                   "-o", plan] + flags,
                  stderr_out=True)
        # Only the file without ratios, compiled without the flag, says that
        # QSA is off (one remark line).
        remarks = [l for l in err.splitlines() if "remark: QSA is off" in l]
        want = 1 if (gguf_name == "model_zero.gguf" and not flags) else 0
        ok = len(remarks) == want and len(err.splitlines()) == want
        checks += 1
        failed += not ok
        print(f"{tag:34s} {want} remark line(s) from strata-compile: "
              f"{'ok' if ok else 'FAIL: ' + repr(err)}")
        for name in names:
            p = prompts[name]
            ours_path = os.path.join(a.workdir, f"{tag}_{name}.f32")
            dumps = []
            if name == "long":
                for act, value in intermediates.items():
                    dumps += ["--dump-buffer",
                              f"{value}={os.path.join(a.workdir, tag + act + '.f32')}"]
            run([tool("strata-run"), plan, "--gguf", gguf, "--tokens",
                 ",".join(map(str, p["tokens"])), "--dump-logits", ours_path] + dumps)
            if name == "long":
                for act, value in intermediates.items():
                    ref = np.fromfile(os.path.join(GOLDEN, acts[act]["file"]), dtype="<f4")
                    got = np.fromfile(os.path.join(a.workdir, tag + act + ".f32"),
                                      dtype="<f4")
                    ok, _ = compare(f"{tag} {act} (%{value})", got.astype(np.float64),
                                    ref.astype(np.float64), bar)
                    checks += 1
                    failed += not ok
            theirs = np.fromfile(os.path.join(GOLDEN, p["file"]), dtype="<f4")
            ours = np.fromfile(ours_path, dtype="<f4")
            ok, _ = compare(f"{tag} logits {name} T={len(p['tokens'])}",
                            ours.astype(np.float64), theirs.astype(np.float64), bar)
            if ours.size == theirs.size:
                top1 = float((ours.reshape(p["shape"]).argmax(1) ==
                              theirs.reshape(p["shape"]).argmax(1)).mean())
                top1_ok = a.precision == "f32" or top1 >= BF16_TOP1
                ok = ok and top1_ok
                print(f"{'':34s} top-1 {top1 * 100:.1f}%"
                      + ("" if a.precision == "f32" else
                         f" (bar {BF16_TOP1 * 100:.0f}%) {'ok' if top1_ok else 'FAIL'}"))
            checks += 1
            failed += not ok
    print(f"{checks - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
