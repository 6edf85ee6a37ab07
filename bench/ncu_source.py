#!/usr/bin/env python3
"""Where a kernel's warps wait, instruction by instruction: reads the CSV of
Nsight Compute's source page (`ncu -i R.ncu-rep --page source --csv
--print-source sass`, a report collected with `--section SourceCounters`)
and prints the stall samples per region of the SASS (each region's share of
all samples and its leading stall reasons) and the instructions with the
most samples, with their leading reasons.

Regions are ranges of SASS instruction indexes: --split A,B,... cuts the
kernel at those indexes; --ws finds attention_ws's (the prologue, the two
consumer warpgroups' copies of the chunk loop, the producer) from where its
wgmma and cp.async instructions sit. What found session 19's V waits:
`bench/ncu_source.py --ws ncu-src.csv.gz`.

    python3 bench/ncu_source.py [--ws [--slack N] | --split A,B,...] [--top N]
                                CSV[.gz]
"""
import argparse
import collections
import csv
import gzip
import sys

SAMPLES = "Warp Stall Sampling (All Samples)"


def load(path):
    """The source page's header and rows (the first line names the kernel)."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", newline="") as f:
        rows = list(csv.reader(f))
    for i, row in enumerate(rows):
        if SAMPLES in row:
            return row, rows[i + 1:]
    sys.exit(f"ncu_source.py: error: {path}: no '{SAMPLES}' column (was the "
             "report collected with --section SourceCounters and exported "
             "with --page source --csv --print-source sass?)")


def ws_regions(src, n, slack):
    """attention_ws's regions: prologue, consumer 0, consumer 1, producer
    (the consumers split at the widest gap between wgmma instructions, the
    producer from its first cp.async of the loop, LDGSTS without BYPASS;
    each loop's set-up, \p slack instructions, before its first wgmma or
    copy)."""
    hg = [i for i, s in enumerate(src) if "HGMMA" in s]
    ld = [i for i, s in enumerate(src) if "LDGSTS" in s and "BYPASS" not in s]
    if len(hg) < 2 or not ld:
        sys.exit("ncu_source.py: error: --ws: no wgmma or no producer "
                 "cp.async in this kernel's SASS (not attention_ws?)")
    k = max(range(1, len(hg)), key=lambda j: hg[j] - hg[j - 1])
    mid = (hg[k - 1] + hg[k]) // 2
    a = max(0, hg[0] - slack)
    p = max(mid, ld[0] - slack)
    return [("prologue", 0, a), ("consumer 0", a, mid),
            ("consumer 1", mid, p), ("producer", p, n)]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("csv")
    ap.add_argument("--ws", action="store_true",
                    help="attention_ws's regions")
    ap.add_argument("--split", default="",
                    help="comma-separated instruction indexes to cut at")
    ap.add_argument("--slack", type=int, default=300,
                    help="--ws: instructions of loop set-up before a loop's "
                    "first wgmma or copy (300: attention_ws at head dim 256)")
    ap.add_argument("--top", type=int, default=25)
    a = ap.parse_args()
    hdr, rows = load(a.csv)
    ix = {h: i for i, h in enumerate(hdr)}
    stalls = [h for h in hdr if h.startswith("stall_") and "Not Issued" not in h]
    src = [r[ix["Source"]].strip() for r in rows]

    def samples(r):
        return int(r[ix[SAMPLES]] or 0)

    total = sum(samples(r) for r in rows) or 1
    n = len(rows)
    if a.ws:
        regions = ws_regions(src, n, a.slack)
    else:
        cuts = [0] + sorted(int(c) for c in a.split.split(",") if c) + [n]
        regions = [(f"[{lo}, {hi})", lo, hi) for lo, hi in zip(cuts, cuts[1:])]
    print(f"{n} instructions, {total} samples")
    print("region                 share  leading stall reasons (% of region)")
    for name, lo, hi in regions:
        part = sum(samples(r) for r in rows[lo:hi])
        why = collections.Counter()
        for r in rows[lo:hi]:
            for h in stalls:
                why[h[6:]] += int(r[ix[h]] or 0)
        lead = ", ".join(f"{k} {100 * v / max(part, 1):.1f}"
                         for k, v in why.most_common(6) if v)
        print(f"{name:20s} {100 * part / total:6.1f}%  {lead}")
    print(f"\nthe {a.top} instructions with the most samples (index, share, "
          "SASS, leading reasons):")
    top = sorted(range(n), key=lambda i: -samples(rows[i]))[:a.top]
    for i in sorted(top):
        r = rows[i]
        lead = [x for x in sorted(((int(r[ix[h]] or 0), h[6:])
                                   for h in stalls), reverse=True)[:2] if x[0]]
        print(f"{i:6d} {100 * samples(r) / total:5.1f}%  {src[i][:60]:60s} "
              + ", ".join(f"{k} {v}" for v, k in lead))


if __name__ == "__main__":
    main()
