#!/usr/bin/env python3
"""Groups a strata-run --profile=json file's kernels by (label, variant, MB
moved) and prints calls, microseconds a call, GB/s and the share of the
per-kernel floor, slowest groups first: which kernel of a family is slow.
  python3 bench/profile_groups.py PROFILE.json [...]"""
import collections
import json
import sys

for path in sys.argv[1:]:
    with open(path) as f:
        prof = json.load(f)
    groups = collections.defaultdict(lambda: [0, 0.0, 0.0, None])
    total = 0.0
    for k in prof["kernels"]:
        key = (k["label"], round(k["bytes"] / 1e6, 2))
        g = groups[key]
        g[0] += 1
        g[1] += k["seconds"]
        g[2] += k["floor_seconds"]
        g[3] = k["index"] if g[3] is None else g[3]
        total += k["seconds"]
    print(f"== {path}: {len(prof['kernels'])} kernels, {1e3 * total:.3f} ms;"
          " by (label, MB): first kernel, calls, us each, GB/s, % of floor, share")
    for (label, mb), (n, s, fl, first) in sorted(
            groups.items(), key=lambda x: -x[1][1])[:40]:
        print(f"  {label:34s} #{first:<5d} {mb:9.2f} MB {n:4d} calls"
              f" {1e6 * s / n:9.1f} us {mb * 1e-3 * n / s:8.1f} GB/s"
              f" {100 * fl / s:5.1f} % {100 * s / total:5.1f} %")
