#!/usr/bin/env python3
"""HF transformers' greedy generation with its cache on the tiny Qwen4-Exp.

Makes the generation golden of test/golden/qwen4exp_llama/ (the model whose
GGUFs llama.cpp's converter wrote, qwen4exp_llama_convert.py): the same HF
model is rebuilt from versions.json (seed_used, the parameters rounded to
float16 as the converter stored them), checked against the committed
prefill logits (logits_long.f32, logits_short.f32: NMSE <= 1e-12, else it
stops), then each prompt of logits.json is continued greedily for --new
tokens with HF's cache:

  out = model(prompt, use_cache=True), then one token at a time
  model(token, past_key_values=out.past_key_values, use_cache=True),
  the next token the argmax of the last logits (torch.argmax: the lowest id
  on ties), end-of-sequence tokens generated like any other.

The 3 layers carry every kind of state: gated delta nets (conv window,
recurrent state), the PLE layer (n-gram history, its dilated conv) and the
QSA layer (KV cache, indexer block keys: the long prompt is past the
indexer budget, so decode selects blocks over the cache).

Two cross-checks are recorded, not required: transformers' own
model.generate (greedy, eos off, output_logits) gives the same ids and
logits, and a full forward without the cache over the whole sequence gives
the same logits rows (NMSE of each).

Outputs in --out: generate_{long,short}.f32 (the logits each generated
token was chosen from, [new, vocab] f32 row-major) and generate.json (per
prompt: prompt ids, generated ids, file, shape; the cross-checks; the
versions).

Usage: qwen4exp_generate_hf.py --out DIR [--new 24] [--device cpu|cuda]
Needs numpy, torch and transformers >= 5.17 with qwen4_exp (the GPU machine
has them); a few seconds on a CPU.
"""
import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import qwen4exp_oracle as oracle  # noqa: E402

GOLDEN = os.path.join(HERE, "qwen4exp_llama")


def nmse(a, b, np):
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    den = float((b * b).sum())
    return float(((a - b) ** 2).sum()) / (den if den > 0 else 1.0)


def greedy_with_cache(model, prompt, new, torch, device):
    """Ids and logits rows of `new` greedy steps through HF's cache."""
    ids, rows = [], []
    with torch.no_grad():
        x = torch.tensor([prompt], dtype=torch.long, device=device)
        out = model(input_ids=x, use_cache=True)
        for step in range(new):
            last = out.logits[0, -1].detach().to("cpu", torch.float32)
            tok = int(torch.argmax(last))
            rows.append(last.numpy().copy())
            ids.append(tok)
            if step + 1 == new:
                break
            x = torch.tensor([[tok]], dtype=torch.long, device=device)
            out = model(input_ids=x, past_key_values=out.past_key_values,
                        use_cache=True)
    return ids, rows


def hf_generate(model, prompt, new, torch, device):
    """transformers' generate(): greedy, end-of-sequence off."""
    import copy
    gc = copy.deepcopy(model.generation_config)
    gc.do_sample = False
    gc.eos_token_id = None
    gc.pad_token_id = 0
    gc.max_new_tokens = new
    gc.min_new_tokens = None
    with torch.no_grad():
        x = torch.tensor([prompt], dtype=torch.long, device=device)
        res = model.generate(x, generation_config=gc, output_logits=True,
                             return_dict_in_generate=True)
    ids = res.sequences[0, len(prompt):].tolist()
    rows = [lg[0].detach().to("cpu", torch.float32).numpy() for lg in res.logits]
    return ids, rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--new", type=int, default=24)
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    ap.add_argument("--threads", type=int, default=4)
    args = ap.parse_args()
    Config, Model = oracle.import_hf()
    import numpy as np
    import torch
    import transformers
    args.strict = False
    oracle.setup_torch(torch, args)
    with open(os.path.join(GOLDEN, "versions.json")) as f:
        versions = json.load(f)
    with open(os.path.join(GOLDEN, "logits.json")) as f:
        prompts = json.load(f)["prompts"]
    seed = versions["seed_used"]
    f16 = versions["f16_rounded_hf_parameters"]
    cfg, model = oracle.build_model(Config, Model, seed, torch, args.device,
                                    f16_names=f16)
    vocab = cfg.vocab_size
    os.makedirs(args.out, exist_ok=True)
    result = {
        "made_by": "test/golden/qwen4exp_generate_hf.py",
        "versions": {"torch": torch.__version__,
                     "transformers": transformers.__version__,
                     "numpy": np.__version__, "device": args.device,
                     "seed_used": seed},
        "rule": "greedy (argmax, lowest id on ties) through HF's cache; "
                "end-of-sequence tokens generated like any other",
        "byte_order": "little", "dtype": "float32",
        "layout": "row-major [new, vocab]: row i is the logits the i-th "
                  "generated token was chosen from",
        "prompts": {},
    }
    failed = False
    for key, p in prompts.items():
        prompt = p["tokens"]
        # The rebuilt model is the committed one.
        with torch.no_grad():
            x = torch.tensor([prompt], dtype=torch.long, device=args.device)
            full = model(input_ids=x, use_cache=False).logits[0]
        ref = np.fromfile(os.path.join(GOLDEN, p["file"]), dtype="<f4")
        rebuilt = nmse(full.to("cpu", torch.float32).numpy().ravel(), ref, np)
        print(f"{key}: prefill logits vs {p['file']}: NMSE {rebuilt:.3e}")
        if rebuilt > 1e-12:
            print(f"{key}: the rebuilt model is not the committed one")
            failed = True
            continue
        ids, rows = greedy_with_cache(model, prompt, args.new, torch,
                                      args.device)
        logits = np.stack(rows).astype("<f4")
        name = f"generate_{key}.f32"
        logits.tofile(os.path.join(args.out, name))
        entry = {"file": name, "shape": [args.new, vocab], "prompt": prompt,
                 "generated": ids, "prefill_nmse_vs_committed": rebuilt}
        # Cross-check 1: a full forward over prompt + generated[:-1], no
        # cache: its last `new` rows are the steps' logits.
        seq = prompt + ids[:-1]
        with torch.no_grad():
            x = torch.tensor([seq], dtype=torch.long, device=args.device)
            nocache = model(input_ids=x, use_cache=False).logits[0]
        nocache = nocache[len(prompt) - 1:].to("cpu", torch.float32).numpy()
        entry["no_cache_forward_nmse"] = max(
            nmse(logits[i], nocache[i], np) for i in range(args.new))
        # Cross-check 2: transformers' generate().
        try:
            gids, grows = hf_generate(model, prompt, args.new, torch,
                                      args.device)
            entry["generate_ids_equal"] = gids == ids
            entry["generate_logits_nmse"] = max(
                nmse(logits[i], grows[i], np) for i in range(len(grows)))
        except Exception as e:  # recorded, not required
            entry["generate_error"] = f"{type(e).__name__}: {e}"
        result["prompts"][key] = entry
        print(f"{key}: {len(prompt)} prompt ids, generated {ids}; no-cache "
              f"NMSE {entry['no_cache_forward_nmse']:.3e}; generate(): "
              f"{entry.get('generate_ids_equal', entry.get('generate_error'))}"
              f" (logits NMSE {entry.get('generate_logits_nmse', float('nan')):.3e})")
    with open(os.path.join(args.out, "generate.json"), "w") as f:
        json.dump(result, f, indent=1)
        f.write("\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
