#!/usr/bin/env python3
"""Random tiny GGUF models that llama.cpp loads: qwen3, qwen3moe, qwen3next.

Tensor names, ggml shapes and metadata follow the llama.cpp vendored in
llama-cpp-python 0.3.36 (src/models/qwen3.cpp, qwen3moe.cpp, qwen3next.cpp,
src/llama-model.cpp load_hparams, src/llama-vocab.cpp) and our
models/qwen3*.strata descriptions. Every matmul input width (ggml ne[0]) is a
multiple of 256, so any block format (K-quants and IQ types included) fits.

Weights are seeded random numbers at scales that keep activations O(1):
matrices N(0, 1/sqrt(K)), token embeddings N(0, 1), norm weights 1 + N(0, 0.1)
and, for qwen3next, ssm_a = -exp(N(0, 0.5)) (llama.cpp multiplies by ssm_a
directly: the converter stores A = -exp(A_log), so it must be negative),
ssm_dt.bias N(0, 0.5), ssm_conv1d N(0, 1/sqrt(conv_kernel)).

Tokenizer (llama.cpp needs `tokenizer.ggml.model`; nothing else is required):
  no_vocab  tokenizer.ggml.model = "no_vocab" plus `{arch}.vocab_size`; no
            token strings at all. llama.cpp then has no BOS/EOS and cannot
            tokenize text, which is fine for id-level logits.
  gpt2      a real byte-level BPE vocabulary: 256 byte tokens (GPT-2's
            byte-to-unicode alphabet), V-257 two-symbol merges, one control
            token "<|endoftext|>" (bos = eos = V-1); `tokenizer.ggml.pre` =
            "qwen2". Text tokenizes and detokenizes.

Weight types: --wtype applies to the 2-D/3-D matmul weights (attn, ffn, ssm
projections, experts, output, token_embd unless --embd-type is given); norms,
biases, ssm_a, ssm_conv1d, ffn_gate_inp and ffn_gate_inp_shexp stay F32 as
llama-quantize leaves them. f32/f16/bf16/q8_0/q4_0/q4_1/q5_0/q5_1 are
quantized with gguf-py; every other block format (q4_k, q5_k, q6_k, iq4_nl,
iq4_xs, iq3_s, iq3_xxs, iq2_xxs, ...) gets random block bytes whose f16 scale
fields are rewritten so the dequantized weights have the intended spread.

What that llama.cpp insists on (found by leaving each key out in turn):
  * all archs: {arch}.block_count, .context_length, .embedding_length,
    .attention.layer_norm_rms_epsilon ("key not found"); tokenizer.ggml.model
    (+ {arch}.vocab_size for no_vocab, + tokens and merges for gpt2);
    .attention.head_count, .feed_forward_length (qwen3) and
    .expert_feed_forward_length (MoE) are optional keys but then default to 0
    and the tensor shape check fails; .head_count_kv defaults to head_count,
    .key_length/.value_length to embedding_length/head_count (needed here
    because HD=128 != 256/4). .expert_count/.expert_used_count missing
    abort the process (GGML_ASSERT), not a catchable error.
  * optional with silent defaults: rope.freq_base (10000!), rope.dimension_count
    (= key_length), general.*.
  * qwen3next: ssm.conv_kernel/.state_size/.group_count/.time_step_rank/
    .inner_size all required; expert_shared_feed_forward_length (else
    feed_forward_length) required; full_attention_interval defaults to 4
    (layer l is full attention iff (l+1) % interval == 0) and a bool array
    {arch}.attention.recurrent_layers overrides it.

Usage:
  make_tiny_gguf.py ARCH OUT.gguf [--seed N] [--wtype T] [--embd-type T]
                    [--tokenizer no_vocab|gpt2] [--tie-embeddings]
                    [--layers N] [--omit-key KEY ...] [--set-key KEY=VALUE ...]
  make_tiny_gguf.py all OUTDIR      # qwen3.gguf, qwen3moe.gguf, qwen3next.gguf

As a library: build(arch, path, **options) -> dict of the dims used.
"""

import argparse
import os
import sys

try:
    import numpy as np
    import gguf
except ImportError as e:  # pragma: no cover
    print(f"SKIPPED: {e}")
    sys.exit(77)

GT = gguf.GGUFValueType
Q = gguf.GGMLQuantizationType

ARCHS = ("qwen3", "qwen3moe", "qwen3next")

# Default dims per arch. D, head dims, FFN and expert widths are multiples of
# 256 where they are a matmul's K; vocab is 1000 (rows only, never a K).
DEFAULTS = {
    "qwen3": dict(V=1000, D=256, L=2, H=4, HKV=2, HD=128, F=512, ctx=4096,
                  rope_base=1000000.0, rope_dims=None),
    "qwen3moe": dict(V=1000, D=256, L=2, H=4, HKV=2, HD=128, E=8, K=2, FE=256,
                     ctx=4096, rope_base=1000000.0, rope_dims=None),
    # qwen3next: L=4 with full_attention_interval=2 gives layers 0,2 = gated
    # delta net and 1,3 = gated full attention ((l+1) % FAI == 0 is attention).
    # Partial RoPE: rope.dimension_count = HD/4 as the converter writes it.
    # DV must equal DK (ssm.inner_size == ssm.state_size * ssm.time_step_rank):
    # llama.cpp sizes ssm_out/ssm_norm/attn_gate with head_v_dim = state_size
    # but the graph uses inner_size / time_step_rank.
    "qwen3next": dict(V=1000, D=256, L=4, H=4, HKV=2, HD=128, E=8, K=2, FE=256,
                      FS=256, FAI=2, DK=128, HK=2, HV=4, CONV=4, ctx=4096,
                      rope_base=10000000.0, rope_dims=32),
}

EPS = 1e-6

# Types gguf-py can quantize itself.
GGUF_PY_QUANTIZE = {Q.F32, Q.F16, Q.BF16, Q.Q8_0, Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1}

# Byte offsets of the f16 scale fields inside one block, for types written as
# random bytes. Every field listed is scaled by the same factor (d and dmin).
SCALE_FIELDS = {
    Q.Q2_K: (80, 82),
    Q.Q3_K: (108,),
    Q.Q4_K: (0, 2),
    Q.Q5_K: (0, 2),
    Q.Q6_K: (208,),
    Q.IQ4_NL: (0,),
    Q.IQ4_XS: (0,),
    Q.IQ3_S: (0,),
    Q.IQ3_XXS: (0,),
    Q.IQ2_XXS: (0,),
    Q.IQ2_XS: (0,),
    Q.IQ2_S: (0,),
}


def parse_type(name):
    try:
        return Q[name.upper()]
    except KeyError:
        raise SystemExit(f"make_tiny_gguf: unknown tensor type '{name}'")


def tensor_bytes(rng, values, qtype):
    """Return (array, raw_dtype) for GGUFWriter.add_tensor.

    values: float32 ndarray in numpy order (last axis = ggml ne[0]); its
    standard deviation is the spread the random blocks are scaled to."""
    if qtype == Q.F32:
        return values.astype(np.float32), None
    if qtype == Q.F16:
        return values.astype(np.float16), None
    if qtype in GGUF_PY_QUANTIZE:
        return gguf.quants.quantize(values, qtype), qtype
    if qtype not in SCALE_FIELDS:
        raise SystemExit(f"make_tiny_gguf: no writer for type {qtype.name}")
    block, tsize = gguf.GGML_QUANT_SIZES[qtype]
    if values.shape[-1] % block:
        raise SystemExit(f"make_tiny_gguf: row length {values.shape[-1]} is not a multiple of {block} "
                         f"({qtype.name})")
    nblocks = values.size // block
    raw = rng.integers(0, 256, size=(nblocks, tsize), dtype=np.uint8)
    # Pass 1: all scale fields = 1.0, measure the spread, then rescale.
    one = np.frombuffer(np.float16(1.0).tobytes(), dtype=np.uint8)
    for off in SCALE_FIELDS[qtype]:
        raw[:, off:off + 2] = one
    deq = gguf.quants.dequantize(raw, qtype)
    spread = float(np.std(deq)) or 1.0
    target = float(np.std(values)) or 1.0
    scale = np.frombuffer(np.float16(target / spread).tobytes(), dtype=np.uint8)
    for off in SCALE_FIELDS[qtype]:
        raw[:, off:off + 2] = scale
    byte_shape = values.shape[:-1] + (values.shape[-1] // block * tsize,)
    return raw.reshape(byte_shape), qtype


def gpt2_vocab(n_vocab):
    """A byte-level BPE vocabulary of n_vocab tokens that llama.cpp accepts."""
    # GPT-2 bytes_to_unicode.
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    byte_sym = {b: chr(c) for b, c in zip(bs, cs)}
    tokens = [byte_sym[b] for b in range(256)]
    merges = []
    # Merge pairs of printable ASCII letters/digits first: "a b" -> "ab".
    alphabet = [byte_sym[b] for b in range(ord("a"), ord("z") + 1)] + \
        [byte_sym[b] for b in range(ord("A"), ord("Z") + 1)] + \
        [byte_sym[b] for b in range(ord("0"), ord("9") + 1)] + [byte_sym[ord(" ")]]
    seen = set(tokens)
    want = n_vocab - 1 - len(tokens)
    for a in alphabet:
        for b in alphabet:
            if len(merges) >= want:
                break
            if a + b in seen:
                continue
            merges.append(f"{a} {b}")
            tokens.append(a + b)
            seen.add(a + b)
    assert len(tokens) == n_vocab - 1, (len(tokens), n_vocab)
    tokens.append("<|endoftext|>")
    types = [gguf.TokenType.NORMAL] * (n_vocab - 1) + [gguf.TokenType.CONTROL]
    return tokens, types, merges


def metadata(arch, d, tokenizer):
    """Ordered (key, value, GGUFValueType) list; the writer adds general.architecture."""
    a = arch
    m = [
        ("general.name", f"tiny-{arch}", GT.STRING),
        ("general.quantization_version", 2, GT.UINT32),
        (f"{a}.block_count", d["L"], GT.UINT32),
        (f"{a}.context_length", d["ctx"], GT.UINT32),
        (f"{a}.embedding_length", d["D"], GT.UINT32),
        (f"{a}.attention.head_count", d["H"], GT.UINT32),
        (f"{a}.attention.head_count_kv", d["HKV"], GT.UINT32),
        (f"{a}.attention.key_length", d["HD"], GT.UINT32),
        (f"{a}.attention.value_length", d["HD"], GT.UINT32),
        (f"{a}.attention.layer_norm_rms_epsilon", EPS, GT.FLOAT32),
        (f"{a}.rope.freq_base", d["rope_base"], GT.FLOAT32),
        (f"{a}.rope.dimension_count", d["rope_dims"] or d["HD"], GT.UINT32),
    ]
    if arch == "qwen3":
        m.append((f"{a}.feed_forward_length", d["F"], GT.UINT32))
    else:
        m += [
            (f"{a}.expert_count", d["E"], GT.UINT32),
            (f"{a}.expert_used_count", d["K"], GT.UINT32),
            (f"{a}.expert_feed_forward_length", d["FE"], GT.UINT32),
        ]
    if arch == "qwen3next":
        m += [
            (f"{a}.expert_shared_feed_forward_length", d["FS"], GT.UINT32),
            (f"{a}.full_attention_interval", d["FAI"], GT.UINT32),
            (f"{a}.ssm.conv_kernel", d["CONV"], GT.UINT32),
            (f"{a}.ssm.state_size", d["DK"], GT.UINT32),
            (f"{a}.ssm.group_count", d["HK"], GT.UINT32),
            (f"{a}.ssm.time_step_rank", d["HV"], GT.UINT32),
            (f"{a}.ssm.inner_size", d.get("DV", d["DK"]) * d["HV"], GT.UINT32),
        ]
    if tokenizer == "no_vocab":
        m += [
            ("tokenizer.ggml.model", "no_vocab", GT.STRING),
            (f"{a}.vocab_size", d["V"], GT.UINT32),
        ]
    elif tokenizer == "gpt2":
        tokens, types, merges = gpt2_vocab(d["V"])
        m += [
            ("tokenizer.ggml.model", "gpt2", GT.STRING),
            ("tokenizer.ggml.pre", "qwen2", GT.STRING),
            ("tokenizer.ggml.tokens", tokens, GT.ARRAY),
            ("tokenizer.ggml.token_type", [int(t) for t in types], GT.ARRAY),
            ("tokenizer.ggml.merges", merges, GT.ARRAY),
            ("tokenizer.ggml.bos_token_id", d["V"] - 1, GT.UINT32),
            ("tokenizer.ggml.eos_token_id", d["V"] - 1, GT.UINT32),
            ("tokenizer.ggml.add_bos_token", False, GT.BOOL),
        ]
    else:
        raise SystemExit(f"make_tiny_gguf: unknown tokenizer '{tokenizer}'")
    return m


def tensors(arch, d, tie):
    """(name, numpy shape, kind) in llama.cpp's order. numpy shape = reversed ggml ne.

    kind: mat (matmul weight, K = last axis), embd, norm, gate (router; F32),
    ssm_a, dt, conv."""
    D, V, H, HKV, HD = d["D"], d["V"], d["H"], d["HKV"], d["HD"]
    t = [("token_embd.weight", (V, D), "embd"), ("output_norm.weight", (D,), "norm")]
    if not tie:
        t.append(("output.weight", (V, D), "mat"))
    for l in range(d["L"]):
        b = f"blk.{l}."
        t.append((b + "attn_norm.weight", (D,), "norm"))
        recurrent = arch == "qwen3next" and (l + 1) % d["FAI"] != 0
        if not recurrent:
            # qwen3next's attn_q yields per head HD query values then HD gate values.
            qrows = 2 * H * HD if arch == "qwen3next" else H * HD
            t += [
                (b + "attn_q.weight", (qrows, D), "mat"),
                (b + "attn_k.weight", (HKV * HD, D), "mat"),
                (b + "attn_v.weight", (HKV * HD, D), "mat"),
                (b + "attn_output.weight", (D, H * HD), "mat"),
                (b + "attn_q_norm.weight", (HD,), "norm"),
                (b + "attn_k_norm.weight", (HD,), "norm"),
            ]
        else:
            DK, HK, HV, CONV = d["DK"], d["HK"], d["HV"], d["CONV"]
            DV = d.get("DV", DK)  # llama.cpp only works with DV == DK (see DEFAULTS)
            qkv = 2 * HK * DK + HV * DV
            t += [
                (b + "attn_qkv.weight", (qkv, D), "mat"),
                (b + "attn_gate.weight", (HV * DV, D), "mat"),
                (b + "ssm_conv1d.weight", (qkv, CONV), "conv"),
                (b + "ssm_dt.bias", (HV,), "dt"),
                (b + "ssm_a", (HV,), "ssm_a"),
                (b + "ssm_ba.weight", (2 * HV, D), "mat"),
                (b + "ssm_norm.weight", (DV,), "norm"),
                (b + "ssm_out.weight", (D, HV * DV), "mat"),
            ]
        if arch == "qwen3":
            F = d["F"]
            t += [
                (b + "ffn_norm.weight", (D,), "norm"),
                (b + "ffn_gate.weight", (F, D), "mat"),
                (b + "ffn_up.weight", (F, D), "mat"),
                (b + "ffn_down.weight", (D, F), "mat"),
            ]
            continue
        E, FE = d["E"], d["FE"]
        # qwen3moe has ffn_norm; qwen3next's MoE pre-norm is post_attention_norm.
        norm = "ffn_norm" if arch == "qwen3moe" else "post_attention_norm"
        t += [
            (b + norm + ".weight", (D,), "norm"),
            (b + "ffn_gate_inp.weight", (E, D), "gate"),
            (b + "ffn_gate_exps.weight", (E, FE, D), "mat"),
            (b + "ffn_up_exps.weight", (E, FE, D), "mat"),
            (b + "ffn_down_exps.weight", (E, D, FE), "mat"),
        ]
        if arch == "qwen3next":
            FS = d["FS"]
            t += [
                # 1-D [D]: ggml treats it as a [D, 1] matrix (one output per token).
                (b + "ffn_gate_inp_shexp.weight", (D,), "gate"),
                (b + "ffn_gate_shexp.weight", (FS, D), "mat"),
                (b + "ffn_up_shexp.weight", (FS, D), "mat"),
                (b + "ffn_down_shexp.weight", (D, FS), "mat"),
            ]
    return t


def init_values(rng, shape, kind):
    if kind == "embd":
        return rng.standard_normal(shape, dtype=np.float32)
    if kind in ("mat", "gate"):
        return (rng.standard_normal(shape, dtype=np.float32) / np.sqrt(shape[-1])).astype(np.float32)
    if kind == "norm":
        return (1.0 + 0.1 * rng.standard_normal(shape, dtype=np.float32)).astype(np.float32)
    if kind == "ssm_a":
        return (-np.exp(0.5 * rng.standard_normal(shape))).astype(np.float32)
    if kind == "dt":
        return (0.5 * rng.standard_normal(shape)).astype(np.float32)
    if kind == "conv":
        return (rng.standard_normal(shape, dtype=np.float32) / np.sqrt(shape[-1])).astype(np.float32)
    raise AssertionError(kind)


def build(arch, path, seed=0, wtype="f32", embd_type=None, tokenizer="no_vocab",
          tie_embeddings=False, layers=None, omit_keys=(), set_keys=None, dims=None):
    """Write a random tiny `arch` model to `path`; return the dims used."""
    if arch not in ARCHS:
        raise SystemExit(f"make_tiny_gguf: unknown arch '{arch}' (one of {', '.join(ARCHS)})")
    d = dict(DEFAULTS[arch])
    d.update(dims or {})
    if layers is not None:
        d["L"] = layers
    wt = parse_type(wtype)
    et = parse_type(embd_type) if embd_type else wt
    rng = np.random.default_rng(seed)

    w = gguf.GGUFWriter(path, arch)
    meta = metadata(arch, d, tokenizer)
    if wt != Q.F32 or et != Q.F32:
        meta.append(("general.file_type", 1 if wt == Q.F16 else 0, GT.UINT32))
    omit = set(omit_keys)
    for key, value, vtype in meta:
        if key in omit:
            continue
        w.add_key_value(key, value, vtype,
                        sub_type=(GT.STRING if vtype == GT.ARRAY and isinstance(value[0], str)
                                  else GT.INT32 if vtype == GT.ARRAY else None))
    for kv in set_keys or []:
        key, _, value = kv.partition("=")
        key = key.replace("{arch}", arch)
        if value.lstrip("-").isdigit():
            w.add_key_value(key, int(value), GT.UINT32 if int(value) >= 0 else GT.INT32)
        elif value in ("true", "false"):
            w.add_key_value(key, value == "true", GT.BOOL)
        else:
            try:
                w.add_key_value(key, float(value), GT.FLOAT32)
            except ValueError:
                w.add_key_value(key, value, GT.STRING)

    for name, shape, kind in tensors(arch, d, tie_embeddings):
        values = init_values(rng, shape, kind)
        qt = et if kind == "embd" else wt if kind == "mat" else Q.F32
        arr, raw = tensor_bytes(rng, values, qt)
        w.add_tensor(name, arr, raw_dtype=raw)

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return d


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("arch", help="qwen3 | qwen3moe | qwen3next | all")
    ap.add_argument("out", help="output .gguf (a directory for 'all')")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--wtype", default="f32", help="matmul weight type (f32, f16, q8_0, q4_k, iq4_xs, ...)")
    ap.add_argument("--embd-type", default=None, help="token_embd type (default: --wtype)")
    ap.add_argument("--tokenizer", default="no_vocab", choices=["no_vocab", "gpt2"])
    ap.add_argument("--tie-embeddings", action="store_true", help="omit output.weight")
    ap.add_argument("--layers", type=int, default=None)
    ap.add_argument("--omit-key", action="append", default=[], help="leave a metadata key out (experiments)")
    ap.add_argument("--set-key", action="append", default=[],
                    help="KEY=VALUE extra metadata ({arch} expands); int -> u32, float -> f32")
    a = ap.parse_args(argv)
    opts = dict(seed=a.seed, wtype=a.wtype, embd_type=a.embd_type, tokenizer=a.tokenizer,
                tie_embeddings=a.tie_embeddings, layers=a.layers, omit_keys=a.omit_key,
                set_keys=a.set_key)
    if a.arch == "all":
        os.makedirs(a.out, exist_ok=True)
        for arch in ARCHS:
            p = os.path.join(a.out, f"{arch}.gguf")
            build(arch, p, **opts)
            print(p)
    else:
        build(a.arch, a.out, **opts)
        print(a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
