#!/usr/bin/env python3
"""Summarises a kernel trace of a strata-run decode run (bench/trace_decode.sh:
bench/cupti_trace.c's CSV, in the columns of Nsight Systems' cuda_gpu_trace
report, which it also reads): the kernels of the last STEPS decode steps (a step
is the plan's kernel count of consecutive kernels; memory copies and the
prefill before them left out), per kernel name (the plan's symbol less its
hash): calls a step, microseconds a call, share; then a step's time from
its first kernel's start to its last one's end, the kernels' sum, and the
idle time between them (gaps: the launch cost the step pays beyond its
kernels' own time).
  python3 bench/trace_summary.py TRACE.csv --plan PLAN.json [--steps N]"""
import argparse
import collections
import csv
import json
import re

ap = argparse.ArgumentParser()
ap.add_argument("trace")
ap.add_argument("--plan", required=True)
ap.add_argument("--steps", type=int, default=16)
a = ap.parse_args()
with open(a.plan) as f:
    per_step = len(json.load(f)["kernels"])
rows = []
with open(a.trace) as f:
    for r in csv.DictReader(f):
        name = r.get("Name", "")
        # Kernels only: copies and memsets are named [CUDA memcpy ...].
        if not name or name.startswith("[CUDA"):
            continue
        start = int(r["Start (ns)"])
        rows.append((start, start + int(r["Duration (ns)"]), name))
rows.sort()
if not rows:
    raise SystemExit("error: no kernels in the trace")
# A decode step launches each plan kernel once, plus their pre-launches: its
# period is the shortest run of at least the plan's kernel count that the
# trace's end repeats; the last steps are the tail cut at that period.
names = [n for _, _, n in rows]
period = None
for p in range(per_step, min(len(names) // 2, 4 * per_step) + 1):
    if names[-p:] == names[-2 * p:-p]:
        period = p
        break
if period is None:
    raise SystemExit(f"error: no repeating step of {per_step}+ kernels at the trace's end")
steps = min(a.steps, len(rows) // period - 1)
tail = rows[-steps * period:]
short = lambda n: re.sub(r"_[0-9a-f]{12}", "", n)
# Under programmatic dependent launch a kernel starts while the one before it
# runs and waits for it inside: its own duration holds that wait. What a
# kernel adds to the step is the time from the previous kernel's end to its
# own ("ends": the kernels ordered by their ends, each charged the
# difference; the first of each step is charged from the step's start).
by = collections.defaultdict(lambda: [0, 0, 0])
busy = 0
span = 0
gaps = 0
for i in range(steps):
    step = tail[i * period:(i + 1) * period]
    span += step[-1][1] - step[0][0]
    for (s0, e0, _), (s1, _, _) in zip(step, step[1:]):
        gaps += max(0, s1 - e0)
    prev = step[0][0]
    for s, e, n in sorted(step, key=lambda x: x[1]):
        k = by[short(n)]
        k[0] += 1
        k[1] += e - s
        k[2] += max(0, e - prev)
        busy += e - s
        prev = max(prev, e)
print(f"# {steps} decode steps of {period} kernels (plan: {per_step}); per step:")
print(f"#   span {span / steps / 1e3:.1f} us, kernels {busy / steps / 1e3:.1f} us"
      f" (overlapping), gaps {gaps / steps / 1e3:.1f} us ({100 * gaps / span:.1f} % of the span)")
print(f"# ends: the time from the previous kernel's end to this one's (what it adds to the step)")
print(f"# {'kernel':40s} {'calls':>6s} {'ends/call':>9s} {'ends/step':>9s} {'share':>6s} {'own/call':>9s}")
for n, (c, t, m) in sorted(by.items(), key=lambda x: -x[1][2]):
    print(f"  {n:40s} {c / steps:6.0f} {m / c / 1e3:9.2f} {m / steps / 1e3:9.1f}"
          f" {100 * m / span:5.1f} % {t / c / 1e3:9.2f}")
