#!/usr/bin/env python3
"""Greedy generation with the KV caches in int8 and bf16 against f32
(strata-compile --kv), on the CPU.

The goldens' models and prompts:
  - generate_golden.py's: tiny synthetic qwen3, qwen3moe, qwen3next and
    qwen4exp with dense attention (F32 weights, seed 1), the 16-token prompt
    drawn from the seed as there, prefill in chunks of 8;
  - qwen4exp_generate_golden.py's: the committed tiny Qwen4-Exp with its QSA
    layer (model_ratios.gguf), its long (72 tokens) and short (11 tokens)
    prompts, prefill in chunks of 16.
Each is compiled three times (--kv f32, bf16, int8; host, --precision f32,
--logits last) and generates 64 tokens greedily (strata-run -n 64
--ignore-eos).

Bar: the int8 cache's ids equal the bf16 cache's for at least 60 of the 64
tokens (the equal prefix: greedy paths that part stay parted). Reported, no
bar: bf16 against f32 (equal prefix and the worst step-logits NMSE while the
sequences agree) and int8 against f32.

Prints one line per model and prompt; exit 1 if a bar fails, 77 (ctest:
skipped) if numpy or the gguf package is missing.
"""
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from golden_common import ROOT, end_to_end_args, nmse, run  # noqa: E402

try:
    import numpy as np
    import gguf as gguf_py
except ImportError as e:
    print(f"SKIPPED: {e}")
    sys.exit(77)

GENERATE = 64
BAR = 60  # tokens of 64: int8 equal to bf16
KVS = ["f32", "bf16", "int8"]
# generate_golden.py's models and prompt rule.
ARCHS = ["qwen3", "qwen3moe", "qwen3next", "qwen4exp"]
SYNTH_EXTRA = {"qwen4exp": ["--compress-ratio", "0"]}
PROMPT_TOKENS, CHUNK, CONTROL_TOKENS = 16, 8, 3
GOLDEN = os.path.join(HERE, "qwen4exp_llama")


def vocab_of(path):
    """The vocabulary (llama.cpp's n_vocab: the tokenizer's ids)."""
    reader = gguf_py.GGUFReader(path)
    return len(reader.fields["tokenizer.ggml.tokens"].data)


def generate(tool, workdir, tag, desc, gguf, prompt, chunk, flags, vocab):
    """{kv: (ids, logits [n, vocab])} over the three cache dtypes."""
    out = {}
    for kv in KVS:
        plan = os.path.join(workdir, f"{tag}-{kv}.plan")
        run([tool("strata-compile"), desc, "--gguf", gguf, "--max-tokens",
             str(chunk), "--max-context", str(len(prompt) + GENERATE),
             "--logits", "last", "--target", "host", "--precision", "f32",
             "--kv", kv, "-o", plan] + flags)
        ids_path = os.path.join(workdir, f"{tag}-{kv}.ids")
        logits_path = os.path.join(workdir, f"{tag}-{kv}.f32")
        # Its standard output is generated text (any bytes): not decoded.
        r = subprocess.run([tool("strata-run"), plan, "--gguf", gguf, "--tokens",
                            ",".join(map(str, prompt)), "-n", str(GENERATE),
                            "--ignore-eos", "--dump-ids", ids_path,
                            "--dump-logits", logits_path], capture_output=True)
        if r.returncode != 0:
            raise RuntimeError(r.stderr.decode("utf-8", "replace"))
        with open(ids_path) as f:
            rows = f.read().split("\n")
        ids = [int(t) for t in rows[1].split(",")]
        logits = np.fromfile(logits_path, dtype="<f4").reshape(-1, vocab)
        out[kv] = (ids, logits)
    return out


def agreement(a, b):
    """The equal prefix of two generations, the worst step-logits NMSE over
    the steps both chose from the same sequence, and where they part, b's
    top-2 logit margin at that step (how near a tie the choice was)."""
    ids_a, la = a
    ids_b, lb = b
    k = 0
    while k < len(ids_a) and ids_a[k] == ids_b[k]:
        k += 1
    steps = min(k + 1, len(ids_a))
    worst = max(nmse(la[i], lb[i]) for i in range(steps))
    where = ""
    if k < len(ids_a):
        top2 = np.sort(lb[k])[-2:]
        where = f" (parts at step {k}, top-2 margin {top2[1] - top2[0]:.2e})"
    return k, worst, where


def main():
    a, tool = end_to_end_args()
    cases = []
    for arch in ARCHS:
        gguf = os.path.join(a.workdir, f"{arch}-s1-f32.gguf")
        run([tool("strata-gguf"), "synth", "--arch", arch, "--preset", "tiny",
             "--seed", "1", "--types", "f32", *SYNTH_EXTRA.get(arch, []), "-o",
             gguf])
        vocab = vocab_of(gguf)
        rng = np.random.default_rng(1)
        prompt = rng.integers(0, vocab - CONTROL_TOKENS,
                              size=PROMPT_TOKENS).tolist()
        cases.append((f"{arch}-s1-f32", arch, gguf, prompt, CHUNK, vocab))
    with open(os.path.join(GOLDEN, "generate.json")) as f:
        golden = json.load(f)
    gguf = os.path.join(GOLDEN, "model_ratios.gguf")
    for name, entry in golden["prompts"].items():
        cases.append((f"qwen4exp-qsa-{name}", "qwen4exp", gguf, entry["prompt"],
                      16, entry["shape"][1]))
    failed = 0
    for tag, arch, gguf, prompt, chunk, vocab in cases:
        desc = os.path.join(ROOT, "models", arch + ".strata")
        g = generate(tool, a.workdir, tag, desc, gguf, prompt, chunk, [], vocab)
        k8, n8, w8 = agreement(g["int8"], g["bf16"])
        k16, n16, w16 = agreement(g["bf16"], g["f32"])
        k8f, n8f, w8f = agreement(g["int8"], g["f32"])
        ok = k8 >= BAR
        failed += not ok
        print(f"{tag:20s} int8 vs bf16: {k8}/{GENERATE} equal (bar {BAR}), "
              f"step NMSE <= {n8:.2e}{w8}; bf16 vs f32: {k16}/{GENERATE}, NMSE "
              f"<= {n16:.2e}{w16}; int8 vs f32: {k8f}/{GENERATE}, NMSE <= "
              f"{n8f:.2e}{w8f} {'ok' if ok else 'FAIL'}", flush=True)
    print(f"{len(cases) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
