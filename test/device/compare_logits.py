#!/usr/bin/env python3
"""Compares GPU logits with the CPU's f32 logits (raw float32 [T, vocab]):
bf16 policy: NMSE <= 1e-3 and top-1 agreement >= 97 %; f32 policy: NMSE <=
1e-5. Prints the figures; exits 1 over a bar.

usage: compare_logits.py GPU.logits CPU.logits bf16|f32 T
"""
import sys

import numpy as np

gpu = np.fromfile(sys.argv[1], dtype=np.float32).astype(np.float64)
cpu = np.fromfile(sys.argv[2], dtype=np.float32).astype(np.float64)
policy = sys.argv[3]
if gpu.size != cpu.size or gpu.size == 0:
    sys.exit(f"size mismatch: gpu {gpu.size}, cpu {cpu.size}")
T = int(sys.argv[4])
g, c = gpu.reshape(T, -1), cpu.reshape(T, -1)
nmse = float(((g - c) ** 2).sum() / (c ** 2).sum())
top1 = float((g.argmax(1) == c.argmax(1)).mean())
bar_nmse, bar_top1 = (1e-3, 0.97) if policy == "bf16" else (1e-5, 0.0)
ok = nmse <= bar_nmse and top1 >= bar_top1
print(f"logits vs cpu f32: NMSE {nmse:.3e} (bar {bar_nmse:g}), top-1 {top1:.3f}"
      f" (bar {bar_top1:g}) {'PASS' if ok else 'FAIL'}")
sys.exit(0 if ok else 1)
