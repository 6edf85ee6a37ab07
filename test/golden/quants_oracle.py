#!/usr/bin/env python3
"""Check strata's ggml block codecs (runtime/format/Quants.cpp) against gguf-py.

1. Dequantisation, bit for bit: for every supported type, draws >= --blocks random blocks (random
   bytes with the f16 scale fields overwritten by finite values), dequantises them with the C++
   tool and with `gguf.quants.dequantize`, and compares the float32 bit patterns (so NaN == NaN
   only when the bits agree). F32/F16/BF16 use fully random bit patterns, NaN and Inf included,
   plus every 16-bit pattern for F16/BF16.
2. Conversions, bit for bit: float32 -> F16 against numpy's cast, -> BF16 against gguf-py's BF16
   quantiser; Q8_0 and Q4_0 quantisation against gguf-py's quantisers (same arithmetic as ggml's
   reference). NaN inputs to F16 only need to stay NaN with the same sign.
3. Quantiser quality: Gaussian rows quantised by the C++ tool, dequantised by gguf-py; the NMSE
   (mean squared error / mean square of the input) must stay below a per-type bar.

Inputs are drawn fresh each run from a seed taken from os.urandom; the seed is printed, and
--seed reproduces a run. Exit status: 0 all good, 1 any mismatch or bar exceeded, 77 gguf-py or
numpy missing (ctest SKIP_RETURN_CODE).

usage: quants_oracle.py --tool build/.../quants-oracle-check [--blocks 10000] [--seed N]
                        [--workdir DIR] [--types Q4_K,IQ3_S,...]
"""

import argparse
import importlib.metadata
import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import gguf
    from gguf import GGMLQuantizationType as T
    from gguf import quants
except ImportError as e:  # pragma: no cover - environment problem, not a failure
    print(f"quants_oracle: SKIPPED: {e}")
    sys.exit(77)

# Byte offsets of the f16 scale fields inside each block (gguf-and-quants.md section 2).
F16_FIELDS = {
    T.Q8_0: [0],
    T.Q4_0: [0],
    T.Q4_K: [0, 2],
    T.Q5_K: [0, 2],
    T.Q6_K: [208],
    T.IQ4_NL: [0],
    T.IQ4_XS: [0],
    T.IQ3_S: [0],
    T.IQ3_XXS: [0],
    T.IQ2_XXS: [0],
}
SCALAR_TYPES = [T.F32, T.F16, T.BF16]
DEQUANT_TYPES = SCALAR_TYPES + list(F16_FIELDS)

# NMSE bars on unit Gaussian data. A uniform quantiser with step s has MSE ~ s^2/12; the steps
# below use the typical range of a block of Gaussians (|max| ~ 2.1 over 32, ~2.6 over 256) and
# the bars leave 2-4x headroom over that estimate:
#   Q8_0  s = 2.1/127          -> 2.3e-5   bar 1e-4
#   Q6_K  s ~ 1.8/31 (16-wide) -> 2.8e-4   bar 1e-3
#   Q5_K  s ~ 4.2/31 (affine)  -> 1.5e-3   bar 4e-3
#   Q4_K  s ~ 4.2/15 (affine)  -> 6.5e-3   bar 1e-2 (scale search brings it lower)
#   Q4_0  s = 2.1/8 (no search)-> 5.7e-3   bar 2e-2 (one end of the range is wasted)
#   IQ4_NL / IQ4_XS: a 16-level non-uniform codebook, same bar as Q4_K
#   IQ3_S: 16 signed odd levels but only 512 of 4096 magnitude quads -> ~3 bits, bar 4e-2
#   F16 / BF16: relative rounding 2^-11 / 2^-8 -> ~8e-8 / ~5e-6
NMSE_BARS = {
    T.F16: 1e-6,
    T.BF16: 1e-4,
    T.Q8_0: 1e-4,
    T.Q4_0: 2e-2,
    T.Q6_K: 1e-3,
    T.Q5_K: 4e-3,
    T.Q4_K: 1e-2,
    T.IQ4_NL: 1e-2,
    T.IQ4_XS: 1e-2,
    T.IQ3_S: 4e-2,
}
# Quantisers that must reproduce gguf-py's bytes exactly.
EXACT_QUANT = [T.Q8_0, T.Q4_0, T.BF16]


class Checker:
    def __init__(self, tool, workdir):
        self.tool = tool
        self.workdir = workdir
        self.failures = 0

    def run_tool(self, mode, qtype, data):
        src = os.path.join(self.workdir, f"{qtype.name}.{mode}.in")
        dst = os.path.join(self.workdir, f"{qtype.name}.{mode}.out")
        data.tofile(src)
        proc = subprocess.run([self.tool, mode, qtype.name, src, dst], capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"{self.tool} {mode} {qtype.name} failed ({proc.returncode}): {proc.stderr.strip()}")
        return np.fromfile(dst, dtype=np.float32 if mode == "dequant" else np.uint8)

    def fail(self, msg):
        self.failures += 1
        print(f"  FAIL: {msg}")


def finite_f16_bits(rng, n):
    """Finite f16 scales: a third arbitrary finite patterns (subnormals, 65504, -0 included), a
    third realistic magnitudes, a sixth small integers-ish, a sixth exact zeros / powers of two."""
    bits = rng.integers(0, 1 << 16, size=n, dtype=np.uint32).astype(np.uint16)
    bits = np.where((bits & 0x7C00) == 0x7C00, bits & 0xFBFF, bits)  # clear an exponent bit
    kind = rng.integers(0, 6, size=n)
    real = (rng.standard_normal(n) * 10.0 ** rng.uniform(-5, 1, size=n)).astype(np.float16).view(np.uint16)
    ints = rng.integers(-64, 65, size=n).astype(np.float16).view(np.uint16)
    pow2 = np.ldexp(1.0, rng.integers(-24, 16, size=n)).astype(np.float16).view(np.uint16)
    pow2 = np.where(rng.integers(0, 2, size=n) == 0, np.uint16(0), pow2)
    out = np.select([kind < 2, kind < 4, kind == 4], [bits, real, ints], pow2).astype(np.uint16)
    assert np.all(np.isfinite(out.view(np.float16)))
    return out


def random_blocks(rng, qtype, nblocks):
    _, type_size = gguf.GGML_QUANT_SIZES[qtype]
    raw = rng.integers(0, 256, size=(nblocks, type_size), dtype=np.uint8)
    for off in F16_FIELDS[qtype]:
        raw[:, off:off + 2] = finite_f16_bits(rng, nblocks).view(np.uint8).reshape(nblocks, 2)
    return raw


def random_scalars(rng, qtype, count):
    if qtype == T.F32:
        words = rng.integers(0, 1 << 32, size=count, dtype=np.uint64).astype(np.uint32)
        # Make sure NaN, Inf, subnormal and zero patterns are well represented.
        k = count // 8
        words[:k] = (words[:k] & 0x807FFFFF) | 0x7F800000
        words[k:2 * k] &= 0x807FFFFF
        words[2 * k] = 0x7F800000
        words[2 * k + 1] = 0x80000000
        return words.view(np.uint8)
    every = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    extra = rng.integers(0, 1 << 16, size=count, dtype=np.uint32).astype(np.uint16)
    return np.concatenate([every, extra]).view(np.uint8)


def compare_bits(checker, label, expected, got, unit):
    """Bitwise comparison of float32 arrays; prints counts and the first mismatches."""
    expected = np.ascontiguousarray(expected, dtype=np.float32).reshape(-1)
    got = np.ascontiguousarray(got, dtype=np.float32).reshape(-1)
    if expected.shape != got.shape:
        checker.fail(f"{label}: {got.size} values from the tool, {expected.size} from gguf-py")
        return
    ev, gv = expected.view(np.uint32), got.view(np.uint32)
    bad = np.nonzero(ev != gv)[0]
    print(f"{label:8s} dequant: {expected.size // unit:7d} blocks, {expected.size:9d} values, "
          f"{bad.size} mismatches")
    for i in bad[:8]:
        print(f"    value {i} (block {i // unit}, element {i % unit}): gguf-py {ev[i]:#010x} "
              f"({expected[i]!r}), strata {gv[i]:#010x} ({got[i]!r})")
    if bad.size:
        checker.fail(f"{label}: {bad.size} dequantised values differ")


def check_dequant(checker, rng, qtype, nblocks):
    block_size, _ = gguf.GGML_QUANT_SIZES[qtype]
    if qtype in SCALAR_TYPES:
        raw = random_scalars(rng, qtype, nblocks * 32)
    else:
        raw = random_blocks(rng, qtype, nblocks).reshape(-1)
    got = checker.run_tool("dequant", qtype, raw)
    expected = quants.dequantize(raw, qtype)
    compare_bits(checker, qtype.name, expected, got, block_size)


def gaussian_rows(rng, rows, cols):
    """Unit Gaussians with a per-row scale 10^U(-3, 1), so scale handling is exercised too."""
    x = rng.standard_normal((rows, cols)).astype(np.float32)
    return (x * (10.0 ** rng.uniform(-3, 1, size=(rows, 1)))).astype(np.float32)


def check_conversions(checker, rng, count):
    words = rng.integers(0, 1 << 32, size=count, dtype=np.uint64).astype(np.uint32)
    k = count // 8
    words[:k] = (words[:k] & 0x807FFFFF) | 0x7F800000  # NaN / Inf
    words[k:2 * k] &= 0x807FFFFF                        # subnormals / zero
    words[2 * k:3 * k] = (words[2 * k:3 * k] & 0x83FFFFFF) | 0x30000000  # around the f16 range
    x = words.view(np.float32)

    got = checker.run_tool("quant", T.F16, x).view(np.uint16)
    with np.errstate(over="ignore"):
        expected = x.astype(np.float16).view(np.uint16)
    nan_in = np.isnan(x)
    bad = np.nonzero((got != expected) & ~nan_in)[0]
    nan_bad = np.nonzero(nan_in & ~(np.isnan(got.view(np.float16)) & ((got >> 15) == (expected >> 15))))[0]
    nan_payload = int(np.count_nonzero(nan_in & (got != expected)))
    print(f"F16      quant:   {count:9d} values, {bad.size} mismatches, {nan_bad.size} NaN sign/class "
          f"mismatches ({nan_payload} NaN payload differences, allowed)")
    for i in bad[:8]:
        print(f"    input {words[i]:#010x}: numpy {expected[i]:#06x}, strata {got[i]:#06x}")
    if bad.size or nan_bad.size:
        checker.fail("F16 conversion differs from numpy")


def check_exact_quant(checker, rng, qtype, rows, cols):
    x = gaussian_rows(rng, rows, cols)
    if qtype == T.BF16:
        # BF16 also converts NaN / Inf / subnormals; gguf-py's rule is the reference.
        w = rng.integers(0, 1 << 32, size=rows * cols, dtype=np.uint64).astype(np.uint32)
        x = np.concatenate([x.reshape(-1), w.view(np.float32)]).reshape(-1, cols)
    got = checker.run_tool("quant", qtype, x.reshape(-1))
    expected = quants.quantize(x, qtype).reshape(-1)
    bad = np.nonzero(got != expected)[0] if got.shape == expected.shape else np.arange(1)
    print(f"{qtype.name:8s} quant:   {x.size:9d} values, {bad.size} byte mismatches vs gguf-py")
    if bad.size:
        checker.fail(f"{qtype.name}: quantised bytes differ from gguf-py (first at byte {bad[0]})")


def check_quant_nmse(checker, rng, qtype, rows, cols):
    x = gaussian_rows(rng, rows, cols)
    got = checker.run_tool("quant", qtype, x.reshape(-1))
    y = quants.dequantize(got.reshape(rows, -1), qtype).astype(np.float64)
    xd = x.astype(np.float64)
    # Per-row NMSE, averaged, so the per-row scales do not let one row dominate.
    per_row = ((y - xd) ** 2).sum(axis=1) / (xd ** 2).sum(axis=1)
    value = float(per_row.mean())
    bar = NMSE_BARS[qtype]
    status = "ok" if value < bar else "ABOVE BAR"
    print(f"{qtype.name:8s} quant:   NMSE {value:.3e} (worst row {per_row.max():.3e}), bar {bar:.0e}: {status}")
    if not value < bar or not np.all(np.isfinite(y)):
        checker.fail(f"{qtype.name}: NMSE {value:.3e} not below {bar:.0e}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tool", required=True, help="path to the quants-oracle-check executable")
    ap.add_argument("--blocks", type=int, default=10000, help="random blocks per type (default 10000)")
    ap.add_argument("--seed", type=int, help="reproduce a run (default: fresh from os.urandom)")
    ap.add_argument("--workdir", help="where to put the exchange files (default: a temporary directory)")
    ap.add_argument("--types", help="comma-separated ggml type names to restrict the checks to")
    args = ap.parse_args()

    seed = args.seed if args.seed is not None else int.from_bytes(os.urandom(8), "little")
    print(f"quants_oracle: gguf {importlib.metadata.version('gguf')}, "
          f"numpy {np.__version__}, seed = {seed} (rerun with --seed {seed})")
    rng = np.random.default_rng(seed)
    wanted = None if not args.types else {t.strip().upper() for t in args.types.split(",")}
    pick = lambda types: [t for t in types if wanted is None or t.name in wanted]

    def run(workdir):
        checker = Checker(os.path.abspath(args.tool), workdir)
        try:
            for qtype in pick(DEQUANT_TYPES):
                check_dequant(checker, rng, qtype, args.blocks)
            if pick([T.F16]):
                check_conversions(checker, rng, args.blocks * 32)
            for qtype in pick(EXACT_QUANT):
                check_exact_quant(checker, rng, qtype, 64, 4096)
            for qtype in pick(list(NMSE_BARS)):
                check_quant_nmse(checker, rng, qtype, 64, 4096)
        except RuntimeError as e:
            checker.fail(str(e))
        return checker.failures

    if args.workdir:
        os.makedirs(args.workdir, exist_ok=True)
        failures = run(args.workdir)
    else:
        with tempfile.TemporaryDirectory(prefix="quants_oracle.") as d:
            failures = run(d)
    if failures:
        print(f"quants_oracle: FAILED ({failures} checks), seed = {seed}")
        sys.exit(1)
    print("quants_oracle: all checks passed")


if __name__ == "__main__":
    main()
