#!/usr/bin/env python3
"""Edits a compiled plan.json the way a hostile user would, for the
validator's regression tests.

usage: edit_plan.py EDIT IN_PLAN_DIR OUT_PLAN_DIR

EDIT:
  move-over-live  a kernel's output moved onto a buffer that was written
                  before that kernel and is read after it
  tie-over-live   a fused kernel's output tied (written in place) over an
                  input of the same size that a later kernel still reads
  host-code       a host plan's kernel given a generated-code block
  temps-wrap      thousands of 2^50-byte temporaries beside a small one
  workspace-huge  a code workspace of 2^61 x T bytes
  target-unknown  target "tpu9000"
Prints what it changed.
"""
import json
import os
import sys

edit, src, dst = sys.argv[1:4]
plan = json.load(open(os.path.join(src, "plan.json")))
bufs, kernels = plan["buffers"], plan["kernels"]


def buffer_inputs(k):
    return [i["buffer"] for i in k["inputs"] if "buffer" in i]


# Position each buffer is written at and last read at (inputs at -1, the
# output after the last kernel); views read through their base.
def base(b):
    while "view_of" in bufs[b]:
        b = bufs[b]["view_of"]
    return b


viewed = {b["view_of"] for b in bufs if "view_of" in b}
written, last_read = {}, {}
for b in plan["inputs"]:
    written[b] = -1
for ki, k in enumerate(kernels):
    for b in buffer_inputs(k):
        last_read[base(b)] = ki
    for o in k["outputs"]:
        written[o] = ki
last_read[base(plan["outputs"][0])] = len(kernels)

if edit == "move-over-live":
    for ki, k in enumerate(kernels):
        mine = set(buffer_inputs(k))
        victims = [b for b, w in written.items()
                   if w < ki and last_read.get(b, -2) > ki and b not in mine]
        outs = [o for o in k["outputs"] if o not in viewed]
        if victims and outs:
            o, v = outs[0], victims[0]
            bufs[o]["offset"] = bufs[v]["offset"]
            print(f"kernel {ki}: buffer {o} moved onto buffer {v}")
            break
    else:
        sys.exit("no kernel with a live buffer to overwrite")
elif edit == "tie-over-live":
    for ki, k in enumerate(kernels):
        if "fused" not in k:
            continue
        for oi, o in enumerate(k["outputs"]):
            if o in viewed:
                continue
            for ii, inp in enumerate(k["inputs"]):
                b = inp.get("buffer")
                if (b is None or bufs[b]["bytes"] != bufs[o]["bytes"]
                        or bufs[b]["dtype"] != bufs[o]["dtype"]
                        or last_read.get(base(b), -1) <= ki):
                    continue
                tied = k.get("tied", [-1] * len(k["outputs"]))
                if tied[oi] >= 0:
                    continue
                tied[oi] = ii
                k["tied"] = tied
                bufs[o]["offset"] = bufs[b]["offset"]
                print(f"kernel {ki}: output {oi} tied over input {ii}")
                break
            else:
                continue
            break
        else:
            continue
        break
    else:
        sys.exit("no fused kernel with an input read later")
elif edit == "host-code":
    kernels[0]["code"] = {"module": "kernels/k.co", "symbol": "k",
                          "grid": [1, 1, 1], "block": [64, 1, 1],
                          "shared_bytes": 0, "args": []}
elif edit == "temps-wrap":
    k = next(k for k in kernels if "fused" in k)
    k["temps"] += [{"dtype": "f32", "shape": [1 << 40, 256]}] * 4096
elif edit == "workspace-huge":
    k = next(k for k in kernels if "code" in k)
    k["code"]["workspace_bytes"] = [1 << 61, 0]
elif edit == "target-unknown":
    plan["target"] = "tpu9000"
else:
    sys.exit(f"unknown edit {edit}")

os.makedirs(dst, exist_ok=True)
json.dump(plan, open(os.path.join(dst, "plan.json"), "w"), indent=1)
