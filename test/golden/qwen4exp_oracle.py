#!/usr/bin/env python3
"""HF transformers as the qwen4exp oracle: the library behind
qwen4exp_llama_convert.py, which makes the goldens in test/golden/qwen4exp_llama/.

Builds `Qwen4ExpForCausalLM` (transformers 5.17, model_type "qwen4_exp_text")
from a fixed tiny config with seeded random weights, in float32 on the CPU,
eager attention and eager experts, no KV cache; runs two fixed prompts; saves
logits and activations captured by forward hooks (write_hf_outputs), and
checks them against its own float64 re-implementation of the spec (Replica)
reading the GGUF. Its GGUF writer (write_gguf, llama.cpp's key and shape
conventions) only feeds the seed search; the committed files are written by
llama.cpp's own converter. Run directly, it says so and exits 2.


Determinism. Weights come from torch.Generator(seed) on the CPU in a fixed
parameter order; prompts from numpy's RandomState(1234). The script then
checks that nothing hinges on a near-tie: the router's k-th vs (k+1)-th
softmax probability (gap > 3e-5) in every layer and token, and the QSA
indexer's last chosen vs first rejected block score (gap > 1e-4) for every
query. If a seed fails it tries seed+1, ... (up to 100) and records the seed
used. A CPU reference can then reproduce the same expert and block choices.

Self-check. After writing, the script re-runs the model from model.gguf with
its own numpy float64 implementation of docs/qwen4exp-model.md (it reads only
the GGUF and the prompt) and compares logits, selections and activations with
HF. The result goes to versions.json["selfcheck"]; --strict exits 1 when it
fails. This checks the GGUF conventions and the written spec together.

The tiny model (HF config field = value):
  vocab_size 256, hidden_size 256, num_hidden_layers 3,
  layer_types [linear_attention, linear_attention, full_attention]
  (HF turns "full_attention" into "qwen_sparse_attention", as it does for the
  real checkpoint), rms_norm_eps 1e-6, hidden_act silu, tie_word_embeddings
  false, eos_token_id 255;
  GDN: linear_num_key_heads 2, linear_num_value_heads 4 (ratio 2, so the GGUF
  V-head re-tiling is visible), linear_key_head_dim = linear_value_head_dim
  32, linear_conv_kernel_dim 4, output_gate_type sigmoid;
  QSA: num_attention_heads 4, num_key_value_heads 2, head_dim 32,
  rope_parameters {rope_type default, rope_theta 1e7, partial_rotary_factor
  0.5 (16 rotary dims), mrope_section [3, 3, 2], mrope_interleaved true},
  indexer_n_heads 4, indexer_kv_heads 1, indexer_head_dim 32,
  indexer_budget 16, indexer_compress_ratio 4 (top 4 blocks + tail: the
  72-token prompt is sparse from query 19 on; the 11-token prompt is dense);
  MoE: num_experts 8, num_experts_per_tok 2, norm_topk_prob true,
  moe_intermediate_size 32, shared_expert_intermediate_size 32;
  HC: hc_count 4, hc_lowrank 8;
  PLE: ple_layer_ids [2] (one-based: block 1), ngram_size 3, heads_per_ngram
  2, ple_embed_dim 32 (4 heads x 8), ple_conv_kernel_size 4,
  ngram_vocab_size_base 500, make_ngram_vocab_size_divisible_by 128,
  seed 1234 (table rows 503+509+521+523 = 2056, padded to 2176).
Every matrix whose input width is hidden_size (256) or hc_count*hidden_size
(1024) takes any GGUF block format; the rest (expert/shared down K=32,
ssm_out K=128, attn_output K=128, hc up K=8, ple_key/value K=32) only fit
F16/BF16/F32, and Q8_0/Q4_0 where K is a multiple of 32. The GGUF is about
3 MB, all outputs about 3.4 MB.

Weights (seeded normal N(mean, std)): token embeddings N(0,1); every linear
N(0, 1/sqrt(fan_in)) except the router (3/sqrt(D)) and the HC inject
(2/sqrt(4D)); zero-centred norm weights N(0, 0.1); the GDN gated norm
1 + N(0, 0.1); A_log = log U(0.05, 1); dt_bias N(-1, 0.5); conv kernels
N(0, 1/sqrt(kernel)) (the PLE conv too, which HF initialises to zero); PLE
table N(0, 1). Every weight the GGUF stores as F16 is rounded to float16 in
the HF model before it runs, so both hold the same numbers.

GGUF conventions (llama.cpp's qwen4exp converter as published GGUFs use it;
conventions.json lists them per tensor):
  * arch "qwen4exp"; ggml dims are HF shapes reversed (a torch [N, K] weight
    is ggml [K, N]); 2-D/3-D matmul weights F16, every 1-D tensor, ssm_conv1d,
    ple_conv1d, ssm_alpha, ssm_beta, hc_*_inject, ffn_gate_inp and
    ffn_gate_inp_shexp F32;
  * zero-centred RMSNorm weights are stored as 1 + w (computed in float32):
    output_hc_norm, hc_{attn,ffn}_norm, attn_{q,k}_norm, indexer.{q,k}_norm,
    ple_norm_{key,query,conv}. ssm_norm (the GDN gated norm) is stored as is;
  * ssm_a = -exp(A_log) (float32);
  * GDN value heads are re-tiled: GGUF v-head j = HF v-head
    (j % n_k)*(n_v/n_k) + j // n_k, so GGUF v-head j uses key head j % n_k
    (HF: v-head h uses key head h // (n_v/n_k)). Applied to the V rows of
    attn_qkv, the rows of attn_gate, ssm_alpha, ssm_beta, the entries of
    ssm_a and ssm_dt.bias, the V channels of ssm_conv1d and the input columns
    of ssm_out (in head_v_dim units). q/k rows and channels are untouched;
  * conv weights [C, 1, K] are squeezed to [C, K] (ggml [K, C]);
  * attn_q keeps HF's per-head [query(head_dim) | gate(head_dim)] rows;
  * indexer.index_qk_proj is split into indexer.q_proj (the first
    indexer_n_heads*indexer_head_dim rows) and indexer.k_proj (the rest);
  * experts.gate_up_proj [E, 2I, D] is split into ffn_gate_exps (rows :I) and
    ffn_up_exps (rows I:); shared_expert_gate [1, D] is stored as is
    (ggml [D, 1]), as llama.cpp's converter does;
  * the PLE table is the global tensor per_layer_token_embd (rows = padded
    n-gram vocabulary, cols = ple_embed_dim / n-gram heads); the hash
    constants are metadata (ple.layer_multipliers, ple.head_vocab_sizes,
    ple.head_offsets as u64 arrays, ple.eos_token_id), ple.layers is
    ZERO-based (HF's ple_layer_ids are one-based);
  * attention.indexer.top_k = indexer_budget in TOKENS; per-layer
    attention.compress_ratios (0 for GDN layers); rope.dimension_count = the
    rotary dims (partial_rotary_factor * head_dim); rope.dimension_sections =
    mrope_section + [0] (i32); ssm.inner_size = n_v * head_v_dim;
    embedding_length_per_layer_input = PLE row width;
    attention.recurrent_layers = bool per layer (true for linear_attention).
  These are llama.cpp's converter's keys (docs/qwen4exp-model.md 2.2); the
  goldens themselves are written by that converter
  (qwen4exp_llama_convert.py), this writer only feeds the seed search.
"""

import argparse
import importlib
import json
import math
import os
import platform
import sys

ARCH = "qwen4exp"
PROMPT_SEED = 1234
T_LONG = 72
T_SHORT = 11
EOS_POS_LONG = 37
MAX_SEED_TRIES = 100
ROUTER_GAP = 3e-5
INDEXER_GAP = 1e-4

TINY = dict(
    vocab_size=256,
    hidden_size=256,
    num_hidden_layers=3,
    layer_types=["linear_attention", "linear_attention", "full_attention"],
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=32,
    hidden_act="silu",
    max_position_embeddings=4096,
    rms_norm_eps=1e-6,
    tie_word_embeddings=False,
    rope_parameters={
        "rope_type": "default",
        "rope_theta": 1.0e7,
        "partial_rotary_factor": 0.5,
        "mrope_section": [3, 3, 2],
        "mrope_interleaved": True,
    },
    attention_bias=False,
    linear_conv_kernel_dim=4,
    linear_key_head_dim=32,
    linear_value_head_dim=32,
    linear_num_key_heads=2,
    linear_num_value_heads=4,
    output_gate_type="sigmoid",
    moe_intermediate_size=32,
    shared_expert_intermediate_size=32,
    num_experts_per_tok=2,
    num_experts=8,
    norm_topk_prob=True,
    hc_count=4,
    hc_lowrank=8,
    ple_layer_ids=[2],
    ple_embed_dim=32,
    ple_conv_kernel_size=4,
    ngram_size=3,
    heads_per_ngram=2,
    ngram_vocab_size_base=500,
    make_ngram_vocab_size_divisible_by=128,
    seed=1234,
    indexer_n_heads=4,
    indexer_kv_heads=1,
    indexer_head_dim=32,
    indexer_budget=16,
    indexer_compress_ratio=4,
    eos_token_id=255,
    bos_token_id=None,
    pad_token_id=None,
)

# Zero-centred RMSNorm weights (HF applies 1 + w; the GGUF stores 1 + w).
ZERO_CENTRED = (
    "hc_norm.weight",
    "self_attn.q_norm.weight",
    "self_attn.k_norm.weight",
    "indexer.q_layernorm.weight",
    "indexer.k_layernorm.weight",
    "ple.norm_key.weight",
    "ple.norm_query.weight",
    "ple.norm_conv.weight",
)


def die(msg, code=1):
    print(f"qwen4exp_oracle: error: {msg}", file=sys.stderr)
    sys.exit(code)


# --------------------------------------------------------------------------
# imports
# --------------------------------------------------------------------------


def import_gguf(path):
    """Imports gguf, first from --gguf-py PATH when given."""
    if path:
        p = os.path.abspath(path)
        if os.path.basename(p) == "gguf" and os.path.isfile(
                os.path.join(p, "__init__.py")):
            p = os.path.dirname(p)
        if not os.path.isfile(os.path.join(p, "gguf", "__init__.py")):
            die(f"--gguf-py {path}: no gguf package there (expected "
                f"{os.path.join(p, 'gguf', '__init__.py')})")
        sys.path.insert(0, p)
    try:
        import gguf  # noqa: F401
    except ImportError as e:
        die("the gguf Python package is not importable "
            f"({e}). Pass --gguf-py DIR (llama.cpp's gguf-py folder or a "
            "folder holding the gguf package), set PYTHONPATH, or "
            "pip install gguf.")
    import gguf
    for need in ("GGUFWriter", "GGUFReader", "GGUFValueType"):
        if not hasattr(gguf, need):
            die(f"the gguf package at {os.path.dirname(gguf.__file__)} has no "
                f"{need}; it is too old")
    return gguf


def gguf_version(gguf):
    # a source folder (llama.cpp's gguf-py) first: an installed gguf's
    # metadata would name another copy than the one imported
    parent = os.path.dirname(os.path.dirname(gguf.__file__))
    pyproject = os.path.join(parent, "pyproject.toml")
    if os.path.isfile(pyproject):
        with open(pyproject, encoding="utf-8") as fh:
            for line in fh:
                if line.strip().startswith("version"):
                    return line.split("=", 1)[1].strip().strip('"') + \
                        " (pyproject)"
    try:
        from importlib import metadata
        return metadata.version("gguf")
    except Exception:
        pass
    return "unknown"


def import_hf():
    try:
        import numpy as np  # noqa: F401
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError as e:
        die(f"numpy, torch and transformers are required ({e})")
    try:
        from transformers import Qwen4ExpForCausalLM, Qwen4ExpTextConfig
    except ImportError:
        try:
            from transformers.models.qwen4_exp import (Qwen4ExpForCausalLM,
                                                       Qwen4ExpTextConfig)
        except ImportError as e:
            import transformers
            die(f"transformers {transformers.__version__} has no qwen4_exp "
                f"model ({e}); 5.17 or newer is needed")
    return Qwen4ExpTextConfig, Qwen4ExpForCausalLM


# --------------------------------------------------------------------------
# model construction
# --------------------------------------------------------------------------


def build_config(Config):
    cfg = Config(**TINY)
    # Eager attention (float additive mask, softmax in f32) and the eager
    # per-expert loop; set before the model exists and again after.
    for attr, val in (("_attn_implementation", "eager"),
                      ("_experts_implementation", "eager")):
        try:
            setattr(cfg, attr, val)
        except Exception:
            pass
    return cfg


def init_weights(model, cfg, seed, torch):
    """Overwrites every parameter from one CPU generator in name order."""
    gen = torch.Generator().manual_seed(seed)
    d = cfg.hidden_size
    hcd = cfg.hc_count * d

    def normal(shape, std, mean=0.0):
        return torch.randn(shape, generator=gen, dtype=torch.float32) * std + mean

    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            shape = tuple(p.shape)
            if name.endswith("embed_tokens.weight"):
                v = normal(shape, 1.0)
            elif name.endswith("ngram_embedding.weight"):
                v = normal(shape, 1.0)
            elif any(name.endswith(s) for s in ZERO_CENTRED):
                v = normal(shape, 0.1)
            elif name.endswith("linear_attn.norm.weight"):
                v = normal(shape, 0.1, 1.0)
            elif name.endswith("A_log"):
                u = torch.rand(shape, generator=gen) * (1.0 - 0.05) + 0.05
                v = torch.log(u)
            elif name.endswith("dt_bias"):
                v = normal(shape, 0.5, -1.0)
            elif name.endswith("conv1d.weight"):
                v = normal(shape, 1.0 / math.sqrt(shape[-1]))
            elif name.endswith("mlp.gate.weight"):
                v = normal(shape, 3.0 / math.sqrt(shape[-1]))
            elif name.endswith("block_inject_weight.weight"):
                v = normal(shape, 2.0 / math.sqrt(hcd))
            elif name.endswith("experts.gate_up_proj") or name.endswith(
                    "experts.down_proj"):
                v = normal(shape, 1.0 / math.sqrt(shape[-1]))
            elif name.endswith(".weight") and len(shape) == 2:
                v = normal(shape, 1.0 / math.sqrt(shape[1]))
            else:
                raise RuntimeError(f"no init rule for parameter {name} {shape}")
            p.copy_(v.to(p.dtype))


# --------------------------------------------------------------------------
# GGUF
# --------------------------------------------------------------------------


def tile_v(t, dim, n_k, n_v, unit):
    """HF grouped value-head order -> GGUF tiled order along `dim` (torch).

    `dim` is viewed as [n_k, n_v/n_k, unit] and the first two are swapped:
    GGUF head j = r*n_k + k holds HF head k*(n_v/n_k) + r.
    """
    shape = list(t.shape)
    r = n_v // n_k
    view = shape[:dim] + [n_k, r, unit] + shape[dim + 1:]
    return t.reshape(view).transpose(dim, dim + 1).contiguous().reshape(shape)


def gguf_plan(model, cfg, torch):
    """[(gguf name, torch tensor (HF values, transformed), 'F16'|'F32',
    HF source, transform note)] in file order."""
    sd = {k: v.detach().to("cpu", torch.float32) for k, v in
          model.state_dict().items()}
    out = []

    def add(gname, t, dtype, src, note):
        out.append((gname, t.contiguous(), dtype, src, note))

    def plus1(src):
        return (1.0 + sd[src]).to(torch.float32)

    d, hc = cfg.hidden_size, cfg.hc_count
    nk, nv = cfg.linear_num_key_heads, cfg.linear_num_value_heads
    dk, dv = cfg.linear_key_head_dim, cfg.linear_value_head_dim
    kd = nk * dk
    inter = cfg.moe_intermediate_size

    add("token_embd.weight", sd["model.embed_tokens.weight"], "F16",
        "model.embed_tokens.weight", "as is")
    add("output.weight", sd["lm_head.weight"], "F16", "lm_head.weight",
        "as is")
    m = "model.hyper_connection_mixer."
    add("output_hc_norm.weight", plus1(m + "hc_norm.weight"), "F32",
        m + "hc_norm.weight", "1 + w")
    add("output_hc_down.weight", sd[m + "input_mix_weight_down.weight"], "F16",
        m + "input_mix_weight_down.weight", "as is")
    add("output_hc_up.weight", sd[m + "input_mix_weight_up.weight"], "F16",
        m + "input_mix_weight_up.weight", "as is")

    for l, kind in enumerate(cfg.layer_types):
        p = f"model.layers.{l}."
        b = f"blk.{l}."
        if (l + 1) in cfg.ple_layer_ids:
            q = p + "ple."
            src = q + "ple_embedding.ngram_embedding.weight"
            add("per_layer_token_embd.weight", sd[src], "F16", src,
                "as is (global tensor)")
            add(b + "ple_key.weight", sd[q + "key_proj.weight"], "F16",
                q + "key_proj.weight", "as is")
            add(b + "ple_value.weight", sd[q + "value_proj.weight"], "F16",
                q + "value_proj.weight", "as is")
            for nm in ("norm_key", "norm_query", "norm_conv"):
                add(b + f"ple_{nm}.weight", plus1(q + nm + ".weight"), "F32",
                    q + nm + ".weight", "1 + w")
            add(b + "ple_conv1d.weight", sd[q + "conv1d.weight"][:, 0, :],
                "F32", q + "conv1d.weight", "squeeze [C,1,K] -> [C,K]")
        for site, hf in (("attn", "attn_hyper_connection"),
                         ("ffn", "mlp_hyper_connection")):
            h = p + hf + "."
            add(b + f"hc_{site}_norm.weight", plus1(h + "hc_norm.weight"),
                "F32", h + "hc_norm.weight", "1 + w")
            add(b + f"hc_{site}_down.weight",
                sd[h + "input_mix_weight_down.weight"], "F16",
                h + "input_mix_weight_down.weight", "as is")
            add(b + f"hc_{site}_up.weight", sd[h + "input_mix_weight_up.weight"],
                "F16", h + "input_mix_weight_up.weight", "as is")
            add(b + f"hc_{site}_inject.weight",
                sd[h + "block_inject_weight.weight"], "F32",
                h + "block_inject_weight.weight", "as is")
        if kind == "linear_attention":
            g = p + "linear_attn."
            w = sd[g + "in_proj_qkv.weight"]
            add(b + "attn_qkv.weight",
                torch.cat([w[:2 * kd], tile_v(w[2 * kd:], 0, nk, nv, dv)]),
                "F16", g + "in_proj_qkv.weight", "V rows tiled")
            add(b + "attn_gate.weight",
                tile_v(sd[g + "in_proj_z.weight"], 0, nk, nv, dv), "F16",
                g + "in_proj_z.weight", "rows tiled")
            add(b + "ssm_alpha.weight",
                tile_v(sd[g + "in_proj_a.weight"], 0, nk, nv, 1), "F32",
                g + "in_proj_a.weight", "rows tiled")
            add(b + "ssm_beta.weight",
                tile_v(sd[g + "in_proj_b.weight"], 0, nk, nv, 1), "F32",
                g + "in_proj_b.weight", "rows tiled")
            a = -torch.exp(sd[g + "A_log"].to(torch.float32))
            add(b + "ssm_a", tile_v(a[:, None], 0, nk, nv, 1)[:, 0], "F32",
                g + "A_log", "-exp(A_log), tiled")
            add(b + "ssm_dt.bias", tile_v(sd[g + "dt_bias"][:, None], 0, nk,
                                          nv, 1)[:, 0],
                "F32", g + "dt_bias", "tiled")
            c = sd[g + "conv1d.weight"][:, 0, :]
            add(b + "ssm_conv1d.weight",
                torch.cat([c[:2 * kd], tile_v(c[2 * kd:], 0, nk, nv, dv)]),
                "F32", g + "conv1d.weight",
                "squeeze [C,1,K] -> [C,K], V channels tiled")
            add(b + "ssm_norm.weight", sd[g + "norm.weight"], "F32",
                g + "norm.weight", "as is (plain weight, no +1)")
            add(b + "ssm_out.weight", tile_v(sd[g + "out_proj.weight"], 1, nk,
                                             nv, dv),
                "F16", g + "out_proj.weight", "input columns tiled")
        else:
            s = p + "self_attn."
            add(b + "attn_q.weight", sd[s + "q_proj.weight"], "F16",
                s + "q_proj.weight", "as is (per head: query | gate)")
            add(b + "attn_k.weight", sd[s + "k_proj.weight"], "F16",
                s + "k_proj.weight", "as is")
            add(b + "attn_v.weight", sd[s + "v_proj.weight"], "F16",
                s + "v_proj.weight", "as is")
            add(b + "attn_output.weight", sd[s + "o_proj.weight"], "F16",
                s + "o_proj.weight", "as is")
            add(b + "attn_q_norm.weight", plus1(s + "q_norm.weight"), "F32",
                s + "q_norm.weight", "1 + w")
            add(b + "attn_k_norm.weight", plus1(s + "k_norm.weight"), "F32",
                s + "k_norm.weight", "1 + w")
            i = s + "indexer."
            w = sd[i + "index_qk_proj.weight"]
            nq = cfg.indexer_n_heads * cfg.indexer_head_dim
            add(b + "indexer.q_proj.weight", w[:nq], "F16",
                i + "index_qk_proj.weight", f"rows [0, {nq})")
            add(b + "indexer.k_proj.weight", w[nq:], "F16",
                i + "index_qk_proj.weight", f"rows [{nq}, end)")
            add(b + "indexer.q_norm.weight", plus1(i + "q_layernorm.weight"),
                "F32", i + "q_layernorm.weight", "1 + w")
            add(b + "indexer.k_norm.weight", plus1(i + "k_layernorm.weight"),
                "F32", i + "k_layernorm.weight", "1 + w")
        e = p + "mlp."
        add(b + "ffn_gate_inp.weight", sd[e + "gate.weight"], "F32",
            e + "gate.weight", "as is (router)")
        gu = sd[e + "experts.gate_up_proj"]
        add(b + "ffn_gate_exps.weight", gu[:, :inter, :], "F16",
            e + "experts.gate_up_proj", f"[:, :{inter}, :]")
        add(b + "ffn_up_exps.weight", gu[:, inter:, :], "F16",
            e + "experts.gate_up_proj", f"[:, {inter}:, :]")
        add(b + "ffn_down_exps.weight", sd[e + "experts.down_proj"], "F16",
            e + "experts.down_proj", "as is")
        for nm in ("gate", "up", "down"):
            src = e + f"shared_expert.{nm}_proj.weight"
            add(b + f"ffn_{nm}_shexp.weight", sd[src], "F16", src, "as is")
        add(b + "ffn_gate_inp_shexp.weight", sd[e + "shared_expert_gate.weight"],
            "F32", e + "shared_expert_gate.weight", "as is ([1, D], ggml [D, 1])")
    return out


def f16_sources(model, cfg, torch):
    """HF parameter names whose GGUF copy is F16 (to be rounded in HF)."""
    return sorted({src for _, _, dt, src, _ in gguf_plan(model, cfg, torch)
                   if dt == "F16"})


def ple_constants(model, cfg):
    """Hash constants of the (single) PLE layer, from HF's own buffers."""
    lid = cfg.ple_layer_ids[0] - 1
    emb = model.model.layers[lid].ple.ple_embedding
    return dict(
        multipliers=[int(x) for x in emb.layer_multipliers.tolist()],
        head_vocab_sizes=[int(x) for x in emb.ngram_heads_vocab_sizes.tolist()],
        head_offsets=[int(x) for x in emb.ngram_heads_offsets.tolist()],
        rows=int(emb.ngram_embedding.weight.shape[0]),
        row_dim=int(emb.ngram_embedding.weight.shape[1]),
    )


def independent_ple_constants(cfg, ple_index):
    """The same constants derived from the config alone (spec check)."""
    mask = (1 << 64) - 1
    gamma = 0x9E3779B97F4A7C15

    def splitmix(v):
        v = (v + gamma) & mask
        v = ((v ^ (v >> 30)) * 0xBF58476D1CE4E5B9) & mask
        v = ((v ^ (v >> 27)) * 0x94D049BB133111EB) & mask
        return (v ^ (v >> 31)) & mask

    half = max(1, (((1 << 63) - 1) // max(cfg.vocab_size, 1)) // 2)
    base_seed = cfg.seed + 10007 * ple_index
    mults = [2 * (splitmix((base_seed + gamma * (i + 1)) & mask) % half) + 1
             for i in range(cfg.ngram_size)]

    def is_prime(x):
        if x < 2:
            return False
        if x % 2 == 0:
            return x == 2
        f = 3
        while f * f <= x:
            if x % f == 0:
                return False
            f += 2
        return True

    nh = (cfg.ngram_size - 1) * cfg.heads_per_ngram
    sizes, offsets, total = [], [], 0
    prime = cfg.ngram_vocab_size_base - 1
    # the (ple_index*nh + j + 1)-th prime >= base; skip earlier layers' primes
    for _ in range(ple_index * nh):
        prime += 1
        while not is_prime(prime):
            prime += 1
    for _ in range(nh):
        prime += 1
        while not is_prime(prime):
            prime += 1
        sizes.append(prime)
        offsets.append(total)
        total += prime
    div = cfg.make_ngram_vocab_size_divisible_by
    rows = -(-total // div) * div
    return dict(multipliers=mults, head_vocab_sizes=sizes, head_offsets=offsets,
                rows=rows)


def write_gguf(path, model, cfg, gguf, torch, np):
    plan = gguf_plan(model, cfg, torch)
    ple = ple_constants(model, cfg)
    V = gguf.GGUFValueType
    w = gguf.GGUFWriter(path, ARCH)
    a = ARCH + "."
    u32 = lambda k, v: w.add_uint32(a + k, int(v))  # noqa: E731

    def arr(k, vals, sub):
        w.add_key_value(a + k, [int(x) for x in vals], V.ARRAY, sub_type=sub)

    w.add_string("general.name", "strata qwen4exp oracle (tiny, random)")
    w.add_uint32("general.file_type", 1)  # mostly F16
    u32("block_count", cfg.num_hidden_layers)
    u32("context_length", cfg.max_position_embeddings)
    u32("embedding_length", cfg.hidden_size)
    u32("vocab_size", cfg.vocab_size)
    u32("attention.head_count", cfg.num_attention_heads)
    u32("attention.head_count_kv", cfg.num_key_value_heads)
    u32("attention.key_length", cfg.head_dim)
    u32("attention.value_length", cfg.head_dim)
    w.add_float32(a + "attention.layer_norm_rms_epsilon", cfg.rms_norm_eps)
    rp = cfg.rope_parameters
    w.add_float32(a + "rope.freq_base", float(rp["rope_theta"]))
    rot = int(cfg.head_dim * rp.get("partial_rotary_factor", 1.0))
    u32("rope.dimension_count", rot)
    arr("rope.dimension_sections", list(rp["mrope_section"]) + [0], V.INT32)
    fai = [i for i, t in enumerate(cfg.layer_types)
           if t != "linear_attention"][0] + 1
    w.add_key_value(a + "attention.recurrent_layers",
                    [t == "linear_attention" for t in cfg.layer_types],
                    V.ARRAY, sub_type=V.BOOL)
    u32("full_attention_interval", fai)
    cr = cfg.indexer_compress_ratio
    arr("attention.compress_ratios",
        [0 if t == "linear_attention" else cr for t in cfg.layer_types],
        V.UINT32)
    u32("attention.indexer.head_count", cfg.indexer_n_heads)
    u32("attention.indexer.key_length", cfg.indexer_head_dim)
    u32("attention.indexer.top_k", cfg.indexer_budget)
    u32("expert_count", cfg.num_experts)
    u32("expert_used_count", cfg.num_experts_per_tok)
    u32("expert_feed_forward_length", cfg.moe_intermediate_size)
    u32("expert_shared_feed_forward_length",
        cfg.shared_expert_intermediate_size)
    u32("ssm.conv_kernel", cfg.linear_conv_kernel_dim)
    u32("ssm.state_size", cfg.linear_key_head_dim)
    u32("ssm.group_count", cfg.linear_num_key_heads)
    u32("ssm.time_step_rank", cfg.linear_num_value_heads)
    u32("ssm.inner_size", cfg.linear_num_value_heads * cfg.linear_value_head_dim)
    u32("hyper_connection.count", cfg.hc_count)
    u32("hyper_connection.low_rank", cfg.hc_lowrank)
    arr("ple.layers", [i - 1 for i in cfg.ple_layer_ids], V.UINT32)
    u32("ple.ngram_size", cfg.ngram_size)
    u32("ple.heads_per_ngram", cfg.heads_per_ngram)
    u32("ple.conv_kernel", cfg.ple_conv_kernel_size)
    u32("ple.eos_token_id", cfg.eos_token_id)
    arr("ple.layer_multipliers", ple["multipliers"], V.UINT64)
    arr("ple.head_vocab_sizes", ple["head_vocab_sizes"], V.UINT64)
    arr("ple.head_offsets", ple["head_offsets"], V.UINT64)
    u32("embedding_length_per_layer_input", ple["row_dim"])
    w.add_string("tokenizer.ggml.model", "no_vocab")
    for name, t, dt, _, _ in plan:
        x = t.numpy().astype(np.float16 if dt == "F16" else np.float32)
        w.add_tensor(name, np.ascontiguousarray(x))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return plan, ple


def prompts(np, cfg):
    rs = np.random.RandomState(PROMPT_SEED)
    eos = cfg.eos_token_id
    long_ = rs.randint(0, cfg.vocab_size - 1, size=T_LONG).astype(np.int64)
    long_[long_ == eos] = 0
    long_[EOS_POS_LONG] = eos  # exercises PLE's n-gram reset at an EOS
    short = rs.randint(0, cfg.vocab_size - 1, size=T_SHORT).astype(np.int64)
    short[short == eos] = 0
    return {"long": long_, "short": short}


class Capture:
    """Forward hooks on the modules whose outputs the oracle keeps."""

    def __init__(self, model, cfg, full):
        self.d = {}
        self.handles = []
        layers = model.model.layers
        for l in range(cfg.num_hidden_layers):
            self._hook(layers[l].mlp.gate, f"router{l}",
                       lambda o: (o[0], o[2]))
        q = [i for i, t in enumerate(cfg.layer_types)
             if t != "linear_attention"][0]
        self._hook(layers[q].self_attn.indexer, f"qsa{q}_mask", lambda o: o)
        if not full:
            return
        self._hook(layers[0].attn_hyper_connection, "hc0_attn_read",
                   lambda o: (o[0], o[2]))
        self._hook(layers[0].linear_attn, "gdn0_out", lambda o: o)
        self._hook(layers[0].mlp, "moe0_out", lambda o: o)
        self._hook(model.model, "final_hidden", lambda o: o.last_hidden_state)
        lp = cfg.ple_layer_ids[0] - 1
        emb = layers[lp].ple.ple_embedding.ngram_embedding
        h = emb.register_forward_pre_hook(
            lambda m, args: self.d.__setitem__(
                f"ple{lp}_ngram_ids", args[0].detach().to("cpu").clone()))
        self.handles.append(h)

    def _hook(self, mod, name, pick):
        def fn(m, args, out):
            v = pick(out)
            if isinstance(v, tuple):
                v = tuple(x.detach().to("cpu").clone() for x in v)
            else:
                v = v.detach().to("cpu").clone()
            self.d[name] = v
        self.handles.append(mod.register_forward_hook(fn))

    def close(self):
        for h in self.handles:
            h.remove()


def run_hf(model, cfg, toks, torch, device, full):
    cap = Capture(model, cfg, full)
    try:
        with torch.no_grad():
            ids = torch.tensor(toks[None, :], dtype=torch.long, device=device)
            out = model(input_ids=ids, use_cache=False)
        logits = out.logits[0].detach().to("cpu", torch.float32)
    finally:
        cap.close()
    return logits, cap.d


def router_margin(caps, cfg, torch):
    k = cfg.num_experts_per_tok
    worst = float("inf")
    for name, v in caps.items():
        if not name.startswith("router"):
            continue
        logits = v[0].to("cpu", torch.float32)
        p = torch.softmax(logits, dim=-1, dtype=torch.float32)
        s = torch.sort(p, dim=-1, descending=True).values
        worst = min(worst, float((s[:, k - 1] - s[:, k]).min()))
    return worst


def qsa_mask_from_hf(caps, torch):
    (name, v), = [(n, v) for n, v in caps.items() if n.endswith("_mask")]
    m = v[0, 0]
    if m.dtype != torch.bool:
        m = m == 0
    return name, m.to("cpu")


# --------------------------------------------------------------------------
# the spec replica: numpy float64, from the GGUF only
# --------------------------------------------------------------------------


class Replica:
    """docs/qwen4exp-model.md, executed: reads model.gguf, runs prefill.

    compress_ratio: when given, every attention layer uses it in place of
    attention.compress_ratios (for files whose ratios are 0, as strata's
    --qsa-compress-ratio does). A ratio of 0 means dense causal attention.
    Attention layers are the ones attention.recurrent_layers marks false (when
    the file has that key), else those with (l + 1) % full_attention_interval
    == 0.
    """

    def __init__(self, path, gguf, np, compress_ratio=None):
        self.np = np
        self.compress_ratio = compress_ratio
        r = gguf.GGUFReader(path)
        self.kv = {}
        for name, f in r.fields.items():
            if name.startswith("GGUF."):
                continue
            self.kv[name] = f.contents()
        self.w = {}
        for t in r.tensors:
            self.w[t.name] = np.array(t.data, dtype=np.float64)
        self.acts = {}
        self.scores = {}

    def meta(self, key):
        return self.kv[ARCH + "." + key]

    def is_attention(self, l):
        rec = self.kv.get(ARCH + ".attention.recurrent_layers")
        if rec is not None:
            return not bool(rec[l])
        return (l + 1) % int(self.meta("full_attention_interval")) == 0

    def ratio(self, l):
        if self.compress_ratio is not None:
            return int(self.compress_ratio)
        return int(self.meta("attention.compress_ratios")[l])

    def W(self, name):
        return self.w[name]

    # elementwise helpers
    def sigmoid(self, x):
        return 1.0 / (1.0 + self.np.exp(-x))

    def silu(self, x):
        return x * self.sigmoid(x)

    def softplus(self, x):
        np = self.np
        return np.where(x > 20.0, x, np.log1p(np.exp(np.minimum(x, 20.0))))

    def rms(self, x, eps):
        np = self.np
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)

    def rope(self, x, pos):
        """Neox rotation of the first rope.dimension_count dims; x [T, H, Dh]."""
        np = self.np
        rot = int(self.meta("rope.dimension_count"))
        base = float(self.meta("rope.freq_base"))
        inv = base ** (-(np.arange(0, rot, 2, dtype=np.float64) / rot))
        ang = pos[:, None].astype(np.float64) * inv[None, :]
        cos = np.concatenate([np.cos(ang)] * 2, axis=-1)[:, None, :]
        sin = np.concatenate([np.sin(ang)] * 2, axis=-1)[:, None, :]
        xr = x[..., :rot]
        half = rot // 2
        rh = np.concatenate([-xr[..., half:], xr[..., :half]], axis=-1)
        return np.concatenate([xr * cos + rh * sin, x[..., rot:]], axis=-1)

    def gr_read(self, R, prefix, inject=True):
        np = self.np
        T, n, D = R.shape
        eps = float(self.meta("attention.layer_norm_rms_epsilon"))
        xn = self.rms(R, eps) * self.W(prefix + "_norm.weight").reshape(n, D)
        xf = xn.reshape(T, n * D)
        lo = self.silu((xf @ self.W(prefix + "_down.weight").T) / n)
        g = self.sigmoid(lo @ self.W(prefix + "_up.weight").T).reshape(T, n, D)
        u = (g * xn).mean(axis=1)
        lam = None
        if inject:
            lam = 2.0 * self.sigmoid((xf @ self.W(prefix + "_inject.weight").T) / n)
        return u, lam

    def gdn(self, u, l):
        np = self.np
        b = f"blk.{l}."
        T = u.shape[0]
        hk = int(self.meta("ssm.group_count"))
        hv = int(self.meta("ssm.time_step_rank"))
        dk = int(self.meta("ssm.state_size"))
        dv = int(self.meta("ssm.inner_size")) // hv
        kw = int(self.meta("ssm.conv_kernel"))
        eps = float(self.meta("attention.layer_norm_rms_epsilon"))
        x = u @ self.W(b + "attn_qkv.weight").T
        cw = self.W(b + "ssm_conv1d.weight")  # [C, K]
        y = np.zeros_like(x)
        for j in range(kw):
            s = kw - 1 - j
            y[s:] += cw[:, j][None, :] * x[:T - s]
        y = self.silu(y)
        q = y[:, :hk * dk].reshape(T, hk, dk)
        k = y[:, hk * dk:2 * hk * dk].reshape(T, hk, dk)
        v = y[:, 2 * hk * dk:].reshape(T, hv, dv)
        q = q / np.sqrt((q * q).sum(-1, keepdims=True) + 1e-6)
        k = k / np.sqrt((k * k).sum(-1, keepdims=True) + 1e-6)
        q = q * dk ** -0.5
        alpha = u @ self.W(b + "ssm_alpha.weight").T
        beta = self.sigmoid(u @ self.W(b + "ssm_beta.weight").T)
        g = self.W(b + "ssm_a")[None, :] * self.softplus(
            alpha + self.W(b + "ssm_dt.bias")[None, :])
        o = np.zeros((T, hv, dv))
        for h in range(hv):
            kh = h % hk  # GGUF tiled order
            S = np.zeros((dk, dv))
            for t in range(T):
                S *= math.exp(g[t, h])
                delta = beta[t, h] * (v[t, h] - k[t, kh] @ S)
                S += np.outer(k[t, kh], delta)
                o[t, h] = q[t, kh] @ S
        z = (u @ self.W(b + "attn_gate.weight").T).reshape(T, hv, dv)
        on = self.rms(o, eps) * self.W(b + "ssm_norm.weight") * self.sigmoid(z)
        return on.reshape(T, hv * dv) @ self.W(b + "ssm_out.weight").T

    def qsa_select(self, u, l):
        np = self.np
        b = f"blk.{l}."
        T = u.shape[0]
        hi = int(self.meta("attention.indexer.head_count"))
        di = int(self.meta("attention.indexer.key_length"))
        budget = int(self.meta("attention.indexer.top_k"))
        cr = self.ratio(l)
        if cr == 0:  # no ratio: dense causal attention
            self.scores[l] = float("inf")
            return np.tril(np.ones((T, T), dtype=bool))
        top = budget // cr
        eps = float(self.meta("attention.layer_norm_rms_epsilon"))
        pos = np.arange(T)
        qi = (u @ self.W(b + "indexer.q_proj.weight").T).reshape(T, hi, di)
        qi = self.rope(self.rms(qi, eps) * self.W(b + "indexer.q_norm.weight"),
                       pos)
        kr = u @ self.W(b + "indexer.k_proj.weight").T  # [T, di]
        nb = T // cr
        kb = kr[:nb * cr].reshape(nb, cr, di).mean(axis=1)
        kb = self.rms(kb, eps) * self.W(b + "indexer.k_norm.weight")
        kb = self.rope(kb[:, None, :], np.arange(nb) * cr)[:, 0, :]
        allowed = np.zeros((T, T), dtype=bool)
        gaps = []
        for t in range(T):
            nc = (t + 1) // cr
            if nc > 0:
                s = np.maximum(qi[t] @ kb[:nc].T, 0.0).sum(axis=0) / math.sqrt(di)
                order = np.argsort(-s, kind="stable")
                chosen = order[:min(top, nc)]
                if nc > top:
                    srt = s[order]
                    gaps.append(float(srt[top - 1] - srt[top]))
                for blk in chosen:
                    allowed[t, blk * cr:(blk + 1) * cr] = True
            allowed[t, nc * cr:t + 1] = True
        self.scores[l] = min(gaps) if gaps else float("inf")
        return allowed

    def qsa(self, u, l):
        np = self.np
        b = f"blk.{l}."
        T = u.shape[0]
        H = int(self.meta("attention.head_count"))
        hkv = int(self.meta("attention.head_count_kv"))
        hd = int(self.meta("attention.key_length"))
        eps = float(self.meta("attention.layer_norm_rms_epsilon"))
        pos = np.arange(T)
        qg = (u @ self.W(b + "attn_q.weight").T).reshape(T, H, 2 * hd)
        q, gate = qg[..., :hd], qg[..., hd:]
        q = self.rope(self.rms(q, eps) * self.W(b + "attn_q_norm.weight"), pos)
        k = (u @ self.W(b + "attn_k.weight").T).reshape(T, hkv, hd)
        k = self.rope(self.rms(k, eps) * self.W(b + "attn_k_norm.weight"), pos)
        v = (u @ self.W(b + "attn_v.weight").T).reshape(T, hkv, hd)
        allowed = self.qsa_select(u, l)
        self.acts[f"qsa{l}_mask"] = allowed
        o = np.zeros((T, H, hd))
        for h in range(H):
            kvh = h // (H // hkv)
            s = (q[:, h] @ k[:, kvh].T) * hd ** -0.5
            s = np.where(allowed, s, -np.inf)
            s = s - s.max(axis=-1, keepdims=True)
            p = np.exp(s)
            p /= p.sum(axis=-1, keepdims=True)
            o[:, h] = p @ v[:, kvh]
        o = o * self.sigmoid(gate)
        return o.reshape(T, H * hd) @ self.W(b + "attn_output.weight").T

    def moe(self, u, l):
        np = self.np
        b = f"blk.{l}."
        T, D = u.shape
        k = int(self.meta("expert_used_count"))
        logits = u @ self.W(b + "ffn_gate_inp.weight").T
        p = np.exp(logits - logits.max(axis=-1, keepdims=True))
        p /= p.sum(axis=-1, keepdims=True)
        order = np.argsort(-p, axis=-1, kind="stable")[:, :k]
        wts = np.take_along_axis(p, order, axis=-1)
        wts = wts / wts.sum(axis=-1, keepdims=True)
        gexp = self.W(b + "ffn_gate_exps.weight")
        uexp = self.W(b + "ffn_up_exps.weight")
        dexp = self.W(b + "ffn_down_exps.weight")
        y = np.zeros((T, D))
        for t in range(T):
            for j in range(k):
                e = order[t, j]
                hmid = self.silu(gexp[e] @ u[t]) * (uexp[e] @ u[t])
                y[t] += wts[t, j] * (dexp[e] @ hmid)
        sh = (self.silu(u @ self.W(b + "ffn_gate_shexp.weight").T) *
              (u @ self.W(b + "ffn_up_shexp.weight").T)) @ \
            self.W(b + "ffn_down_shexp.weight").T
        # [D] (strata's writer) or ggml [D, 1] (llama.cpp's converter)
        sg = self.sigmoid(u @ self.W(b + "ffn_gate_inp_shexp.weight").reshape(-1))
        if l == 0:
            self.acts["router0_ids"] = order
        return y + sg[:, None] * sh

    def ple_ids(self, tokens):
        n = int(self.meta("ple.ngram_size"))
        hpn = int(self.meta("ple.heads_per_ngram"))
        eos = int(self.meta("ple.eos_token_id"))
        mults = [int(x) for x in self.meta("ple.layer_multipliers")]
        sizes = [int(x) for x in self.meta("ple.head_vocab_sizes")]
        offs = [int(x) for x in self.meta("ple.head_offsets")]
        hist = [eos] * (n - 1) + [int(x) for x in tokens]
        ids = []
        for i in range(len(tokens)):
            P = i + n - 1
            back = []
            for s in range(n):
                if s == 0 or eos not in hist[P - s:P]:
                    back.append(hist[P - s])
                else:
                    back.append(eos)
            row = []
            for order_n in range(2, n + 1):
                mixed = 0
                for s in range(order_n):
                    mixed ^= back[s] * mults[s]
                for j in range(hpn):
                    h = (order_n - 2) * hpn + j
                    row.append(mixed % sizes[h] + offs[h])
            ids.append(row)
        return self.np.array(ids, dtype=self.np.int64)

    def ple(self, R, tokens, l):
        np = self.np
        b = f"blk.{l}."
        T, n, D = R.shape
        eps = float(self.meta("attention.layer_norm_rms_epsilon"))
        ids = self.ple_ids(tokens)
        self.acts[f"ple{l}_ngram_ids"] = ids
        emb = self.W("per_layer_token_embd.weight")[ids].reshape(T, -1)
        key = (emb @ self.W(b + "ple_key.weight").T).reshape(T, n, D)
        key = self.rms(key, eps) * self.W(b + "ple_norm_key.weight").reshape(n, D)
        qry = self.rms(R, eps) * self.W(b + "ple_norm_query.weight").reshape(n, D)
        gate = (key * qry).sum(-1) / math.sqrt(D)
        gate = np.sign(gate) * np.sqrt(np.maximum(np.abs(gate), 1e-6))
        value = emb @ self.W(b + "ple_value.weight").T
        gv = self.sigmoid(gate)[:, :, None] * value[:, None, :]
        gvn = self.rms(gv, eps) * self.W(b + "ple_norm_conv.weight").reshape(n, D)
        x = gvn.reshape(T, n * D)
        cw = self.W(b + "ple_conv1d.weight")  # [C, K]
        kw = cw.shape[1]
        dil = int(self.meta("ple.ngram_size"))
        y = np.zeros_like(x)
        for j in range(kw):
            s = (kw - 1 - j) * dil
            if s < T:
                y[s:] += cw[:, j][None, :] * x[:T - s]
        return (gv.reshape(T, n * D) + self.silu(y)).reshape(T, n, D)

    def forward(self, tokens):
        np = self.np
        self.acts = {}
        L = int(self.meta("block_count"))
        n = int(self.meta("hyper_connection.count"))
        ple_layers = [int(x) for x in self.meta("ple.layers")]
        x = self.W("token_embd.weight")[np.asarray(tokens)]
        R = np.repeat(x[:, None, :], n, axis=1)
        for l in range(L):
            if l in ple_layers:
                R = R + self.ple(R, tokens, l)
            u, lam = self.gr_read(R, f"blk.{l}.hc_attn")
            if l == 0:
                self.acts["hc0_attn_read"] = (u, lam)
            f = self.qsa(u, l) if self.is_attention(l) else self.gdn(u, l)
            if l == 0:
                self.acts["gdn0_out"] = f
            R = R + lam[:, :, None] * f[:, None, :]
            u, lam = self.gr_read(R, f"blk.{l}.hc_ffn")
            f = self.moe(u, l)
            if l == 0:
                self.acts["moe0_out"] = f
            R = R + lam[:, :, None] * f[:, None, :]
        u, _ = self.gr_read(R, "output_hc", inject=False)
        self.acts["final_hidden"] = u
        return u @ self.W("output.weight").T


def rel_err(a, b, np):
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-30))


# --------------------------------------------------------------------------
# main (and the pieces qwen4exp_llama_convert.py reuses)
# --------------------------------------------------------------------------


def build_model(Config, Model, seed, torch, device, f16_names=None):
    """The seeded tiny model. Every parameter named in f16_names (default:
    those strata's writer stores as F16, f16_sources) is rounded to float16
    values, so that the HF run uses the numbers the GGUF holds."""
    cfg = build_config(Config)
    torch.manual_seed(seed)
    model = Model(cfg)
    for setter, val in (("set_attn_implementation", "eager"),
                        ("set_experts_implementation", "eager")):
        if hasattr(model, setter):
            try:
                getattr(model, setter)(val)
            except Exception:
                pass
    model.eval()
    init_weights(model, cfg, seed, torch)
    if f16_names is None:
        f16_names = f16_sources(model, cfg, torch)
    f16 = set(f16_names)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name in f16:
                p.copy_(p.to(torch.float16).to(torch.float32))
    model.to(device)
    return cfg, model


def save_raw(path, arr, np, dtype):
    a = np.ascontiguousarray(np.asarray(arr).astype(dtype))
    with open(path, "wb") as fh:
        fh.write(a.astype(a.dtype.newbyteorder("<")).tobytes())
    return list(a.shape)


def add_common_args(ap):
    ap.add_argument("--out", required=True, help="output directory")
    ap.add_argument("--seed", type=int, default=0, help="first weight seed")
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--strict", action="store_true",
                    help="exit 1 when the GGUF self-check fails")


def setup_torch(torch, args):
    torch.set_default_dtype(torch.float32)
    torch.set_num_threads(max(1, args.threads))
    if args.device == "cuda":
        if not torch.cuda.is_available():
            die("--device cuda but torch sees no GPU")
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")


def choose_seed(Config, Model, toks, first_seed, gguf_path, gguf, np, torch,
                device, f16_names=None):
    """The first seed from first_seed on whose router and indexer decisions
    have no near-ties. Each try writes strata's GGUF to gguf_path (the spec
    replica reads it to get the indexer scores).

    Returns (seed, cfg, model, {prompt: (logits, captures)}, tries)."""
    tries = []
    for attempt in range(MAX_SEED_TRIES):
        seed = first_seed + attempt
        cfg, model = build_model(Config, Model, seed, torch, device, f16_names)
        res = {}
        for key, t in toks.items():
            res[key] = run_hf(model, cfg, t, torch, device,
                              full=(key == "long"))
        write_gguf(gguf_path, model, cfg, gguf, torch, np)
        rep = Replica(gguf_path, gguf, np)
        rmarg = min(router_margin(res[k][1], cfg, torch) for k in res)
        imarg = float("inf")
        sel_ok = True
        for key, t in toks.items():
            rep.forward(t)
            imarg = min(imarg, min(rep.scores.values()))
            name, hf_mask = qsa_mask_from_hf(res[key][1], torch)
            sel_ok &= bool((hf_mask.numpy() == rep.acts[name]).all())
        tries.append({"seed": seed, "router_gap": rmarg, "indexer_gap": imarg,
                      "replica_selection_matches_hf": sel_ok})
        print(f"seed {seed}: router gap {rmarg:.3g}, indexer gap {imarg:.3g}, "
              f"selection match {sel_ok}")
        if rmarg > ROUTER_GAP and imarg > INDEXER_GAP:
            return seed, cfg, model, res, tries
    die(f"no seed in [{first_seed}, {first_seed + MAX_SEED_TRIES}) without "
        "near-ties")


def write_hf_outputs(outdir, toks, res, cfg, np, torch):
    """logits_{long,short}.f32 + logits.json, act_* + activations.json.
    Returns the activations' metadata (name -> file, dtype, shape, ...)."""
    out = lambda f: os.path.join(outdir, f)  # noqa: E731
    logits_meta = {"byte_order": "little", "dtype": "float32",
                   "layout": "row-major [T, vocab]", "prompts": {}}
    for key, t in toks.items():
        fname = f"logits_{key}.f32"
        shape = save_raw(out(fname), res[key][0].numpy(), np, np.float32)
        logits_meta["prompts"][key] = {
            "file": fname, "shape": shape, "tokens": [int(x) for x in t],
            "positions": f"0..{len(t) - 1}",
            "note": ("EOS (id %d) at position %d" % (cfg.eos_token_id,
                                                     EOS_POS_LONG))
            if key == "long" else "shorter than indexer_budget: dense",
        }
    with open(out("logits.json"), "w") as fh:
        json.dump(logits_meta, fh, indent=1)

    caps = res["long"][1]
    acts = {}

    def act(name, value, dtype, module, meaning):
        ext = {"float32": "f32", "int32": "i32", "uint8": "u8"}[dtype]
        fname = f"act_{name}.{ext}"
        arr = value.to("cpu").numpy() if hasattr(value, "numpy") else value
        if arr.ndim >= 2 and arr.shape[0] == 1 and name not in ("router0_logits",
                                                                "router0_ids"):
            arr = arr[0]
        shape = save_raw(out(fname), arr, np, np.dtype(dtype))
        acts[name] = {"file": fname, "dtype": dtype, "shape": shape,
                      "hf_module": module, "meaning": meaning}

    u, inj = caps["hc0_attn_read"]
    act("hc0_attn_read_u", u, "float32", "model.layers.0.attn_hyper_connection",
        "first gated-residual read: the mixed input u [T, D] fed to the GDN")
    act("hc0_attn_inject", inj, "float32",
        "model.layers.0.attn_hyper_connection",
        "its injection gates 2*sigmoid(inject(xn)/hc) [T, hc]")
    act("gdn0_out", caps["gdn0_out"], "float32", "model.layers.0.linear_attn",
        "first GDN mixer output (after out_proj, before the HC write) [T, D]")
    act("moe0_out", caps["moe0_out"], "float32", "model.layers.0.mlp",
        "first MoE block output (routed + gated shared expert) [T, D]")
    rl, ri = caps["router0"]
    act("router0_logits", rl, "float32", "model.layers.0.mlp.gate",
        "router logits of layer 0 [T, E]")
    act("router0_ids", ri.to(torch.int32), "int32", "model.layers.0.mlp.gate",
        "selected experts of layer 0 [T, k], descending probability")
    lp = cfg.ple_layer_ids[0] - 1
    act(f"ple{lp}_ngram_ids", caps[f"ple{lp}_ngram_ids"].to(torch.int32),
        "int32", f"model.layers.{lp}.ple.ple_embedding.ngram_embedding (input)",
        "PLE table row ids [T, n_heads] (n-gram 2 heads, then 3)")
    qname, qmask = qsa_mask_from_hf(caps, torch)
    act(qname, qmask.to(torch.uint8), "uint8",
        qname.replace("qsa", "model.layers.").replace("_mask", "") +
        ".self_attn.indexer",
        "QSA selection [T(query), T(key)]: 1 where the indexer allows the key")
    act("final_hidden", caps["final_hidden"], "float32",
        "model.model (last_hidden_state)",
        "output of the final gated-residual mixer [T, D] (input of lm_head)")
    _, smask = qsa_mask_from_hf(res["short"][1], torch)
    act(qname + "_short", smask.to(torch.uint8), "uint8", acts[qname]["hf_module"],
        "QSA selection for the short prompt (all causal: dense)")
    with open(out("activations.json"), "w") as fh:
        json.dump({"prompt": "long", "byte_order": "little",
                   "layout": "row-major, batch dim dropped",
                   "activations": acts}, fh, indent=1)
    return acts


def selfcheck(gguf_path, gguf, np, torch, toks, res, cfg, ple,
              compress_ratio=None, tolerance=2e-4):
    """Runs the spec replica from a GGUF and compares it with HF: logits,
    QSA selections and (long prompt) activations, router ids, PLE ids; and
    the PLE constants re-derived from the config. Returns the result dict
    (key "ok")."""
    rep = Replica(gguf_path, gguf, np, compress_ratio=compress_ratio)
    caps = res["long"][1]
    u, inj = caps["hc0_attn_read"]
    _, ri = caps["router0"]
    lp = cfg.ple_layer_ids[0] - 1
    sc = {"tolerance_rel": tolerance}
    if compress_ratio is not None:
        sc["compress_ratio_override"] = compress_ratio
    ok = True
    for key, t in toks.items():
        lg = rep.forward(t)
        e = rel_err(lg, res[key][0].numpy(), np)
        sc[f"logits_{key}_max_rel_err"] = e
        ok &= e < sc["tolerance_rel"]
        name, hf_mask = qsa_mask_from_hf(res[key][1], torch)
        same = bool((hf_mask.numpy() == rep.acts[name]).all())
        sc[f"qsa_selection_{key}_matches"] = same
        ok &= same
        if key == "long":
            for an, rv, hv in (
                    ("hc0_attn_read_u", rep.acts["hc0_attn_read"][0], u[0]),
                    ("hc0_attn_inject", rep.acts["hc0_attn_read"][1], inj[0]),
                    ("gdn0_out", rep.acts["gdn0_out"], caps["gdn0_out"][0]),
                    ("moe0_out", rep.acts["moe0_out"], caps["moe0_out"][0]),
                    ("final_hidden", rep.acts["final_hidden"],
                     caps["final_hidden"][0])):
                e = rel_err(rv, hv.numpy(), np)
                sc[f"{an}_max_rel_err"] = e
                ok &= e < sc["tolerance_rel"]
            same = bool((rep.acts["router0_ids"] == ri.numpy()).all())
            sc["router0_ids_match"] = same
            ok &= same
            ids_hf = caps[f"ple{lp}_ngram_ids"][0].numpy()
            same = bool((rep.acts[f"ple{lp}_ngram_ids"] == ids_hf).all())
            sc["ple_ngram_ids_match"] = same
            ok &= same
    ind = independent_ple_constants(cfg, 0)
    sc["ple_constants_rederived_match"] = all(
        ind[k] == ple[k] for k in ("multipliers", "head_vocab_sizes",
                                   "head_offsets", "rows"))
    ok &= sc["ple_constants_rederived_match"]
    sc["ok"] = bool(ok)
    return sc


def activation_stats(outdir, acts, res, np):
    stats = {k: {"rms": float(np.sqrt(np.mean(np.square(
        np.fromfile(os.path.join(outdir, v["file"]), dtype=np.dtype(v["dtype"]))
        .astype(np.float64)))))}
        for k, v in acts.items() if v["dtype"] == "float32"}
    lg = res["long"][0].numpy()
    stats["logits_long"] = {"rms": float(np.sqrt(np.mean(lg.astype(np.float64) ** 2))),
                            "max_abs": float(np.abs(lg).max())}
    return stats


def env_versions(args, gguf, model, np, torch, transformers):
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "numpy": np.__version__,
        "gguf": gguf_version(gguf),
        "gguf_path": os.path.dirname(gguf.__file__),
        "device": args.device,
        "torch_threads": torch.get_num_threads(),
        "attn_implementation": getattr(model.config, "_attn_implementation", None),
        "experts_implementation": getattr(model.config, "_experts_implementation",
                                          None),
    }


def list_outputs(outdir):
    total = 0
    for f in sorted(os.listdir(outdir)):
        sz = os.path.getsize(os.path.join(outdir, f))
        total += sz
        print(f"{sz:>10}  {f}")
    print(f"{total:>10}  total")


def main():
    die("qwen4exp_oracle.py is the library of the HF oracle; the goldens are "
        "made by qwen4exp_llama_convert.py, which writes the GGUFs with "
        "llama.cpp's own converter (see its --help)", code=2)


if __name__ == "__main__":
    main()
