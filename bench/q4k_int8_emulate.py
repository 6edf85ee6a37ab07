#!/usr/bin/env python3
"""The int8 decode forms' expected error on a Q4_K expert stack, against a
GPU dump (issue 33: the tiny Qwen3-MoE with Q4_K experts fails --check at
moe_grouped_swiglu with the int8 forms, NMSE 1.94e-4 on the H100).

The decode GEMVs quantise A to int8 by pieces of 8 values (a scale each, the
quantised sum in Q4_K's min term: exact algebra, see BlockDecodeTest's
Q4KInt8DotIsTheDotWithQuantisedActivations). This script recomputes layer
L's grouped SwiGLU h = silu(x Wg^T) * (x Wu^T) for the routed slots from a
dump of its input (a.L*2+1), the routing (y.L.perm, y.L.off) and the
synthetic weights of `strata-run --synthetic-weights SEED`
(runtime/SyntheticBlock.h's generator, ported), in float64, with and
without the int8 quantisation of x, and compares the dumped h with both,
per expert and per column.

  python3 bench/q4k_int8_emulate.py DIR [--gate-index 22 --up-index 23]
      [--seed 1] [--experts 16 --ffn 512 --hidden 256]
DIR holds a3.f32, perm.f32, off.f32 and i8.h.f32 (strata-run --dump-buffer
writes every buffer as f32), and optionally off.h.f32 (the plan with
gemm-decode-int8=off), as bench/q4k_int8_debug.sh run leaves them.
The weight indices are the plan's (plan.json "weights").
"""
import argparse
import sys

import numpy as np

try:
    import gguf
except ImportError:
    sys.exit("error: needs the gguf package (pip install gguf)")

M64 = (1 << 64) - 1


def splitmix(s):
    s[0] = (s[0] + 0x9E3779B97F4A7C15) & M64
    z = s[0]
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def uniform(s, lo, hi):
    return np.float32(lo) + np.float32(hi - lo) * np.float32(splitmix(s) >> 40) * np.float32(2.0**-24)


def q4k_block(seed, index, block):
    """strata_synthetic_block for Q4_K (144 bytes)."""
    s = [(seed * 0x9E3779B97F4A7C15 ^ (index + 1) * 0xC2B2AE3D27D4EB4F ^ block * 0x165667B19E3779F9) & M64]
    splitmix(s)
    out = bytearray(144)
    for i in range(0, 144, 8):
        n = min(8, 144 - i)
        out[i:i + n] = splitmix(s).to_bytes(8, "little")[:n]
    d = uniform(s, 2e-5, 6e-5)
    out[0:2] = np.float16(d).tobytes()
    out[2:4] = np.float16(d * np.float32(7.5)).tobytes()
    # Zero-mean sub-blocks (since 2026-12-07): every 6-bit min equals its
    # scale in get_scale_min_k4's packing (bytes 4..15).
    q = out[4:16]
    for j in range(4, 8):
        q[j] = (q[j] & 63) | (q[j - 4] & 0xC0)
    for j in range(4):
        q[j + 4] = (q[j + 4] & 0xC0) | (q[j] & 63)
    for j in range(8, 12):
        q[j] = (q[j] & 0x0F) | ((q[j] << 4) & 0xF0)
    out[4:16] = q
    return bytes(out)


def weight(seed, index, rows, k):
    nb = k // 256
    data = b"".join(q4k_block(seed, index, b) for b in range(rows * nb))
    arr = np.frombuffer(data, np.uint8).reshape(rows, nb * 144)
    return gguf.dequantize(arr, gguf.GGMLQuantizationType.Q4_K).astype(np.float64)


def bf16(x):
    b = x.astype(np.float32).view(np.uint32)
    b = ((b + 0x7FFF + ((b >> 16) & 1)) & 0xFFFF0000).astype(np.uint32)
    return b.view(np.float32)


def q8(x):
    """strata_qa8 by pieces of 8: the values the int8 forms multiply."""
    x = x.reshape(-1, 8).astype(np.float32)
    amax = np.abs(x).max(1, keepdims=True)
    inv = np.where(amax > 0, np.float32(127) / np.where(amax > 0, amax, 1), 0).astype(np.float32)
    return (np.rint(x * inv) * (amax * np.float32(1 / 127))).reshape(-1)


def nmse(a, b):
    return float(((a - b) ** 2).sum() / max((b**2).sum(), 1e-300))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dir")
    ap.add_argument("--gate-index", type=int, default=22)
    ap.add_argument("--up-index", type=int, default=23)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--experts", type=int, default=16)
    ap.add_argument("--ffn", type=int, default=512)
    ap.add_argument("--hidden", type=int, default=256)
    a = ap.parse_args()
    E, F, D = a.experts, a.ffn, a.hidden
    x = np.fromfile(f"{a.dir}/a3.f32", np.float32).reshape(-1, D)
    perm = np.fromfile(f"{a.dir}/perm.f32", np.float32).astype(int)
    off = np.fromfile(f"{a.dir}/off.f32", np.float32).astype(int)[: E + 1]
    h = np.fromfile(f"{a.dir}/i8.h.f32", np.float32).reshape(-1, F)
    n = off[-1]
    k = n // x.shape[0] if x.shape[0] else 0
    h = h[:n]
    G = weight(a.seed, a.gate_index, E * F, D).reshape(E, F, D)
    U = weight(a.seed, a.up_index, E * F, D).reshape(E, F, D)
    silu = lambda z: z / (1 + np.exp(-z))
    ref = np.zeros((n, F))
    emu = np.zeros((n, F))
    for e in range(E):
        for m in range(off[e], off[e + 1]):
            row = bf16(x[perm[m] // k])
            xf = row.astype(np.float64)
            xq = q8(row).astype(np.float64)
            ref[m] = silu(xf @ G[e].T) * (xf @ U[e].T)
            emu[m] = silu(xq @ G[e].T) * (xq @ U[e].T)
    print(f"slots {n}, k {k}: dumped h against float {nmse(h, ref):.3g}, against the int8 emulation "
          f"{nmse(h, emu):.3g}; the emulation against float {nmse(emu, ref):.3g}")
    try:
        ho = np.fromfile(f"{a.dir}/off.h.f32", np.float32).reshape(-1, F)[:n]
        print(f"gemm-decode-int8=off's h against float {nmse(ho, ref):.3g}")
    except FileNotFoundError:
        pass
    for e in range(E):
        if off[e] < off[e + 1]:
            s = slice(off[e], off[e + 1])
            print(f"  expert {e:3d}: {off[e + 1] - off[e]} rows, against float {nmse(h[s], ref[s]):.3g}, "
                  f"against the emulation {nmse(h[s], emu[s]):.3g}")
    col = ((h - emu) ** 2).sum(0) / np.maximum((emu**2).sum(0), 1e-300)
    worst = np.argsort(col)[-8:][::-1]
    print("  worst columns (against the emulation):", ", ".join(f"{c}: {col[c]:.3g}" for c in worst))
    bad = np.argwhere(np.abs(h - emu) > 1e-2 * np.abs(emu).max())
    print(f"  elements off by more than 1 % of max |h|: {len(bad)}", bad[:16].tolist())


if __name__ == "__main__":
    main()
