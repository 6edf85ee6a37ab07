#!/usr/bin/env python3
"""Writes a plan's weights as raw GGUF bytes, in the plan's weight order, for
plan_smoke.py: OUT.bin (each weight 256-byte aligned) and OUT.json (name,
offset, bytes per plan weight index). Reads the GGUF with the gguf package.

usage: prepare_weights.py PLAN_DIR MODEL.gguf OUT
"""
import json
import sys

import numpy as np
from gguf import GGUFReader

plan_dir, gguf, out = sys.argv[1:4]
plan = json.load(open(plan_dir + "/plan.json"))
tensors = {t.name: t for t in GGUFReader(gguf).tensors}
blob = bytearray()
index = []
for w in plan["weights"]:
    data = np.asarray(tensors[w["name"]].data).tobytes()
    off = (len(blob) + 255) // 256 * 256
    blob += b"\0" * (off - len(blob)) + data
    index.append({"name": w["name"], "offset": off, "bytes": len(data)})
open(out + ".bin", "wb").write(blob)
json.dump(index, open(out + ".json", "w"))
