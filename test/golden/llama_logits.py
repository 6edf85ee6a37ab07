#!/usr/bin/env python3
"""llama.cpp as a logits oracle: all T x vocab logits for a GGUF and token ids.

Runs llama.cpp's CPU backend through llama-cpp-python (scripts/install-deps.sh
builds it): the tokens are decoded as one sequence starting at position 0,
exactly as given (no BOS is added, no tokenizer is involved), with
logits_all=True so every position's logits come back.

Settings that make the numbers reproducible and comparable to an f32
reference:
  * n_ctx = n_batch = n_ubatch >= T: one llama_decode, one ubatch (pass
    --ubatch to split the prompt; recurrent layers then carry state across
    ubatches),
  * KV cache in F32 (llama.cpp's default is F16; --kv-type f16 restores it),
  * flash attention off, no GPU offload, n_threads = n_threads_batch = 2,
    fixed seed (irrelevant to logits; no sampling happens).

Usage:
  llama_logits.py MODEL.gguf --tokens 1,2,3 -o OUT.f32
  llama_logits.py MODEL.gguf --tokens-file ids.txt -o OUT.f32
  llama_logits.py MODEL.gguf --random-tokens 64 [--seed 0] -o OUT.f32 [--save-tokens ids.txt]

OUT.f32 is raw little-endian float32, row-major [T, n_vocab] (no header); the
shape is printed on stdout as "T n_vocab". Exit 77 (ctest: skipped) when
llama_cpp or numpy is missing, 1 on errors.

As a library:
  from llama_logits import llama_logits
  x = llama_logits("m.gguf", [1, 2, 3])   # np.float32 [T, n_vocab]
"""

import argparse
import os
import sys
import time

try:
    import numpy as np
except ImportError as e:  # pragma: no cover
    print(f"SKIPPED: {e}")
    sys.exit(77)

SEED = 1234
KV_TYPES = {"f32": 0, "f16": 1}  # ggml_type ids


def _import_llama():
    try:
        import llama_cpp
    except ImportError as e:
        print(f"SKIPPED: llama_cpp not importable ({e}); run scripts/install-deps.sh")
        sys.exit(77)
    return llama_cpp


def load(model_path, n_ctx, n_threads=2, kv_type="f32", ubatch=None, verbose=False):
    """A llama_cpp.Llama set up for whole-prompt logits over up to n_ctx tokens."""
    llama_cpp = _import_llama()
    if not os.path.isfile(model_path):
        raise FileNotFoundError(f"no such file: {model_path}")
    n_ctx = max(int(n_ctx), 1)
    n_ub = min(int(ubatch), n_ctx) if ubatch else n_ctx
    return llama_cpp.Llama(
        model_path=model_path,
        n_gpu_layers=0,
        n_ctx=n_ctx,
        n_batch=n_ctx,
        n_ubatch=n_ub,
        n_threads=n_threads,
        n_threads_batch=n_threads,
        seed=SEED,
        logits_all=True,
        flash_attn=False,
        type_k=KV_TYPES[kv_type],
        type_v=KV_TYPES[kv_type],
        verbose=verbose,
    )


def eval_logits(llm, tokens):
    """Decode `tokens` from position 0 in a loaded model; np.float32 [T, n_vocab] (a copy)."""
    tokens = [int(t) for t in tokens]
    n_vocab = llm.n_vocab()
    if not tokens:
        raise ValueError("no tokens")
    if len(tokens) > llm.n_ctx():
        raise ValueError(f"{len(tokens)} tokens > n_ctx {llm.n_ctx()}")
    bad = [t for t in tokens if t < 0 or t >= n_vocab]
    if bad:
        raise ValueError(f"token ids out of range [0, {n_vocab}): {bad[:8]}")
    llm.reset()
    llm.eval(tokens)
    out = np.array(llm.scores[: len(tokens)], dtype=np.float32, copy=True)
    assert out.shape == (len(tokens), n_vocab), out.shape
    return out


def llama_logits(model_path, tokens, n_threads=2, kv_type="f32", ubatch=None, verbose=False):
    """All logits [T, n_vocab] (np.float32) of llama.cpp for `tokens` (ids, no BOS added)."""
    llm = load(model_path, len(tokens), n_threads=n_threads, kv_type=kv_type, ubatch=ubatch,
               verbose=verbose)
    try:
        return eval_logits(llm, tokens)
    finally:
        llm.close()


def write_f32(path, logits):
    """Raw little-endian float32, row-major, no header; written atomically."""
    tmp = path + ".tmp"
    np.ascontiguousarray(logits, dtype="<f4").tofile(tmp)
    os.replace(tmp, path)


def read_f32(path, n_vocab):
    """Inverse of write_f32: np.float32 [T, n_vocab]."""
    x = np.fromfile(path, dtype="<f4")
    if x.size % n_vocab:
        raise ValueError(f"{path}: {x.size} floats is not a multiple of n_vocab {n_vocab}")
    return x.reshape(-1, n_vocab)


def parse_tokens(text):
    """Ids separated by commas and/or whitespace."""
    return [int(t) for t in text.replace(",", " ").split()]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model", help="GGUF file")
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--tokens", help="comma-separated token ids, e.g. 1,2,3")
    src.add_argument("--tokens-file", help="file of token ids (comma/whitespace separated)")
    src.add_argument("--random-tokens", type=int, metavar="T", help="T uniform random ids in [0, n_vocab)")
    ap.add_argument("--seed", type=int, default=0, help="seed for --random-tokens")
    ap.add_argument("--save-tokens", help="write the ids used (one line, comma-separated)")
    ap.add_argument("-o", "--out", required=True, help="output: raw LE float32 [T, n_vocab]")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--kv-type", choices=sorted(KV_TYPES), default="f32")
    ap.add_argument("--ubatch", type=int, default=None, help="split the prompt into ubatches of this size")
    ap.add_argument("--verbose", action="store_true", help="llama.cpp's own log")
    ap.add_argument("--time", action="store_true", help="print load and eval seconds on stderr")
    a = ap.parse_args(argv)

    try:
        if a.tokens is not None:
            tokens = parse_tokens(a.tokens)
        elif a.tokens_file is not None:
            with open(a.tokens_file) as f:
                tokens = parse_tokens(f.read())
        else:
            tokens = None
        n = len(tokens) if tokens is not None else a.random_tokens
        if n <= 0:
            raise ValueError("no tokens")
        t0 = time.perf_counter()
        llm = load(a.model, n, n_threads=a.threads, kv_type=a.kv_type, ubatch=a.ubatch,
                   verbose=a.verbose)
        t1 = time.perf_counter()
        if tokens is None:
            rng = np.random.default_rng(a.seed)
            tokens = rng.integers(0, llm.n_vocab(), size=n).tolist()
        logits = eval_logits(llm, tokens)
        t2 = time.perf_counter()
    except (ValueError, FileNotFoundError, OSError, RuntimeError) as e:
        print(f"llama_logits: error: {e}", file=sys.stderr)
        return 1
    if not np.all(np.isfinite(logits)):
        print(f"llama_logits: error: {int(np.sum(~np.isfinite(logits)))} non-finite logits", file=sys.stderr)
        return 1
    write_f32(a.out, logits)
    if a.save_tokens:
        with open(a.save_tokens, "w") as f:
            f.write(",".join(str(t) for t in tokens) + "\n")
    if a.time:
        print(f"llama_logits: load {t1 - t0:.3f} s, eval {t2 - t1:.3f} s for {len(tokens)} tokens",
              file=sys.stderr)
    print(f"{logits.shape[0]} {logits.shape[1]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
