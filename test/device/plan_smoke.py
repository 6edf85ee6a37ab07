#!/usr/bin/env python3
"""Runs a compiled sm_90 plan on the GPU through the CUDA driver API (ctypes,
no SDK headers; torch only allocates memory) and compares its logits with
the CPU backend's. A smoke test of the generated kernels until the C++ cuda
backend exists: arena poisoned with 0xff (NaN) first, every kernel launched
in plan order with the plan's grid/block/args.

usage: plan_smoke.py PLAN_DIR WEIGHTS.bin WEIGHTS.json TOKENS CPU_LOGITS.f32
(WEIGHTS.* from prepare: the plan's weights' raw GGUF bytes, by index)
"""
import ctypes
import json
import os
import sys

import numpy as np
import torch

plan_dir, wbin, wjson, tokens, cpu_logits = sys.argv[1:6]
plan = json.load(open(os.path.join(plan_dir, "plan.json")))
cuda = ctypes.CDLL("libcuda.so.1")
torch.zeros(1, device="cuda")  # a primary context, current on this thread


def check(rc, what):
    if rc != 0:
        msg = ctypes.c_char_p()
        cuda.cuGetErrorString(rc, ctypes.byref(msg))
        sys.exit(f"{what}: CUDA error {rc} {msg.value}")


def dim(d, t):
    if isinstance(d, int):
        return d
    coef, const = d[0], d[1]
    div = d[2] if len(d) > 2 else 1
    return (coef * t) // div + const


toks = [int(x) for x in tokens.split(",")]
T = len(toks)
arena = torch.full((plan["arena"]["bytes"] + 256,), 255, dtype=torch.uint8, device="cuda")
base = arena.data_ptr()
blob = np.fromfile(wbin, dtype=np.uint8)
index = json.load(open(wjson))
wdev = torch.from_numpy(blob).to("cuda")
wbase = wdev.data_ptr()
bufs = plan["buffers"]
tok_buf = bufs[plan["inputs"][0]]
arena[tok_buf["offset"]:tok_buf["offset"] + 4 * T] = torch.tensor(toks, dtype=torch.int32).view(torch.uint8).cuda()


def temp_bytes(tmp, t):
    n = {"f32": 4, "bf16": 2, "i32": 4}[tmp["dtype"]]
    for d in tmp["shape"]:
        n *= max(dim(d, t), 0)
    return (n + 255) // 256 * 256


ws_bytes = max([sum(temp_bytes(x, T) for x in k.get("temps", [])) for k in plan["kernels"]] + [256])
ws = torch.full((ws_bytes,), 255, dtype=torch.uint8, device="cuda")
modules = {}
for i, k in enumerate(plan["kernels"]):
    code = k["code"]
    path = os.path.join(plan_dir, code["module"])
    if path not in modules:
        data = open(path, "rb").read()
        if path.endswith(".ptx"):
            data += b"\0"
        mod = ctypes.c_void_p()
        check(cuda.cuModuleLoadData(ctypes.byref(mod), data), f"load {path}")
        modules[path] = mod
    fn = ctypes.c_void_p()
    check(cuda.cuModuleGetFunction(ctypes.byref(fn), modules[path], code["symbol"].encode()), code["symbol"])
    vals = []
    for a in code["args"]:
        if a == "T":
            vals.append(ctypes.c_int64(T))
        elif a == "workspace":
            vals.append(ctypes.c_uint64(ws.data_ptr()))
        else:
            kind, n = a.split(":")
            n = int(n)
            addr = base + bufs[n]["offset"] if kind == "buffer" else wbase + index[n]["offset"]
            vals.append(ctypes.c_uint64(addr))
    ptrs = (ctypes.c_void_p * len(vals))(*[ctypes.cast(ctypes.pointer(v), ctypes.c_void_p) for v in vals])
    g = [max(dim(d, T), 1) for d in code["grid"]]
    b = code["block"]
    check(cuda.cuLaunchKernel(fn, g[0], g[1], g[2], b[0], b[1], b[2], 0, None, ptrs, None),
          f"launch {i} {code['symbol']}")
    check(cuda.cuCtxSynchronize(), f"kernel {i} ({k.get('fused', k.get('recipe'))}) {code['symbol']}")
    if os.environ.get("FIRST_NAN"):
        # The first kernel whose output holds a NaN (the arena starts as NaN).
        for o in k["outputs"]:
            bb = bufs[o]
            n = {"f32": 4, "bf16": 2, "i32": 4}[bb["dtype"]]
            for d in bb["shape"]:
                n *= dim(d, T)
            raw = arena[bb["offset"]:bb["offset"] + n]
            if bb["dtype"] == "f32":
                bad = torch.isnan(raw.view(torch.float32)).sum().item()
            elif bb["dtype"] == "bf16":
                bad = torch.isnan(raw.view(torch.bfloat16)).sum().item()
            else:
                bad = 0
            if bad:
                body = [b["recipe"] for b in k.get("body", [])]
                ins = [("w", x["weight"]) if "weight" in x else (bufs[x["buffer"]]["name"], bufs[x["buffer"]]["shape"]) for x in k["inputs"]]
                sys.exit(f"kernel {i} {k.get('fused', k.get('recipe'))} {body} {code['symbol']}: "
                         f"{bad} NaN in output {bb['name']} {bb['shape']}; inputs {ins}")
out = bufs[plan["outputs"][0]]
n = 4
for d in out["shape"]:
    n *= dim(d, T)
gpu = arena[out["offset"]:out["offset"] + n].cpu().numpy().view(np.float32)
cpu = np.fromfile(cpu_logits, dtype=np.float32)
if gpu.size != cpu.size:
    sys.exit(f"size mismatch gpu {gpu.size} cpu {cpu.size}")
V = cpu.size // T if cpu.size % T == 0 else cpu.size
g2, c2 = gpu.reshape(-1, V).astype(np.float64), cpu.reshape(-1, V).astype(np.float64)
nmse = float(((g2 - c2) ** 2).sum() / max((c2 ** 2).sum(), 1e-30))
top1 = float((g2.argmax(1) == c2.argmax(1)).mean())
print(f"{os.path.basename(plan_dir)}: T={T} kernels={len(plan['kernels'])} nan={int(np.isnan(gpu).sum())} "
      f"nmse={nmse:.3e} top1={top1:.3f}")
