#!/usr/bin/env python3
"""The differential suite: every op of the op table a model reaches with float
activations, the fused families the passes make and every GEMM variant x
weight block type, each as a small model whose sm_90 plans strata-run checks
kernel by kernel against the cpu backend (ggml's test-backend-ops, here).

A case is a tiny model (architecture "diffsuite"): tokens -> get_rows from
a random table [32, D] (the model's input rows) -> a short prologue (reshape,
slice, further table lookups) -> the op or fused family under test -> an f32
output [T, N] (the plan's "logits"). Where the op's input must not become an
epilogue of the get_rows that makes it (fuse-elementwise fuses an op into
the only reader of its result), the output also concatenates that input, so
it has two readers. A returned reshape is copied by a one-operand concat (see
case output_reshape_view).

  prepare  (development machine: clang-19, ptxas, the gguf package)
      python3 test/device/diffsuite.py prepare --bin BUILD/bin \\
          --out build-diffsuite
    Per case: OUT/CASE/model.strata, OUT/CASE/model.gguf (fresh random
    weights, gguf.GGUFWriter; meta("embedding_length") reads
    "diffsuite.embedding_length") and two sm_90 plans, strata-compile
    --target sm_90 --max-tokens 128 (64 for the 64-row GEMM tile cases) with
    the default bf16 policy (OUT/CASE/bf16.sm90) and --precision f32
    (OUT/CASE/f32.sm90); PTX, sources and ptxas logs are deleted where a
    cubin exists, after ptxas's notes of serialised wgmma or an ignored
    setmaxnreg are printed (and listed in cases.json: ptxas_losses). The host plans of both policies (OUT.host/CASE/POLICY, not
    needed on the GPU machine) run on the cpu backend at every T: a case
    must run there to be a GPU test. A compilation the compiler or code
    generator rejects is printed with its message and left out (the case
    keeps a policy that compiled; "rejected" in cases.json). Also writes
    OUT/tokens-T.txt (T = 1, 37, 100, and 700 for the delta rule and QSA; ids below 32) and OUT/cases.json
    (cases, their kernels and GEMM variants, variants per weight type,
    recipes that no kernel runs).
    Weights: f32 and f16 as numpy arrays; bf16, q8_0 and q4_0 through
    gguf.quants.quantize; the types gguf-py cannot quantise (q4_k q5_k q6_k
    iq4_nl iq4_xs iq3_s) as random blocks whose f16 scales are then set,
    block by block, so that gguf.quants.dequantize gives the wanted RMS
    (every code, scale and grid index of the format occurs: what a decoder
    test wants). --types restricts the set.

  run  (the GPU machine: Python with numpy, no gguf package needed)
      python3 test/device/diffsuite.py run --bin build-rt/bin \\
          --dir build-diffsuite --results FILE
    For every case x policy x T in {1, 37, 100}: strata-run PLAN --gguf
    model.gguf --tokens-file tokens-T.txt --backend cuda --check. A run
    passes when strata-run exits 0 (every kernel within --check's bars: NMSE
    <= 1e-4 for f32 and bf16 buffers, i32 mismatch <= 1 %). Appends one line
    per run (case, policy, T, PASS/FAIL, the check summary's worst NMSE and
    its kernel, or the error naming the divergent kernel) and a total to
    FILE; exits 1 if any run fails. Without nvidia-smi it prints SKIPPED and
    exits 77. --backend cpu --no-check runs the same loop over the host plans
    (a dry run, no GPU).
"""
from __future__ import annotations

import argparse
import concurrent.futures
import fnmatch
import json
import math
import os
import re
import shutil
import subprocess
import sys
import time
import zlib
from dataclasses import dataclass

import numpy as np

ARCH = "diffsuite"
VOCAB = 32  # the test vocabulary: token ids are below it
MAX_TOKENS = 128
PROMPTS = (1, 37, 100)
POLICIES = ("bf16", "f32")
TARGET = "sm_90"
ALL_TYPES = ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_k", "q5_k", "q6_k",
             "iq4_nl", "iq4_xs", "iq3_s")
# Elements per block (the smallest legal K of a GEMM over the type).
BLOCK = {"f32": 1, "f16": 1, "bf16": 1, "q8_0": 32, "q4_0": 32,
         "iq4_nl": 32, "q4_k": 256, "q5_k": 256, "q6_k": 256,
         "iq4_xs": 256, "iq3_s": 256}
# Byte offsets of each block's f16 scales (d, then dmin where there is one)
# for the types written as random blocks (ggml's block layouts).
SCALE_FIELDS = {"q4_k": (0, 2), "q5_k": (0, 2), "q6_k": (208,),
                "iq4_nl": (0,), "iq4_xs": (0,), "iq3_s": (0,)}


# ----------------------------------------------------------------------------
# Cases
# ----------------------------------------------------------------------------

@dataclass
class Weight:
    """A tensor of the case's GGUF; shape in IR order (ggml's reversed)."""
    shape: tuple[int, ...]
    type: str = "f32"
    init: str = "normal"  # normal | uniform | norm (1 + 0.1 N(0, 1))
    std: float | None = None  # normal: default 1 / sqrt(last dim)
    lo: float = 0.0
    hi: float = 1.0


@dataclass
class Case:
    """One model of the suite: its statements, weights and output."""
    name: str
    category: str
    doc: str
    body: list[str]
    weights: dict[str, Weight]
    out: str  # the returned value, f32 [T, width]
    width: int
    embd: Weight  # token_embd.weight [VOCAB, D]: the model's input rows
    flags: tuple[str, ...] = ()  # extra strata-compile flags
    # strata-compile --codegen-opt values of the case (A/B forms)
    options: tuple[str, ...] = ()
    max_tokens: int = MAX_TOKENS
    prompts: tuple[int, ...] = PROMPTS
    types: tuple[str, ...] = ()  # weight types the case needs

    def description(self) -> str:
        """The model description (.strata text)."""
        return "\n".join(
            [f"// diffsuite case {self.name} ({self.category}): {self.doc}",
             "// Written by test/device/diffsuite.py prepare.",
             f"model {ARCH} {{",
             '  let D = meta("embedding_length")',
             '  let V = dim("token_embd.weight", 0)',
             f"  func @main(%tok: i32[T]) -> f32[T, {self.width}] {{",
             '    %x = get_rows(weight("token_embd.weight", [V, D]), %tok)']
            + ["    " + line for line in self.body]
            + [f"    return {self.out}", "  }", "}", ""])


class Body:
    """Collects a case's statements, the weights they name and its output."""

    def __init__(self, d: int, embd_type: str = "f16", **embd_init) -> None:
        self.lines: list[str] = []
        self.weights: dict[str, Weight] = {}
        self.embd = Weight((VOCAB, d), embd_type, **({"std": 1.0} | embd_init))
        self.out = ("%x", d)

    def __call__(self, line: str) -> None:
        self.lines.append(line)

    def w(self, name: str, shape, type: str = "f32", **init) -> str:
        """Declares weight NAME and returns its operand text."""
        shape = tuple(int(s) for s in shape)
        self.weights[name] = Weight(shape, type, **init)
        return f'weight("{name}", [{", ".join(map(str, shape))}])'

    def table(self, name: str, width: int, type: str = "f16",
              **init) -> str:
        """%NAME = the rows of a second table [VOCAB, width] at the tokens."""
        init = {"std": 1.0} | init
        self(f"%{name} = get_rows({self.w(name + '.weight', (VOCAB, width), type, **init)}, %tok)")
        return f"%{name}"

    def output(self, value: str, width: int, *keep: tuple[str, int]) -> None:
        """Returns VALUE [T, width], concatenated with KEEP values (each a
        second reader of a value, so that it is not fused into its
        producer as an epilogue)."""
        # A returned reshape gets its own copy (a concat of one operand):
        # under the bf16 policy, assign-precision stores the viewed value in
        # bf16 and the return type check then fails (case
        # output_reshape_view shows it).
        view = any(line.startswith(f"{value} = reshape(") for line in self.lines)
        if keep or view:
            names = ", ".join([value] + [k for k, _ in keep])
            self(f"%out = concat({names}) {{axis = 1}}")
            value, width = "%out", width + sum(w for _, w in keep)
        self.out = (value, width)

    def output_as_is(self, value: str, width: int) -> None:
        """Returns VALUE itself, even a view."""
        self.out = (value, width)

    def case(self, name: str, category: str, doc: str, **kw) -> Case:
        return Case(name, category, doc, self.lines, self.weights,
                    self.out[0], self.out[1], self.embd, **kw)


UNARY = ("neg", "exp", "log", "sqrt", "rsqrt", "abs", "square", "relu",
         "silu", "sigmoid", "softplus", "gelu", "tanh", "sign")
BINARY = ("add", "sub", "mul", "div", "maximum", "minimum")
POSITIVE = {"log", "sqrt", "rsqrt"}  # need positive inputs
ROW = 300  # row length of the elementwise cases: past one block of 256


def unary_cases() -> list[Case]:
    """Each elementwise op alone (its input read twice, so not fused)."""
    cases = []
    d = ROW
    variants = [(u, u, "") for u in UNARY] + [
        ("clamp_min", "clamp", " {min = -0.25}"),
        ("clamp_max", "clamp", " {max = 0.5}"),
        ("clamp", "clamp", " {min = -0.5, max = 0.75}"),
        ("scale", "scale", " {s = 0.37}"),
        ("scale_bias", "scale", " {s = -1.5, b = 0.25}"),
    ]
    for name, op, attrs in variants:
        init = {"init": "uniform", "lo": 0.05, "hi": 3.0} \
            if op in POSITIVE else {}
        b = Body(d, **init)
        b(f"%y = {op}(%x){attrs}")
        b.output("%y", d, ("%x", d))
        cases.append(b.case(f"unary_{name}", "unary",
                            f"{op}{attrs} of [T, {d}]"))
    # Casts. A cast to bf16/f16 fused with its reader needs a 16-bit
    # temporary (see the report for what the code generator says).
    for to in ("bf16", "f16"):
        b = Body(d)
        b(f"%c = cast(%x) {{to = {to}}}")
        b("%y = cast(%c) {to = f32}")
        b("%z = exp(%y)")
        b.output("%z", d, ("%x", d))
        cases.append(b.case(f"unary_cast_{to}_chain", "unary",
                            f"cast to {to}, back to f32, exp: one fused "
                            "chain"))
    for to in ("bf16", "f16"):
        b = Body(d)
        b(f"%c = cast(%x) {{to = {to}}}")
        b(f"%y = matmul(%c, {b.w('w.weight', (72, d), 'f16')})")
        b.output("%y", 72, ("%x", d))
        cases.append(b.case(f"unary_cast_{to}_gemm", "unary",
                            f"cast to {to} alone, the {to} activation read "
                            "by a GEMM"))
    # Below VOCAB - 1: bf16 storage must not round a value up to VOCAB.
    b = Body(4, init="uniform", lo=0.0, hi=VOCAB - 1.0)
    b("%ids = cast(%x) {to = i32}")
    b(f"%e = get_rows({b.w('rows.weight', (VOCAB, 8), 'f16', std=1.0)}, %ids) : f32[T, 4, 8]")
    b("%e1 = reshape(%e) : f32[T, 32]")
    b.output("%e1", 32, ("%x", 4))
    cases.append(b.case("unary_cast_i32", "unary",
                        "cast of [0, 32) values to i32 row ids of a 2-D "
                        "get_rows"))
    return cases


def binary_cases() -> list[Case]:
    """Each binary op on equal shapes, then every broadcasting form."""
    cases = []
    d = ROW
    for op in BINARY:
        b = Body(d)
        extra = {"init": "uniform", "lo": 0.5, "hi": 2.0} if op == "div" \
            else {}
        z = b.table("z", d, **extra)
        b(f"%y = {op}(%x, {z})")
        b.output("%y", d, ("%x", d), (z, d))
        cases.append(b.case(f"binary_{op}", "binary",
                            f"{op} of two [T, {d}] values"))
    forms = [
        # name, op, second operand, it comes first, doc
        ("sub_D", "sub", ("w", (d,)), False, "[T, D] - [D]"),
        ("sub_D_first", "sub", ("w", (d,)), True, "[D] - [T, D]"),
        ("div_1D", "div", ("w", (1, d)), False, "[T, D] / [1, D]"),
        ("mul_1D_first", "mul", ("w", (1, d)), True, "[1, D] * [T, D]"),
        ("maximum_T1", "maximum", ("t", 1), False, "maximum([T, D], [T, 1])"),
        ("minimum_T1_first", "minimum", ("t", 1), True,
         "minimum([T, 1], [T, D])"),
        ("div_T1", "div", ("t", 1), False, "[T, D] / [T, 1]"),
    ]
    for name, op, (kind, shape), first, doc in forms:
        b = Body(d)
        keep = [("%x", d)]
        pos = {"init": "uniform", "lo": 0.5, "hi": 2.0} if op == "div" else {}
        if kind == "w":
            rhs = b.w("b.weight", shape, **pos)
        else:
            rhs = b.table("c", 1, **pos)
            keep.append((rhs, 1))
        args = f"{rhs}, %x" if first else f"%x, {rhs}"
        b(f"%y = {op}({args})")
        b.output("%y", d, *keep)
        cases.append(b.case(f"binary_{name}", "binary", doc))
    # Rank 3: [T, 1, D] * [T, H, D] (the PLE gate), + [H, D], / [T, H, 1].
    h, hd = 4, 75
    b = Body(h * hd)
    g = b.table("g", hd)
    s = b.table("s", h, init="uniform", lo=0.5, hi=2.0)
    b(f"%x3 = reshape(%x) : f32[T, {h}, {hd}]")
    b(f"%g3 = reshape({g}) : f32[T, 1, {hd}]")
    b(f"%s3 = reshape({s}) : f32[T, {h}, 1]")
    b("%y0 = mul(%g3, %x3)")
    b(f"%y1 = add(%y0, {b.w('b.weight', (h, hd))})")
    b("%y2 = div(%y1, %s3)")
    b(f"%y = reshape(%y2) : f32[T, {h * hd}]")
    b.output("%y", h * hd, ("%x", h * hd), (g, hd), (s, h))
    cases.append(b.case("binary_rank3", "binary",
                        "[T, 1, D] * [T, H, D] + [H, D], / [T, H, 1]: one "
                        "fused chain"))
    return cases


def reduction_cases() -> list[Case]:
    """softmax, reduce_sum/mean on non-leading axes, argmax, rms_norm,
    l2_norm."""
    cases = []
    d = ROW
    b = Body(d)
    b("%y = softmax(%x)")
    b.output("%y", d, ("%x", d))
    cases.append(b.case("softmax_row", "reduction", f"softmax of [T, {d}]"))
    b = Body(d, std=3.0)
    b("%x3 = reshape(%x) : f32[T, 5, 60]")
    b("%y3 = softmax(%x3)")
    b(f"%y = reshape(%y3) : f32[T, {d}]")
    b.output("%y", d, ("%x", d))
    cases.append(b.case("softmax_heads", "reduction",
                        "softmax of [T, 5, 60] (sharp: logits N(0, 9))"))
    for op in ("reduce_sum", "reduce_mean"):
        for axis, shape, out in ((2, (12, 25), 12), (1, (12, 25), 25),
                                 (-1, (3, 100), 3)):
            b = Body(d)
            b(f"%x3 = reshape(%x) : f32[T, {shape[0]}, {shape[1]}]")
            b(f"%y = {op}(%x3) {{axis = {axis}}}")
            b.output("%y", out, ("%x", d))
            ax = "m1" if axis < 0 else str(axis)
            cases.append(b.case(f"{op}_axis{ax}", "reduction",
                                f"{op} of [T, {shape[0]}, {shape[1]}] over "
                                f"axis {axis}"))
    # argmax (the greedy ids of add-greedy-ids): rows of 300 (vector
    # loads) and of 25 (scalar loads); the ids, an i32 kernel output
    # checked as such, then index a table (an f32 output).
    for shape in ((d,), (12, 25)):
        b = Body(d)
        src, n = "%x", shape[-1]
        if len(shape) == 2:
            b(f"%x3 = reshape(%x) : f32[T, {shape[0]}, {shape[1]}]")
            src = "%x3"
        b(f"%a = argmax({src})")
        tab = b.w("id_embd.weight", (n, 4), std=1.0)
        if len(shape) == 1:
            b(f"%y = get_rows({tab}, %a) : f32[T, 4]")
            out = 4
        else:
            b(f"%e = get_rows({tab}, %a) : f32[T, {shape[0]}, 4]")
            b(f"%y = reshape(%e) : f32[T, {shape[0] * 4}]")
            out = shape[0] * 4
        b.output("%y", out, ("%x", d))
        cases.append(b.case(f"argmax_{n}", "reduction",
                            f"argmax of rows of {n}, the ids read by "
                            "get_rows"))
    b = Body(d)
    b("%r = reduce_sum(%x) {axis = 1}")
    b("%r1 = reshape(%r) : f32[T, 1]")
    b.output("%r1", 1, ("%x", d))
    cases.append(b.case("reduce_sum_rows", "reduction",
                        "reduce_sum of [T, D] over axis 1 (a [T] result)"))
    forms = [
        ("rms_norm_w", (d,), "eps = 1e-6", "plain, weight [D]"),
        ("rms_norm_noweight", None, "eps = 1e-5", "plain, no weight"),
        ("rms_norm_groups4", (d,), "eps = 1e-6, groups = 4",
         "4 groups of 75, weight [D]"),
        ("rms_norm_groups3_noweight", None, "eps = 1e-6, groups = 3",
         "3 groups of 100, no weight"),
    ]
    for name, wshape, attrs, doc in forms:
        b = Body(d)
        w = ", " + b.w("norm.weight", wshape, init="norm") if wshape else ""
        b(f"%y = rms_norm(%x{w}) {{{attrs}}}")
        b.output("%y", d, ("%x", d))
        cases.append(b.case(name, "reduction", f"rms_norm {doc}"))
    # A row of 1,280 (a multiple of 128): a wave's 10 vector loads in a
    # chunk of 8 and one of 2.
    b = Body(1280)
    b(f"%y = rms_norm(%x, {b.w('norm.weight', (1280,), init='norm')}) "
      "{eps = 1e-6}")
    b.output("%y", 1280, ("%x", 1280))
    cases.append(b.case("rms_norm_wide1280", "reduction",
                        "rms_norm of [T, 1280], weight [1280]"))
    for hd in (64, 128):
        b = Body(4 * hd)
        b(f"%x3 = reshape(%x) : f32[T, 4, {hd}]")
        b(f"%y3 = rms_norm(%x3, {b.w('norm.weight', (hd,), init='norm')}) "
          "{eps = 1e-6}")
        b(f"%y = reshape(%y3) : f32[T, {4 * hd}]")
        b.output("%y", 4 * hd, ("%x", 4 * hd))
        cases.append(b.case(f"rms_norm_heads{hd}", "reduction",
                            f"per-head rms_norm of [T, 4, {hd}], weight "
                            f"[{hd}]"))
    for form in ("max", "add"):
        for hd in (64, 128):
            b = Body(2 * hd)
            b(f"%x3 = reshape(%x) : f32[T, 2, {hd}]")
            b(f'%y3 = l2_norm(%x3) {{eps = 1e-6, form = "{form}"}}')
            b(f"%y = reshape(%y3) : f32[T, {2 * hd}]")
            b.output("%y", 2 * hd, ("%x", 2 * hd))
            cases.append(b.case(f"l2_norm_{form}_hd{hd}", "reduction",
                                f'l2_norm form "{form}" per head of {hd}'))
    b = Body(d)
    b("%y = l2_norm(%x) {eps = 1e-6}")
    b.output("%y", d, ("%x", d))
    cases.append(b.case("l2_norm_row", "reduction",
                        f"l2_norm (default form) of [T, {d}]"))
    return cases


def rope_cases() -> list[Case]:
    """rope: normal, neox, partial dims, sections; head dims 64 and 128."""
    cases = []
    forms = [
        ("normal", 64, 64, None), ("neox", 64, 64, None),
        ("normal", 128, 128, None), ("neox", 128, 128, None),
        ("neox", 64, 32, None), ("normal", 128, 64, None),
        ("neox", 128, 64, [11, 11, 10]), ("neox", 64, 64, [16, 8, 8]),
    ]
    for mode, hd, dims, sections in forms:
        h = 3
        b = Body(h * hd)
        b("%pos = arange(%tok)")
        b(f"%x3 = reshape(%x) : f32[T, {h}, {hd}]")
        sec = f", sections = {sections}" if sections else ""
        b(f'%r = rope(%x3, %pos) {{mode = "{mode}", dims = {dims}, '
          f"base = 10000.0{sec}}}")
        b(f"%y = reshape(%r) : f32[T, {h * hd}]")
        b.output("%y", h * hd, ("%x", h * hd))
        name = f"rope_{mode}_hd{hd}" + (f"_dims{dims}" if dims != hd else "") \
            + ("_sections" if sections else "")
        cases.append(b.case(name, "rope",
                            f"rope {mode} of [T, {h}, {hd}], {dims} dims"
                            + (f", sections {sections}" if sections else "")))
    return cases


# The delta rule carries its state across chunks of 16-32 tokens, and
# qsa_select sorts each row's visible blocks (a power of two per row): one
# prompt of many chunks and long rows too.
LONG_PROMPTS = {"max_tokens": 1024, "prompts": PROMPTS + (700,)}


def attention_cases() -> list[Case]:
    """Causal GQA at head dims 64/128/256, gated, value dim != key dim,
    non-causal, and QSA with its indexer (block_mean + qsa_select). q, k, v
    (and the gate) are slices of one table's rows."""
    cases = []

    def qkv(b: Body, h: int, hkv: int, hd: int, dv: int, gated: bool,
            norm_rope: bool, vnorm: bool = False) -> None:
        """%q, %k, %v (and %gate) from the rows %x."""
        # Row layout: q heads, gate heads, k heads, v heads (dv wide).
        qg = (2 if gated else 1) * h * hd
        b(f"%q0 = slice(%x) {{axis = 1, start = 0, end = {h * hd}}}")
        if gated:
            b(f"%g0 = slice(%x) {{axis = 1, start = {h * hd}, end = {qg}}}")
            b(f"%gate = reshape(%g0) : f32[T, {h}, {hd}]")
        b(f"%k0 = slice(%x) {{axis = 1, start = {qg}, end = {qg + hkv * hd}}}")
        b(f"%v0 = slice(%x) {{axis = 1, start = {qg + hkv * hd}, "
          f"end = {qg + hkv * (hd + dv)}}}")
        q, k = ("%q1", "%k1") if norm_rope else ("%q", "%k")
        b(f"{q} = reshape(%q0) : f32[T, {h}, {hd}]")
        b(f"{k} = reshape(%k0) : f32[T, {hkv}, {hd}]")
        if vnorm:
            # v a buffer of its own (bf16 under the GPU policy), not a view
            # of the f32 table: what sm_90's warpgroup form needs.
            b(f"%v1 = reshape(%v0) : f32[T, {hkv}, {dv}]")
            b(f"%v = rms_norm(%v1, {b.w('v_norm.weight', (dv,), init='norm')}) {{eps = 1e-6}}")
        else:
            b(f"%v = reshape(%v0) : f32[T, {hkv}, {dv}]")
        if norm_rope:
            b("%pos = arange(%tok)")
            b(f"%q2 = rms_norm(%q1, {b.w('q_norm.weight', (hd,), init='norm')}) {{eps = 1e-6}}")
            b(f"%k2 = rms_norm(%k1, {b.w('k_norm.weight', (hd,), init='norm')}) {{eps = 1e-6}}")
            b(f'%q = rope(%q2, %pos) {{mode = "neox", dims = {hd}, base = 10000.0}}')
            b(f'%k = rope(%k2, %pos) {{mode = "neox", dims = {hd}, base = 10000.0}}')

    forms = [
        # name, H, HKV, HD, DV, gated, causal, norm + rope
        ("gqa_hd64", 4, 2, 64, 64, False, True, True),
        ("gqa_hd128", 4, 2, 128, 128, False, True, True),
        ("gqa_hd256", 4, 1, 256, 256, False, True, False),
        ("mha_hd64", 2, 2, 64, 64, False, True, False),
        ("gated_hd64", 4, 2, 64, 64, True, True, True),
        ("gated_hd128", 4, 2, 128, 128, True, True, True),
        ("gated_hd256", 2, 1, 256, 256, True, True, False),
        ("dv_ne_dk", 4, 2, 64, 128, False, True, False),
        ("noncausal_hd64", 4, 2, 64, 64, False, False, False),
        # qwen4exp's grouping (12 query heads a KV head; sm_90's warpgroup
        # form: 4 heads x 32 tokens a block) and qwen3next's (8).
        ("gated_hd256_hg12", 12, 1, 256, 256, True, True, True),
        ("gated_hd256_hg8", 16, 2, 256, 256, True, True, False),
    ]
    # Every operand a bf16 buffer of its own (v normalised too), so sm_90
    # runs the warpgroup form: ungated, non-causal, DV != DK, and 4, 2 and
    # 1 heads of a KV group per block.
    vforms = [
        ("wg_gqa_hd128", 8, 2, 128, 128, False, True, True),
        ("wg_noncausal_hd64", 4, 1, 64, 64, False, False, True),
        ("wg_dv_ne_dk", 4, 2, 64, 128, False, True, True),
        ("wg_mha_hd64", 2, 2, 64, 64, True, True, True),
    ]
    for name, h, hkv, hd, dv, gated, causal, nr in forms + vforms:
        vnorm = name.startswith("wg_")
        width = (2 if gated else 1) * h * hd + hkv * (hd + dv)
        b = Body(width)
        qkv(b, h, hkv, hd, dv, gated, nr, vnorm)
        g = ", %gate" if gated else ""
        b(f"%o = attention(%q, %k, %v{g}) {{scale = {1 / math.sqrt(hd):.9g}, "
          f"causal = {'true' if causal else 'false'}"
          f"{', gated = true' if gated else ''}}}")
        b(f"%o1 = reshape(%o) : f32[T, {h * dv}]")
        b.output("%o1", h * dv)
        cases.append(b.case(f"attention_{name}", "attention",
                            f"attention H={h} HKV={hkv} HD={hd} DV={dv}"
                            f"{' gated' if gated else ''}"
                            f"{'' if causal else ' non-causal'}"
                            f"{'; q, k: rms_norm + neox rope' if nr else ''}"
                            f"{'; v: rms_norm' if vnorm else ''}"))
    # QSA: the indexer picks each query's blocks of cr tokens.
    # top 64 of up to 350 blocks of 2 (qsa_top_select: radix select, more
    # than one block per thread in its scans); top 150 of up to 175 (the
    # cut among the zero scores of relu: ties broken by the lower block).
    # The last is qwen4exp's shape (12 query heads a KV head, head dim 256,
    # blocks of 4) at a budget the long prompt's rows exceed. The _wg cases
    # normalise v too (every operand a bf16 buffer of its own), so sm_90
    # runs attention_wg's sparse form: all heads of a KV group for 128 / HG
    # tokens, the union of their selected blocks compacted.
    # The last case is compiled for 24,576 tokens: qsa_select's scores and
    # ids no longer fit its 44 KiB of LDS, so it keeps ids only for the
    # rows the bitonic sort takes (the radix select knows a block by its
    # index); attention's sparse form still fits its row bitmaps there (at
    # this head dim). The _compact cases force the compact union tables
    # (attn-compact=on: no row bitmaps, masks set at each selection's
    # rank in the union), which plans past ~20K tokens of qwen4exp's shape
    # take, at the shapes of two _wg cases; the head dim 256 one compiled
    # for 4,096 tokens, so its tables are bounded by the tile's selections
    # (10 tokens x 33 blocks: 21 chunks) rather than by the blocks (64).
    for hd, cr, top, hi, di, h, hkv, wgv in (
            (64, 4, 4, 2, 64, 4, 2, False), (128, 8, 2, 1, 128, 4, 2, False),
            (64, 16, 1, 2, 32, 4, 2, False), (64, 2, 64, 2, 64, 4, 2, False),
            (64, 4, 150, 2, 64, 4, 2, False), (256, 4, 32, 2, 64, 12, 1, False),
            (64, 4, 4, 2, 64, 4, 2, True), (128, 8, 2, 1, 128, 8, 1, True),
            (64, 16, 1, 2, 32, 4, 2, True), (64, 2, 64, 2, 64, 4, 1, True),
            (64, 4, 150, 2, 64, 6, 2, True), (256, 4, 32, 2, 64, 12, 1, True),
            (256, 4, 8, 2, 64, 24, 2, True), (64, 4, 150, 2, 64, 4, 2, True),
            (64, 4, 150, 2, 64, 6, 2, "compact"),
            (256, 4, 32, 2, 64, 12, 1, "compact")):
        long_plan = (hd, cr, top, h, wgv) == (64, 4, 150, 4, True)
        compact = wgv == "compact"
        width = 2 * h * hd + 2 * hkv * hd
        b = Body(width)
        qkv(b, h, hkv, hd, hd, True, True, wgv)
        qi0 = b.table("qi0", hi * di)
        kr = b.table("kr", di)
        b(f"%qi1 = reshape({qi0}) : f32[T, {hi}, {di}]")
        b(f"%qi2 = rms_norm(%qi1, {b.w('idx_q_norm.weight', (di,), init='norm')}) {{eps = 1e-6}}")
        b(f'%qi = rope(%qi2, %pos) {{mode = "neox", dims = {di}, base = 10000.0}}')
        b(f"%kb0 = block_mean({kr}) {{block = {cr}}} : f32[T / {cr}, {di}]")
        b(f"%kb1 = rms_norm(%kb0, {b.w('idx_k_norm.weight', (di,), init='norm')}) {{eps = 1e-6}}")
        b(f"%kb2 = reshape(%kb1) : f32[T / {cr}, 1, {di}]")
        b(f"%bp = arange(%kb1) {{step = {cr}}}")
        b(f'%kb3 = rope(%kb2, %bp) {{mode = "neox", dims = {di}, base = 10000.0}}')
        b(f"%kb = reshape(%kb3) : f32[T / {cr}, {di}]")
        b(f"%idx = qsa_select(%qi, %kb) {{block = {cr}, top = {top}}} : "
          f"i32[T, {top + 1}]")
        b(f"%o = attention(%q, %k, %v, %gate, %idx) {{scale = "
          f"{1 / math.sqrt(hd):.9g}, causal = true, gated = true, "
          f"block = {cr}}}")
        b(f"%o1 = reshape(%o) : f32[T, {h * hd}]")
        b.output("%o1", h * hd)
        cases.append(b.case(f"attention_qsa_hd{hd}_cr{cr}_top{top}"
                            f"{'' if h // hkv == 2 else f'_hg{h // hkv}'}"
                            f"{'_h' + str(h) if h // hkv == 12 and hkv > 1 else ''}"
                            f"{'_wg' if wgv else ''}"
                            f"{'_max24k' if long_plan else ''}"
                            f"{'_compact' if compact else ''}",
                            "attention",
                            f"QSA: gated attention over the top {top} blocks "
                            f"of {cr} tokens picked by block_mean + "
                            f"qsa_select (indexer: {hi} heads of {di})"
                            f"{'; v: rms_norm' if wgv else ''}"
                            f"{'; plan for 24,576 tokens' if long_plan else ''}"
                            f"{'; compact union tables' if compact else ''}",
                            options=(("attn-compact=on",) if compact
                                     else ()),
                            **(dict(LONG_PROMPTS, max_tokens=24576)
                               if long_plan else
                               dict(LONG_PROMPTS, max_tokens=4096)
                               if compact and hd == 256 else LONG_PROMPTS)))
    return cases




def conv_delta_cases() -> list[Case]:
    """conv1d_causal (channels of heads of 64 and 128) and gated_delta_rule
    (grouped and tiled heads, key/value dims 64 and 128)."""
    cases = []
    for c, k, dil, silu in ((128, 4, 1, False), (256, 4, 1, False),
                            (256, 4, 3, False), (128, 4, 1, True),
                            (384, 3, 2, True)):
        b = Body(c)
        b(f"%c1 = conv1d_causal(%x, {b.w('conv.weight', (c, k), std=0.5)}) "
          f"{{dilation = {dil}}}")
        if silu:
            b("%y = silu(%c1)")
            b.output("%y", c, ("%x", c))
        else:
            b.output("%c1", c, ("%x", c))
        cases.append(b.case(f"conv1d_c{c}_k{k}_dil{dil}"
                            + ("_silu" if silu else ""),
                            "fused" if silu else "conv",
                            f"depthwise causal conv of [T, {c}], {k} taps, "
                            f"dilation {dil}" + (" + silu epilogue" if silu
                                                  else "")))

    def delta(b: Body, hk: int, h: int, dk: int, dv: int, heads: str,
              form: str) -> None:
        qk = hk * dk
        b(f"%q0 = slice(%x) {{axis = 1, start = 0, end = {qk}}}")
        b(f"%k0 = slice(%x) {{axis = 1, start = {qk}, end = {2 * qk}}}")
        b(f"%v0 = slice(%x) {{axis = 1, start = {2 * qk}, end = {2 * qk + h * dv}}}")
        b(f"%q1 = reshape(%q0) : f32[T, {hk}, {dk}]")
        b(f"%k1 = reshape(%k0) : f32[T, {hk}, {dk}]")
        b(f"%v = reshape(%v0) : f32[T, {h}, {dv}]")
        b(f'%q = l2_norm(%q1) {{eps = 1e-6, form = "{form}"}}')
        b(f'%k = l2_norm(%k1) {{eps = 1e-6, form = "{form}"}}')
        bb = b.table("bt", h)
        al = b.table("al", h)
        b(f"%beta = sigmoid({bb})")
        b(f"%a1 = add({al}, {b.w('ssm_dt.bias', (h,), init='uniform', lo=-4.0, hi=-1.0)})")
        b("%a2 = softplus(%a1)")
        b(f"%g = mul(%a2, {b.w('ssm_a', (h,), init='uniform', lo=-8.0, hi=-1.0)})")
        b(f"%o = gated_delta_rule(%q, %k, %v, %g, %beta) "
          f'{{scale = {1 / math.sqrt(dk):.9g}, heads = "{heads}"}}')

    forms = [
        # HK, H, DK, DV, heads
        (2, 4, 64, 64, "grouped"), (2, 4, 64, 64, "tiled"),
        (2, 4, 128, 128, "grouped"), (1, 2, 128, 128, "tiled"),
        (2, 2, 64, 128, "grouped"), (2, 6, 128, 64, "tiled"),
        # Value dim 48: V's 32-column blocks do not split, so bf16 takes
        # the one-launch delta_mma form.
        (2, 2, 64, 48, "grouped"),
    ]
    for hk, h, dk, dv, heads in forms:
        b = Body(2 * hk * dk + h * dv)
        delta(b, hk, h, dk, dv, heads, "add")
        b(f"%o1 = reshape(%o) : f32[T, {h * dv}]")
        b.output("%o1", h * dv)
        cases.append(b.case(f"delta_{heads}_hk{hk}_h{h}_dk{dk}_dv{dv}",
                            "delta",
                            f"gated_delta_rule: {hk} key heads of {dk}, {h} "
                            f"value heads of {dv}, {heads}",
                            **LONG_PROMPTS))
    # The qwen3next block: conv over q|k|v + silu, the slices read by the
    # norms, the output normalised per head and gated by silu(z).
    hk, h, dk, dv, kc = 2, 4, 64, 64, 4
    qkvw = 2 * hk * dk + h * dv
    b = Body(qkvw)
    b(f"%qkv1 = conv1d_causal(%x, {b.w('ssm_conv1d.weight', (qkvw, kc), std=0.5)})")
    b("%qkv = silu(%qkv1)")
    b(f"%q0 = slice(%qkv) {{axis = 1, start = 0, end = {hk * dk}}}")
    b(f"%k0 = slice(%qkv) {{axis = 1, start = {hk * dk}, end = {2 * hk * dk}}}")
    b(f"%v0 = slice(%qkv) {{axis = 1, start = {2 * hk * dk}, end = {qkvw}}}")
    b(f"%q1 = reshape(%q0) : f32[T, {hk}, {dk}]")
    b(f"%k1 = reshape(%k0) : f32[T, {hk}, {dk}]")
    b(f"%v = reshape(%v0) : f32[T, {h}, {dv}]")
    b("%q = l2_norm(%q1) {eps = 1e-6}")
    b("%k = l2_norm(%k1) {eps = 1e-6}")
    ba0 = b.table("ba0", 2 * h)
    b(f"%ba = reshape({ba0}) : f32[T, {hk}, {2 * h // hk}]")
    b(f"%b0 = slice(%ba) {{axis = 2, start = 0, end = {h // hk}}}")
    b(f"%al0 = slice(%ba) {{axis = 2, start = {h // hk}, end = {2 * h // hk}}}")
    b(f"%bb = reshape(%b0) : f32[T, {h}]")
    b(f"%al = reshape(%al0) : f32[T, {h}]")
    b("%beta = sigmoid(%bb)")
    b(f"%al1 = add(%al, {b.w('ssm_dt.bias', (h,), init='uniform', lo=-4.0, hi=-1.0)})")
    b("%al2 = softplus(%al1)")
    b(f"%g = mul(%al2, {b.w('ssm_a', (h,), init='uniform', lo=-8.0, hi=-1.0)})")
    b(f"%o = gated_delta_rule(%q, %k, %v, %g, %beta) {{scale = {1 / math.sqrt(dk):.9g}}}")
    z0 = b.table("z0", h * dv)
    b(f"%z1 = reshape({z0}) : f32[T, {h}, {dv}]")
    b("%z = silu(%z1)")
    b(f"%on = rms_norm(%o, {b.w('ssm_norm.weight', (dv,), init='norm')}) {{eps = 1e-6}}")
    b("%og = mul(%on, %z)")
    b(f"%o1 = reshape(%og) : f32[T, {h * dv}]")
    b.output("%o1", h * dv)
    cases.append(b.case("delta_block_qwen3next", "fused",
                        "qwen3next's delta-net block: conv + silu, slices, "
                        "l2 norms, alpha/beta split, gated per-head norm",
                        **LONG_PROMPTS))
    return cases


def moe_cases(types: tuple[str, ...]) -> list[Case]:
    """moe_route forms, moe_combine, and the grouped experts (moe_experts +
    moe_combine, which group-experts rewrites into moe_sort,
    moe_grouped_swiglu, moe_grouped_down and moe_scatter) per weight type
    and at expert counts that pick each GEMM row tile."""
    cases = []
    d = 64
    for func, norm, e, k in (("softmax", True, 8, 2), ("softmax", False, 64, 6),
                             ("sigmoid", True, 64, 6), ("sigmoid", False, 8, 2),
                             ("softmax", True, 128, 8), ("softmax", True, 512, 10)):
        b = Body(e, std=2.0)
        b(f'%w, %ids = moe_route(%x) {{k = {k}, func = "{func}", '
          f"norm = {'true' if norm else 'false'}}}")
        b(f"%e = get_rows({b.w('expert_embd.weight', (e, 8), std=1.0)}, %ids) : f32[T, {k}, 8]")
        b(f"%e1 = reshape(%e) : f32[T, {8 * k}]")
        b.output("%w", k, ("%e1", 8 * k))
        cases.append(b.case(
            f"moe_route_{func}_{'norm' if norm else 'nonorm'}_e{e}k{k}",
            "moe", f"moe_route {func}, top {k} of {e}, norm {norm}; the ids "
            "read by a 2-D get_rows"))
    # moe_combine of values no moe_experts makes (it stays itself).
    for shared in (0, 1, 2):
        e, k = 8, 2
        b = Body(e, std=2.0)
        b(f'%w, %ids = moe_route(%x) {{k = {k}, func = "softmax", norm = true}}')
        y0 = b.table("y0", k * d)
        b(f"%y = reshape({y0}) : f32[T, {k}, {d}]")
        args = "%y, %w"
        if shared:
            args += ", " + b.table("sh", d)
        if shared == 2:
            args += ", " + b.table("gl", 1)
        b(f"%m = moe_combine({args})")
        b.output("%m", d)
        what = ["", " + shared expert", " + sigmoid-gated shared expert"]
        cases.append(b.case(f"moe_combine_{['plain', 'shared', 'gated'][shared]}",
                            "moe", f"moe_combine{what[shared]}"))

    def experts(b: Body, e: int, k: int, dd: int, f: int, t: str,
                func: str = "softmax", norm: bool = True) -> None:
        b(f"%r = matmul(%x, {b.w('router.weight', (e, dd), std=4 / math.sqrt(dd))}) : f32[T, {e}]")
        b(f'%w, %ids = moe_route(%r) {{k = {k}, func = "{func}", '
          f"norm = {'true' if norm else 'false'}}}")
        b(f"%y = moe_experts(%x, %ids, {b.w('ffn_gate_exps.weight', (e, f, dd), t)}, "
          f"{b.w('ffn_up_exps.weight', (e, f, dd), t)}, "
          f"{b.w('ffn_down_exps.weight', (e, dd, f), t)}) : f32[T, {k}, {dd}]")

    # Per type: 2 experts, top 1 (64 rows per expert at T = 128: the 64-row
    # tile); the smallest legal widths.
    for t in types:
        dd = f = max(64, BLOCK[t])
        b = Body(dd)
        experts(b, 2, 1, dd, f, t)
        b("%m = moe_combine(%y, %w)")
        b.output("%m", dd)
        cases.append(b.case(f"moe_experts_{t}", "moe_experts",
                            f"grouped experts over {t} stacks [2, {f}, {dd}], "
                            "top 1 of 2", types=(t,)))
    # The down projection's K = 384 (not a multiple of 256): 128-element
    # raw stages on sm_90, as the seed model's K = 640.
    for t in ("iq4_nl", "q8_0"):
        if t not in types:
            continue
        b = Body(64)
        experts(b, 2, 2, 64, 384, t)
        b("%m = moe_combine(%y, %w)")
        b.output("%m", 64)
        cases.append(b.case(f"moe_experts_{t}_f384", "moe_experts",
                            f"grouped experts over {t} stacks [2, 384, 64], "
                            "top 2 of 2 (down K = 384)", types=(t,)))
    # Row tiles: T*k/E rows per expert at T = 128 pick 16, 64, 128.
    for t in ("q8_0",):
        if t not in types:
            continue
        for e, k, tile in ((8, 1, "m16"), (4, 2, "m64"), (2, 2, "m128")):
            dd = f = max(64, BLOCK[t])
            b = Body(dd)
            experts(b, e, k, dd, f, t)
            b("%m = moe_combine(%y, %w)")
            b.output("%m", dd)
            cases.append(b.case(f"moe_experts_{t}_e{e}k{k}", "moe_experts",
                                f"grouped experts, {t} stacks [{e}, {f}, {dd}],"
                                f" top {k} ({tile} row tile at T = 128)",
                                types=(t,)))
    # Planned for 640 tokens: from 512 on (4 experts x 192 rows / top 2 is
    # less) the grouped GEMMs' alternate code runs (sm_90: the pre-launch
    # dequantises the stacks and gathers A's rows into the workspace for
    # the TMA tile; gate and up side by side in 128-column halves, N = 512
    # exact, N = 320 a ragged last tile).
    for t in ("iq3_s", "iq4_nl", "q8_0", "f16"):
        if t not in types:
            continue
        f = 512 if BLOCK[t] == 256 else 320
        b = Body(256)
        experts(b, 4, 2, 256, f, t)
        b("%m = moe_combine(%y, %w)")
        b.output("%m", 256)
        cases.append(b.case(f"moe_experts_{t}_tma_e4k2", "moe_experts",
                            f"grouped experts, {t} stacks [4, {f}, 256], top 2,"
                            " planned for 640 tokens (T >= 512: the TMA "
                            "alternate)", types=(t,), max_tokens=640,
                            prompts=(1, 37, 600)))
    # moe_sort over slices of 2,048 slots (count, then scan and scatter per
    # slice): T = 700 x top 8 = 5,600 slots, three slices.
    if "q8_0" in types:
        b = Body(64)
        experts(b, 16, 8, 64, 64, "q8_0")
        b("%m = moe_combine(%y, %w)")
        b.output("%m", 64)
        cases.append(b.case("moe_experts_q8_0_e16k8_slices", "moe_experts",
                            "grouped experts, q8_0 stacks [16, 64, 64], top 8:"
                            " moe_sort over three 2,048-slot slices at T = 700",
                            types=("q8_0",), **LONG_PROMPTS))
    b = Body(64)
    experts(b, 4, 2, 64, 64, "f16")
    b("%s = reduce_sum(%y) {axis = 1}")
    b.output("%s", 64)
    cases.append(b.case("moe_experts_no_combine", "moe_experts",
                        "moe_experts whose result no moe_combine reads (so "
                        "group-experts leaves it)", types=("f16",)))
    # qwen3next's MoE: routed experts + SwiGLU shared expert scaled by
    # sigmoid(x . gate); and sigmoid routing with an ungated shared expert.
    t = "q8_0" if "q8_0" in types else "f32"
    dd, f, fs = 64, 96, 128
    b = Body(dd)
    experts(b, 8, 2, dd, f, t)
    b(f"%sg = matmul(%x, {b.w('ffn_gate_shexp.weight', (fs, dd), t)})")
    b(f"%su = matmul(%x, {b.w('ffn_up_shexp.weight', (fs, dd), t)})")
    b("%ss = silu(%sg)")
    b("%sh = mul(%ss, %su)")
    b(f"%s2 = matmul(%sh, {b.w('ffn_down_shexp.weight', (dd, fs), t)})")
    b(f"%gl = matmul(%x, {b.w('ffn_gate_inp_shexp.weight', (1, dd))}) : f32[T, 1]")
    b("%m = moe_combine(%y, %w, %s2, %gl)")
    b.output("%m", dd)
    cases.append(b.case("moe_block_shared_gated", "moe_experts",
                        f"routed {t} experts (top 2 of 8) + SwiGLU shared "
                        "expert scaled by sigmoid(x . gate), as qwen3next",
                        types=(t,)))
    b = Body(dd)
    experts(b, 4, 2, dd, f, "f16", "sigmoid", False)
    b(f"%sh = matmul(%x, {b.w('shared.weight', (dd, dd), 'f16')})")
    b("%m = moe_combine(%y, %w, %sh)")
    b.output("%m", dd)
    cases.append(b.case("moe_block_sigmoid_shared", "moe_experts",
                        "sigmoid routing without renormalisation, f16 "
                        "experts, an ungated shared expert", types=("f16",)))
    return cases


def hc_site(b: Body, r: str, pre: str, n: int, d: int, lr: int, t: str,
            inject: bool) -> None:
    """A gated-residual read as models/qwen4exp.strata writes it: %PRE.u
    (and the injection gates %PRE.lam)."""
    nw = b.w(pre + "_norm.weight", (n * d,), init="norm")
    b(f"%{pre}.xn = hc_norm({r}, {nw}) {{eps = 1e-6}}")
    b(f"%{pre}.xf = reshape(%{pre}.xn) : f32[T, {n * d}]")
    b(f"%{pre}.lo0 = matmul(%{pre}.xf, {b.w(pre + '_down.weight', (lr, n * d), t)})")
    b(f"%{pre}.lo1 = scale(%{pre}.lo0) {{s = {1 / n}}}")
    b(f"%{pre}.lo = silu(%{pre}.lo1)")
    b(f"%{pre}.g0 = matmul(%{pre}.lo, {b.w(pre + '_up.weight', (n * d, lr), t)})")
    b(f"%{pre}.g1 = sigmoid(%{pre}.g0)")
    b(f"%{pre}.g = reshape(%{pre}.g1) : f32[T, {n}, {d}]")
    b(f"%{pre}.u = hc_read(%{pre}.xn, %{pre}.g)")
    if inject:
        b(f"%{pre}.j0 = matmul(%{pre}.xf, {b.w(pre + '_inject.weight', (n, n * d), t)})")
        b(f"%{pre}.j1 = scale(%{pre}.j0) {{s = {1 / n}}}")
        b(f"%{pre}.j2 = sigmoid(%{pre}.j1)")
        b(f"%{pre}.lam = scale(%{pre}.j2) {{s = 2.0}}")


def hc_cases(types: tuple[str, ...]) -> list[Case]:
    """Hyper-connections: qwen4exp's fused sites (hc_write_norm,
    hc_down_inject, hc_up_mix, hc_down), each hc op alone, sinkhorn."""
    cases = []
    for d, n, lr, t in ((64, 4, 16, "f32"), (256, 4, 32, "q8_0"),
                        (128, 4, 32, "bf16"), (64, 4, 32, "q4_0"),
                        (128, 2, 32, "f16"), (320, 4, 96, "f16")):
        if t not in types:
            continue
        b = Body(d)
        f1 = b.table("f1", d, std=0.25)
        f2 = b.table("f2", d, std=0.25)
        b(f"%r0 = hc_expand(%x) {{n = {n}}}")
        hc_site(b, "%r0", "attn", n, d, lr, t, True)
        b(f"%f1b = mul({f1}, %attn.u)")
        b("%r1 = hc_write(%r0, %f1b, %attn.lam)")
        hc_site(b, "%r1", "ffn", n, d, lr, t, True)
        b(f"%f2b = mul({f2}, %ffn.u)")
        b("%r2 = hc_write(%r1, %f2b, %ffn.lam)")
        hc_site(b, "%r2", "out", n, d, lr, t, False)
        b.output("%out.u", d)
        # Planned for 640 tokens: T = 600 runs the kernels' alternate code
        # (sm_90: the TMA tile from 512 tokens), the shorter prompts their
        # own.
        cases.append(b.case(f"hc_sites_d{d}_n{n}_lr{lr}_{t}", "hc",
                            f"qwen4exp's gated residual: {n} streams of {d}, "
                            f"rank-{lr} {t} read gates; two write+norm sites "
                            "and the final read", types=(t,),
                            max_tokens=640, prompts=(1, 37, 100, 600)))
    # Each hc op alone: no GEMM makes the gate, so nothing fuses. 2,560 x 4
    # is qwen4exp's: a wave's 20 loads of a stream in chunks of 8.
    for d, n in ((64, 4), (300, 3), (2560, 4)):
        b = Body(d)
        g0 = b.table("g0", n * d, init="uniform", lo=0.0, hi=1.0)
        lam = b.table("lam", n, init="uniform", lo=0.0, hi=2.0)
        b(f"%r = hc_expand(%x) {{n = {n}}}")
        b(f"%g = reshape({g0}) : f32[T, {n}, {d}]")
        b("%xn = hc_norm(%r) {eps = 1e-6}")
        b(f"%xw = hc_norm(%r, {b.w('hc_norm.weight', (n * d,), init='norm')}) {{eps = 1e-6}}")
        b("%u = hc_read(%xn, %g)")
        b(f"%r2 = hc_write(%xw, %u, {lam})")
        b(f"%r3 = hc_write(%r2, %x, {lam})")
        b(f"%y = reshape(%r3) : f32[T, {n * d}]")
        b(f"%xn2 = reshape(%xn) : f32[T, {n * d}]")
        b.output("%y", n * d, ("%xn2", n * d), (g0, n * d), (lam, n))
        cases.append(b.case(f"hc_ops_d{d}_n{n}", "hc",
                            "hc_expand, hc_norm (with and without weight), "
                            f"hc_read, hc_write alone; {n} streams of {d}"))
    for n, lead, iters in ((4, (), 20), (4, (2,), 5), (8, (), 3)):
        m = int(np.prod(lead)) if lead else 1
        dims = ", ".join(map(str, lead + (n, n)))
        b = Body(m * n * n)
        b(f"%m1 = reshape(%x) : f32[T, {dims}]")
        b(f"%s = sinkhorn(%m1) {{iters = {iters}}}")
        b(f"%y = reshape(%s) : f32[T, {m * n * n}]")
        b.output("%y", m * n * n, ("%x", m * n * n))
        cases.append(b.case(f"sinkhorn_n{n}_x{m}_it{iters}", "hc",
                            f"sinkhorn of [T, {dims}], {iters} iterations"))
    return cases


def shape_cases() -> list[Case]:
    """slice, concat, permute, reshape (alone and folded into a reader),
    arange, ngram_hash."""
    cases = []
    d = 192
    b = Body(d)
    b("%a = slice(%x) {axis = 1, start = 40, end = 136}")
    b("%a2 = neg(%a)")
    b.output("%a", 96, ("%a2", 96), ("%x", d))
    cases.append(b.case("slice_alone", "shape",
                        "a slice of [T, 192] read twice (its own kernel)"))
    b = Body(d)
    b("%a = slice(%x) {axis = 1, start = 64, end = 160}")
    b(f"%y = matmul(%a, {b.w('w.weight', (72, 96))})")
    b.output("%y", 72, ("%x", d))
    cases.append(b.case("slice_into_gemm", "shape",
                        "a slice read by a GEMM alone (folds into its "
                        "operand)"))
    b = Body(d)
    b("%a = slice(%x) {axis = 1, start = 64, end = 160}")
    b("%a1 = exp(%a)")
    b.output("%a1", 96, ("%x", d))
    cases.append(b.case("slice_into_unary", "shape",
                        "a slice read by an elementwise op alone (folds "
                        "into it)"))
    b = Body(d)
    b("%x3 = reshape(%x) : f32[T, 4, 48]")
    b("%a = slice(%x3) {axis = 2, start = 8, end = 40}")
    b("%c = slice(%x3) {axis = 1, start = 1, end = 3}")
    b("%c1 = reshape(%c) : f32[T, 96]")
    b("%a1 = reshape(%a) : f32[T, 128]")
    b.output("%a1", 128, ("%c1", 96), ("%x", d))
    cases.append(b.case("slice_rank3", "shape",
                        "slices of [T, 4, 48] on axes 2 and 1, a concat "
                        "of three"))
    b = Body(d)
    b("%x3 = reshape(%x) : f32[T, 4, 48]")
    b("%y3 = exp(%x3)")
    b("%c = concat(%x3, %y3) {axis = 2}")
    b("%c1 = reshape(%c) : f32[T, 384]")
    b.output("%c1", 384)
    cases.append(b.case("concat_axis2", "shape",
                        "concat on axis 2 of [T, 4, 48] values"))
    for shape in ((4, 48), (12, 16)):
        b = Body(d)
        b(f"%x3 = reshape(%x) : f32[T, {shape[0]}, {shape[1]}]")
        b("%p = permute(%x3) {perm = [0, 2, 1]}")
        b(f"%y = reshape(%p) : f32[T, {d}]")
        b("%p2 = neg(%p)")
        b(f"%y2 = reshape(%p2) : f32[T, {d}]")
        b.output("%y", d, ("%y2", d), ("%x", d))
        cases.append(b.case(f"permute_{shape[0]}x{shape[1]}", "shape",
                            f"permute [0, 2, 1] of [T, {shape[0]}, "
                            f"{shape[1]}] read twice"))
    b = Body(d)
    b("%x4 = reshape(%x) : f32[T, 2, 6, 16]")
    b("%p = permute(%x4) {perm = [0, 2, 3, 1]}")
    b("%y = reshape(%p) : f32[T, 192]")
    b(f"%z = matmul(%y, {b.w('w.weight', (72, d))})")
    b.output("%z", 72, ("%x", d))
    cases.append(b.case("permute_into_gemm", "shape",
                        "permute [0, 2, 3, 1] of [T, 2, 6, 16] read by a "
                        "GEMM alone"))
    b = Body(d)
    b("%x4 = reshape(%x) : f32[T, 2, 6, 16]")
    b("%p = permute(%x4) {perm = [0, 3, 1, 2]}")
    b("%p1 = sigmoid(%p)")
    b("%y = reshape(%p1) : f32[T, 192]")
    b.output("%y", d, ("%x", d))
    cases.append(b.case("permute_into_unary", "shape",
                        "permute [0, 3, 1, 2] of [T, 2, 6, 16] read by an "
                        "elementwise op alone"))
    b = Body(d)
    b(f"%gw = reshape({b.w('g.weight', (d,))}) : f32[1, {d}]")
    b("%gl = matmul(%x, %gw) : f32[T, 1]")
    b.output("%gl", 1, ("%x", d))
    cases.append(b.case("reshape_weight", "shape",
                        "a 1-D weight reshaped to [1, D] (its own kernel) "
                        "read by a GEMM, as qwen3next's shared gate"))
    b = Body(d)
    b("%x3 = reshape(%x) : f32[T, 4, 48]")
    b("%y3 = softmax(%x3)")
    b(f"%y = reshape(%y3) : f32[T, {d}]")
    b.output_as_is("%y", d)
    cases.append(b.case("output_reshape_view", "shape",
                        "the plan's output is a reshape (a view) of an "
                        "activation"))
    # arange: positions index a position table.
    for step in (1, 3):
        b = Body(64)
        b(f"%pos = arange(%tok) {{step = {step}}}")
        table = b.w("pos_embd.weight", (step * MAX_TOKENS, 64), "f16",
                    std=1.0)
        b(f"%pe = get_rows({table}, %pos)")
        b.output("%pe", 64)
        cases.append(b.case(f"arange_step{step}", "shape",
                            f"arange {{step = {step}}} of the tokens "
                            "indexing a position table"))
    # ngram_hash + the PLE table lookup.
    for n, heads, eos in ((3, 2, 1), (4, 3, 7)):
        nh = (n - 1) * heads
        sizes = [31 + 6 * i for i in range(nh)]
        offsets = [sum(sizes[:i]) for i in range(nh)]
        mults = [1, 1000003, 998244353, 19260817][:n]
        hp = 8
        b = Body(8)
        b(f"%ids = ngram_hash(%tok) {{n = {n}, heads = {heads}, eos = {eos}, "
          f"mults = {mults}, sizes = {sizes}, offsets = {offsets}}} : "
          f"i32[T, {nh}]")
        b(f"%e0 = get_rows({b.w('ple_embd.weight', (sum(sizes), hp), 'f16', std=1.0)}, %ids) "
          f": f32[T, {nh}, {hp}]")
        b(f"%e = reshape(%e0) : f32[T, {nh * hp}]")
        b.output("%e", nh * hp)
        cases.append(b.case(f"ngram_hash_n{n}_h{heads}", "shape",
                            f"ngram_hash n={n} heads={heads} eos={eos}, its "
                            "ids read by a 2-D get_rows"))
    return cases


def get_rows_cases(types: tuple[str, ...]) -> list[Case]:
    """get_rows of an embedding table of each type."""
    cases = []
    for t in types:
        d = 256
        b = Body(d, t)
        b.output("%x", d)
        cases.append(b.case(f"get_rows_{t}", "get_rows",
                            f"get_rows of a {t} table [{VOCAB}, {d}]",
                            types=(t,)))
    return cases


def matmul_cases(types: tuple[str, ...]) -> list[Case]:
    """Every block type: the smallest legal K, N not a multiple of 64, K of
    several tiles. The 128-row tile is the bf16 plan at T = 128, the 64-row
    one a plan for 64 tokens, the 16-row one a plan of the last position's
    logits (--logits last: the GEMM reads last_rows); every f32 plan is the
    FMA path."""
    cases = []
    for t in types:
        bk = BLOCK[t]
        kmin = {1: 16, 32: 32, 256: 256}[bk]
        kbig = {1: 200, 32: 224, 256: 512}[bk]
        b = Body(kmin)
        b(f"%y = matmul(%x, {b.w('w.weight', (72, kmin), t)})")
        b.output("%y", 72)
        cases.append(b.case(f"matmul_{t}_k{kmin}_n72", "matmul",
                            f"[T, {kmin}] x {t} [72, {kmin}]", types=(t,)))
        b = Body(kbig)
        b(f"%y = matmul(%x, {b.w('w.weight', (200, kbig), t)})")
        b.output("%y", 200)
        cases.append(b.case(f"matmul_{t}_k{kbig}_n200", "matmul",
                            f"[T, {kbig}] x {t} [200, {kbig}]", types=(t,)))
        k = max(kmin, 64)
        b = Body(k)
        b(f"%y = matmul(%x, {b.w('w.weight', (136, k), t)})")
        b.output("%y", 136)
        cases.append(b.case(f"matmul_{t}_m64", "matmul",
                            f"[T, {k}] x {t} [136, {k}] planned for 64 "
                            "tokens (the 64-row tile)", types=(t,),
                            max_tokens=64, prompts=(1, 37)))
        b = Body(k)
        b(f"%y = matmul(%x, {b.w('w.weight', (72, k), t)})")
        b.output("%y", 72)
        cases.append(b.case(f"matmul_{t}_last", "matmul",
                            f"--logits last: [1, {k}] x {t} [72, {k}] "
                            "(last_rows; the 16-row tile)",
                            flags=("--logits", "last"), types=(t,)))
        if t in ("f16", "bf16"):
            # bf16 A (rms_norm's output under the bf16 policy) x 16-bit W:
            # sm_90's TMA tile from 512 tokens (the kernel's alternate code;
            # f16 W converted to bf16 in the workspace by its pre-launch),
            # the cp.async tiles below. K below one 64-wide box and ragged,
            # N ragged and 320 (160-column tiles), prompts of several
            # 128-row tiles with a partial last one.
            for n, k in ((72, 16), (200, 200), (320, 1024), (600, 136)):
                b = Body(k)
                b(f"%h = rms_norm(%x, {b.w('norm.weight', (k,), init='norm')}) "
                  "{eps = 1e-6}")
                b(f"%y = matmul(%h, {b.w('w.weight', (n, k), t)})")
                b.output("%y", n)
                cases.append(b.case(f"matmul_{t}_tma_k{k}_n{n}", "matmul",
                                    f"rms_norm then [T, {k}] x {t} [{n}, {k}] "
                                    "(bf16 A: the TMA tile on sm_90 from "
                                    "512 tokens)",
                                    types=(t,), max_tokens=640,
                                    prompts=(1, 129, 600)))
        if BLOCK[t] > 1:
            # bf16 A x quantised W planned for 640 tokens: from 512 on the
            # kernel's alternate code runs (its pre-launch dequantises W
            # into the workspace for the TMA tile); below, its own tiles.
            b = Body(256)
            b(f"%h = rms_norm(%x, {b.w('norm.weight', (256,), init='norm')}) "
              "{eps = 1e-6}")
            b(f"%y = matmul(%h, {b.w('w.weight', (200, 256), t)})")
            b.output("%y", 200)
            cases.append(b.case(f"matmul_{t}_tmaq_k256_n200", "matmul",
                                f"rms_norm then [T, 256] x {t} [200, 256] "
                                "planned for 640 tokens (T >= 512: the "
                                "alternate code, W dequantised for the TMA "
                                "tile)", types=(t,), max_tokens=640,
                                prompts=(1, 37, 600)))
        if t == "f32":
            # f32 weights under bf16 activations (the MoE router): sm_90
            # runs them on the matrix units as three bf16 terms of W.
            for n in (48, 200, 512):
                b = Body(256)
                b(f"%h = rms_norm(%x, {b.w('norm.weight', (256,), init='norm')}) "
                  "{eps = 1e-6}")
                b(f"%y = matmul(%h, {b.w('w.weight', (n, 256), t)})")
                b.output("%y", n)
                cases.append(b.case(f"matmul_f32w_bf16a_n{n}", "matmul",
                                    f"rms_norm then [T, 256] x f32 [{n}, 256] "
                                    "(bf16 A under the bf16 policy)",
                                    types=(t,)))
        if bk == 32:
            # K % 256 != 0 but K % 128 == 0: sm_90 stages raw blocks 128
            # elements of K at a time (the experts' down projection, K = 640).
            b = Body(384)
            b(f"%y = matmul(%x, {b.w('w.weight', (200, 384), t)})")
            b.output("%y", 200)
            cases.append(b.case(f"matmul_{t}_k384_n200", "matmul",
                                f"[T, 384] x {t} [200, 384] (128-element raw "
                                "stages)", types=(t,)))
    return cases


def fused_cases(types: tuple[str, ...]) -> list[Case]:
    """Elementwise chains and GEMM epilogues (fuse-elementwise)."""
    cases = []
    d = ROW
    b = Body(d)
    b("%a = scale(%x) {s = 0.5}")
    b("%c = sigmoid(%a)")
    b(f"%e = mul(%c, {b.w('b1.weight', (d,))})")
    b("%f = tanh(%e)")
    b(f"%g = add(%f, {b.w('b2.weight', (1, d))})")
    b("%y = square(%g)")
    b.output("%y", d, ("%x", d))
    cases.append(b.case("chain_elementwise", "fused",
                        "scale, sigmoid, mul [D], tanh, add [1, D], square: "
                        "one kernel"))
    b = Body(d)
    ops = ["neg", "exp", "softplus", "sqrt", "log", "abs", "silu", "gelu",
           "relu", "tanh", "sigmoid", "square", "rsqrt", "sign"]
    prev = "%x"
    for i, op in enumerate(ops):
        b(f"%c{i} = {op}({prev})")
        prev = f"%c{i}"
    b(f"%y = mul({prev}, %x)")
    b.output("%y", d, ("%x", d))
    cases.append(b.case("chain_long", "fused",
                        "a 15-op elementwise chain (more than one group of "
                        "12)"))
    b = Body(d)
    b("%a = sigmoid(%x)")
    b("%c = mul(%a, %x)")
    b("%e = exp(%a)")
    b.output("%c", d, ("%e", d), ("%x", d))
    cases.append(b.case("chain_two_outputs", "fused",
                        "a chain whose inner value is read outside too (a "
                        "second output)"))
    b = Body(d)
    b("%a = scale(%x) {s = 2.0}")
    b("%c = clamp(%a) {max = 2.0}")
    b.output("%c", d)
    cases.append(b.case("get_rows_epilogue", "fused",
                        "get_rows taking its only reader's chain (scale, "
                        "clamp) as an epilogue"))
    b = Body(d)
    b("%x3 = reshape(%x) : f32[T, 12, 25]")
    b("%r = reduce_mean(%x3) {axis = 2}")
    b("%y = sigmoid(%r)")
    b(f"%y2 = mul(%y, {b.w('b.weight', (12,))})")
    b.output("%y2", 12, ("%x", d))
    cases.append(b.case("reduce_epilogue", "fused",
                        "reduce_mean with a sigmoid * [12] epilogue"))
    b = Body(d)
    b(f"%n = rms_norm(%x, {b.w('norm.weight', (d,), init='norm')}) {{eps = 1e-6}}")
    b("%y = silu(%n)")
    b.output("%y", d, ("%x", d))
    cases.append(b.case("norm_epilogue", "fused",
                        "rms_norm with a silu epilogue"))
    # GEMM epilogues on each path: f32 weights (FMA), f16/q8_0/q4_k (MMA).
    epis = [
        ("scale", ["%y = scale(%m) {s = 0.125}"]),
        ("silu", ["%y = silu(%m)"]),
        ("sigmoid_scale", ["%y0 = sigmoid(%m)", "%y = scale(%y0) {s = 2.0}"]),
        ("add_residual", ["%y = add(%m, %x)"]),
        ("clamp", ["%y = clamp(%m) {min = -1.0, max = 1.0}"]),
        ("softplus_mul", ["%y0 = softplus(%m)", "%y = mul(%y0, {w})"]),
        ("chain", ["%y0 = add(%m, %x)", "%y1 = scale(%y0) {s = 0.5}",
                   "%y2 = sigmoid(%y1)", "%y = mul(%y2, {w})"]),
        ("cast_bf16", ["%y0 = clamp(%m) {min = -1.0, max = 1.0}",
                       "%y1 = cast(%y0) {to = bf16}",
                       "%y = matmul(%y1, {w2})"]),
    ]
    # Every epilogue on the FMA path (f32 weights) and the MMA path (q8_0);
    # f16 and q4_k weights with the longest chain.
    for t in ("f32", "q8_0", "f16", "q4_k"):
        if t not in types:
            continue
        k = max(64, BLOCK[t])
        for name, lines in epis:
            if t in ("f16", "q4_k") and name not in ("chain", "cast_bf16"):
                continue
            b = Body(k)
            b(f"%m = matmul(%x, {b.w('w.weight', (k, k), t)})")
            w = b.w("e.weight", (k,)) if any("{w}" in l for l in lines) else ""
            w2 = b.w("w2.weight", (72, k), "f16") \
                if any("{w2}" in l for l in lines) else ""
            for line in lines:
                b(line.replace("{w}", w).replace("{w2}", w2))
            b.output("%y", 72 if w2 else k)
            cases.append(b.case(f"epilogue_{name}_{t}", "fused",
                                f"{t} matmul + {name.replace('_', ' ')} "
                                "epilogue", types=(t,)))
        f = max(128, BLOCK[t])
        b = Body(k)
        b(f"%g = matmul(%x, {b.w('gate.weight', (f, k), t)})")
        b(f"%u = matmul(%x, {b.w('up.weight', (f, k), t)})")
        b("%s = silu(%g)")
        b("%hh = mul(%s, %u)")
        b(f"%dn = matmul(%hh, {b.w('down.weight', (k, f), t)})")
        b("%y = add(%x, %dn)")
        b.output("%y", k)
        cases.append(b.case(f"epilogue_swiglu_{t}", "fused",
                            f"SwiGLU FFN over {t} weights: matmul+silu, "
                            "matmul+mul, matmul+add (residual)", types=(t,)))
    return cases


def all_cases(types: tuple[str, ...]) -> list[Case]:
    """The suite over weight TYPES (cases needing another type are left
    out)."""
    cases = (unary_cases() + binary_cases() + reduction_cases() +
             rope_cases() + attention_cases() + conv_delta_cases() +
             moe_cases(types) + hc_cases(types) + shape_cases() +
             get_rows_cases(types) + matmul_cases(types) +
             fused_cases(types))
    names = [c.name for c in cases]
    dup = {n for n in names if names.count(n) > 1}
    assert not dup, f"duplicate case names: {sorted(dup)}"
    return [c for c in cases if all(t in types for t in c.types)]


# ----------------------------------------------------------------------------
# GGUF writing
# ----------------------------------------------------------------------------

def values(w: Weight, rng: np.random.Generator) -> np.ndarray:
    """Fresh f32 values for weight W."""
    if w.init == "uniform":
        return rng.uniform(w.lo, w.hi, w.shape).astype(np.float32)
    if w.init == "norm":
        return (1 + 0.1 * rng.standard_normal(w.shape)).astype(np.float32)
    std = w.std if w.std is not None else 1 / math.sqrt(w.shape[-1])
    return (std * rng.standard_normal(w.shape)).astype(np.float32)


def random_blocks(w: Weight, rng: np.random.Generator):
    """Random blocks of a type gguf-py cannot quantise, each block's f16
    scales set so that its dequantised RMS is the weight's std."""
    import gguf
    qt = gguf.GGMLQuantizationType[w.type.upper()]
    bs, ts = gguf.GGML_QUANT_SIZES[qt]
    if w.shape[-1] % bs:
        raise ValueError(f"{w.type} rows of {w.shape[-1]} are not whole blocks")
    nb = int(np.prod(w.shape)) // bs
    raw = rng.integers(0, 256, (nb, ts), dtype=np.uint8)
    fields = SCALE_FIELDS[w.type]

    def set_scales(scale: np.ndarray) -> None:
        b = scale.astype(np.float16).view(np.uint8).reshape(nb, 2)
        for off in fields:
            raw[:, off:off + 2] = b

    set_scales(np.ones(nb, np.float32))
    rms = np.sqrt((gguf.quants.dequantize(raw, qt).reshape(nb, bs)
                   .astype(np.float64) ** 2).mean(axis=1))
    std = w.std if w.std is not None else 1 / math.sqrt(w.shape[-1])
    set_scales(np.where(rms > 0, std / np.maximum(rms, 1e-30), std))
    deq = gguf.quants.dequantize(raw, qt)
    if not np.isfinite(deq).all():
        raise ValueError(f"non-finite {w.type} blocks")
    return raw.reshape(w.shape[:-1] + (w.shape[-1] // bs * ts,)), qt


def encode(w: Weight, rng: np.random.Generator):
    """(array, raw_dtype or None) for GGUFWriter.add_tensor."""
    import gguf
    if w.type in SCALE_FIELDS:
        return random_blocks(w, rng)
    v = values(w, rng)
    if w.type == "f32":
        return v, None
    if w.type == "f16":
        return v.astype(np.float16), None
    qt = gguf.GGMLQuantizationType[w.type.upper()]
    return gguf.quants.quantize(v, qt), qt


def write_gguf(path: str, case: Case) -> None:
    import gguf
    rng = np.random.default_rng(zlib.crc32(case.name.encode()))
    wr = gguf.GGUFWriter(path, ARCH)
    # meta("embedding_length") in the description reads this key.
    wr.add_uint32(f"{ARCH}.embedding_length", case.embd.shape[1])
    tensors = {"token_embd.weight": case.embd}
    tensors.update(case.weights)
    for name, w in tensors.items():
        data, qt = encode(w, rng)
        wr.add_tensor(name, data, raw_dtype=qt)
    wr.write_header_to_file()
    wr.write_kv_data_to_file()
    wr.write_tensors_to_file()
    wr.close()


# ----------------------------------------------------------------------------
# prepare
# ----------------------------------------------------------------------------

def compile_plan(bindir: str, case_dir: str, plan_dir: str, target: str,
                 precision: str, case: Case, cache: str | None,
                 options: tuple[str, ...] = ()):
    """Runs strata-compile; returns (ok, message, report json or None).
    GPU plans get the case's code generation options and `options` (the
    run's --codegen-opt)."""
    cmd = [os.path.join(bindir, "strata-compile"),
           os.path.join(case_dir, "model.strata"),
           "--gguf", os.path.join(case_dir, "model.gguf"),
           "--max-tokens", str(case.max_tokens), "--target", target,
           "--precision", precision, "-o", plan_dir, *case.flags]
    if target != "host":
        cmd.append("--report=json")
        for o in (*case.options, *options):
            cmd += ["--codegen-opt", o]
    if cache:
        cmd += ["--cache-dir", cache]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        lines = (p.stderr.strip() or p.stdout.strip()).splitlines()
        errors = [l for l in lines if "error" in l]
        return False, "\n".join(errors or lines[-6:]), None
    report = None
    if target != "host":
        try:
            report = json.loads(p.stdout)
        except json.JSONDecodeError:
            report = None
    return True, "", report


def host_check(bindir: str, case_dir: str, plan_dir: str, out: str,
               case: Case) -> str:
    """Runs a host plan on the cpu backend at every prompt length; returns
    '' or what went wrong (an error, the wrong size, non-finite logits)."""
    for t in case.prompts:
        logits = plan_dir + f".T{t}.f32"
        p = subprocess.run(
            [os.path.join(bindir, "strata-run"), plan_dir,
             "--gguf", os.path.join(case_dir, "model.gguf"),
             "--tokens-file", os.path.join(out, f"tokens-{t}.txt"),
             "--dump-logits", logits, "--threads", "1"],
            capture_output=True, text=True)
        if p.returncode != 0:
            return f"T={t}: " + (p.stderr.strip().splitlines() or ["?"])[-1]
        y = np.fromfile(logits, dtype=np.float32)
        os.remove(logits)
        rows = 1 if "--logits" in case.flags else t
        if y.size != rows * case.width:
            return f"T={t}: {y.size} logits, expected {rows} x {case.width}"
        if not np.isfinite(y).all():
            return f"T={t}: non-finite logits"
        if float(np.abs(y).max()) > 1e4:
            return f"T={t}: logits up to {float(np.abs(y).max()):.3g}"
    return ""


# ptxas's "Potential Performance Loss" notes that mean a kernel runs far
# from what its source asks: serialised wgmma (C7510: a call; C7513: a
# wgmma's input registers written inside its pipeline stage; C7520: a
# divergent path; each wgmma then waits for the one before), an ignored
# setmaxnreg (C7508).
PTXAS_LOSSES = ("C7508", "C7510", "C7513", "C7520")


def strip_kernels(plan_dir: str) -> list[str]:
    """Drops PTX, sources and ptxas logs of kernels that have a cubin;
    returns the ptxas notes of PTXAS_LOSSES in those logs (kernel: note)."""
    kdir = os.path.join(plan_dir, "kernels")
    if not os.path.isdir(kdir):
        return []
    names = os.listdir(kdir)
    cubins = {n[:-len(".cubin")] for n in names if n.endswith(".cubin")}
    losses = []
    for n in sorted(names):
        if n.endswith(".ptxas.txt") and n[:-len(".ptxas.txt")] in cubins:
            with open(os.path.join(kdir, n)) as f:
                losses += [f"{n[:-len('.ptxas.txt')]}: {line.strip()}"
                           for line in f
                           if any(f"({c})" in line for c in PTXAS_LOSSES)]
        for ext in (".ptx", ".cu", ".ptxas.txt"):
            if n.endswith(ext) and n[:-len(ext)] in cubins:
                os.remove(os.path.join(kdir, n))
    return losses


def dir_size(path: str) -> int:
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            total += os.path.getsize(os.path.join(root, f))
    return total


def op_mnemonics() -> list[str]:
    """The op table's mnemonics (runtime/format/Ops.def of this checkout)."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                        "runtime", "format", "Ops.def")
    try:
        with open(path) as f:
            return re.findall(r'^OP\(\w+, "(\w+)"', f.read(), re.M)
    except OSError:
        return []


def plan_gemms(plan_dir: str) -> list[str]:
    """"variant:type" of every GEMM kernel's matrix weights in a plan."""
    with open(os.path.join(plan_dir, "plan.json")) as f:
        plan = json.load(f)
    found = set()
    for k in plan["kernels"]:
        if not k.get("variant"):
            continue
        for o in k["inputs"]:
            w = plan["weights"][o["weight"]] if "weight" in o else None
            if w and len(w["dims"]) >= 2 and w["name"] != "token_embd.weight":
                found.add(f"{k['variant']}:{w['type']}")
    return sorted(found)


def coverage(done: list[dict]) -> tuple[list[str], dict[str, list[str]]]:
    """(recipes no sm_90 kernel runs, GEMM variants per weight type)."""
    ran: set[str] = set()
    variants: dict[str, set[str]] = {}
    for c in done:
        for kernels in c["kernels"].values():
            for k in kernels:
                ran.update(k["body"].split(","))
        for g in c["gemms"]:
            v, t = g.split(":")
            variants.setdefault(t, set()).add(v)
    missing = [m for m in op_mnemonics() if m not in ran]
    return missing, {t: sorted(v) for t, v in variants.items()}


def usable_types(types: tuple[str, ...]) -> list[str]:
    """The weight types this gguf-py can write (see the module doc)."""
    import gguf
    usable = []
    for t in types:
        qt = gguf.GGMLQuantizationType[t.upper()]
        try:
            if t in SCALE_FIELDS:
                gguf.quants.dequantize(
                    np.zeros((1, gguf.GGML_QUANT_SIZES[qt][1]), np.uint8), qt)
                print(f"{t}: gguf-py cannot quantise it: random blocks, "
                      "scales set from gguf-py's dequantisation")
            elif t not in ("f32", "f16"):
                gguf.quants.quantize(np.zeros((1, 256), np.float32), qt)
        except NotImplementedError:
            print(f"skip {t}: this gguf-py cannot write it")
            continue
        usable.append(t)
    return usable


def cmd_prepare(args) -> int:
    t0 = time.monotonic()
    types = tuple(args.types.split(",")) if args.types else ALL_TYPES
    for t in types:
        if t not in ALL_TYPES:
            sys.exit(f"error: unknown type '{t}' (types: {' '.join(ALL_TYPES)})")
    try:
        import gguf  # noqa: F401
    except ImportError:
        sys.exit("error: prepare needs the gguf Python package")
    usable = usable_types(types)
    cases = all_cases(tuple(usable))
    if args.only:
        cases = [c for c in cases
                 if any(fnmatch.fnmatch(c.name, p) for p in args.only.split(","))]
    out = args.out.rstrip("/")
    host = (args.host_dir or out + ".host").rstrip("/")
    for d in (out, host):
        if os.path.exists(d):
            shutil.rmtree(d)
        os.makedirs(d)
    for t in sorted(set(PROMPTS).union(*(c.prompts for c in cases))):
        rng = np.random.default_rng(t)
        ids = rng.integers(0, VOCAB, t)
        with open(os.path.join(out, f"tokens-{t}.txt"), "w") as f:
            f.write(",".join(map(str, ids)) + "\n")
    done, rejected = [], []
    ptxas_losses: list[str] = []  # PTXAS_LOSSES notes, case by case
    for i, case in enumerate(cases):
        cdir = os.path.join(out, case.name)
        os.makedirs(cdir)
        with open(os.path.join(cdir, "model.strata"), "w") as f:
            f.write(case.description())
        write_gguf(os.path.join(cdir, "model.gguf"), case)
        entry = {"name": case.name, "category": case.category,
                 "doc": case.doc, "types": list(case.types),
                 "gguf": f"{case.name}/model.gguf",
                 "prompts": list(case.prompts),
                 "max_tokens": case.max_tokens, "flags": list(case.flags),
                 "options": [*case.options, *(args.codegen_opt or [])],
                 "plans": {}, "host_plans": {}, "kernels": {}, "gemms": []}
        why: dict[str, str] = {}  # policy -> why it is left out
        for prec in POLICIES:
            plan = os.path.join(cdir, f"{prec}.sm90")
            ok, msg, report = compile_plan(args.bin, cdir, plan, TARGET, prec,
                                           case, args.cache_dir,
                                           tuple(args.codegen_opt or ()))
            if not ok:
                why[prec] = (f"strata-compile --target {TARGET} --precision "
                             f"{prec}: {msg}")
                continue
            # The host plan of the same policy: run on the cpu backend here
            # (a case that does not run there is no GPU test), and what
            # `run --backend cpu` runs.
            hplan = os.path.join(host, case.name, prec)
            os.makedirs(os.path.dirname(hplan), exist_ok=True)
            ok, msg, _ = compile_plan(args.bin, cdir, hplan, "host", prec,
                                      case, None)
            if not ok:
                why[prec] = (f"strata-compile --target host --precision "
                             f"{prec}: {msg}")
            elif not args.no_host_run:
                msg = host_check(args.bin, cdir, hplan, out, case)
                if msg:
                    why[prec] = f"strata-run, {prec} host plan on cpu: {msg}"
            if prec in why:
                shutil.rmtree(plan, ignore_errors=True)
                continue
            for loss in strip_kernels(plan):
                print(f"    ptxas ({prec}): {loss}", flush=True)
                ptxas_losses.append(f"{case.name} ({prec}): {loss}")
            entry["plans"][prec] = os.path.relpath(plan, out)
            entry["host_plans"][prec] = os.path.relpath(hplan, out)
            entry["kernels"][prec] = [
                {"label": k["label"], "body": k["body"],
                 "variant": k.get("variant", "")}
                for k in (report or {}).get("kernels", [])]
            entry["gemms"] = sorted(set(entry["gemms"]) | set(plan_gemms(plan)))
        if not entry["plans"]:
            status = "REJECTED (left out)"
        elif why:
            status = (f"ok for {', '.join(entry['plans'])} only "
                      f"({dir_size(cdir) / 1e3:.0f} KB)")
        else:
            status = f"ok ({dir_size(cdir) / 1e3:.0f} KB)"
        print(f"[{i + 1}/{len(cases)}] {case.name}: {status}", flush=True)
        for prec, msg in why.items():
            print("    " + msg.replace("\n", "\n    "), flush=True)
            rejected.append({"name": case.name, "category": case.category,
                             "doc": case.doc, "policy": prec, "reason": msg})
        if entry["plans"]:
            done.append(entry)
        else:
            shutil.rmtree(cdir)
            shutil.rmtree(os.path.join(host, case.name), ignore_errors=True)
    counts: dict[str, int] = {}
    for c in done:
        counts[c["category"]] = counts.get(c["category"], 0) + 1
    missing, variants = coverage(done)
    manifest = {"arch": ARCH, "target": TARGET, "vocab": VOCAB,
                "policies": list(POLICIES), "prompts": list(PROMPTS),
                "types": list(usable), "counts": counts,
                "variants": variants, "recipes_not_run": missing,
                "cases": done, "rejected": rejected,
                "ptxas_losses": ptxas_losses}
    with open(os.path.join(out, "cases.json"), "w") as f:
        json.dump(manifest, f, indent=1)
    print("GEMM variants per weight type (bf16 and f32 plans):")
    for t in usable:
        print(f"  {t:7} {' '.join(variants.get(t, ['-']))}")
    print("recipes in no sm_90 kernel: " + (", ".join(missing) or "none"))
    runs = sum(len(c["plans"]) * len(c["prompts"]) for c in done)
    print(f"{len(done)} cases ("
          + ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
          + f"), {runs} runs; {len(rejected)} compilations rejected; {out}: "
          f"{dir_size(out) / 1e6:.1f} MB; {time.monotonic() - t0:.0f} s")
    for r in rejected:
        print(f"rejected {r['name']} ({r['policy']}): {r['reason']}")
    # Not a failure (the suite checks numbers), but worth a look: the kernel
    # runs slower than its source says.
    print(f"ptxas performance-loss notes ({', '.join(PTXAS_LOSSES)}): "
          f"{len(ptxas_losses)}")
    for loss in ptxas_losses:
        print(f"  {loss}")
    return 0


# ----------------------------------------------------------------------------
# run
# ----------------------------------------------------------------------------

def have_nvidia_gpu() -> bool:
    if shutil.which("nvidia-smi") is None:
        return False
    try:
        return subprocess.run(["nvidia-smi"], capture_output=True,
                              timeout=60).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def run_one(args, manifest_dir: str, case: dict, policy: str, t: int):
    """One strata-run; returns (passed, summary text)."""
    plans = case["plans"] if args.backend != "cpu" else case["host_plans"]
    cmd = [os.path.join(args.bin, "strata-run"),
           os.path.join(manifest_dir, plans[policy]),
           "--gguf", os.path.join(manifest_dir, case["gguf"]),
           "--tokens-file", os.path.join(manifest_dir, f"tokens-{t}.txt"),
           "--backend", args.backend, "--threads", str(args.threads)]
    if not args.no_check:
        cmd.append("--check")
    try:
        p = subprocess.run(cmd, capture_output=True, text=True,
                           timeout=args.timeout)
    except subprocess.TimeoutExpired:
        return False, f"timed out after {args.timeout} s"
    text = p.stdout + p.stderr
    check = re.search(r"^check: .*worst NMSE (\S+) \(kernel (\d+), ([^)]*)\)",
                      text, re.M)
    if p.returncode == 0:
        if check:
            return True, (f"worst NMSE {check.group(1)} (kernel "
                          f"{check.group(2)}, {check.group(3)})")
        return True, "ran" + ("" if args.no_check else " (no check line)")
    lines = [l for l in p.stderr.strip().splitlines() if l.strip()] or \
        [l for l in text.strip().splitlines() if l.strip()] or ["?"]
    err = next((l for l in lines if "error" in l), lines[-1])
    return False, f"rc={p.returncode}: {err.strip()}"


def cmd_run(args) -> int:
    if args.backend == "cuda" and not have_nvidia_gpu():
        print("SKIPPED: no NVIDIA GPU here (diffsuite.py run needs one; "
              "--backend cpu --no-check is a dry run on the host plans)")
        return 77
    with open(os.path.join(args.dir, "cases.json")) as f:
        manifest = json.load(f)
    cases = manifest["cases"]
    if args.only:
        cases = [c for c in cases
                 if any(fnmatch.fnmatch(c["name"], p) for p in args.only.split(","))]
    policies = args.policies.split(",") if args.policies else POLICIES
    jobs = [(c, p, t) for c in cases for p in policies if p in c["plans"]
            for t in c["prompts"]]
    t0 = time.monotonic()
    mode = f"--backend {args.backend}" + (" --no-check" if args.no_check
                                          else " --check")
    head = (f"# test/device/diffsuite.py run: {len(cases)} cases of "
            f"{os.path.join(args.dir, 'cases.json')} x policies x T, "
            f"strata-run {mode}, "
            f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}")
    # Each result is printed and appended as it completes (flushed), so a run
    # cut short by a time limit still leaves every finished line behind; the
    # total line is written last, so its absence marks an unfinished run.
    res = None
    if args.results:
        os.makedirs(os.path.dirname(os.path.abspath(args.results)),
                    exist_ok=True)
        res = open(args.results, "a")
        res.write(head + "\n")
        res.flush()
    failed = 0

    def emit(line: str) -> None:
        print(line, flush=True)
        if res:
            res.write(line + "\n")
            res.flush()

    with concurrent.futures.ThreadPoolExecutor(args.jobs) as ex:
        futures = {ex.submit(run_one, args, args.dir, *j): j for j in jobs}
        for fut in concurrent.futures.as_completed(futures):
            c, p, t = futures[fut]
            ok, summary = fut.result()
            failed += not ok
            emit(f"diffsuite {c['name']} {p} T={t}: "
                 f"{'PASS' if ok else 'FAIL'} {summary}")
    emit(f"diffsuite total: {len(jobs)} runs, {len(jobs) - failed} "
         f"passed, {failed} failed ({len(cases)} cases, "
         f"{time.monotonic() - t0:.0f} s)")
    if res:
        res.close()
    return 1 if failed else 0


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("prepare", help="write and compile the cases")
    p.add_argument("--bin", required=True, help="the build's bin folder")
    p.add_argument("--out", default="build-diffsuite")
    p.add_argument("--types", help="comma-separated weight types "
                   f"(default: {','.join(ALL_TYPES)})")
    p.add_argument("--only", help="comma-separated case name globs")
    p.add_argument("--cache-dir", help="strata-compile's kernel cache")
    p.add_argument("--codegen-opt", action="append", metavar="NAME=VALUE",
                   help="a code generation option for every case's GPU "
                   "plans (repeatable; strata-compile --codegen-opt help)")
    p.add_argument("--host-dir", help="where the host plans go (default: "
                   "OUT.host; not needed on the GPU machine)")
    p.add_argument("--no-host-run", action="store_true",
                   help="do not run the host plans on the cpu backend")
    p.set_defaults(func=cmd_prepare)
    r = sub.add_parser("run", help="run every case on the GPU with --check")
    r.add_argument("--bin", required=True, help="the runtime's bin folder")
    r.add_argument("--dir", default="build-diffsuite")
    r.add_argument("--results", help="append the results lines to FILE")
    r.add_argument("--backend", default="cuda",
                   help="cuda (default); cpu runs the host plans")
    r.add_argument("--no-check", action="store_true",
                   help="run without --check (a dry run of the loop)")
    r.add_argument("--only", help="comma-separated case name globs")
    r.add_argument("--policies", help="bf16,f32 (default: both)")
    r.add_argument("--jobs", type=int, default=min(16, os.cpu_count() or 1),
                   help="strata-run processes at once (default: min(16, "
                   "cores))")
    r.add_argument("--threads", type=int, default=2,
                   help="cpu backend workers per strata-run (default 2)")
    r.add_argument("--timeout", type=int, default=300,
                   help="seconds per strata-run (default 300)")
    r.set_defaults(func=cmd_run)
    args = ap.parse_args()
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
