#!/usr/bin/env python3
"""`strata-gguf dequant` against gguf-py, bit for bit.

Writes a GGUF with gguf-py holding one tensor per loadable block type (random
blocks, f16 scale fields overwritten with finite values, seed printed), runs
`strata-gguf dequant FILE TENSOR -o OUT.f32` for each, and compares the raw
float32 output with gguf.quants.dequantize as uint32 bit patterns.
Exit 0 = all equal, 1 = mismatch, 77 = gguf/numpy missing (skipped).
"""
import argparse
import os
import subprocess
import sys

try:
    import numpy as np
    import gguf
    from gguf import GGMLQuantizationType as Q
except ImportError as e:  # pragma: no cover
    print(f"SKIPPED: {e}")
    sys.exit(77)

# Byte offsets of the f16 scale fields inside each block.
SCALES = {Q.Q8_0: [0], Q.Q4_0: [0], Q.Q4_K: [0, 2], Q.Q5_K: [0, 2],
          Q.Q6_K: [208], Q.IQ4_NL: [0], Q.IQ4_XS: [0], Q.IQ3_S: [0],
          Q.IQ3_XXS: [0], Q.IQ2_XXS: [0]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--strata-gguf", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--seed", type=int)
    a = ap.parse_args()
    seed = a.seed if a.seed is not None else int.from_bytes(os.urandom(4), "little")
    print(f"seed {seed}")
    rng = np.random.default_rng(seed)
    os.makedirs(a.workdir, exist_ok=True)
    path = os.path.join(a.workdir, "dequant.gguf")
    w = gguf.GGUFWriter(path, "test")
    expected = {}
    rows, cols = 3, 512
    for qt, offs in SCALES.items():
        bs, ts = gguf.GGML_QUANT_SIZES[qt]
        nblk = cols // bs
        raw = rng.integers(0, 256, size=(rows, nblk, ts), dtype=np.uint8)
        for o in offs:
            scale = rng.uniform(-2, 2, size=(rows, nblk)).astype(np.float16)
            raw[:, :, o:o + 2] = scale.view(np.uint8).reshape(rows, nblk, 2)
        raw = raw.reshape(rows, nblk * ts)
        name = f"t.{qt.name.lower()}"
        w.add_tensor(name, raw, raw_dtype=qt)
        expected[name] = gguf.quants.dequantize(raw, qt).astype(np.float32)
    for name, dt in (("t.f16", np.float16), ("t.f32", np.float32)):
        x = rng.standard_normal((rows, cols)).astype(dt)
        w.add_tensor(name, x)
        expected[name] = x.astype(np.float32)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()

    failed = 0
    for name, want in expected.items():
        out = os.path.join(a.workdir, name + ".f32")
        subprocess.run([a.strata_gguf, "dequant", path, name, "-o", out], check=True)
        got = np.fromfile(out, dtype="<f4").reshape(want.shape)
        bad = int(np.count_nonzero(got.view(np.uint32) != want.view(np.uint32)))
        print(f"{name:12s} {want.size:6d} values  {bad} mismatches")
        failed += bad != 0
    # A missing tensor is an error with a non-zero exit and no output file.
    r = subprocess.run([a.strata_gguf, "dequant", path, "nope", "-o",
                        os.path.join(a.workdir, "nope.f32")], capture_output=True, text=True)
    if r.returncode == 0 or "no tensor named 'nope'" not in r.stderr or \
            os.path.exists(os.path.join(a.workdir, "nope.f32")):
        print(f"missing-tensor case wrong: rc={r.returncode} {r.stderr!r}")
        failed += 1
    print(f"{len(expected) + 1 - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
