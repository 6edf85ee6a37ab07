#!/usr/bin/env python3
"""llama.cpp (through llama-cpp-python) loads what `strata-gguf synth` writes.

For each architecture (qwen3, qwen3moe, qwen3next, qwen4exp with QSA and,
as llama.cpp's converter also writes it, with compress ratio 0) and three
--types settings
(all f32; a mix whose first-matching rules make experts q4_k; a mix with every
block type strata writes) the file must load, report the synthetic vocabulary
(1000 tokens), evaluate a prompt to finite logits of a sane spread, and
tokenize/detokenize text through the byte-level BPE vocabulary unchanged.
gguf-py must read the same file with the types synth reports.

Usage: synth_llama_load.py --strata-gguf BIN --workdir DIR
Exits 0 on success, 1 on a failure, 77 (ctest: skipped) where llama_cpp,
numpy or gguf is missing.
"""

import argparse
import os
import subprocess
import sys

try:
    import numpy as np
    import gguf
    from llama_cpp import Llama
except ImportError as e:  # pragma: no cover
    print(f"SKIPPED: {e}")
    sys.exit(77)

# (arch, label, extra synth arguments)
ARCHES = [("qwen3", "", []), ("qwen3moe", "", []), ("qwen3next", "", []),
          ("qwen4exp", "", []), ("qwen4exp", "-dense", ["--compress-ratio", "0"])]
TYPES = {
    "f32": "f32",
    "mix": "q8_0,*ffn_*=q4_k,*attn_v*=q6_k,*_exps*=iq3_s,"
           "*ffn_down_exps*=iq4_nl,*attn_output*=iq4_xs",
    "all": "q8_0,*ffn_down_exps*=iq4_nl,*ffn_gate_exps*=iq3_s,*_exps*=q4_k,"
           "*ffn_gate_inp*=f16,*ffn_down*=q6_k,*ffn_*=q4_k,*attn_v*=q6_k,"
           "*attn_output*=iq4_xs,*attn_k.*=q5_k,*attn_q.*=q4_0,*ssm_out*=bf16,"
           "*attn_gate*=bf16,token_embd*=q6_k,output.*=f16",
}
PROMPT = [5, 17, 300, 999, 42, 256, 700, 3, 997, 12]
TEXT = b"hello world\nabc 123"


def check(cond, what):
    if not cond:
        raise AssertionError(what)


def run_one(strata_gguf, workdir, arch, label, spec, extra):
    path = os.path.join(workdir, f"{arch}-{label}.gguf")
    if arch == "qwen4exp" and "," in spec:
        # The hyper-connection up projections have rows of 32 values (the
        # rank) that no block type fits; *ffn_* would name hc_ffn_up.
        default, rules = spec.split(",", 1)
        spec = f"{default},*hc_*=f16,{rules}"
    subprocess.run([strata_gguf, "synth", "--arch", arch, "--preset", "tiny",
                    "--seed", "11", "--types", spec, "-o", path] + extra,
                   check=True, stderr=subprocess.DEVNULL)
    reader = gguf.GGUFReader(path)
    check(reader.fields["general.architecture"].contents() == arch,
          "general.architecture")
    check(len(reader.fields["tokenizer.ggml.tokens"].contents()) == 1000,
          "token count")

    llm = Llama(model_path=path, n_ctx=64, n_batch=64, logits_all=True,
                n_threads=2, verbose=False)
    check(llm.n_vocab() == 1000, f"n_vocab {llm.n_vocab()}")
    llm.reset()
    llm.eval(PROMPT)
    logits = np.array(llm.scores[:len(PROMPT)])
    check(logits.shape == (len(PROMPT), 1000), f"logits shape {logits.shape}")
    check(bool(np.isfinite(logits).all()), "non-finite logits")
    spread = float(logits.std())
    check(0.1 < spread < 10.0, f"logit std {spread}")
    tokens = llm.tokenize(TEXT, add_bos=False)
    check(llm.detokenize(tokens) == TEXT, "tokenize/detokenize round trip")
    print(f"ok: {arch} {label}: logits std {spread:.3f}, "
          f"{len(tokens)} tokens for {TEXT!r}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--strata-gguf", required=True)
    ap.add_argument("--workdir", required=True)
    args = ap.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    failed = 0
    for arch, variant, extra in ARCHES:
        for label, spec in TYPES.items():
            try:
                run_one(args.strata_gguf, args.workdir, arch, label + variant,
                        spec, extra)
            except Exception as e:  # report every case, then fail
                print(f"FAIL: {arch} {label}{variant}: {e}")
                failed += 1
    total = len(ARCHES) * len(TYPES)
    print(f"{total - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
