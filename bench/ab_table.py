#!/usr/bin/env python3
"""The table bench/ab.sh writes: the mean ms of every kernel family per plan
over the runs in RAW (the concatenated `strata-run --profile` outputs, each
after a `## plan-NAME run I` line) and each plan's change against the first.

    python3 bench/ab_table.py RAW NAME ...
"""
import re
import sys
from collections import defaultdict

ROW = re.compile(r"^\s+(\S+)\s+(\d+)\s+([0-9.]+)\s+[0-9.]+%")
TOTAL = re.compile(r"^profile: .*?([0-9.]+) ms in kernels")


def parse(path):
    """{plan: {family: [ms per run]}}, with the kernels' total as 'all'."""
    runs = defaultdict(lambda: defaultdict(list))
    plan = None
    with open(path) as f:
        for line in f:
            m = re.match(r"^## plan-(\S+) run \d+$", line)
            if m:
                plan = m.group(1)
                continue
            if plan is None:
                continue
            t = TOTAL.match(line)
            if t:
                runs[plan]["all kernels"].append(float(t.group(1)))
                continue
            r = ROW.match(line)
            if r and r.group(1) != "kernel":
                runs[plan][r.group(1)].append(float(r.group(3)))
    return runs


def main():
    if len(sys.argv) < 3:
        sys.exit("usage: ab_table.py RAW NAME ...")
    raw, plans = sys.argv[1], sys.argv[2:]
    runs = parse(raw)
    missing = [p for p in plans if "all kernels" not in runs.get(p, {})]
    for p in missing:
        print(f"plan-{p}: no profile in the runs (see the raw output below)")
    plans = [p for p in plans if p not in missing]
    if not plans:
        return 1
    mean = {p: {k: sum(v) / len(v) for k, v in runs[p].items()} for p in plans}
    base = mean[plans[0]]
    families = sorted(base, key=lambda k: -base[k])
    head = "| family | " + " | ".join(f"plan-{p} ms" for p in plans)
    head += "".join(f" | {p} vs {plans[0]}" for p in plans[1:]) + " |"
    print()
    print(head)
    print("|---" * (1 + 2 * len(plans) - 1) + "|")
    for k in families:
        cells = [f"{mean[p].get(k, float('nan')):.3f}" for p in plans]
        for p in plans[1:]:
            v = mean[p].get(k)
            cells.append(f"{100 * (v / base[k] - 1):+.1f} %"
                         if v is not None and base[k] > 0 else "-")
        print(f"| {k} | " + " | ".join(cells) + " |")
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
