#!/usr/bin/env python3
"""Generate runtime/format/IqGrids.inc from the installed PyPI `gguf` package.

The i-quant codebooks (iq3s_grid, iq3xxs_grid, iq2xxs_grid, ksigns_iq2xs, kvalues_iq4nl) are
decoded with gguf-py's own `init_grid()` and rebuilt as ggml stores them: entry i of a grid is
sum_k uint8(grid[0, 0, i, k]) << 8k (design reference gguf-and-quants.md section 2.13). The
first/last values quoted in sections 2.9-2.12 are checked before anything is written.

Usage:
  scripts/gen_iq_grids.py [--output runtime/format/IqGrids.inc]   # (re)write the file
  scripts/gen_iq_grids.py --check [--output ...]                   # exit 1 if the file is stale
"""

import argparse
import importlib.metadata
import os
import sys

import numpy as np
from gguf import quants

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_OUTPUT = os.path.join(REPO_ROOT, "runtime", "format", "IqGrids.inc")


def grid_entries(cls, expected_shape):
    """Rebuild ggml's packed grid entries (one integer per row) from a gguf-py class."""
    cls.init_grid()
    grid = np.asarray(cls.grid)
    assert grid.shape == (1, 1) + expected_shape, (cls.__name__, grid.shape)
    mags = grid.reshape(expected_shape)
    # Magnitudes are small positive integers stored as float32; make sure nothing is lost.
    assert np.all(mags == np.round(mags)) and mags.min() >= 0 and mags.max() <= 255
    mags = mags.astype(np.uint64)
    entries = []
    for row in mags:
        value = 0
        for k, m in enumerate(row):
            value |= int(m) << (8 * k)
        entries.append(value)
    return entries


def expect(cond, what):
    if not cond:
        sys.exit(f"gen_iq_grids: self-check failed: {what}")


def build_tables():
    iq3s = grid_entries(quants.IQ3_S, (512, 4))
    iq3xxs = grid_entries(quants.IQ3_XXS, (256, 4))
    iq2xxs = grid_entries(quants.IQ2_XXS, (256, 8))
    ksigns = list(quants.IQ2_XXS.ksigns)
    kvalues = list(quants.IQ4_NL.kvalues)

    # Self-checks against the values quoted in gguf-and-quants.md 2.7 and 2.9-2.12.
    expect(iq3s[0] == 0x01010101 and iq3s[1] == 0x01010103, "iq3s_grid first entries")
    expect(iq3s[4] == 0x0101010F, "iq3s_grid[4]")
    expect(iq3s[-1] == 0x0F0F0101, "iq3s_grid last entry")
    expect(all(((v >> (8 * k)) & 0xFF) in (1, 3, 5, 7, 9, 11, 13, 15) for v in iq3s for k in range(4)),
           "iq3s_grid bytes are odd 1..15")
    expect(iq3xxs[0] == 0x04040404 and iq3xxs[-1] == 0x3E341C04, "iq3xxs_grid first/last")
    expect(iq2xxs[0] == 0x0808080808080808, "iq2xxs_grid first entry")
    expect(iq2xxs[1] & 0xFFFF == 0x082B, "iq2xxs_grid[1] low bytes")
    expect(iq2xxs[-1] == 0x2B2B2B1908081908, "iq2xxs_grid last entry")
    expect(len(ksigns) == 128, "ksigns_iq2xs size")
    expect(ksigns[:8] == [0, 129, 130, 3, 132, 5, 6, 135] and ksigns[-4:] == [252, 125, 126, 255],
           "ksigns_iq2xs first/last")
    expect(all(s == (i | (0x80 if bin(i).count("1") % 2 else 0)) for i, s in enumerate(ksigns)),
           "ksigns_iq2xs parity rule")
    expect(kvalues == [-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113],
           "kvalues_iq4nl")
    expect(len(set(iq3s)) == 512 and len(set(iq3xxs)) == 256 and len(set(iq2xxs)) == 256,
           "grid entries are distinct")
    return iq3s, iq3xxs, iq2xxs, ksigns, kvalues


def format_array(ctype, name, values, fmt, per_line):
    lines = [f"STRATA_TABLE {ctype} {name}[{len(values)}] = {{"]
    for i in range(0, len(values), per_line):
        lines.append("    " + " ".join(fmt(v) + "," for v in values[i:i + per_line]))
    lines.append("};")
    return "\n".join(lines)


def render():
    iq3s, iq3xxs, iq2xxs, ksigns, kvalues = build_tables()
    version = importlib.metadata.version("gguf")
    hex32 = lambda v: f"0x{v:08x}"
    hex64 = lambda v: f"0x{v:016x}ull"
    parts = [
        "//===- IqGrids.inc - i-quant codebooks (generated) -------------*- C++ -*-===//",
        "//",
        "// GENERATED FILE - do not edit. Regenerate with:",
        "//   python3 scripts/gen_iq_grids.py",
        f"// from the PyPI `gguf` package version {version} (gguf.quants IQ3_S, IQ3_XXS,",
        "// IQ2_XXS grids via init_grid(), IQ2_XXS.ksigns, IQ4_NL.kvalues). Grid entry i",
        "// packs element k of row i into byte k (little-endian), as ggml-common.h does.",
        "//",
        "// Included by runtime/format/BlockDecode.h and freestanding like it: needs",
        "// only its contract (STRATA_TABLE and the fixed-width integer typedefs).",
        "//",
        "//===----------------------------------------------------------------------===//",
        "",
        "// clang-format off",
        "",
        "/// iq3s_grid: 512 entries of 4 magnitudes in {1,3,...,15}.",
        format_array("uint32_t", "strata_iq3s_grid", iq3s, hex32, 6),
        "",
        "/// iq3xxs_grid: 256 entries of 4 magnitudes in {4,12,20,28,36,44,52,62}.",
        format_array("uint32_t", "strata_iq3xxs_grid", iq3xxs, hex32, 6),
        "",
        "/// iq2xxs_grid: 256 entries of 8 magnitudes in {8,25,43}.",
        format_array("uint64_t", "strata_iq2xxs_grid", iq2xxs, hex64, 3),
        "",
        "/// ksigns_iq2xs: 7 sign bits plus an even-parity 8th bit.",
        format_array("uint8_t", "strata_ksigns_iq2xs", ksigns, lambda v: f"{v}", 12),
        "",
        "/// kvalues_iq4nl: the non-linear 4-bit codebook of IQ4_NL and IQ4_XS.",
        format_array("int8_t", "strata_kvalues_iq4nl", kvalues, lambda v: f"{v}", 16),
        "",
        "// clang-format on",
        "",
    ]
    return "\n".join(parts)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--output", default=DEFAULT_OUTPUT)
    ap.add_argument("--check", action="store_true", help="fail if --output differs from what would be generated")
    args = ap.parse_args()
    text = render()
    if args.check:
        try:
            with open(args.output, encoding="utf-8") as f:
                current = f.read()
        except OSError as e:
            sys.exit(f"gen_iq_grids: cannot read {args.output}: {e}")
        if current != text:
            sys.exit(f"gen_iq_grids: {args.output} is stale; rerun scripts/gen_iq_grids.py")
        print(f"gen_iq_grids: {args.output} is up to date")
        return
    with open(args.output, "w", encoding="utf-8") as f:
        f.write(text)
    print(f"gen_iq_grids: wrote {args.output}")


if __name__ == "__main__":
    main()
