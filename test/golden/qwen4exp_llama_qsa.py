#!/usr/bin/env python3
"""Where llama.cpp departs from HF transformers on qwen4exp's QSA path.

strata follows HF (docs/qwen4exp-model.md 3.7): per query the top BUD/CR
complete blocks by indexer score plus the query's incomplete tail block.
llama.cpp keeps the best BUD+CR-1 key CELLS instead, so once a query has more
complete blocks than the budget and a short tail, it also attends to up to
CR-1 tokens of the next-best block (docs/qsa-llamacpp.md). This test shows it
on a tiny random qwen4exp whose one attention layer (blk.3) is QSA with CR 4
and BUD 16 (strata-gguf synth, F32), over a 64-token prompt:

  1. strata's own selection (the qsa_select buffer) equals HF's rule computed
     from strata's dumped indexer queries and raw keys (test/golden/qsa_rules.py);
  2. HF's and llama.cpp's rules first differ at query BUD+CR-1 = 19, as
     predicted, and every earlier query attends densely under both;
  3. llama.cpp's logits (llama-cpp-python, f32 KV cache) equal strata's on
     every query before that one (NMSE <= 1e-5 over those rows, each row
     <= 1e-8), and the first row where they part (row NMSE > 1e-6) is exactly
     the first query where the two selection rules differ.
  4. With the selection forced dense (the same weights, compress ratio 0), the
     two agree on every row (NMSE <= 1e-5): the departure is the selection.

Prints every measurement; exit 1 if a check fails, 77 if llama_cpp, numpy or
gguf is missing.
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from golden_common import ROOT, end_to_end_args, nmse, run  # noqa: E402

try:
    import numpy as np
    from gguf import GGUFReader
    from llama_logits import llama_logits
    import llama_cpp  # noqa: F401
    import qsa_rules
except ImportError as e:  # pragma: no cover
    print(f"SKIPPED: {e}; run scripts/install-deps.sh")
    sys.exit(77)

T = 64
CR, BUD, LAYER = 4, 16, 3
SEED = 5


def meta(reader, key):
    return reader.fields["qwen4exp." + key].contents()


def main():
    a, tool = end_to_end_args()
    w = lambda n: os.path.join(a.workdir, n)
    model = os.path.join(ROOT, "models", "qwen4exp.strata")
    failed = 0

    def check(ok, what):
        nonlocal failed
        failed += not ok
        print(f"{what}: {'ok' if ok else 'FAIL'}", flush=True)

    for name, ratio in (("qsa", CR), ("dense", 0)):
        run([tool("strata-gguf"), "synth", "--arch", "qwen4exp", "--preset", "tiny",
             "--seed", str(SEED), "--compress-ratio", str(ratio), "-o", w(name + ".gguf")])
        run([tool("strata-compile"), model, "--gguf", w(name + ".gguf"),
             "--max-tokens", str(T), "-o", w(name + ".plan")])
    reader = GGUFReader(w("qsa.gguf"))
    check(int(meta(reader, "attention.indexer.top_k")) == BUD and
          list(meta(reader, "attention.compress_ratios")) == [0, 0, 0, CR],
          f"the file has one QSA layer (blk.{LAYER}), CR {CR}, BUD {BUD}")
    eps = float(meta(reader, "attention.layer_norm_rms_epsilon"))
    rot = int(meta(reader, "rope.dimension_count"))
    theta = float(meta(reader, "rope.freq_base"))
    hi = int(meta(reader, "attention.indexer.head_count"))
    di = int(meta(reader, "attention.indexer.key_length"))
    k_norm = next(t for t in reader.tensors
                  if t.name == f"blk.{LAYER}.indexer.k_norm.weight").data.astype(np.float32)

    vocab = llama_logits(w("qsa.gguf"), [0]).shape[1]
    tokens = np.random.default_rng(SEED).integers(0, vocab, size=T).tolist()
    ids = ",".join(map(str, tokens))
    run([tool("strata-run"), w("qsa.plan"), "--gguf", w("qsa.gguf"), "--tokens", ids,
         "--dump-logits", w("qsa.f32"), "--dump-buffer", "qi=" + w("qi.f32"),
         "--dump-buffer", "kr=" + w("kr.f32"), "--dump-buffer", "idx=" + w("idx.f32")])
    run([tool("strata-run"), w("dense.plan"), "--gguf", w("dense.gguf"), "--tokens", ids,
         "--dump-logits", w("dense.f32")])
    qi = np.fromfile(w("qi.f32"), dtype="<f4").reshape(T, hi, di)
    kr = np.fromfile(w("kr.f32"), dtype="<f4").reshape(T, di)
    idx = np.fromfile(w("idx.f32"), dtype="<f4").reshape(T, BUD // CR + 1).astype(int)

    # 1. strata's selection is HF's rule.
    hf = qsa_rules.hf_allowed(qi, kr, k_norm, eps, rot, theta, CR, BUD)
    ours = np.zeros((T, T), dtype=bool)
    for t in range(T):
        for b in idx[t][idx[t] >= 0]:
            ours[t, b * CR:min((b + 1) * CR, t + 1)] = True
    check((ours == hf).all(), "strata's qsa_select equals HF's rule on every query")

    # 2. The rules part where predicted; densely causal before.
    ll = qsa_rules.llamacpp_allowed(qi, kr, k_norm, eps, rot, theta, CR, BUD)
    first = qsa_rules.first_difference(hf, ll)
    predicted = qsa_rules.predicted_first_difference(CR, BUD)
    n_diff = int((hf != ll).any(axis=1).sum())
    check(first == predicted,
          f"the rules first differ at query {first} (predicted BUD+CR-1 = {predicted}); "
          f"{n_diff} of {T} queries differ, llama.cpp adds "
          f"{sorted(set((ll & ~hf).sum(1)[(hf != ll).any(axis=1)].tolist()))} keys there")
    dense = np.tril(np.ones((T, T), dtype=bool))
    check((hf[:first] == dense[:first]).all() and (ll[:first] == dense[:first]).all(),
          f"queries 0..{first - 1} attend to every earlier token under both rules")

    # 3. llama.cpp's logits: equal before that query, apart from it on.
    ours_l = np.fromfile(w("qsa.f32"), dtype="<f4").reshape(T, vocab)
    theirs = llama_logits(w("qsa.gguf"), tokens)
    rows = np.array([nmse(ours_l[t], theirs[t]) for t in range(T)])
    parted = np.flatnonzero(rows > 1e-6)
    first_row = int(parted[0]) if parted.size else None
    before = nmse(ours_l[:first], theirs[:first])
    print(f"llama.cpp vs strata: rows 0..{first - 1} NMSE {before:.3e} "
          f"(largest row {rows[:first].max():.3e}); all rows {nmse(ours_l, theirs):.3e}; "
          f"top-1 {float((ours_l.argmax(1) == theirs.argmax(1)).mean()) * 100:.1f}%")
    check(before <= 1e-5 and rows[:first].max() <= 1e-8,
          f"llama.cpp equals strata before query {first}")
    check(first_row == first,
          f"the first row where llama.cpp's logits part from strata's is {first_row}")

    # 4. The same weights with dense attention: no departure at all.
    dense_l = np.fromfile(w("dense.f32"), dtype="<f4").reshape(T, vocab)
    err = nmse(dense_l, llama_logits(w("dense.gguf"), tokens))
    check(err <= 1e-5, f"dense attention (compress ratio 0): NMSE {err:.3e} over all rows")

    total = 7
    print(f"{total - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
