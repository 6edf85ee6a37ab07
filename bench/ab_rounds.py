#!/usr/bin/env python3
"""The median ms a decode step per variant, row count and prompt over the
rounds of a bench/decode_batch_ab.sh results file, and each variant's speed
against the reference's (a variant named base or head, else the first).

    python3 bench/ab_rounds.py RESULTS.txt
"""
import re
import statistics
import sys
from collections import defaultdict

LINE = re.compile(r"^round (\d+) (\S+) B=(\d+)(?: P=(\d+))?: (.*)$")
# Batched: "N decode steps of B rows in X ms (S ms a step, ...)"; one row:
# "generated N tokens in X ms (...)", a step X / N.
STEP = re.compile(r"\(([0-9.]+) ms a step")
ONE = re.compile(r"generated (\d+) tokens in ([0-9.]+) ms")


def main(path):
    ms = defaultdict(list)  # (P, B, variant) -> [ms a step]
    order = []
    with open(path) as f:
        for line in f:
            m = LINE.match(line)
            if not m:
                continue
            _, v, b, p, rest = m.groups()
            st, one = STEP.search(rest), ONE.search(rest)
            if st:
                step = float(st.group(1))
            elif one:
                step = float(one.group(2)) / int(one.group(1))
            else:
                continue
            if v not in order:
                order.append(v)
            ms[(int(p or 256), int(b), v)].append(step)
    # The reference: a variant named base or head, else the first seen.
    for ref in ("base", "head"):
        if ref in order:
            order.remove(ref)
            order.insert(0, ref)
            break
    shapes = sorted({(p, b) for p, b, _ in ms})
    print(f"{'P':>5} {'B':>3} {'variant':<12} {'ms/step':>8} {'tok/s':>8} "
          f"{'vs ' + order[0]:>9}  rounds")
    for p, b in shapes:
        base = statistics.median(ms[(p, b, order[0])]) if ms[(p, b, order[0])] else None
        for v in order:
            xs = ms.get((p, b, v))
            if not xs:
                continue
            med = statistics.median(xs)
            ratio = f"{base / med:.3f}x" if base else "-"
            print(f"{p:>5} {b:>3} {v:<12} {med:>8.3f} {b * 1000 / med:>8.1f} "
                  f"{ratio:>9}  {' '.join(f'{x:.3f}' for x in xs)}")


if __name__ == "__main__":
    main(sys.argv[1])
