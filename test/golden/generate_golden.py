#!/usr/bin/env python3
"""strata-run's greedy generation against llama.cpp's, token for token.

For each arch (qwen3, qwen3moe, qwen3next; qwen4exp with dense attention,
F32 only) and weight set (all F32; the quantised mix of llama_golden.py:
Q8_0, Q4_K, Q6_K, IQ4_NL, IQ4_XS, IQ3_S), on a tiny synthetic model:
  strata-gguf synth -> strata-compile --logits last --max-tokens 8
  --max-context P+N (the stateful plan: the prompt prefilled in chunks of 8,
  then one decode row a token over the KV caches and recurrent state) ->
  strata-run --tokens PROMPT -n N --ignore-eos --dump-ids --dump-logits
and llama.cpp (llama-cpp-python's Llama.generate, greedy sampler: temp 0,
repeat_penalty 1, KV cache in F32, one thread) on the same GGUF and the same
prompt ids, N tokens past the prompt; both ignore end-of-generation tokens,
so N tokens are always compared. The prompt: P ids drawn from the seed in
[0, vocab - 3) (the synthetic vocabulary's three control tokens left out).

The bars:
  F32: all N ids equal.
  mix, against llama.cpp on the same weights dequantised to F32
  (strata-gguf dequant-all; llama.cpp then keeps activations in f32 too):
  all N ids equal.
  mix, against llama.cpp on the quantised file itself: llama.cpp rounds
  activations to 8 bits before quantised matmuls (strata does not), which
  moves logits by up to ~1 on these models, so the greedy paths may part;
  the equal prefix is reported, and the logits of every step up to there
  must be within llama_golden.py's bar for the mix.
On every step both ran on the same sequence, the two logits rows must be
within llama_golden.py's NMSE bars (F32: 1e-5, mix: 5e-3). llama.cpp sums in
f32 in its own order (F32 logits differ by ~1e-5): where a step's top-2
logits are within 1e-4 (TIE) a flip of the greedy choice is legitimate.
Such steps are listed, whether or not they flipped, and a flip there (each
side's choice within TIE of the other's top) is reported as a tie, not a
failure. The default seed (1) and prompt length (16) have none on any
model: the smallest top-2 margin is printed.

Prints one line per comparison with the timings; exit 1 if a bar fails, 77
(ctest: skipped) if llama_cpp or numpy cannot be imported.
"""
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from golden_common import ROOT, end_to_end_args, nmse, run  # noqa: E402

try:
    import numpy as np
    import llama_cpp  # noqa: F401
    from llama_logits import load as llama_load
except ImportError as e:
    print(f"SKIPPED: {e}; run scripts/install-deps.sh")
    sys.exit(77)
from llama_golden import MIX  # noqa: E402

ARCHS = ["qwen3", "qwen3moe", "qwen3next", "qwen4exp"]
# Qwen4-Exp with dense attention (synth --compress-ratio 0; llama.cpp's QSA
# selection departs from HF's, docs/qsa-llamacpp.md, so the QSA path is
# checked against HF in qwen4exp_generate_golden.py), F32 weights only.
SYNTH_EXTRA = {"qwen4exp": ["--compress-ratio", "0"]}
KINDS = {"qwen4exp": ["f32"]}
TIE = 1e-4
# Rows per run of the stateful plans: the 16-token prompt runs in two chunks.
CHUNK = 8
# Per step, the logits both chose from (while the sequences agree): the bars
# of llama_golden.py (F32; the quantised mix, whose activations llama.cpp
# rounds to 8 bits).
F32_NMSE, MIX_NMSE = 1e-5, 5e-3
CONTROL_TOKENS = 3  # the synthetic vocabulary's last ids


def run_bytes(cmd):
    """Runs a tool whose standard output is generated text (any bytes);
    returns its standard error; raises with both if it fails."""
    r = subprocess.run(cmd, capture_output=True)
    err = r.stderr.decode("utf-8", "replace")
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}\n{err}")
    return err


def margins(logits):
    """Per row: the top logit minus the second."""
    top2 = np.sort(logits, axis=1)[:, -2:]
    return top2[:, 1] - top2[:, 0]


def llama_generate(gguf, prompt, n):
    """llama.cpp's greedy ids after prompt and the logits each was chosen
    from ([n, vocab])."""
    llm = llama_load(gguf, len(prompt) + n, n_threads=1)
    try:
        ids = []
        for token in llm.generate(prompt, temp=0.0, top_k=40, top_p=0.95,
                                  min_p=0.05, repeat_penalty=1.0):
            ids.append(int(token))
            if len(ids) == n:
                break
        logits = np.array(llm.scores[len(prompt) - 1:len(prompt) - 1 + n],
                          dtype=np.float32)
        return ids, logits
    finally:
        llm.close()


def compare(name, ours, ours_logits, theirs, their_logits, quantised):
    """One comparison line and whether it passes."""
    n = len(ours)
    k = next((i for i in range(n) if ours[i] != theirs[i]), n)
    mo, mt = margins(ours_logits), margins(their_logits)
    # Steps to judge: where both ran the same sequence (up to and including
    # the first difference).
    judged = range(min(k + 1, n))
    ties = [i for i in judged if min(mo[i], mt[i]) < TIE]
    diff = [float(np.abs(ours_logits[i] - their_logits[i]).max()) for i in judged]
    worst = max(nmse(ours_logits[i], their_logits[i]) for i in judged)
    bar = MIX_NMSE if quantised else F32_NMSE
    line = (f"{name:34s} equal {k}/{n}, smallest top-2 margin "
            f"{min(min(mo[i], mt[i]) for i in judged):.2e}, largest |dlogit| "
            f"{max(diff):.2e}, step NMSE <= {worst:.1e} (bar {bar:g}), tie "
            f"steps (< {TIE:g}): {ties if ties else 'none'}")
    if worst > bar:
        return line + " FAIL", False
    if k == n:
        return line + " ok", True
    a, b = ours[k], theirs[k]
    where = (f"; step {k}: ours {a} (llama.cpp's logit {their_logits[k][a]:.6g} "
             f"vs {their_logits[k][b]:.6g}), llama.cpp {b} (ours "
             f"{ours_logits[k][b]:.6g} vs {ours_logits[k][a]:.6g})")
    # A tie flip: each side's choice is within TIE of the other's top.
    if (ours_logits[k][b] >= ours_logits[k][a] - TIE
            and their_logits[k][a] >= their_logits[k][b] - TIE):
        return line + where + " (a tie flip) ok", True
    if quantised:
        return line + where + " (llama.cpp's 8-bit activations) ok", True
    return line + where + " FAIL", False


def main():
    def options(ap):
        ap.add_argument("--seeds", default="1")
        ap.add_argument("--prompt-tokens", type=int, default=16)
        ap.add_argument("--generate", type=int, default=64)
        ap.add_argument("--archs", default=",".join(ARCHS))
        ap.add_argument("--kinds", default="f32,mix")
    a, tool = end_to_end_args(options)
    n, p = a.generate, a.prompt_tokens
    failed, lines = 0, 0
    started = time.perf_counter()
    for arch in a.archs.split(","):
        for seed in [int(s) for s in a.seeds.split(",")]:
            for kind in a.kinds.split(","):
                if kind not in KINDS.get(arch, [kind]):
                    continue
                tag = f"{arch}-s{seed}-{kind}"
                gguf = os.path.join(a.workdir, tag + ".gguf")
                plan = os.path.join(a.workdir, tag + ".plan")
                run([tool("strata-gguf"), "synth", "--arch", arch, "--preset", "tiny",
                     "--seed", str(seed), "--types", "f32" if kind == "f32" else MIX,
                     *SYNTH_EXTRA.get(arch, []), "-o", gguf])
                desc = os.path.join(ROOT, "models", arch + ".strata")
                run([tool("strata-compile"), desc, "--gguf", gguf, "--max-tokens",
                     str(CHUNK), "--max-context", str(p + n), "--logits", "last",
                     "--target", "host", "-o", plan])
                ids_path = os.path.join(a.workdir, tag + ".ids")
                logits_path = os.path.join(a.workdir, tag + ".f32")
                llm_probe = llama_load(gguf, 1, n_threads=1)
                vocab = llm_probe.n_vocab()
                llm_probe.close()
                rng = np.random.default_rng(seed)
                prompt = rng.integers(0, vocab - CONTROL_TOKENS, size=p).tolist()
                t0 = time.perf_counter()
                err = run_bytes([tool("strata-run"), plan, "--gguf", gguf, "--tokens",
                                 ",".join(map(str, prompt)), "-n", str(n),
                                 "--ignore-eos", "--dump-ids", ids_path,
                                 "--dump-logits", logits_path])
                ours_seconds = time.perf_counter() - t0
                with open(ids_path) as f:
                    rows = f.read().split("\n")
                assert rows[0] == ",".join(map(str, prompt)), rows[0]
                ours = [int(t) for t in rows[1].split(",")]
                ours_logits = np.fromfile(logits_path, dtype="<f4").reshape(n, vocab)
                refs = [(tag, gguf, kind == "mix")]
                if kind == "mix":
                    exact = os.path.join(a.workdir, tag + "-dequant.gguf")
                    run([tool("strata-gguf"), "dequant-all", gguf, exact])
                    refs.append((tag + "-vs-dequant", exact, False))
                for name, ref, quantised in refs:
                    t0 = time.perf_counter()
                    theirs, their_logits = llama_generate(ref, prompt, n)
                    their_seconds = time.perf_counter() - t0
                    line, ok = compare(name, ours, ours_logits, theirs, their_logits,
                                       quantised)
                    failed += not ok
                    lines += 1
                    print(f"{line}; strata {ours_seconds:.2f} s, llama.cpp "
                          f"{their_seconds:.2f} s", flush=True)
                timing = err.strip().splitlines()[-1] if err.strip() else ""
                print(f"  {tag}: strata-run {timing}", flush=True)
    print(f"{lines - failed} passed, {failed} failed "
          f"({time.perf_counter() - started:.1f} s)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
