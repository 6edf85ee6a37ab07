#!/usr/bin/env python3
"""The peers a user would otherwise pick for each of strata's kernel families,
measured at the seed shape (qwen4exp, T = 16058) on the same GPU in the same
run as strata (bench/run.sh), so the performance table compares like with like.

Why: strata's profile alone says how far a kernel is from its floor, not
whether a user would be better off with torch. Each peer implements the same
math as strata's kernel (reference: shared/reference/qwen4exp.md,
docs/hyper-connection-floor.md) with the library a user would reach for:

  hc      gated-residual K1 (R += lambda*F, per-stream RMSNorm, bf16 image)
          and one whole site (K1 + K2 down/inject GEMM + K3 up GEMM with
          sigmoid and stream mix) in torch eager and torch.compile; the
          device-to-device copy rate over K1's byte count
  moe     the routed experts of one layer (512 experts, top-10, gate/up
          K 2560 N 640x2, down K 640 N 2560) with torch._grouped_mm in bf16
          on the sorted token layout, and dense bf16 matmuls of equal FLOPs
  attn    dense causal GQA attention (24 q-heads, 2 KV heads, head dim 256)
          through SDPA with the flash and cuDNN backends
  delta   the gated delta rule (16 key heads, 48 value heads, 128x128 state)
          with flash-linear-attention's chunk_gated_delta_rule (q/k expanded
          to 48 heads as HF does, and fla's own GVA) and transformers'
          torch fallback torch_chunk_gated_delta_rule (qwen3_next)

and the decode peers (one token of one sequence, P = 16,384 cached positions):

  attn_decode  one query row against P cached keys/values (24 q-heads,
          2 KV heads, head dim 256) through SDPA (flash, efficient and
          cuDNN backends), the cache in bf16 and f32
  delta_step   one step of the gated delta rule (f32 state 48 x 128 x 128)
          with fla's fused_recurrent_gated_delta_rule (its GVA)
  moe_decode   the 10 routed experts of one token: torch._grouped_mm in
          bf16 with one row per routed expert, and the device copy rate of
          the routed experts' bytes at strata's block types (IQ3_S gate/up,
          IQ4_NL down): the floor a GEMV of those bytes has

Every measurement runs in its own try/except: a peer that cannot run (no
cuDNN backend, fla missing, out of memory) is written as "unavailable: reason"
and the rest still run. Timing: CUDA events around each call (wall clock on
the CPU), after warm-up calls, median of at least 10 timed calls.
Bytes and FLOPs are counted per measurement (formulas in the results) and
turned into achieved GB/s and TFLOP/s.

  python3 bench/peers.py -o peers.json                 # GPU, seed shape
  python3 bench/peers.py --device cpu --small -o x.json  # dry run anywhere
"""
import argparse
import datetime
import importlib
import inspect
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time

SEED = dict(T=16058, P=16384, streams=4, C=2560, rank=320, experts=512, topk=10, expert_width=640,
            q_heads=24, kv_heads=2, head_dim=256, k_heads=16, v_heads=48, dk=128, dv=128)
SMALL = dict(T=96, P=128, streams=4, C=256, rank=32, experts=8, topk=2, expert_width=64,
             q_heads=4, kv_heads=2, head_dim=64, k_heads=2, v_heads=6, dk=32, dv=32)
EPS = 1e-6
GROUPS = ("hc", "moe", "attn", "delta", "attn_decode", "delta_step", "moe_decode")


def reason(e):
    """One line for an exception: its type and the first line of its text."""
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}"[:400]


class Runner:
    """Times callables and collects result records, one per measurement."""

    def __init__(self, torch, device, warmup, reps, deadline, out_path, meta, shapes):
        self.torch, self.device = torch, device
        self.warmup, self.reps = warmup, reps
        self.deadline = deadline
        self.t0 = time.time()
        self.out_path = out_path
        self.doc = {"meta": meta, "shapes": shapes,
                    "timing": {"warmup": warmup, "reps": reps,
                               "method": ("CUDA events around each call" if device == "cuda"
                                          else "wall clock around each call") +
                               f"; median of >= {reps} timed calls after {warmup} warm-ups "
                               "(2 warm-ups and 10 calls when one call takes over 0.5 s)"},
                    "results": []}

    def sync(self):
        if self.device == "cuda":
            self.torch.cuda.synchronize()

    def out_of_time(self):
        return self.deadline and time.time() - self.t0 > self.deadline

    def time_fn(self, fn):
        torch = self.torch
        t = time.time()
        fn()  # first call: compiles, autotunes, allocates
        self.sync()
        first_s = time.time() - t
        t = time.time()
        fn()  # second call (a warm-up too) says whether a call is slow
        self.sync()
        slow = time.time() - t > 0.5
        for _ in range(0 if slow else self.warmup - 2):
            fn()
        self.sync()
        reps = 10 if slow else self.reps
        times = []
        for _ in range(reps):
            if self.device == "cuda":
                a = torch.cuda.Event(enable_timing=True)
                b = torch.cuda.Event(enable_timing=True)
                a.record()
                fn()
                b.record()
                b.synchronize()
                times.append(a.elapsed_time(b))
            else:
                t = time.perf_counter()
                fn()
                times.append((time.perf_counter() - t) * 1e3)
        return {"ms_median": statistics.median(times), "ms_min": min(times), "ms_max": max(times),
                "reps": reps, "warmup": 2 if slow else max(2, self.warmup), "first_call_s": first_s}

    def add(self, rec):
        self.doc["results"].append(rec)
        self.save()
        name = f"{rec['group']}/{rec['name']} {rec['impl']}"
        if rec["status"] == "ok":
            print(f"peers: {name}: {rec['ms_median']:.3f} ms (median of {rec['reps']}), "
                  f"{rec.get('gbs', 0):.0f} GB/s, {rec.get('tflops', 0):.2f} TFLOP/s"
                  + (f" [{rec['mode']}]" if rec.get("mode") else ""), flush=True)
        else:
            print(f"peers: {name}: {rec['status']}: {rec.get('reason', '')}", flush=True)

    def save(self):
        if not self.out_path:
            return
        tmp = self.out_path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(self.doc, f, indent=1)
        os.replace(tmp, self.out_path)

    def measure(self, group, name, impl, fn, nbytes, flops, **extra):
        """Times fn and records it; any exception becomes 'unavailable'."""
        rec = {"group": group, "name": name, "impl": impl, "bytes": nbytes, "flops": flops, **extra}
        if self.out_of_time():
            rec.update(status="skipped", reason=f"the peers' time budget ({self.deadline:.0f} s) was spent")
            self.add(rec)
            return None
        try:
            r = self.time_fn(fn)
        except Exception as e:  # noqa: BLE001 - every peer failure is reported, not raised
            self.free()
            rec.update(status="unavailable", reason=reason(e))
            self.add(rec)
            return None
        s = r["ms_median"] / 1e3
        rec.update(status="ok", **r, gbs=nbytes / s / 1e9 if s > 0 else 0.0,
                   tflops=flops / s / 1e12 if s > 0 else 0.0)
        self.add(rec)
        return rec

    def unavailable(self, group, name, impl, why, **extra):
        self.add({"group": group, "name": name, "impl": impl, "status": "unavailable",
                  "reason": why, **extra})

    def free(self):
        if self.device == "cuda":
            try:
                self.torch.cuda.synchronize()
            except Exception:  # noqa: BLE001 - a broken context is reported by the next peer
                pass
            self.torch.cuda.empty_cache()


def nmse(torch, a, b):
    a, b = a.float(), b.float()
    den = (b * b).mean().item()
    return ((a - b) ** 2).mean().item() / den if den > 0 else float("nan")


# --------------------------------------------------------------------------
# Hyper-connection site (gated residual), K1 and K1+K2+K3.
# --------------------------------------------------------------------------
def hc_k1(torch, R, F, lam, w):
    """K1: R += lambda*F in place; returns the bf16 image of the per-stream
    RMS-normalised streams times the norm weight (which holds 1 + w)."""
    R.add_(lam.float().unsqueeze(-1) * F.float().unsqueeze(1))
    rs = torch.rsqrt(R.square().mean(-1, keepdim=True) + EPS)
    return (R * rs * w).to(torch.bfloat16)


def hc_site(torch, R, F, lam, w, Wcat, Wup, rank):
    """K1, then K2 (down + inject as one GEMM: silu(./4) and 2*sigmoid(./4)),
    then K3 (up GEMM, sigmoid, mean over streams of gate * image)."""
    xh = hc_k1(torch, R, F, lam, w)
    T, n, C = xh.shape
    y = xh.reshape(T, n * C) @ Wcat.t()
    lo = torch.nn.functional.silu(y[:, :rank].float() * 0.25).to(torch.bfloat16)
    lam_next = (2 * torch.sigmoid(y[:, rank:].float() * 0.25)).to(torch.bfloat16)
    G = torch.sigmoid((lo @ Wup.t()).float()).view(T, n, C)
    u = (G * xh.float()).mean(1).to(torch.bfloat16)
    return u, lam_next


def bench_hc(run, torch, dev, S):
    T, n, C, r = S["T"], S["streams"], S["C"], S["rank"]
    g = "hc"
    # Bytes as strata's cost rules count them (bf16 activations, f32 streams).
    k1_bytes = T * (2 * n * C * 4 + C * 2 + n * 2 + n * C * 2) + n * C * 4
    k2_bytes = T * (n * C * 2 + r * 2 + n * 2) + (r + n) * n * C * 2
    k3_bytes = T * (r * 2 + n * C * 2 + C * 2) + n * C * r * 2
    k1_flops = T * 2 * n * C
    site_flops = k1_flops + T * 2 * n * C * (r + n) + T * 2 * r * n * C
    site_bytes = k1_bytes + k2_bytes + k3_bytes
    shape = {"T": T, "streams": n, "C": C, "rank": r}
    formulas = {"k1_bytes": "T*(2*n*C*4 + C*2 + n*2 + n*C*2) + n*C*4 (R read+write f32, F bf16, "
                            "lambda bf16, image bf16, norm weight f32)",
                "site_bytes": "K1 + K2 T*(n*C*2 + r*2 + n*2) + (r+n)*n*C*2 + K3 T*(r*2 + n*C*2 + C*2) + n*C*r*2",
                "site_flops": "T*(2*n*C + 2*n*C*(r+n) + 2*r*n*C)"}
    try:
        gen = torch.Generator(device=dev).manual_seed(0)
        R = torch.randn(T, n, C, device=dev, generator=gen)
        F = torch.randn(T, C, device=dev, generator=gen).to(torch.bfloat16)
        lam = (2 * torch.sigmoid(torch.randn(T, n, device=dev, generator=gen))).to(torch.bfloat16)
        w = 1 + 0.1 * torch.randn(n, C, device=dev, generator=gen)
        Wcat = (torch.randn(r + n, n * C, device=dev, generator=gen) * (n * C) ** -0.5).to(torch.bfloat16)
        Wup = (torch.randn(n * C, r, device=dev, generator=gen) * r ** -0.5).to(torch.bfloat16)
    except Exception as e:  # noqa: BLE001
        for name, impl in (("k1", "copy_ D2D"), ("k1", "torch eager"), ("k1", "torch.compile"),
                           ("site", "torch eager"), ("site", "torch.compile")):
            run.unavailable(g, name, impl, reason(e), shape=shape)
        return
    # The device-to-device copy of K1's byte count (half read, half written).
    try:
        half = k1_bytes // 2 // 16 * 16
        src = torch.empty(half, dtype=torch.uint8, device=dev)
        dst = torch.empty_like(src)
        src.fill_(1)
        run.measure(g, "k1", "copy_ D2D", lambda: dst.copy_(src), 2 * half, 0, shape=shape,
                    note="dst.copy_(src) of K1's bytes / 2: bytes = read + written")
        del src, dst
    except Exception as e:  # noqa: BLE001
        run.unavailable(g, "k1", "copy_ D2D", reason(e), shape=shape)
    run.free()

    k1_eager = lambda: hc_k1(torch, R, F, lam, w)  # noqa: E731
    ref = run.measure(g, "k1", "torch eager", k1_eager, k1_bytes, k1_flops, shape=shape,
                      formulas={"bytes": formulas["k1_bytes"], "flops": "T*2*n*C"})
    try:
        k1_c = torch.compile(lambda R_, F_, l_, w_: hc_k1(torch, R_, F_, l_, w_), dynamic=False)
        rec = run.measure(g, "k1", "torch.compile", lambda: k1_c(R, F, lam, w), k1_bytes, k1_flops,
                          shape=shape, formulas={"bytes": formulas["k1_bytes"], "flops": "T*2*n*C"})
        if rec and ref:
            R2 = R.clone()
            rec["nmse_vs_eager"] = nmse(torch, k1_c(R2.clone(), F, lam, w), hc_k1(torch, R2, F, lam, w))
            run.save()
    except Exception as e:  # noqa: BLE001
        run.unavailable(g, "k1", "torch.compile", reason(e), shape=shape)
    run.free()

    site_eager = lambda: hc_site(torch, R, F, lam, w, Wcat, Wup, r)  # noqa: E731
    ref = run.measure(g, "site", "torch eager", site_eager, site_bytes, site_flops, shape=shape,
                      formulas={"bytes": formulas["site_bytes"], "flops": formulas["site_flops"]})
    try:
        site_c = torch.compile(lambda *a: hc_site(torch, *a, r), dynamic=False)
        rec = run.measure(g, "site", "torch.compile", lambda: site_c(R, F, lam, w, Wcat, Wup),
                          site_bytes, site_flops, shape=shape,
                          formulas={"bytes": formulas["site_bytes"], "flops": formulas["site_flops"]})
        if rec and ref:
            R2 = R.clone()
            rec["nmse_vs_eager"] = nmse(torch, site_c(R2.clone(), F, lam, w, Wcat, Wup)[0],
                                        hc_site(torch, R2, F, lam, w, Wcat, Wup, r)[0])
            run.save()
    except Exception as e:  # noqa: BLE001
        run.unavailable(g, "site", "torch.compile", reason(e), shape=shape)
    del R, F, lam, w, Wcat, Wup
    run.free()


# --------------------------------------------------------------------------
# Routed experts of one layer.
# --------------------------------------------------------------------------
def grouped_mm_fn(torch):
    f = getattr(torch.nn.functional, "grouped_mm", None)
    if f is not None:
        return f, "torch.nn.functional.grouped_mm"
    f = getattr(torch, "_grouped_mm", None)
    if f is not None:
        return f, "torch._grouped_mm"
    raise RuntimeError(f"torch {torch.__version__} has neither torch.nn.functional.grouped_mm "
                       "nor torch._grouped_mm")


def bench_moe(run, torch, dev, S):
    T, E, k, K, N = S["T"], S["experts"], S["topk"], S["C"], S["expert_width"]
    M = T * k
    g = "moe"
    shape = {"T": T, "experts": E, "topk": k, "rows": M, "gate_up": f"K {K} N {N}x2", "down": f"K {N} N {K}"}
    gu_flops, dn_flops = 2 * M * K * 2 * N, 2 * M * N * K
    gu_bytes = M * K * 2 + E * 2 * N * K * 2 + M * 2 * N * 2
    dn_bytes = M * N * 2 + E * K * N * 2 + M * K * 2
    names = (("gemms", "torch._grouped_mm bf16"), ("gate_up", "torch._grouped_mm bf16"),
             ("down", "torch._grouped_mm bf16"), ("pipeline", "torch._grouped_mm bf16 + SwiGLU"),
             ("gemms", "dense bf16 matmul (equal FLOPs)"))
    try:
        gmm, gmm_name = grouped_mm_fn(torch)
        gen = torch.Generator(device=dev).manual_seed(1)
        x = torch.randn(T, K, device=dev, generator=gen).to(torch.bfloat16)
        # Uniform routing: k distinct experts per token, rows sorted by expert.
        idx = torch.rand(T, E, device=dev, generator=gen).topk(k, dim=1).indices
        flat = idx.reshape(-1)
        order = torch.argsort(flat, stable=True)
        counts = torch.bincount(flat, minlength=E)
        offs = torch.cumsum(counts, 0).to(torch.int32)
        xs = x[order // k].contiguous()
        # Weights as (E, out, in), passed as (E, in, out) views: x @ W^T per expert.
        Wgu = (torch.randn(E, 2 * N, K, device=dev, generator=gen, dtype=torch.bfloat16) * K ** -0.5)
        Wd = (torch.randn(E, K, N, device=dev, generator=gen, dtype=torch.bfloat16) * N ** -0.5)
        del x, idx, flat, order
    except Exception as e:  # noqa: BLE001
        for name, impl in names:
            run.unavailable(g, name, impl, reason(e), shape=shape)
        run.free()
        return
    tokens_per_expert = {"min": int(counts.min()), "max": int(counts.max()), "mean": M / E}
    # offs[-1] == rows is the usual MoE call; torch's documentation asks for
    # offs[-1] < rows, so where the exact call is refused the rows get one
    # padding row (ignored by every group).
    xa, layout = xs, "offs[-1] = rows"
    try:
        gmm(xs, Wgu.transpose(-2, -1), offs=offs)
    except Exception as e:  # noqa: BLE001
        xa = torch.cat([xs, xs[:1]]).contiguous()
        layout = f"one padding row (the exact call said {reason(e)})"

    def gate_up():
        return gmm(xa, Wgu.transpose(-2, -1), offs=offs)

    def swiglu(y):
        return torch.nn.functional.silu(y[:, :N]) * y[:, N:]

    extra = {"shape": shape, "tokens_per_expert": tokens_per_expert, "api": gmm_name, "layout": layout}
    try:
        y = gate_up()
        h = swiglu(y).contiguous()
        # Correctness: the first and last experts' rows against plain matmuls.
        bounds = [0] + offs.tolist()
        errs = []
        for e in (0, E - 1):
            a, b = bounds[e], bounds[e + 1]
            if b > a:
                errs.append(nmse(torch, y[a:b], xs[a:b] @ Wgu[e].t()))
        extra["nmse_vs_matmul"] = max(errs) if errs else None
    except Exception as e:  # noqa: BLE001
        for name, impl in names[:4]:
            run.unavailable(g, name, impl, reason(e), **extra)
        y = h = None

    if h is not None:
        def down():
            return gmm(h, Wd.transpose(-2, -1), offs=offs)

        def gemms():
            gate_up()
            down()

        def pipeline():
            return gmm(swiglu(gate_up()), Wd.transpose(-2, -1), offs=offs)

        run.measure(g, "gemms", "torch._grouped_mm bf16", gemms, gu_bytes + dn_bytes, gu_flops + dn_flops,
                    **extra, note="gate/up grouped GEMM + down grouped GEMM (no SwiGLU)")
        run.measure(g, "gate_up", "torch._grouped_mm bf16", gate_up, gu_bytes, gu_flops, **extra)
        run.measure(g, "down", "torch._grouped_mm bf16", down, dn_bytes, dn_flops, **extra)
        run.measure(g, "pipeline", "torch._grouped_mm bf16 + SwiGLU", pipeline,
                    gu_bytes + dn_bytes + 3 * M * N * 2, gu_flops + dn_flops, **extra,
                    note="gate/up GEMM, silu(gate)*up in eager torch, down GEMM")
    del y, h, Wgu, Wd, xa
    run.free()
    try:
        W1 = torch.randn(K, 2 * N, device=dev, dtype=torch.bfloat16) * K ** -0.5
        W2 = torch.randn(N, K, device=dev, dtype=torch.bfloat16) * N ** -0.5
        hd = torch.randn(M, N, device=dev, dtype=torch.bfloat16)

        def dense():
            xs @ W1
            hd @ W2

        run.measure(g, "gemms", "dense bf16 matmul (equal FLOPs)", dense,
                    M * K * 2 + K * 2 * N * 2 + M * 2 * N * 2 + M * N * 2 + N * K * 2 + M * K * 2,
                    gu_flops + dn_flops, shape=shape,
                    note="[M, K] @ [K, 2N] and [M, N] @ [N, K] with M = T*topk: the GEMM rate without grouping")
        del W1, W2, hd
    except Exception as e:  # noqa: BLE001
        run.unavailable(g, "gemms", "dense bf16 matmul (equal FLOPs)", reason(e), shape=shape)
    del xs, offs, counts
    run.free()


# --------------------------------------------------------------------------
# Attention: dense causal GQA through SDPA.
# --------------------------------------------------------------------------
def bench_attn(run, torch, dev, S):
    T, Hq, Hkv, D = S["T"], S["q_heads"], S["kv_heads"], S["head_dim"]
    g = "attn"
    shape = {"T": T, "q_heads": Hq, "kv_heads": Hkv, "head_dim": D, "causal": True}
    flops = 4 * D * Hq * T * (T + 1) // 2
    nbytes = (2 * Hq + 2 * Hkv) * T * D * 2
    formulas = {"flops": "4*D*Hq*T*(T+1)/2 (QK^T and PV over the causal half)",
                "bytes": "q, o (Hq heads) and k, v (Hkv heads) once, bf16"}
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
        sdpa = torch.nn.functional.scaled_dot_product_attention
        gen = torch.Generator(device=dev).manual_seed(2)
        q = torch.randn(1, Hq, T, D, device=dev, generator=gen, dtype=torch.bfloat16)
        k = torch.randn(1, Hkv, T, D, device=dev, generator=gen, dtype=torch.bfloat16)
        v = torch.randn(1, Hkv, T, D, device=dev, generator=gen, dtype=torch.bfloat16)
    except Exception as e:  # noqa: BLE001
        for impl in ("SDPA flash", "SDPA cuDNN"):
            run.unavailable(g, "causal", impl, reason(e), shape=shape)
        return
    outs = {}
    for impl, backend_name in (("SDPA flash", "FLASH_ATTENTION"), ("SDPA cuDNN", "CUDNN_ATTENTION")):
        backend = getattr(SDPBackend, backend_name, None)
        if backend is None:
            run.unavailable(g, "causal", impl, f"SDPBackend.{backend_name} is missing in this torch",
                            shape=shape)
            continue
        # enable_gqa where the backend takes it; else K/V expanded to Hq heads.
        mode, args, kw = None, None, None
        errors = []
        for m in ("enable_gqa", "kv expanded"):
            try:
                if m == "enable_gqa":
                    a, kwm = (q, k, v), {"is_causal": True, "enable_gqa": True}
                else:
                    rep = Hq // Hkv
                    a, kwm = (q, k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)), {"is_causal": True}
                with sdpa_kernel(backend):
                    o = sdpa(*a, **kwm)
                mode, args, kw = m, a, kwm
                break
            except Exception as e:  # noqa: BLE001
                errors.append(f"{m}: {reason(e)}")
                run.free()
        if mode is None:
            run.unavailable(g, "causal", impl, "; ".join(errors), shape=shape)
            continue

        def call(args=args, kw=kw, backend=backend):
            with sdpa_kernel(backend):
                return sdpa(*args, **kw)

        rec = run.measure(g, "causal", impl, call, nbytes, flops, shape=shape, mode=mode,
                          formulas=formulas, **({"fallback_from": errors} if errors else {}))
        if rec:
            outs[impl] = o
        else:
            del o
        del args
        run.free()
    if len(outs) == 2:
        a, b = list(outs.values())
        for rec in run.doc["results"]:
            if rec["group"] == g and rec["impl"] == "SDPA cuDNN" and rec["status"] == "ok":
                rec["nmse_vs_flash"] = nmse(torch, b, a)
        run.save()
    del q, k, v, outs
    run.free()


# --------------------------------------------------------------------------
# Gated delta rule.
# --------------------------------------------------------------------------
def hf_delta_rule(torch):
    """transformers' torch fallback of the chunked gated delta rule."""
    errors = []
    for mod in ("transformers.models.qwen3_next.modeling_qwen3_next",
                "transformers.models.qwen4_exp.modeling_qwen4_exp"):
        try:
            m = importlib.import_module(mod)
            fn = getattr(m, "torch_chunk_gated_delta_rule", None)
            if fn is not None:
                return fn, mod
            errors.append(f"{mod} has no torch_chunk_gated_delta_rule")
        except Exception as e:  # noqa: BLE001
            errors.append(f"{mod}: {reason(e)}")
    raise RuntimeError("; ".join(errors))


def bench_delta(run, torch, dev, S):
    T, Hk, Hv, dk, dv = S["T"], S["k_heads"], S["v_heads"], S["dk"], S["dv"]
    rep = Hv // Hk
    g = "delta"
    shape = {"T": T, "k_heads": Hk, "v_heads": Hv, "dk": dk, "dv": dv}
    flops = T * Hv * 8 * dk * dv
    io = T * Hv * dv * 2 * 2 + T * Hv * (4 + 2) + Hv * dk * dv * 4  # v, o bf16; g f32, beta bf16; state f32

    def qk_bytes(h):
        return 2 * T * h * dk * 2

    formulas = {"flops": "T*Hv*8*dk*dv (the recurrent form's work, as strata's cost rule counts it)",
                "bytes": "q, k (bf16, at the heads passed), v and o (bf16), g (f32), beta (bf16), "
                         "final state (f32)"}
    try:
        gen = torch.Generator(device=dev).manual_seed(3)

        def l2(x):
            return x * torch.rsqrt((x * x).sum(-1, keepdim=True) + 1e-6)

        q = l2(torch.randn(1, T, Hk, dk, device=dev, generator=gen)).to(torch.bfloat16)
        k = l2(torch.randn(1, T, Hk, dk, device=dev, generator=gen)).to(torch.bfloat16)
        v = torch.randn(1, T, Hv, dv, device=dev, generator=gen).to(torch.bfloat16)
        # Log decay g = -exp(A)*softplus(a + dt) < 0 and beta = sigmoid(b).
        g_ = -0.1 * torch.nn.functional.softplus(torch.randn(1, T, Hv, device=dev, generator=gen))
        beta = torch.sigmoid(torch.randn(1, T, Hv, device=dev, generator=gen)).to(torch.bfloat16)
        # HF repeats q and k per value head group (head h uses key head h // rep).
        qe = q.repeat_interleave(rep, dim=2).contiguous()
        ke = k.repeat_interleave(rep, dim=2).contiguous()
    except Exception as e:  # noqa: BLE001
        for impl in ("fla chunk_gated_delta_rule (q/k expanded)", "fla chunk_gated_delta_rule (GVA)",
                     "HF torch_chunk_gated_delta_rule"):
            run.unavailable(g, "layer", impl, reason(e), shape=shape)
        return
    outs = {}
    scale = dk ** -0.5
    fla_fn, fla_err = None, None
    try:
        if run.device != "cuda":
            raise RuntimeError("flash-linear-attention's Triton kernels need a CUDA device")
        fla_fn = importlib.import_module("fla.ops.gated_delta_rule").chunk_gated_delta_rule
    except Exception as e:  # noqa: BLE001
        fla_err = reason(e)
    for impl, qq, kk in (("fla chunk_gated_delta_rule (q/k expanded)", qe, ke),
                         ("fla chunk_gated_delta_rule (GVA)", q, k)):
        if fla_fn is None:
            run.unavailable(g, "layer", impl, fla_err, shape=shape)
            continue

        def call(qq=qq, kk=kk):
            return fla_fn(qq, kk, v, g_, beta, scale=scale, output_final_state=True)

        rec = run.measure(g, "layer", impl, call, io + qk_bytes(qq.shape[2]), flops, shape=shape,
                          formulas=formulas, version=package_version("fla-core"))
        if rec:
            try:
                outs[impl] = call()[0]
            except Exception:  # noqa: BLE001
                pass
        run.free()
    impl = "HF torch_chunk_gated_delta_rule"
    try:
        hf_fn, mod = hf_delta_rule(torch)
        params = inspect.signature(hf_fn).parameters
        kw = {"chunk_size": 64, "initial_state": None, "output_final_state": True,
              "use_qk_l2norm_in_kernel": False}
        kw = {a: b for a, b in kw.items() if a in params}

        def hf_call():
            return hf_fn(qe, ke, v, g_, beta, **kw)

        rec = run.measure(g, "layer", impl, hf_call, io + qk_bytes(Hv), flops, shape=shape,
                          formulas=formulas, module=mod,
                          note="fp32 inside (it casts q/k/v/g/beta to float32), q/k expanded to Hv heads")
        if rec:
            outs[impl] = hf_call()[0]
    except Exception as e:  # noqa: BLE001
        run.unavailable(g, "layer", impl, reason(e), shape=shape)
    # Agreement between the implementations (same inputs, same math).
    ref = outs.get("HF torch_chunk_gated_delta_rule")
    if ref is not None:
        for rec in run.doc["results"]:
            o = outs.get(rec["impl"])
            if rec["group"] == g and rec["status"] == "ok" and o is not None and o is not ref:
                rec["nmse_vs_hf"] = nmse(torch, o, ref)
        run.save()
    del q, k, v, g_, beta, qe, ke, outs
    run.free()



# --------------------------------------------------------------------------
# Decode (one token, P cached positions).
# --------------------------------------------------------------------------
def bench_attn_decode(run, torch, dev, S):
    P, Hq, Hkv, D = S["P"], S["q_heads"], S["kv_heads"], S["head_dim"]
    g = "attn_decode"
    for dt_name in ("bf16", "f32"):
        dt = torch.bfloat16 if dt_name == "bf16" else torch.float32
        esize = 2 if dt_name == "bf16" else 4
        shape = {"P": P, "q_heads": Hq, "kv_heads": Hkv, "head_dim": D, "cache": dt_name}
        nbytes = 2 * Hkv * P * D * esize + 2 * Hq * D * esize
        flops = 4 * Hq * P * D
        try:
            from torch.nn.attention import SDPBackend, sdpa_kernel
            sdpa = torch.nn.functional.scaled_dot_product_attention
            gen = torch.Generator(device=dev).manual_seed(4)
            q = torch.randn(1, Hq, 1, D, device=dev, generator=gen).to(dt)
            k = torch.randn(1, Hkv, P, D, device=dev, generator=gen).to(dt)
            v = torch.randn(1, Hkv, P, D, device=dev, generator=gen).to(dt)
        except Exception as e:  # noqa: BLE001
            run.unavailable(g, "step", "SDPA", reason(e), shape=shape)
            continue
        for impl, backend_name in (("SDPA flash", "FLASH_ATTENTION"),
                                   ("SDPA efficient", "EFFICIENT_ATTENTION"),
                                   ("SDPA cuDNN", "CUDNN_ATTENTION")):
            backend = getattr(SDPBackend, backend_name, None)
            if backend is None:
                run.unavailable(g, "step", impl, f"SDPBackend.{backend_name} is missing", shape=shape)
                continue
            mode, args, kw, errors = None, None, None, []
            for m in ("enable_gqa", "kv expanded"):
                try:
                    if m == "enable_gqa":
                        a, kwm = (q, k, v), {"enable_gqa": True}
                    else:
                        rep = Hq // Hkv
                        a, kwm = (q, k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)), {}
                    with sdpa_kernel(backend):
                        sdpa(*a, **kwm)
                    mode, args, kw = m, a, kwm
                    break
                except Exception as e:  # noqa: BLE001
                    errors.append(f"{m}: {reason(e)}")
                    run.free()
            if mode is None:
                run.unavailable(g, "step", impl, "; ".join(errors), shape=shape)
                continue

            def call(args=args, kw=kw, backend=backend):
                with sdpa_kernel(backend):
                    return sdpa(*args, **kw)

            # Bytes as read once at the cache's heads (an expanded K/V reads
            # more: the figure is what the step needs, not what it moved).
            run.measure(g, "step", impl, call, nbytes, flops, shape=shape, mode=mode,
                        formulas={"bytes": "K and V of P positions at Hkv heads + q and o",
                                  "flops": "4*Hq*P*D"})
            del args
            run.free()
        del q, k, v
        run.free()


def bench_delta_step(run, torch, dev, S):
    Hk, Hv, dk, dv = S["k_heads"], S["v_heads"], S["dk"], S["dv"]
    g = "delta_step"
    shape = {"T": 1, "k_heads": Hk, "v_heads": Hv, "dk": dk, "dv": dv, "state": "f32"}
    nbytes = 2 * Hv * dk * dv * 4  # the state read and written (f32)
    flops = Hv * 8 * dk * dv
    impl = "fla fused_recurrent_gated_delta_rule (GVA)"
    try:
        if run.device != "cuda":
            raise RuntimeError("flash-linear-attention's Triton kernels need a CUDA device")
        fn = importlib.import_module("fla.ops.gated_delta_rule").fused_recurrent_gated_delta_rule
        gen = torch.Generator(device=dev).manual_seed(5)

        def l2(x):
            return x * torch.rsqrt((x * x).sum(-1, keepdim=True) + 1e-6)

        q = l2(torch.randn(1, 1, Hk, dk, device=dev, generator=gen)).to(torch.bfloat16)
        k = l2(torch.randn(1, 1, Hk, dk, device=dev, generator=gen)).to(torch.bfloat16)
        v = torch.randn(1, 1, Hv, dv, device=dev, generator=gen).to(torch.bfloat16)
        g_ = -0.1 * torch.nn.functional.softplus(torch.randn(1, 1, Hv, device=dev, generator=gen))
        beta = torch.sigmoid(torch.randn(1, 1, Hv, device=dev, generator=gen)).to(torch.bfloat16)
        h0 = torch.randn(1, Hv, dk, dv, device=dev, generator=gen) * 0.1
    except Exception as e:  # noqa: BLE001
        run.unavailable(g, "step", impl, reason(e), shape=shape)
        return

    def call():
        return fn(q, k, v, g_, beta, scale=dk ** -0.5, initial_state=h0, output_final_state=True)

    run.measure(g, "step", impl, call, nbytes, flops, shape=shape,
                formulas={"bytes": "the f32 state read and written", "flops": "Hv*8*dk*dv"},
                version=package_version("fla-core"))
    del q, k, v, g_, beta, h0
    run.free()


def bench_moe_decode(run, torch, dev, S):
    E, k, K, N = S["experts"], S["topk"], S["C"], S["expert_width"]
    g = "moe_decode"
    shape = {"tokens": 1, "experts": E, "topk": k, "gate_up": f"K {K} N {N}x2", "down": f"K {N} N {K}"}
    # Strata's block types (bench/decode_prepare.sh): IQ3_S gate/up (110
    # bytes a 256 values), IQ4_NL down (18 bytes a 32).
    q_bytes = k * (2 * N * K * 110 // 256 + K * N * 18 // 32)
    try:
        dst = torch.empty(q_bytes, dtype=torch.uint8, device=dev)
        src = torch.randint(0, 255, (q_bytes,), dtype=torch.uint8, device=dev)
        run.measure(g, "routed experts", "copy_ D2D (their IQ3_S/IQ4_NL bytes)",
                    lambda: dst.copy_(src), 2 * q_bytes, 0, shape=shape,
                    note="reads and writes the bytes: GB/s counts both")
        del dst, src
    except Exception as e:  # noqa: BLE001
        run.unavailable(g, "routed experts", "copy_ D2D", reason(e), shape=shape)
    run.free()
    try:
        gmm, gmm_name = grouped_mm_fn(torch)
        gen = torch.Generator(device=dev).manual_seed(6)
        Wgu = torch.randn(E, 2 * N, K, device=dev, generator=gen, dtype=torch.bfloat16) * K ** -0.5
        Wd = torch.randn(E, K, N, device=dev, generator=gen, dtype=torch.bfloat16) * N ** -0.5
        ids = torch.randperm(E, device=dev, generator=gen)[:k].sort().values
        counts = torch.zeros(E, dtype=torch.int64, device=dev)
        counts[ids] = 1
        offs = torch.cumsum(counts, 0).to(torch.int32)
        x = torch.randn(k, K, device=dev, generator=gen).to(torch.bfloat16)
    except Exception as e:  # noqa: BLE001
        run.unavailable(g, "routed experts", "torch._grouped_mm bf16", reason(e), shape=shape)
        run.free()
        return
    xa = torch.cat([x, x[:1]]).contiguous()

    def experts():
        h = gmm(xa, Wgu.transpose(-2, -1), offs=offs)
        a = torch.nn.functional.silu(h[:, :N]) * h[:, N:]
        return gmm(a.contiguous(), Wd.transpose(-2, -1), offs=offs)

    bf_bytes = k * 3 * N * K * 2
    run.measure(g, "routed experts", f"{gmm_name} bf16 (a row per routed expert) + SwiGLU",
                experts, bf_bytes, k * 2 * 3 * N * K, shape=shape,
                formulas={"bytes": "the 10 routed experts' bf16 weights"},
                note="one padding row (torch asks offs[-1] < rows)")
    del Wgu, Wd, x, xa
    run.free()

# --------------------------------------------------------------------------
def package_version(name):
    try:
        from importlib.metadata import version
        return version(name)
    except Exception:  # noqa: BLE001
        return None


def gpu_facts():
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total",
                              "--format=csv,noheader"], capture_output=True, text=True, timeout=30)
        if out.returncode == 0 and out.stdout.strip():
            name, driver, mem = [x.strip() for x in out.stdout.strip().splitlines()[0].split(",")]
            return {"gpu": name, "driver": driver, "gpu_memory": mem}
    except (OSError, subprocess.SubprocessError, ValueError):
        pass
    return {"gpu": None, "driver": None}


def git_commit():
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                             timeout=10, cwd=os.path.dirname(os.path.abspath(__file__)))
        return out.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument("--small", action="store_true", help="tiny shapes (a dry run of every peer)")
    ap.add_argument("--only", default=",".join(GROUPS), help=f"comma-separated groups of {GROUPS}")
    ap.add_argument("--T", type=int, help="prompt length (default 16058; 96 with --small)")
    ap.add_argument("--P", type=int, help="cached positions of the decode peers (default 16384)")
    ap.add_argument("--reps", type=int, default=20, help="timed calls per measurement (>= 10)")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--deadline", type=float, default=0,
                    help="seconds after which the remaining peers are skipped (0: none)")
    ap.add_argument("--commit", help="commit to record (default: git rev-parse)")
    ap.add_argument("-o", "--output", required=True)
    a = ap.parse_args()
    if a.reps < 10:
        ap.error("--reps must be at least 10")
    groups = [x for x in a.only.split(",") if x]
    bad = [x for x in groups if x not in GROUPS]
    if bad:
        ap.error(f"unknown group(s) {bad}; known: {GROUPS}")
    shapes = dict(SMALL if a.small else SEED)
    if a.T:
        shapes["T"] = a.T
    if a.P:
        shapes["P"] = a.P
    meta = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "host": platform.node(), "python": platform.python_version(),
            "commit": a.commit or git_commit(), "device": a.device, "small": a.small,
            **gpu_facts()}
    def give_up(why):
        print(f"peers: error: {why}", file=sys.stderr)
        meta["error"] = why
        with open(a.output, "w") as f:
            json.dump({"meta": meta, "shapes": shapes, "results": []}, f, indent=1)
        return 1

    try:
        import torch
    except Exception as e:  # noqa: BLE001
        return give_up(f"torch cannot be imported ({reason(e)}); no peer can run")
    meta.update(torch=torch.__version__, torch_cuda=torch.version.cuda,
                triton=package_version("triton"), fla_core=package_version("fla-core"),
                transformers=package_version("transformers"))
    if a.device == "cuda":
        if not torch.cuda.is_available():
            return give_up("--device cuda but torch sees no CUDA device (use --device cpu)")
        p = torch.cuda.get_device_properties(0)
        meta.update(torch_device=p.name, sm_count=p.multi_processor_count,
                    capability=f"{p.major}.{p.minor}", cudnn=torch.backends.cudnn.version())
    else:
        torch.set_num_threads(max(1, os.cpu_count() or 1))
    run = Runner(torch, a.device, a.warmup, a.reps, a.deadline, a.output, meta, shapes)
    run.save()
    print(f"peers: {a.device}, shapes {shapes}", flush=True)
    for group in groups:
        t = time.time()
        try:
            with torch.no_grad():  # inference, as strata's prefill
                {"hc": bench_hc, "moe": bench_moe, "attn": bench_attn, "delta": bench_delta,
                 "attn_decode": bench_attn_decode, "delta_step": bench_delta_step,
                 "moe_decode": bench_moe_decode}[group](
                    run, torch, a.device, shapes)
        except Exception as e:  # noqa: BLE001 - a bug in one group must not lose the others
            run.unavailable(group, "group", "-", f"the group stopped: {reason(e)}")
            run.free()
        print(f"peers: group {group} took {time.time() - t:.1f} s", flush=True)
    run.doc["meta"]["seconds"] = time.time() - run.t0
    run.save()
    ok = sum(r["status"] == "ok" for r in run.doc["results"])
    print(f"peers: {ok} of {len(run.doc['results'])} measurements ran; wrote {a.output}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
