#!/usr/bin/env python3
"""Writes a small vocabulary-only GGUF for the tokenizer's lit tests.

usage: make_vocab_gguf.py OUT [--model M] [--pre P] [--no-tokenizer]
                              [--bad-merge] [--eos N]

The vocabulary: the 256 byte tokens of GPT-2's byte-level spelling (id =
byte), then "he", "ll", "hell", "hello", "<|endoftext|>" (CONTROL) and
"<ud>" (USER_DEFINED), with the merges that build "hello". --bad-merge adds
the merge "he zz" ("zz" is no token). Written by hand (GGUF v3, no tensors)
so the tests need no Python package.
"""
import argparse
import struct

ap = argparse.ArgumentParser()
ap.add_argument("out")
ap.add_argument("--model", default="gpt2")
ap.add_argument("--pre", default="qwen2")
ap.add_argument("--no-tokenizer", action="store_true")
ap.add_argument("--bad-merge", action="store_true")
ap.add_argument("--eos", type=int, default=260)
a = ap.parse_args()


def byte_text(b):
    # GPT-2's bytes_to_unicode: printable Latin-1 bytes stand for themselves,
    # the others take U+0100 onwards in byte order.
    keep = list(range(0x21, 0x7F)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    if b in keep:
        return chr(b)
    return chr(256 + [x for x in range(256) if x not in keep].index(b))


def s(v):
    b = v.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


kvs = [("general.architecture", 8, s("qwen2"))]
if not a.no_tokenizer:
    tokens = [byte_text(b) for b in range(256)] + ["he", "ll", "hell", "hello", "<|endoftext|>", "<ud>"]
    types = [1] * 260 + [3, 4]
    merges = ["h e", "l l", "he ll", "hell o"] + (["he zz"] if a.bad_merge else [])
    kvs += [
        ("tokenizer.ggml.model", 8, s(a.model)),
        ("tokenizer.ggml.pre", 8, s(a.pre)),
        ("tokenizer.ggml.tokens", 9,
         struct.pack("<IQ", 8, len(tokens)) + b"".join(s(t) for t in tokens)),
        ("tokenizer.ggml.token_type", 9,
         struct.pack("<IQ", 5, len(types)) + b"".join(struct.pack("<i", t) for t in types)),
        ("tokenizer.ggml.merges", 9,
         struct.pack("<IQ", 8, len(merges)) + b"".join(s(m) for m in merges)),
        ("tokenizer.ggml.eos_token_id", 4, struct.pack("<I", a.eos)),
    ]
out = b"GGUF" + struct.pack("<IQQ", 3, 0, len(kvs))
for key, vtype, value in kvs:
    out += s(key) + struct.pack("<I", vtype) + value
out += b"\0" * (-len(out) % 32)
open(a.out, "wb").write(out)
