#!/usr/bin/env python3
"""Golden test: strata's GGUF reader and writer against the PyPI `gguf` package.

Reader direction: gguf.GGUFWriter writes files with every metadata value type
(nested arrays included), u32 and u64 counts, many tensor types and custom
alignments; `strata-gguf inspect --full` must report the same header,
metadata (key, type, value, in order) and tensor table (name, type, dims,
offset, bytes) as gguf.GGUFReader and as the values written.

Writer direction: `strata-gguf rewrite IN OUT` reads with strata's reader and
writes with strata's writer; OUT must be byte-identical to the gguf-written
IN (both lay files out canonically), and gguf.GGUFReader must read OUT with
the same fields and tensor bytes. Files with trailing junk are normalised.

Also: files both readers must reject, and `strata-gguf types` against
gguf.GGML_QUANT_SIZES.

Usage:
  gguf_oracle.py --strata-gguf BIN --workdir DIR   # run the checks (ctest)
  gguf_oracle.py --write-seeds DIR                 # small valid files for the fuzzer

Exits 0 on success, 1 on a mismatch, 77 (ctest: skipped) if `gguf` or numpy
is missing.
"""

import argparse
import math
import os
import re
import subprocess
import sys

try:
    import numpy as np
    import gguf
except ImportError as e:  # pragma: no cover
    print(f"SKIPPED: {e}")
    sys.exit(77)

GT = gguf.GGUFValueType
Q = gguf.GGMLQuantizationType

TYPE_NAMES = {
    GT.UINT8: "u8", GT.INT8: "i8", GT.UINT16: "u16", GT.INT16: "i16",
    GT.UINT32: "u32", GT.INT32: "i32", GT.FLOAT32: "f32", GT.BOOL: "bool",
    GT.STRING: "string", GT.ARRAY: "array", GT.UINT64: "u64", GT.INT64: "i64",
    GT.FLOAT64: "f64",
}

# Typed numpy arrays map to these ggml types by themselves; every other type
# is written as raw bytes with raw_dtype.
NUMPY_TYPES = {Q.F32: np.float32, Q.F16: np.float16, Q.F64: np.float64,
               Q.I8: np.int8, Q.I16: np.int16, Q.I32: np.int32, Q.I64: np.int64}


class Failure(Exception):
    pass


def check(cond, what):
    if not cond:
        raise Failure(what)


# ---------------------------------------------------------------------------
# Test files
# ---------------------------------------------------------------------------

class Case:
    """One GGUF file: metadata entries (key, vtype, sub_type, value) after
    general.architecture, tensors (name, qtype, ggml dims), alignment."""

    def __init__(self, name, kvs, tensors, alignment=None, arch="llama"):
        self.name = name
        self.arch = arch
        self.kvs = kvs
        self.tensors = tensors
        self.alignment = alignment

    def expected_kvs(self):
        out = [("general.architecture", GT.STRING, None, self.arch)]
        if self.alignment is not None:
            out.append(("general.alignment", GT.UINT32, None, self.alignment))
        return out + self.kvs


def tensor_data(qtype, dims, rng):
    """Random contents for a tensor of ggml dims `dims` (ne0 first)."""
    np_shape = tuple(reversed(dims))
    if qtype in NUMPY_TYPES:
        dt = NUMPY_TYPES[qtype]
        if np.issubdtype(dt, np.floating):
            return rng.standard_normal(np_shape).astype(dt)
        return rng.integers(-100, 100, size=np_shape).astype(dt)
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    assert dims[0] % block == 0
    byte_shape = np_shape[:-1] + (dims[0] // block * size,)
    # Any bytes are a valid file payload; the format does not decode them.
    return rng.integers(0, 256, size=byte_shape, dtype=np.uint8)


def write_case(case, path, seed=1):
    rng = np.random.default_rng(seed)
    w = gguf.GGUFWriter(path, case.arch)
    if case.alignment is not None:
        w.add_custom_alignment(case.alignment)
    for key, vtype, sub, value in case.kvs:
        # add_key_value, unlike add_string/add_array, keeps empty strings.
        w.add_key_value(key, value, vtype, sub_type=sub)
    data = {}
    for name, qtype, dims in case.tensors:
        arr = tensor_data(qtype, dims, rng)
        data[name] = arr
        if qtype in NUMPY_TYPES:
            w.add_tensor(name, arr)
        else:
            w.add_tensor(name, arr, raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return data


ALL_VALUES = [
    ("u8", GT.UINT8, None, 255),
    ("i8", GT.INT8, None, -128),
    ("u16", GT.UINT16, None, 65535),
    ("i16", GT.INT16, None, -32768),
    ("u32", GT.UINT32, None, 4294967295),
    ("i32", GT.INT32, None, -2147483648),
    ("f32", GT.FLOAT32, None, 0.1),
    ("f32.tiny", GT.FLOAT32, None, 1e-6),
    ("bool.t", GT.BOOL, None, True),
    ("bool.f", GT.BOOL, None, False),
    ("str", GT.STRING, None, 'h\u00e9llo "w\\orld"\n\ttab \u2713'),
    ("str.empty", GT.STRING, None, ""),
    ("u64", GT.UINT64, None, 18446744073709551615),
    ("i64", GT.INT64, None, -9223372036854775808),
    ("f64", GT.FLOAT64, None, -1.5e-300),
    ("arr.u8", GT.ARRAY, GT.UINT8, [0, 1, 255]),
    ("arr.i8", GT.ARRAY, GT.INT8, [-1, 127]),
    ("arr.u16", GT.ARRAY, GT.UINT16, [65535, 0]),
    ("arr.i16", GT.ARRAY, GT.INT16, [-300, 300]),
    ("arr.u32", GT.ARRAY, GT.UINT32, [1, 2, 4000000000]),
    ("arr.i32", GT.ARRAY, GT.INT32, [-5, 5]),
    ("arr.f32", GT.ARRAY, GT.FLOAT32,
     [0.5, -1e-3, float("inf"), float("-inf"), float("nan")]),
    ("arr.bool", GT.ARRAY, GT.BOOL, [True, False, True]),
    ("arr.str", GT.ARRAY, GT.STRING, ["a", "", "\u00fc\"\\"]),
    ("arr.u64", GT.ARRAY, GT.UINT64, [2**64 - 1, 2**63]),
    ("arr.i64", GT.ARRAY, GT.INT64, [-2**63, 2**62]),
    ("arr.f64", GT.ARRAY, GT.FLOAT64, [1e300, -2.5]),
    ("arr.long", GT.ARRAY, GT.UINT32, list(range(1000))),
    # Inner element types are inferred by gguf-py: int -> i32,
    # float -> f32, str -> string, bool -> bool, bytes -> u8.
    ("nest.i32", GT.ARRAY, GT.ARRAY, [[1, 2], [3, 4, 5]]),
    ("nest.str", GT.ARRAY, GT.ARRAY, [["a"], ["b", "c"]]),
    ("nest.mixed", GT.ARRAY, GT.ARRAY, [[1.5], ["x"], [True, False]]),
    ("nest.bytes", GT.ARRAY, GT.ARRAY, [b"\x00\xff", b"\x07"]),
    ("nest.3", GT.ARRAY, GT.ARRAY, [[[1.25]], [[2.5, 3.5], [4.0]]]),
    ("nest.8", GT.ARRAY, GT.ARRAY, [[[[[[[7]]]]]]]),
]

# u32 hparams as gguf-py's helpers write them, and u64 ones as the spec's
# convention has them: readers must take both.
COUNTS = [
    ("llama.block_count", GT.UINT32, None, 2),
    ("llama.context_length", GT.UINT64, None, 4096),
    ("llama.embedding_length", GT.UINT32, None, 64),
    ("llama.expert_count", GT.UINT64, None, 8),
    ("llama.attention.head_count_kv", GT.ARRAY, GT.UINT32, [2, 4]),
    ("llama.attention.layer_norm_rms_epsilon", GT.FLOAT32, None, 1e-5),
    ("general.quantization_version", GT.UINT32, None, 2),
]


def all_tensor_types(known_ids):
    """One tensor of every ggml type that both strata and gguf-py know."""
    out = []
    for t in Q:
        if t == Q.Q8_1 or t.value not in known_ids:
            continue  # gguf-py's Q8_1 size disagrees with ggml's (ref §4.3)
        block, _ = gguf.GGML_QUANT_SIZES[t]
        out.append((f"t.{t.name.lower()}", t, [block * 2, 3]))
    return out


def cases(known_ids):
    return [
        Case("all_values", ALL_VALUES + COUNTS,
             all_tensor_types(known_ids) + [
                 ("blk.0.ffn_down_exps.weight", Q.Q6_K, [256, 2, 3]),
                 ("t.4d", Q.F32, [2, 3, 4, 5]),
                 ("t.1d", Q.F16, [7]),
             ]),
        Case("align64", COUNTS,
             [("a", Q.F16, [3]), ("b", Q.Q8_0, [32]), ("c", Q.Q4_K, [256, 2]),
              ("d", Q.I8, [1])], alignment=64),
        Case("align8", [("x", GT.UINT8, None, 1)],
             [("a", Q.F32, [1]), ("b", Q.F16, [5]), ("c", Q.IQ4_NL, [32])],
             alignment=8),
        Case("align4096", [], [("a", Q.BF16, [3]), ("b", Q.F32, [2])],
             alignment=4096, arch="qwen3"),
        Case("metadata_only", ALL_VALUES, [], arch="qwen3moe"),
    ]


def seed_cases():
    """Small valid files (< 4 KB each) for the fuzzer's seed corpus."""
    small_values = [kv for kv in ALL_VALUES if kv[0] != "arr.long"]
    return [
        Case("seed_values", small_values,
             [("a", Q.F32, [4]), ("b", Q.Q8_0, [32])]),
        Case("seed_tensors", COUNTS,
             [("token_embd.weight", Q.Q4_K, [256]), ("n", Q.F16, [3, 2]),
              ("e", Q.Q8_0, [32, 1, 2]), ("i", Q.I32, [1, 1, 1, 2])]),
        Case("seed_align64", [("k", GT.ARRAY, GT.ARRAY, [[1], [2, 3]])],
             [("a", Q.F16, [3]), ("b", Q.IQ4_NL, [32])], alignment=64),
        Case("seed_empty", [], []),
    ]


# ---------------------------------------------------------------------------
# Parsing `strata-gguf inspect --full`
# ---------------------------------------------------------------------------

class ValueParser:
    """Parses MetaValue::toString output (bytes): "str" with \\" \\\\ \\xNN
    escapes, numbers, true/false, [a, b, ...]."""

    def __init__(self, text):
        self.t = text
        self.p = 0

    def parse(self):
        v = self.value()
        check(self.p == len(self.t), f"trailing text in value {self.t!r}")
        return v

    def value(self):
        c = self.t[self.p:self.p + 1]
        if c == b'"':
            return self.string()
        if c == b"[":
            self.p += 1
            out = []
            if self.t[self.p:self.p + 1] == b"]":
                self.p += 1
                return out
            while True:
                out.append(self.value())
                if self.t.startswith(b", ", self.p):
                    self.p += 2
                    check(not self.t.startswith(b"...", self.p),
                          "array elided despite --full")
                    continue
                check(self.t[self.p:self.p + 1] == b"]",
                      f"bad array at {self.p} in {self.t!r}")
                self.p += 1
                return out
        m = re.compile(rb"[^,\]]+").match(self.t, self.p)
        check(m is not None, f"bad value at {self.p} in {self.t!r}")
        self.p = m.end()
        word = m.group().decode()
        if word in ("true", "false"):
            return word == "true"
        try:
            return int(word)
        except ValueError:
            return float(word)

    def string(self):
        self.p += 1
        out = bytearray()
        while True:
            check(self.p < len(self.t), "unterminated string")
            c = self.t[self.p]
            if c == ord('"'):
                self.p += 1
                return out.decode("utf-8")
            if c == ord("\\"):
                e = self.t[self.p + 1]
                if e == ord("x"):
                    out.append(int(self.t[self.p + 2:self.p + 4], 16))
                    self.p += 4
                else:
                    out.append(e)
                    self.p += 2
                continue
            out.append(c)
            self.p += 1


def inspect(tool, path, full=True):
    args = [tool, "inspect"] + (["--full"] if full else []) + [path]
    r = subprocess.run(args, capture_output=True)
    check(r.returncode == 0,
          f"strata-gguf inspect {path} failed: {r.stderr.decode(errors='replace')}")
    lines = r.stdout.split(b"\n")
    check(lines[-1] == b"", "output does not end in a newline")
    lines = lines[:-1]
    out = {"metadata": [], "tensors": []}
    header = {b"file": "file", b"version": "version",
              b"alignment": "alignment", b"data offset": "data_offset"}
    i = 0
    while i < len(lines):
        line = lines[i]
        i += 1
        m = re.fullmatch(rb"(metadata|tensors) \((\d+)\):", line)
        if m:
            n = int(m.group(2))
            if m.group(1) == b"metadata":
                for _ in range(n):
                    mm = re.fullmatch(rb"  (\S+) +(\S+) +(.*)", lines[i])
                    check(mm is not None, f"bad metadata line {lines[i]!r}")
                    out["metadata"].append((mm.group(1).decode(),
                                            mm.group(2).decode(), mm.group(3)))
                    i += 1
            elif n:
                check(lines[i].split() == [b"name", b"type", b"dims",
                                           b"offset", b"bytes"],
                      f"bad tensor header {lines[i]!r}")
                i += 1
                for _ in range(n):
                    mm = re.fullmatch(
                        rb"  (\S+) +(\S+) +\[([0-9, ]*)\] +(\d+) +(\d+)",
                        lines[i])
                    check(mm is not None, f"bad tensor line {lines[i]!r}")
                    out["tensors"].append((
                        mm.group(1).decode(), mm.group(2).decode(),
                        [int(d) for d in mm.group(3).split(b", ")],
                        int(mm.group(4)), int(mm.group(5))))
                    i += 1
            continue
        key, _, value = line.partition(b": ")
        check(key in header, f"unexpected line {line!r}")
        v = value.decode()
        out[header[key]] = v if key == b"file" else int(v)
    return out


# ---------------------------------------------------------------------------
# Comparisons
# ---------------------------------------------------------------------------

def inner_type(v):
    """gguf-py's inferred element type for a nested array element."""
    if isinstance(v, (bytes, bytearray)):
        return GT.UINT8
    return GT.get_type(v[0])


def normalise(vtype, sub, value):
    """The value as strata should print it: f32 rounded to float, bytes as
    lists, nested arrays with inferred element types."""
    if vtype == GT.FLOAT32:
        return float(np.float32(value))
    if vtype == GT.ARRAY:
        if sub == GT.ARRAY:
            return [normalise(GT.ARRAY, inner_type(e), e) for e in value]
        return [normalise(sub, None, e) for e in value]
    return value


def same(a, b):
    if isinstance(a, list) or isinstance(b, list):
        return (isinstance(a, list) and isinstance(b, list) and len(a) == len(b)
                and all(same(x, y) for x, y in zip(a, b)))
    if isinstance(b, float):
        # fmt prints a float with an integral value without a point ("4");
        # the type column (and the byte-identical rewrite) pin the type.
        if type(a) is int:
            a = float(a)
        if isinstance(a, float) and math.isnan(a):
            return math.isnan(b)
    return type(a) is type(b) and a == b


def flatten(v):
    if isinstance(v, list):
        return [x for e in v for x in flatten(e)]
    return [v]


def type_name(vtype, sub):
    if vtype == GT.ARRAY:
        return f"array<{TYPE_NAMES[sub]}>"
    return TYPE_NAMES[vtype]


def check_reader_agrees(case, path):
    """gguf.GGUFReader reads back what was written (sanity of the oracle)."""
    r = gguf.GGUFReader(path)
    fields = [f for f in r.fields.values() if not f.name.startswith("GGUF.")]
    want = case.expected_kvs()
    check([f.name for f in fields] == [k for k, *_ in want],
          f"{case.name}: gguf reader keys differ")
    for f, (key, vtype, sub, value) in zip(fields, want):
        check(f.types[0] == vtype, f"{key}: gguf reader type {f.types}")
        got = f.contents()
        exp = normalise(vtype, sub, value)
        if vtype == GT.ARRAY:
            # GGUFReader flattens nested arrays (a known gguf-py limitation)
            # and decodes every leaf with the first inner array's type, so
            # it can only vouch for nested arrays of one leaf type.
            exp = flatten(exp)
            if len({type(x) for x in exp}) > 1:
                continue
            got = [float(x) if isinstance(x, float) else x for x in got]
        elif vtype in (GT.FLOAT32, GT.FLOAT64):
            got = float(got)
        check(same(got, exp), f"{key}: gguf reader read {got!r}, want {exp!r}")
    return r


def check_inspect(tool, case, path):
    r = check_reader_agrees(case, path)
    got = inspect(tool, path)
    check(got["version"] == 3, "version")
    check(got["alignment"] == r.alignment,
          f"alignment {got['alignment']} vs gguf {r.alignment}")
    check(got["data_offset"] == r.data_offset,
          f"data offset {got['data_offset']} vs gguf {r.data_offset}")
    want = case.expected_kvs()
    check(len(got["metadata"]) == len(want),
          f"{len(got['metadata'])} metadata entries, want {len(want)}")
    for (key, tname, text), (wkey, vtype, sub, value) in zip(got["metadata"],
                                                             want):
        check(key == wkey, f"key {key!r}, want {wkey!r}")
        check(tname == type_name(vtype, sub),
              f"{key}: type {tname}, want {type_name(vtype, sub)}")
        v = ValueParser(text).parse()
        exp = normalise(vtype, sub, value)
        check(same(v, exp), f"{key}: strata read {v!r}, want {exp!r}")
    check(len(got["tensors"]) == len(r.tensors), "tensor count")
    for (name, tname, dims, offset, nbytes), t in zip(got["tensors"],
                                                      r.tensors):
        check(name == t.name, f"tensor {name!r} vs {t.name!r}")
        check(tname == t.tensor_type.name, f"{name}: type {tname} vs "
                                           f"{t.tensor_type.name}")
        check(dims == [int(d) for d in t.shape], f"{name}: dims {dims} vs "
                                                 f"{list(t.shape)}")
        check(offset == t.data_offset - r.data_offset, f"{name}: offset")
        check(nbytes == t.n_bytes, f"{name}: {nbytes} bytes vs {t.n_bytes}")
    # Without --full, long arrays are cut with a count.
    short = inspect(tool, path, full=False)
    for key, _, text in short["metadata"]:
        if key == "arr.long":
            check(text.endswith(b", ... (1000 elements)]"), f"elision {text!r}")


def check_same_gguf(a_path, b_path):
    a, b = gguf.GGUFReader(a_path), gguf.GGUFReader(b_path)
    check(a.alignment == b.alignment and a.data_offset == b.data_offset,
          "alignment / data offset differ")
    check(list(a.fields) == list(b.fields), "field keys differ")
    for key in a.fields:
        fa, fb = a.fields[key], b.fields[key]
        check(fa.types == fb.types, f"{key}: types differ")
        # Raw parts compare nested arrays too, which contents() flattens.
        check(len(fa.parts) == len(fb.parts) and all(
            pa.tobytes() == pb.tobytes() for pa, pb in zip(fa.parts, fb.parts)),
            f"{key}: value differs")
    check(len(a.tensors) == len(b.tensors), "tensor count differs")
    for ta, tb in zip(a.tensors, b.tensors):
        check(ta.name == tb.name and ta.tensor_type == tb.tensor_type and
              list(ta.shape) == list(tb.shape) and ta.n_bytes == tb.n_bytes,
              f"tensor {ta.name}: info differs")
        check(ta.data.tobytes() == tb.data.tobytes(),
              f"tensor {ta.name}: data differs")


def run(tool, args):
    return subprocess.run([tool] + args, capture_output=True)


def check_rewrite(tool, case, path, workdir, data):
    out = os.path.join(workdir, case.name + ".rewritten.gguf")
    r = run(tool, ["rewrite", path, out])
    check(r.returncode == 0, f"rewrite failed: {r.stderr.decode()}")
    with open(path, "rb") as f, open(out, "rb") as g:
        check(f.read() == g.read(), f"{case.name}: rewrite is not "
                                    "byte-identical to gguf-py's file")
    check_same_gguf(path, out)
    # The tensor bytes are what python generated, not just self-consistent.
    rd = gguf.GGUFReader(out)
    for t in rd.tensors:
        check(t.data.tobytes() == data[t.name].tobytes(),
              f"{t.name}: data differs from what was written")

    # Trailing junk after the data section is dropped: the output is the
    # canonical file again.
    junk = os.path.join(workdir, case.name + ".junk.gguf")
    with open(path, "rb") as f, open(junk, "wb") as g:
        g.write(f.read() + b"\x01" * 100)
    out2 = os.path.join(workdir, case.name + ".normalised.gguf")
    r = run(tool, ["rewrite", junk, out2])
    check(r.returncode == 0, f"rewrite of junk failed: {r.stderr.decode()}")
    with open(path, "rb") as f, open(out2, "rb") as g:
        check(f.read() == g.read(), f"{case.name}: trailing junk not dropped")


def expect_reject(tool, path, needle, gguf_rejects):
    r = run(tool, ["inspect", path])
    err = r.stderr.decode(errors="replace")
    check(r.returncode == 1, f"{path}: accepted, want an error with {needle!r}")
    check(needle in err and "\n" not in err.rstrip("\n"),
          f"{path}: error {err!r} lacks {needle!r}")
    check(err.startswith(f"strata-gguf: error: {path}: offset "),
          f"{path}: error {err!r} not in '<path>: offset N:' form")
    if gguf_rejects:
        try:
            gguf.GGUFReader(path)
        except Exception:
            return
        raise Failure(f"{path}: gguf.GGUFReader accepted it")


def check_rejections(tool, workdir):
    base = os.path.join(workdir, "align64.gguf")
    with open(base, "rb") as f:
        good = f.read()

    def variant(name, data):
        p = os.path.join(workdir, f"bad_{name}.gguf")
        with open(p, "wb") as f:
            f.write(data)
        return p

    # gguf-py still reads version 2; strata names the version it wants.
    v2 = good[:4] + (2).to_bytes(4, "little") + good[8:]
    expect_reject(tool, variant("v2", v2), "offset 4: version: GGUF version 2 "
                  "is not supported; only version 3 is", gguf_rejects=False)
    expect_reject(tool, variant("magic", b"GGUX" + good[4:]),
                  "offset 0: magic: bad magic", gguf_rejects=True)
    # Cut inside the last tensor's data.
    r = gguf.GGUFReader(base)
    cut = r.tensors[-1].data_offset + r.tensors[-1].n_bytes - 1
    expect_reject(tool, variant("truncated", good[:cut]),
                  "lies outside the file", gguf_rejects=True)

    # general.alignment written as i32: gguf-py raises, and so must we.
    p = os.path.join(workdir, "bad_align_type.gguf")
    w = gguf.GGUFWriter(p, "llama")
    w.add_int32("general.alignment", 64)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    expect_reject(tool, p, "metadata 'general.alignment': must be u32, not i32",
                  gguf_rejects=True)
    # Unknown ggml type id 99 in the first tensor info.
    i = good.index(b"\x01\x00\x00\x00\x00\x00\x00\x00a")  # len 1, "a"
    t_at = i + 9 + 4 + 8  # name, n_dims, one dim
    bad = good[:t_at] + (99).to_bytes(4, "little") + good[t_at + 4:]
    expect_reject(tool, variant("ggml_type", bad),
                  f"offset {t_at}: tensor 'a' type: unknown ggml type id 99",
                  gguf_rejects=True)


def strata_types(tool):
    """{id: (name, block size, type size)} from `strata-gguf types`."""
    r = run(tool, ["types"])
    check(r.returncode == 0, "strata-gguf types failed")
    out = {}
    for line in r.stdout.decode().splitlines()[1:]:
        tid, name, _ir, block, size, _loadable = line.split()
        out[int(tid)] = (name, int(block), int(size))
    return out


def check_types(tool, workdir):
    ours = strata_types(tool)
    for tid, (name, block, size) in ours.items():
        check(tid in {t.value for t in Q}, f"{name}: id {tid} unknown to gguf")
        check(Q(tid).name == name, f"id {tid}: {name} vs gguf {Q(tid).name}")
        if Q(tid) == Q.Q8_1:
            continue  # gguf-py's (32, 40) is not ggml's block_q8_1 (ref §4.3)
        check(gguf.GGML_QUANT_SIZES[Q(tid)] == (block, size),
              f"{name}: ({block}, {size}) vs gguf "
              f"{gguf.GGML_QUANT_SIZES[Q(tid)]}")
    # Types newer than strata's table are refused by id, not misread.
    for t in Q:
        if t.value in ours:
            continue
        print(f"note: gguf knows {t.name} ({t.value}); strata does not")
        p = os.path.join(workdir, f"unknown_{t.name.lower()}.gguf")
        write_case(Case(t.name, [], [("w", t, [gguf.GGML_QUANT_SIZES[t][0]])]),
                   p)
        expect_reject(tool, p, f"tensor 'w' type: unknown ggml type id "
                      f"{t.value}", gguf_rejects=False)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--strata-gguf", help="path to the strata-gguf binary")
    ap.add_argument("--workdir", help="scratch directory for the files")
    ap.add_argument("--write-seeds", metavar="DIR",
                    help="write small valid GGUF files for the fuzzer")
    args = ap.parse_args()

    if args.write_seeds:
        os.makedirs(args.write_seeds, exist_ok=True)
        for case in seed_cases():
            p = os.path.join(args.write_seeds, case.name + ".gguf")
            write_case(case, p)
            size = os.path.getsize(p)
            assert size < 4096, f"{p}: {size} bytes"
            print(f"{p}: {size} bytes")
        return 0

    if not args.strata_gguf or not args.workdir:
        ap.error("--strata-gguf and --workdir are required")
    os.makedirs(args.workdir, exist_ok=True)
    tool = args.strata_gguf
    results = []

    def step(name, fn, *fn_args):
        try:
            fn(*fn_args)
            results.append(True)
            print(f"PASS {name}")
        except Failure as e:
            results.append(False)
            print(f"FAIL {name}: {e}")

    known_ids = set(strata_types(tool))
    for case in cases(known_ids) + seed_cases():
        path = os.path.join(args.workdir, case.name + ".gguf")
        data = write_case(case, path)
        step(f"{case.name}: strata reads what gguf wrote", check_inspect,
             tool, case, path)
        step(f"{case.name}: gguf reads what strata wrote", check_rewrite,
             tool, case, path, args.workdir, data)
    step("malformed files are rejected", check_rejections, tool, args.workdir)
    step("ggml type table matches gguf", check_types, tool, args.workdir)
    failures = results.count(False)
    print(f"{len(results) - failures} of {len(results)} checks passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
