#!/usr/bin/env python3
"""Which keys each query may attend to in one QSA layer: HF's rule vs llama.cpp's.

Both functions take what strata can dump from @qsa_index in models/qwen4exp.strata
(strata-run --dump-buffer qi=qi.f32 --dump-buffer kr=kr.f32):
  qi      [T, HI, DI]  indexer queries after rms_norm * q_norm and RoPE (%qi)
  kr      [T, DI]      raw indexer keys, no norm, no RoPE (%kr)
  k_norm  [DI]         blk.L.indexer.k_norm.weight
  eps, rot, theta, neox: attention.layer_norm_rms_epsilon, rope.dimension_count,
          rope.freq_base, and neox (rotate-half) vs GPT-J pairs
  cr, bud: the layer's compress ratio (CR) and attention.indexer.top_k (BUD, tokens)
and return allowed [T(query), T(key)] (bool), the causal mask included.
See docs/qsa-llamacpp.md for the source facts behind both. The one structural
difference: llama.cpp keeps the BUD+CR-1 best CELLS (ggml_top_k), HF keeps BUD/CR
best BLOCKS plus the tail and pads its BUD+CR-1 index buffer with -1, so llama.cpp
also attends to CR-1-((t+1)%CR) tokens of the next-best block once t >= BUD+CR-1.
llamacpp_allowed reproduced the indexer_top_k tensor of llama-cpp-python 0.3.36
(CPU) exactly on a 96-token prefill, for one ubatch and for ubatches of 16 and 7.
"""

import numpy as np


def rope(x, pos, rot, theta, neox=True):
    """Partial RoPE of the first `rot` dims of x [N, ..., D] at positions pos [N]."""
    inv = 1.0 / theta ** (np.arange(0, rot, 2, dtype=np.float64) / rot)
    ang = np.asarray(pos, dtype=np.float64)[:, None] * inv[None, :]
    ang = ang.reshape(ang.shape[:1] + (1,) * (x.ndim - 2) + ang.shape[1:])
    c, s = np.cos(ang), np.sin(ang)
    y = np.array(x, dtype=np.float64)
    if neox:
        a, b = x[..., :rot // 2], x[..., rot // 2:rot]
        y[..., :rot // 2], y[..., rot // 2:rot] = a * c - b * s, b * c + a * s
    else:
        a, b = x[..., 0:rot:2], x[..., 1:rot:2]
        y[..., 0:rot:2], y[..., 1:rot:2] = a * c - b * s, b * c + a * s
    return y


def block_keys(kr, k_norm, eps, rot, theta, cr, neox=True):
    """Pooled block keys kb [T // cr, DI]: mean of cr raw keys, rms * k_norm, rope at b*cr."""
    nb = kr.shape[0] // cr
    kb = kr[:nb * cr].astype(np.float64).reshape(nb, cr, -1).mean(axis=1)
    kb = kb / np.sqrt(np.mean(kb * kb, axis=-1, keepdims=True) + eps) * k_norm
    return rope(kb, np.arange(nb) * cr, rot, theta, neox)


def block_scores(qi, kb):
    """score[t, b] = sum_h relu(qi[t, h] . kb[b]) (no 1/sqrt(DI): it does not change any order)."""
    return np.maximum(np.einsum("thd,bd->thb", qi.astype(np.float64), kb), 0.0).sum(axis=1)


def hf_allowed(qi, kr, k_norm, eps, rot, theta, cr, bud, neox=True):
    """HF transformers (docs/qwen4exp-model.md 3.7): per query t, nc = (t+1)//cr complete
    blocks; the top min(bud//cr, nc) by score (ties: lower block index) plus the tail
    tokens [nc*cr, t]."""
    T, ntop = qi.shape[0], bud // cr
    s = block_scores(qi, block_keys(kr, k_norm, eps, rot, theta, cr, neox))
    allowed = np.zeros((T, T), dtype=bool)
    for t in range(T):
        nc = (t + 1) // cr
        for b in np.argsort(-s[t, :nc], kind="stable")[:min(ntop, nc)]:
            allowed[t, b * cr:(b + 1) * cr] = True
        allowed[t, nc * cr:t + 1] = True
    return allowed


def _adjust_heap(a, hole, n, value, less):
    """libstdc++ std::__adjust_heap (+ __push_heap) on the list a[0:n]."""
    top, child = hole, hole
    while child < (n - 1) // 2:
        child = 2 * (child + 1)
        if less(a[child], a[child - 1]):
            child -= 1
        a[hole], hole = a[child], child
    if n % 2 == 0 and child == (n - 2) // 2:
        child = 2 * (child + 1)
        a[hole], hole = a[child - 1], child - 1
    parent = (hole - 1) // 2
    while hole > top and less(a[parent], value):
        a[hole], hole = a[parent], parent
        parent = (hole - 1) // 2
    a[hole] = value


def ggml_cpu_top_k(v, k):
    """Index set ggml's CPU TOP_K picks from row v: std::partial_sort (libstdc++ heap_select)
    of 0..n-1 with comp(a, b) = v[a] > v[b]; equal values keep no index order."""
    idx, less = list(range(len(v))), (lambda a, b: v[a] > v[b])
    if k >= 2:  # make_heap(first, middle)
        for parent in range((k - 2) // 2, -1, -1):
            _adjust_heap(idx, parent, k, idx[parent], less)
    for i in range(k, len(v)):  # replace the heap's worst only by a strictly better one
        if less(idx[i], idx[0]):
            val, idx[i] = idx[i], idx[0]
            _adjust_heap(idx, 0, k, val, less)
    return set(idx[:k])


def llamacpp_allowed(qi, kr, k_norm, eps, rot, theta, cr, bud, neox=True,
                     n_kv=None, kv_f16=False):
    """llama.cpp (qwen4exp build_qsa_top_k + set_input_qsa) for one sequence from position
    0 (any ubatch split gives the same sets). Per cell j the value is the score of its
    pooled block; cells at or after tail_start = (t+1)//cr*cr get +1e9 (f32), cells j > t
    and cells >= T (n_kv padding) get -inf; ggml top_k keeps min(n_kv, bud+cr-1) CELLS;
    the causal mask is added again after the selection. kv_f16 rounds the cached raw keys
    to f16 (llama.cpp's default type_k)."""
    T = qi.shape[0]
    n_kv = T if n_kv is None else n_kv
    if kv_f16:
        kr = kr.astype(np.float16).astype(np.float32)
    kb = block_keys(kr, k_norm, eps, rot, theta, cr, neox)  # the complete blocks in the cache
    nb = kb.shape[0]
    if nb * cr < T:  # the spare ("dead") block of the unpooled cells: blk_cells row of zeros
        kb = np.concatenate([kb, block_keys(np.repeat(kr[:1], cr, 0), k_norm, eps, rot,
                                            theta, cr, neox)])
    s = block_scores(qi, kb).astype(np.float32)
    cell_blk = np.minimum(np.arange(T) // cr, nb)  # cells past the last full block -> dead
    width = min(n_kv, bud + cr - 1)
    allowed = np.zeros((T, T), dtype=bool)
    for t in range(T):
        tail_start = (t + 1) // cr * cr
        v = np.full(n_kv, -np.inf, dtype=np.float32)
        blk_bias = np.where(np.arange(kb.shape[0]) * cr >= tail_start, 1e9, 0.0)
        v[:t + 1] = (s[t] + blk_bias.astype(np.float32))[cell_blk[:t + 1]]
        for j in ggml_cpu_top_k(v, width):
            if j <= t:
                allowed[t, j] = True
    return allowed


def first_difference(mask_a, mask_b):
    """First query row (0-based) where the masks differ, or None when equal."""
    rows = np.flatnonzero((np.asarray(mask_a) != np.asarray(mask_b)).any(axis=1))
    return int(rows[0]) if rows.size else None


def predicted_first_difference(cr, bud):
    """First query where llama.cpp's bud+cr-1 cells exceed HF's blocks + tail: nc = bud/cr + 1
    complete blocks and an empty tail, t = bud + cr - 1 (HF requires cr | bud). None for cr 1."""
    return None if cr == 1 else bud + cr - 1


def _random_case(rng, T, hi, di):
    qi = rng.standard_normal((T, hi, di)).astype(np.float32)
    kr = rng.standard_normal((T, di)).astype(np.float32)
    k_norm = (1.0 + 0.1 * rng.standard_normal(di)).astype(np.float32)
    return qi, kr, k_norm


if __name__ == "__main__":
    rng = np.random.default_rng(0)
    eps, rot, theta = 1e-6, 16, 1e7
    T, cr, bud = 96, 4, 16
    qi, kr, kn = _random_case(rng, T, 4, 32)
    hf = hf_allowed(qi, kr, kn, eps, rot, theta, cr, bud)
    ll = llamacpp_allowed(qi, kr, kn, eps, rot, theta, cr, bud)
    diff = np.flatnonzero((hf != ll).any(axis=1))
    print(f"T={T} CR={cr} BUD={bud}: first differing query {first_difference(hf, ll)} "
          f"(predicted BUD+CR-1 = {predicted_first_difference(cr, bud)}); "
          f"{diff.size} of {T} queries differ")
    print("  differing queries:", diff.tolist())
    print("  keys per query  hf:", sorted(set(hf.sum(1)[cr * (bud // cr + 1) - 1:].tolist())),
          " llama.cpp:", sorted(set(ll.sum(1)[cr * (bud // cr + 1) - 1:].tolist())))
    print("  HF keys are a subset of llama.cpp keys:", not (hf & ~ll).any(),
          "| extra keys per differing query:", sorted(set((ll & ~hf).sum(1)[diff].tolist())))
    p = predicted_first_difference(cr, bud)
    dense = np.tril(np.ones((T, T), dtype=bool))
    assert (hf[:p] == dense[:p]).all() and (ll[:p] == dense[:p]).all(), "dense prefix"
    for cr2, bud2 in [(2, 16), (4, 16), (4, 8), (8, 16), (1, 8)]:
        qi, kr, kn = _random_case(rng, 64, 4, 32)
        fd = first_difference(hf_allowed(qi, kr, kn, eps, rot, theta, cr2, bud2),
                              llamacpp_allowed(qi, kr, kn, eps, rot, theta, cr2, bud2))
        print(f"  CR={cr2} BUD={bud2} T=64: first difference {fd}, "
              f"predicted {predicted_first_difference(cr2, bud2)}")
