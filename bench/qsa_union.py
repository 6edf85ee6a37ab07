#!/usr/bin/env python3
"""How much of the dense-causal work a QSA attention tile shape must do.

Reads qsa_select outputs dumped by `strata-run --dump-buffer idx=F.f32`
(float32 [T, TOP + 1]: each token's TOP chosen blocks of BLOCK keys, then
its tail block, -1 for none) and prints, for tiles of N consecutive tokens
and key granularities G (keys skipped or kept together), the keys a tile
must visit (the union of its tokens' selected keys, rounded out to G)
summed over tokens, as a fraction of the dense-causal keys (sum of t + 1),
beside the keys the tokens select themselves. Used to pick the sparse
attention tile: a kernel whose tile is N tokens visits that fraction.
  python3 bench/qsa_union.py --block 4 F.f32 [F2.f32 ...]
"""
import argparse
import sys

import numpy as np


def union_fraction(idx, block, n, g):
    t_count = idx.shape[0]
    keys = 0
    for t0 in range(0, t_count, n):
        rows = idx[t0:t0 + n]
        last = min(t0 + n, t_count) - 1
        blocks = np.unique(rows[rows >= 0]).astype(np.int64)
        # Every key of a selected block up to the tile's last token, rounded
        # out to granules of g keys.
        k = (blocks[:, None] * block + np.arange(block)[None, :]).ravel()
        k = k[k <= last]
        granules = np.unique(k // g)
        visited = np.minimum((granules + 1) * g, last + 1) - granules * g
        keys += int(visited.sum()) * rows.shape[0]
    return keys


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--block", type=int, default=4)
    ap.add_argument("--top", type=int, default=512)
    ap.add_argument("files", nargs="+")
    a = ap.parse_args()
    for f in a.files:
        raw = np.fromfile(f, dtype=np.float32)
        if raw.size % (a.top + 1):
            sys.exit(f"qsa_union.py: error: {f}: {raw.size} floats is not a "
                     f"multiple of TOP + 1 = {a.top + 1}")
        idx = raw.reshape(-1, a.top + 1).astype(np.int64)
        t = idx.shape[0]
        dense = t * (t + 1) // 2
        own = 0
        for ti in range(t):
            b = idx[ti][idx[ti] >= 0]
            k = (b[:, None] * a.block + np.arange(a.block)[None, :]).ravel()
            own += int((k <= ti).sum())
        print(f"# {f}: T = {t}, dense-causal keys {dense}, selected "
              f"{own / dense:.3f} of them")
        print("tokens/tile  " + "  ".join(f"G={g:<4d}" for g in (4, 16, 64)))
        for n in (1, 2, 4, 5, 8, 10, 16, 32):
            fr = [union_fraction(idx, a.block, n, g) / dense
                  for g in (4, 16, 64)]
            print(f"{n:11d}  " + "  ".join(f"{x:6.3f}" for x in fr))


if __name__ == "__main__":
    main()
