#!/usr/bin/env python3
"""Qwen4-Exp goldens whose GGUF files llama.cpp's own converter wrote.

The tiny random model of qwen4exp_oracle.py (same config, weights, prompts,
seed search and spec replica, imported from there) saved as an HF checkpoint
and converted by llama.cpp's convert_hf_to_gguf.py, in the two kinds of file
that exist in the wild:

  model_ratios.gguf  qwen4exp.attention.compress_ratios = [0, 0, 4]: the
                     converter read config.json itself, whose layer_types
                     says "full_attention" for the QSA layer (what happens
                     when the converting transformers has no qwen4_exp);
  model_zero.gguf    compress_ratios = [0, 0, 0]: the converter's hparams
                     came from transformers' AutoConfig, whose
                     Qwen4ExpTextConfig renames "full_attention" to
                     "qwen_sparse_attention", so no layer matches the
                     converter's "full_attention" test (what happens with a
                     transformers that knows qwen4_exp).

Both files come from ONE HF model (QSA on, indexer_compress_ratio 4) and one
checkpoint: the "zero" file only lacks the ratios. HF's logits match it with
compress ratio 4 given from outside (strata: --qsa-compress-ratio 4); with
ratio 0 (dense attention) they match only the short prompt.

Usage:
  qwen4exp_llama_convert.py --out DIR --converter LLAMA_DIR
                            [--converter-version TEXT] [--outtype f16|f32]
                            [--seed N] [--device cpu|cuda] [--strict]

LLAMA_DIR is a llama.cpp tree (or a copy of its convert_hf_to_gguf.py,
conversion/ and gguf-py/); its gguf-py goes first on sys.path, for this
script and for the converter. --converter-version is recorded as given (the
files' sha256 are recorded too). Needs numpy, torch, safetensors and
transformers >= 5.17 with qwen4_exp. Takes about half a minute on a CPU.

Outputs in --out DIR:
  model_ratios.gguf, model_zero.gguf   the converted files
  logits_long.f32, logits_short.f32, logits.json, act_*, activations.json
                                       the HF run (as in qwen4exp_oracle.py)
  tensors.json    every GGUF tensor: dtype, ggml dims, HF source, transform,
                  and whether its values equal the HF weights exactly
  versions.json   versions, converter identity and file hashes, what each
                  kind is and how it was made, the checkpoint's config.json
                  and tensor list, seeds, self-checks

How the converter is driven (no converter code is changed; this script runs
it in a child process of its own and sets two things before its main()):
  * kind "ratios": conversion.base.AutoConfig is replaced by a stand-in
    whose from_pretrained raises, so ModelBase.load_hparams takes its own
    fallback and reads config.json, as it does under a transformers without
    qwen4_exp. Kind "zero" runs the converter untouched (AutoConfig works).
  * The tiny model has no tokenizer: when the checkpoint folder holds no
    tokenizer file, Qwen4ExpTextModel.set_vocab is pointed at the
    converter's own _set_vocab_none, which writes tokenizer.ggml.model =
    "none" and nothing else.

The checkpoint (model.save_pretrained, float32 safetensors) is stored as
published checkpoints are: the PLE table as
`...ple.ple_embedding.ngram_embedding.shard_{i}.weight` (split_ngram_parts =
4 in config.json), the int64 hash-constant buffers (layer_multipliers,
ngram_heads_offsets, ngram_heads_vocab_sizes) as tensors, experts one by one.
config.json is then given the layer_types the published config.json has
("full_attention", which HF's config renames on load) and
full_attention_interval (3 here; the converter writes 4 when it is absent).
float32 makes the converter's 1 + w of zero-centred norms a float32 add, as
in HF.

Dtypes: with --outtype f16 the converter decides per tensor (F16 for 2-D/3-D
weights except ffn_gate_inp, ffn_gate_inp_shexp and ssm_conv1d; F32 for 1-D
tensors and *_norm). This script asks it: a probe conversion of the
unrounded model gives each tensor's dtype, and every HF parameter whose GGUF
copy is F16 is rounded to float16 values before the HF run (the seed search
runs on the rounded model). Afterwards every tensor of both files is
dequantised with the gguf package and compared with the HF weight after the
layout transforms (qwen4exp_oracle.gguf_plan): all must be equal exactly.
"""

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import qwen4exp_oracle as oracle  # noqa: E402

KINDS = ("ratios", "zero")
PLE_SHARDS = 4
MODEL_NAME = "strata qwen4exp oracle (tiny, random)"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "tokenizer_config.json",
                   "vocab.json", "merges.txt")
HASHED_FILES = ("convert_hf_to_gguf.py", "conversion/base.py",
                "conversion/qwen.py", "conversion/qwen4exp.py",
                "gguf-py/gguf/constants.py", "gguf-py/gguf/gguf_writer.py",
                "gguf-py/gguf/tensor_mapping.py", "gguf-py/pyproject.toml")
KIND_NOTES = {
    "ratios": "hparams from config.json (layer_types 'full_attention'): "
              "conversion.base.AutoConfig replaced by a stand-in that raises, "
              "so load_hparams falls back to config.json, as under a "
              "transformers without qwen4_exp",
    "zero": "hparams from transformers' AutoConfig (Qwen4ExpTextConfig "
            "renames 'full_attention' to 'qwen_sparse_attention'): the "
            "converter run untouched",
}


def die(msg):
    oracle.die(msg)


# --------------------------------------------------------------------------
# the converter, in a child process: --run-converter KIND LLAMA_DIR ARGS...
# --------------------------------------------------------------------------


class _NoAutoConfig:
    """Stands in for transformers.AutoConfig in conversion.base."""

    @staticmethod
    def from_pretrained(*args, **kwargs):
        raise ValueError("AutoConfig disabled by qwen4exp_llama_convert.py "
                         "(kind 'ratios': read config.json itself)")


def converter_child(argv):
    kind, conv_dir, conv_args = argv[0], argv[1], argv[2:]
    sys.path.insert(0, conv_dir)
    sys.path.insert(0, os.path.join(conv_dir, "gguf-py"))
    import convert_hf_to_gguf
    from conversion import base
    from conversion.qwen4exp import Qwen4ExpTextModel
    if kind == "ratios":
        base.AutoConfig = _NoAutoConfig
    elif kind != "zero":
        die(f"unknown kind {kind!r}")
    model_dir = conv_args[0]
    if not any(os.path.exists(os.path.join(model_dir, f))
               for f in TOKENIZER_FILES):
        Qwen4ExpTextModel.set_vocab = Qwen4ExpTextModel._set_vocab_none
    sys.argv = [os.path.join(conv_dir, "convert_hf_to_gguf.py")] + conv_args
    convert_hf_to_gguf.main()


def convert(kind, conv_dir, ckpt, outfile, outtype, log_path):
    cmd = [sys.executable, os.path.abspath(__file__), "--run-converter", kind,
           conv_dir, ckpt, "--outfile", outfile, "--outtype", outtype,
           "--model-name", MODEL_NAME]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True)
    with open(log_path, "w") as fh:
        fh.write(p.stdout)
    if p.returncode != 0 or not os.path.isfile(outfile):
        print(p.stdout[-6000:])
        die(f"the converter failed (kind {kind}, exit {p.returncode}); "
            f"log: {log_path}")
    return [ln for ln in p.stdout.splitlines() if "WARNING" in ln]


# --------------------------------------------------------------------------
# checkpoint
# --------------------------------------------------------------------------


def save_checkpoint(model, cfg, path):
    """model.save_pretrained + the published config.json's layer_types.
    Returns (config.json dict, [(name, shape, dtype)])."""
    from safetensors import safe_open
    model.config.split_ngram_parts = PLE_SHARDS
    model.save_pretrained(path, safe_serialization=True)
    cpath = os.path.join(path, "config.json")
    with open(cpath) as fh:
        c = json.load(fh)
    c["layer_types"] = list(oracle.TINY["layer_types"])
    c["full_attention_interval"] = [
        i for i, t in enumerate(oracle.TINY["layer_types"])
        if t == "full_attention"][0] + 1
    with open(cpath, "w") as fh:
        json.dump(c, fh, indent=2)
    tensors = []
    for fn in sorted(os.listdir(path)):
        if fn.endswith(".safetensors"):
            with safe_open(os.path.join(path, fn), "pt") as f:
                for k in sorted(f.keys()):
                    s = f.get_slice(k)
                    tensors.append((k, list(s.get_shape()), s.get_dtype()))
    names = [t[0] for t in tensors]
    for need in ["ngram_embedding.shard_%d.weight" % i
                 for i in range(PLE_SHARDS)] + [
            "ple_embedding.layer_multipliers",
            "ple_embedding.ngram_heads_offsets",
            "ple_embedding.ngram_heads_vocab_sizes"]:
        if not any(n.endswith(need) for n in names):
            die(f"the checkpoint lacks ...{need}")
    for n, _, dt in tensors:
        if n.endswith(("layer_multipliers", "heads_offsets",
                       "heads_vocab_sizes")) and dt != "I64":
            die(f"checkpoint tensor {n} is {dt}, not int64")
    return c, tensors


# --------------------------------------------------------------------------
# GGUF checks
# --------------------------------------------------------------------------


def read_gguf(path, gguf):
    r = gguf.GGUFReader(path)
    kv = {n: f.contents() for n, f in r.fields.items()
          if not n.startswith("GGUF.")}
    return r, kv


def probe_f16_names(Config, Model, seed, torch, gguf, conv_dir, work):
    """Which HF parameters the converter stores as F16: converts the
    unrounded model once and maps each F16 tensor back to its HF source."""
    cfg, model = oracle.build_model(Config, Model, seed, torch, "cpu",
                                    f16_names=())
    ckpt = os.path.join(work, "probe_checkpoint")
    save_checkpoint(model, cfg, ckpt)
    path = os.path.join(work, "probe.gguf")
    convert("ratios", conv_dir, ckpt, path, "f16",
            os.path.join(work, "probe.log"))
    r, _ = read_gguf(path, gguf)
    dtypes = {t.name: t.tensor_type.name for t in r.tensors}
    plan = oracle.gguf_plan(model, cfg, torch)
    planned = {g for g, *_ in plan}
    if set(dtypes) != planned:
        die("the converter's tensors differ from qwen4exp_oracle.gguf_plan: "
            f"only converter {sorted(set(dtypes) - planned)}, only plan "
            f"{sorted(planned - set(dtypes))}")
    odd = {n: d for n, d in dtypes.items() if d not in ("F16", "F32")}
    if odd:
        die(f"unexpected dtypes from the converter: {odd}")
    return sorted({src for g, _, _, src, _ in plan if dtypes[g] == "F16"})


def check_tensors(path, plan, gguf, np):
    """Dequantises every tensor and compares it with the HF weight after the
    layout transforms. Returns (rows for tensors.json, all exact)."""
    r, _ = read_gguf(path, gguf)
    want = {g: (t, src, note) for g, t, _, src, note in plan}
    rows, ok = [], True
    for t in r.tensors:
        exp_t, src, note = want[t.name]
        exp = exp_t.numpy().astype(np.float32)
        got = gguf.quants.dequantize(np.asarray(t.data), t.tensor_type)
        got = np.asarray(got, dtype=np.float32)
        ggml = [int(x) for x in t.shape]
        row = {"gguf": t.name, "dtype": t.tensor_type.name, "ggml_dims": ggml,
               "hf": src, "hf_shape": list(exp.shape), "transform": note}
        if ggml != list(reversed(exp.shape)):
            row["note"] = (f"ggml dims {ggml}; strata's writer (transform "
                           f"'{note}') has {list(reversed(exp.shape))}")
        same_n = got.size == exp.size
        exact = same_n and bool(np.array_equal(got.reshape(-1),
                                               exp.reshape(-1)))
        row["equals_hf_exactly"] = exact
        if same_n and not exact:
            row["max_abs_diff"] = float(np.abs(got.reshape(-1).astype(
                np.float64) - exp.reshape(-1)).max())
        if t.tensor_type.name == "F16":
            row["hf_is_f16_representable"] = bool(np.array_equal(
                exp.astype(np.float16).astype(np.float32), exp))
        ok &= exact
        rows.append(row)
    missing = sorted(set(want) - {t.name for t in r.tensors})
    if missing:
        ok = False
        rows.append({"missing_from_file": missing})
    return rows, ok


def file_sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def small(v):
    """A metadata value for versions.json (arrays up to 16 entries)."""
    if isinstance(v, (list, tuple)):
        return list(v) if len(v) <= 16 else f"<array of {len(v)}>"
    return v


# --------------------------------------------------------------------------
# main
# --------------------------------------------------------------------------


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--run-converter":
        converter_child(sys.argv[2:])
        return

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    oracle.add_common_args(ap)
    ap.add_argument("--converter", required=True, metavar="LLAMA_DIR",
                    help="llama.cpp tree with convert_hf_to_gguf.py, "
                         "conversion/ and gguf-py/")
    ap.add_argument("--converter-version", default="unknown",
                    help="what LLAMA_DIR is, recorded in versions.json "
                         "(e.g. 'llama-cpp-python 0.3.36 sdist, "
                         "vendor/llama.cpp')")
    ap.add_argument("--outtype", default="f16", choices=("f16", "f32"))
    args = ap.parse_args()

    conv_dir = os.path.abspath(args.converter)
    if not os.path.isfile(os.path.join(conv_dir, "convert_hf_to_gguf.py")):
        die(f"--converter {args.converter}: no convert_hf_to_gguf.py there")
    gguf = oracle.import_gguf(os.path.join(conv_dir, "gguf-py"))
    Config, Model = oracle.import_hf()
    import numpy as np
    import torch
    import transformers

    oracle.setup_torch(torch, args)
    os.makedirs(args.out, exist_ok=True)
    out = lambda f: os.path.join(args.out, f)  # noqa: E731
    work = tempfile.mkdtemp(prefix="qwen4exp_llama_")
    print("work dir:", work)

    toks = oracle.prompts(np, oracle.build_config(Config))

    # ---- which weights the converter stores as F16 ---------------------
    if args.outtype == "f16":
        f16_names = probe_f16_names(Config, Model, args.seed, torch, gguf,
                                    conv_dir, work)
    else:
        f16_names = []
    print(f"{len(f16_names)} HF parameters rounded to float16")

    # ---- the model, the checkpoint, the two conversions ------------------
    chosen, cfg, model, res, tries = oracle.choose_seed(
        Config, Model, toks, args.seed, os.path.join(work, "strata.gguf"),
        gguf, np, torch, args.device, f16_names=f16_names)
    ckpt = os.path.join(work, "checkpoint")
    ckpt_config, ckpt_tensors = save_checkpoint(model, cfg, ckpt)

    plan = oracle.gguf_plan(model, cfg, torch)
    ple = oracle.ple_constants(model, cfg)
    ratio = cfg.indexer_compress_ratio
    expect_ratios = {
        "ratios": [0 if t == "linear_attention" else ratio
                   for t in oracle.TINY["layer_types"]],
        "zero": [0] * cfg.num_hidden_layers,
    }
    kinds, tensor_rows, all_ok = {}, {}, True
    for kind in KINDS:
        fname = f"model_{kind}.gguf"
        warnings = convert(kind, conv_dir, ckpt, out(fname), args.outtype,
                           os.path.join(work, f"convert_{kind}.log"))
        _, kv = read_gguf(out(fname), gguf)
        got = [int(x) for x in kv[oracle.ARCH + ".attention.compress_ratios"]]
        if got != expect_ratios[kind]:
            die(f"{fname}: compress_ratios {got}, expected "
                f"{expect_ratios[kind]}: the converter did not take the "
                f"hparams path of kind {kind!r}")
        rows, exact = check_tensors(out(fname), plan, gguf, np)
        tensor_rows[fname] = rows
        all_ok &= exact
        kinds[fname] = {
            "kind": kind, "how": KIND_NOTES[kind],
            "compress_ratios": got, "converter_warnings": warnings,
            "outtype": args.outtype,
            "all_tensors_equal_hf_exactly": exact,
            "sha256": file_sha256(out(fname)),
            "metadata": {k: small(v) for k, v in kv.items()},
        }
        print(f"{fname}: compress_ratios {got}, tensors exact: {exact}")

    # ---- HF outputs and the replica's self-checks ------------------------
    acts = oracle.write_hf_outputs(args.out, toks, res, cfg, np, torch)
    checks = {
        "model_ratios.gguf": oracle.selfcheck(
            out("model_ratios.gguf"), gguf, np, torch, toks, res, cfg, ple),
        f"model_zero.gguf with compress ratio {ratio}": oracle.selfcheck(
            out("model_zero.gguf"), gguf, np, torch, toks, res, cfg, ple,
            compress_ratio=ratio),
    }
    dense = oracle.selfcheck(out("model_zero.gguf"), gguf, np, torch, toks,
                             res, cfg, ple)
    checks["model_zero.gguf as is (ratio 0: dense attention)"] = {
        "note": "informative: dense attention matches HF on the short prompt "
                "only",
        **{k: dense[k] for k in ("logits_short_max_rel_err",
                                 "qsa_selection_short_matches",
                                 "logits_long_max_rel_err",
                                 "qsa_selection_long_matches")},
    }
    dense_short_ok = (dense["logits_short_max_rel_err"] < dense["tolerance_rel"]
                      and dense["qsa_selection_short_matches"])
    ok = (all_ok and dense_short_ok and
          all(v["ok"] for v in list(checks.values())[:2]))

    with open(out("tensors.json"), "w") as fh:
        json.dump({
            "note": "every tensor of each file, dequantised with the gguf "
                    "package and compared with the HF weight after the "
                    "layout transforms of qwen4exp_oracle.gguf_plan "
                    "(hf_shape is the transformed HF shape; ggml_dims as the "
                    "file stores them)",
            "files": tensor_rows}, fh, indent=1)

    conv_files = {}
    for rel in HASHED_FILES:
        p = os.path.join(conv_dir, rel)
        if os.path.isfile(p):
            conv_files[rel] = file_sha256(p)
    versions = oracle.env_versions(args, gguf, model, np, torch, transformers)
    versions.update({
        "converter": {"version": args.converter_version,
                      "outtype": args.outtype,
                      "model_name_arg": MODEL_NAME,
                      "sha256": conv_files},
        "files": kinds,
        "f16_rounded_hf_parameters": f16_names,
        "checkpoint": {
            "format": "model.save_pretrained (float32 safetensors), "
                      "config.json edited as described",
            "config.json": ckpt_config,
            "tensors": [{"name": n, "shape": s, "dtype": d}
                        for n, s, d in ckpt_tensors],
        },
        "seed_requested": args.seed,
        "seed_used": chosen,
        "prompt_seed": oracle.PROMPT_SEED,
        "seed_tries": tries,
        "margins": {"router_gap_min": oracle.ROUTER_GAP,
                    "indexer_gap_min": oracle.INDEXER_GAP},
        "activation_stats": oracle.activation_stats(args.out, acts, res, np),
        "selfcheck": {"ok": bool(ok), "checks": checks},
        "config": json.loads(cfg.to_json_string()),
    })
    with open(out("versions.json"), "w") as fh:
        json.dump(versions, fh, indent=1, default=str)

    oracle.list_outputs(args.out)
    print("self-check:", json.dumps(versions["selfcheck"], default=str))
    if not ok:
        print("qwen4exp_llama_convert: CHECK FAILED (outputs were still "
              "written)", file=sys.stderr)
        if args.strict:
            sys.exit(1)


if __name__ == "__main__":
    main()
