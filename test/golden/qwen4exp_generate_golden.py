#!/usr/bin/env python3
"""strata-run's greedy generation on the tiny Qwen4-Exp against HF's.

The golden is HF transformers' greedy continuation with its cache
(test/golden/qwen4exp_llama/generate.json and generate_{long,short}.f32,
made on the GPU machine by qwen4exp_generate_hf.py from the same model as
the committed GGUFs). Its 3 layers carry every kind of state: gated delta
nets (conv window, recurrent state), the PLE layer (n-gram history, dilated
conv) and the QSA layer (KV cache, indexer block keys; the long prompt, 72
tokens with an EOS inside, is past the indexer budget of 16 tokens, so
every decode step selects blocks over the cache; the short one, 11 tokens,
passes it while generating).

Each file is compiled with its state (strata-compile --max-context 128
--logits last, host, f32) and prefilled in chunks of --max-tokens rows: 16
(a multiple of the QSA block of 4) and 7 (blocks complete inside chunks and
across their boundaries). strata-run --tokens PROMPT -n N --ignore-eos then
generates N tokens:
  - model_ratios.gguf (compress ratios [0, 0, 4] in the file);
  - model_zero.gguf with --qsa-compress-ratio 4.
Bars: every generated id equal to HF's; the logits of every step within
NMSE 1e-5 of HF's.
Prints each comparison; exit 1 if a bar fails, 77 if numpy is missing.
"""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from golden_common import ROOT, end_to_end_args, nmse, run  # noqa: E402

GOLDEN = os.path.join(HERE, "qwen4exp_llama")
BAR = 1e-5

try:
    import numpy as np
except ImportError as e:  # pragma: no cover
    print(f"SKIPPED: {e}")
    sys.exit(77)


def main():
    a, tool = end_to_end_args()
    with open(os.path.join(GOLDEN, "generate.json")) as f:
        golden = json.load(f)
    model = os.path.join(ROOT, "models", "qwen4exp.strata")
    cases = [("model_ratios.gguf", []),
             ("model_zero.gguf", ["--qsa-compress-ratio", "4"])]
    failed = checks = 0
    for gguf_name, flags in cases:
        gguf = os.path.join(GOLDEN, gguf_name)
        for chunk in (16, 7):
            tag = f"{gguf_name.split('.')[0]}{'+ratio4' if flags else ''}-chunk{chunk}"
            plan = os.path.join(a.workdir, tag + ".plan")
            run([tool("strata-compile"), model, "--gguf", gguf, "--max-tokens",
                 str(chunk), "--max-context", "128", "--logits", "last",
                 "--target", "host", "--precision", "f32", "-o", plan] + flags)
            for name, entry in golden["prompts"].items():
                n = len(entry["generated"])
                ids_path = os.path.join(a.workdir, f"{tag}-{name}.ids")
                logits_path = os.path.join(a.workdir, f"{tag}-{name}.f32")
                run([tool("strata-run"), plan, "--gguf", gguf, "--tokens",
                           ",".join(map(str, entry["prompt"])), "-n", str(n),
                           "--ignore-eos", "--dump-ids", ids_path,
                           "--dump-logits", logits_path])
                with open(ids_path) as f:
                    rows = f.read().split("\n")
                ours = [int(t) for t in rows[1].split(",")] if rows[1] else []
                theirs = entry["generated"]
                vocab = entry["shape"][1]
                ours_logits = np.fromfile(logits_path, dtype="<f4").reshape(-1, vocab)
                their_logits = np.fromfile(os.path.join(GOLDEN, entry["file"]),
                                           dtype="<f4").reshape(-1, vocab)
                equal = 0
                while equal < min(len(ours), len(theirs)) and ours[equal] == theirs[equal]:
                    equal += 1
                steps = min(equal + 1, len(ours), len(theirs))
                worst = max(nmse(ours_logits[i].astype(np.float64),
                                 their_logits[i].astype(np.float64))
                            for i in range(steps)) if steps else float("inf")
                ok = equal == len(theirs) == len(ours) and worst <= BAR
                checks += 1
                failed += not ok
                print(f"{tag:32s} {name:5s} equal {equal}/{len(theirs)}, step "
                      f"logits NMSE <= {worst:.2e} (bar {BAR:g}) "
                      f"{'ok' if ok else 'FAIL'}", flush=True)
    print(f"{checks - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
