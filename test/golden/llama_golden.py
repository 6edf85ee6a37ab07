#!/usr/bin/env python3
"""strata's CPU plan against llama.cpp, on synthetic models of each arch.

For each arch (qwen3, qwen3moe, qwen3next, qwen4exp), each seed, and each
weight set (all F32; a quantised mix with Q8_0, Q4_K, Q6_K, IQ4_NL, IQ4_XS
and IQ3_S; for qwen4exp the UD-IQ4_XS layout: Q6_K trunk, IQ3_S gate/up and
IQ4_NL down experts):
  strata-gguf synth -> strata-compile -> strata-run --dump-logits
  llama.cpp (llama-cpp-python) logits for the same tokens
and compares all T x vocab logits:
  F32:  NMSE <= 1e-5
  mix:  NMSE <= 5e-3 and top-1 agreement >= 95 %
(llama.cpp quantises activations to 8 bits for quantised matmuls, so the mix
cannot match exactly), and strata on the mix against llama.cpp on the same
weights dequantised to F32 (strata-gguf dequant-all): NMSE <= 1e-5, which
pins the remaining mix difference on llama.cpp's activation rounding.
qwen4exp files are written with attention.compress_ratios 0 (synth
--compress-ratio 0: dense attention layers, as llama.cpp's converter writes
them with a transformers that knows qwen4_exp), PLE on: on the QSA path
llama.cpp departs from HF transformers, which strata follows (see
docs/qsa-llamacpp.md and qwen4exp_llama_qsa.py). The default prompt is 256 tokens: top-1 agreement
counts near-ties of the top two logits, and over 64 tokens one such
position moves it by 1.6 points. Prints every measurement; exit 1 if any
bar fails, 77 if llama_cpp or numpy is missing.
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from golden_common import ROOT, end_to_end_args, nmse, run  # noqa: E402
from qwen4exp_udiq4xs import TYPES as UD_TYPES  # noqa: E402

try:
    import numpy as np
except ImportError as e:  # pragma: no cover
    print(f"SKIPPED: {e}")
    sys.exit(77)

ARCHS = ["qwen3", "qwen3moe", "qwen3next", "qwen4exp"]
# Extra synth arguments per arch.
SYNTH_ARGS = {"qwen4exp": ["--compress-ratio", "0"]}
# First matching rule wins; the default (q8_0) covers the rest. Every arch's
# file holds all of MIX_TYPES (checked before each comparison): the dense
# qwen3 takes IQ3_S on ffn_up, the MoE archs take Q4_K on the up experts.
MIX = ("q8_0,*ffn_down_exps.*=iq4_nl,*ffn_gate_exps.*=iq3_s,"
       "*ffn_up_exps.*=q4_k,*ffn_gate.*=q4_k,*ffn_up.*=iq3_s,*ffn_down.*=q6_k,"
       "*attn_v.*=iq4_nl,*attn_output.*=iq4_xs,*shexp.*=q4_k,*attn_qkv.*=q6_k,"
       "*attn_gate.*=iq4_nl,*ssm_out.*=iq4_xs,output.*=q6_k")
MIX_TYPES = {"Q8_0", "Q4_K", "Q6_K", "IQ4_NL", "IQ4_XS", "IQ3_S"}
# qwen4exp's mix is the published UD-IQ4_XS layout (see qwen4exp_udiq4xs.py).
ARCH_MIX = {"qwen4exp": (UD_TYPES, {"Q6_K", "IQ3_S", "IQ4_NL", "Q8_0"})}
BARS = {"f32": (1e-5, 0.0), "mix": (5e-3, 0.95)}
# The GPU precision policy (activations stored in bf16) on the CPU.
BF16_BARS = (1e-3, 0.97)


def main():
    def options(ap):
        ap.add_argument("--seeds", default="1,2")
        ap.add_argument("--tokens", type=int, default=256)
        ap.add_argument("--archs", default=",".join(ARCHS))
        ap.add_argument("--kinds", default="f32,mix",
                        help="weight sets to compare: f32, mix")
        ap.add_argument("--precision", default="f32", choices=["f32", "bf16"],
                        help="bf16: plans store activations in bf16 (the GPU "
                        "policy); bars NMSE <= 1e-3, top-1 >= 97 %%")
    a, tool = end_to_end_args(options)
    try:
        from gguf import GGUFReader as gguf_reader
        from llama_logits import llama_logits
        import llama_cpp  # noqa: F401
    except ImportError as e:
        print(f"SKIPPED: {e}; run scripts/install-deps.sh")
        return 77
    results, failed = [], 0
    for arch in a.archs.split(","):
        for seed in [int(s) for s in a.seeds.split(",")]:
            for kind in a.kinds.split(","):
                tag = f"{arch}-s{seed}-{kind}"
                gguf = os.path.join(a.workdir, tag + ".gguf")
                plan = os.path.join(a.workdir, tag + ".plan")
                mix, mix_types = ARCH_MIX.get(arch, (MIX, MIX_TYPES))
                types = "f32" if kind == "f32" else mix
                run([tool("strata-gguf"), "synth", "--arch", arch, "--preset", "tiny",
                     "--seed", str(seed), "--types", types, "-o", gguf]
                    + SYNTH_ARGS.get(arch, []))
                if kind == "mix":
                    held = {t.tensor_type.name for t in gguf_reader(gguf).tensors}
                    if not mix_types <= held:
                        print(f"{tag}: FAIL: the mix lacks {sorted(mix_types - held)}")
                        failed += 1
                        continue
                run([tool("strata-compile"), os.path.join(ROOT, "models", arch + ".strata"),
                     "--gguf", gguf, "--max-tokens", str(a.tokens), "--target", "host",
                     "--precision", a.precision, "-o", plan])
                # A prompt of random ids from the model's vocabulary, the
                # vocabulary size as llama.cpp reads it.
                vocab = llama_logits(gguf, [0]).shape[1]
                rng = np.random.default_rng(seed)
                tokens = rng.integers(0, vocab, size=a.tokens).tolist()
                theirs = llama_logits(gguf, tokens)
                ours_path = os.path.join(a.workdir, tag + ".f32")
                run([tool("strata-run"), plan, "--gguf", gguf, "--tokens",
                     ",".join(map(str, tokens)), "--dump-logits", ours_path])
                ours = np.fromfile(ours_path, dtype="<f4").reshape(theirs.shape)
                checks = [(tag, theirs,
                           BF16_BARS if a.precision == "bf16" else BARS[kind])]
                if kind == "mix":
                    # The same quantised weights dequantised to F32: llama.cpp
                    # then keeps activations f32 too, so strata's run of the
                    # quantised file must match it as closely as F32 does.
                    exact = os.path.join(a.workdir, tag + "-dequant.gguf")
                    run([tool("strata-gguf"), "dequant-all", gguf, exact])
                    checks.append((tag + "-vs-dequant", llama_logits(exact, tokens),
                                   BF16_BARS if a.precision == "bf16" else BARS["f32"]))
                for name, ref, (bar_nmse, bar_top1) in checks:
                    err = nmse(ours, ref)
                    top1 = float((ours.argmax(1) == ref.argmax(1)).mean())
                    ok = err <= bar_nmse and top1 >= bar_top1 and np.isfinite(ours).all()
                    failed += not ok
                    line = (f"{name:28s} T={len(tokens)} vocab={ref.shape[1]} "
                            f"NMSE={err:.3e} (bar {bar_nmse:g}) top1={top1 * 100:.1f}% "
                            f"{'ok' if ok else 'FAIL'}")
                    print(line, flush=True)
                    results.append(line)
    print(f"{len(results) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
