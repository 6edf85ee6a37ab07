#!/usr/bin/env python3
"""Helpers for strata-run's generation lit tests (test/Tools/strata-run-generate.test).

  generation.py force-eos IDS IN.gguf OUT.gguf PREFIX CHECK
      IDS is a --dump-ids file of a greedy run. Picks the first generated
      token, from the third on, whose id did not occur before it, and copies
      IN.gguf to OUT.gguf with tokenizer.ggml.eos_token_id set to that id (in
      place in the bytes: a u32 key of the synthetic vocabulary). The same
      greedy run on OUT.gguf must then stop right after that token. Writes
      PREFIX (the ids generated before it, comma-separated: the text shown)
      and CHECK, FileCheck patterns for the new run's --dump-ids (prefix
      IDS), its stderr (prefix ERR) and the byte count of its --dump-logits
      (prefix BYTES; vocabulary from --vocab, default 1000).
  generation.py pick-stop TEXT OFFSET LENGTH STOP EXPECT
      STOP gets the first LENGTH bytes of TEXT at or after OFFSET that are
      all printable ASCII (they go through a shell), EXPECT the bytes of
      TEXT before their first occurrence: what a run with --stop STOP
      prints.
  generation.py rename-key IN KEY NEWKEY OUT
      copies IN with metadata key KEY renamed NEWKEY (same length).
  generation.py check-greedy IDS LOGITS VOCAB
      every generated id of IDS is the argmax (lowest id on ties) of its
      row of LOGITS (--dump-logits: raw float32 [generated, VOCAB]).
  generation.py check-prefix SHORT.ids LONG.ids
      both have the same prompt, and SHORT's generated ids begin LONG's.
  generation.py check-cache-bytes PLAN.json P1 OUT1 P2 OUT2 ...
      each OUT is the stdout of a run with --profile=json whose last run
      (a decode row) attends P positions (its position + 1): the text, then
      the profile's JSON. Every attention_cached kernel's bytes must be its
      own bytes plus, per attended position, one position of its key and
      value caches (the states' bytes over slots x context): the same own
      bytes in every run, the caches' share growing with P.
"""
import json
import struct
import sys


def key_offset(data, key):
    needle = struct.pack("<Q", len(key)) + key.encode()
    at = data.find(needle)
    if at < 0:
        sys.exit(f"generation.py: no key {key}")
    return at, at + len(needle)


def force_eos(ids_path, src, dst, prefix_path, check_path, vocab=1000):
    lines = open(ids_path).read().split("\n")
    prompt, gen = lines[0], [int(t) for t in lines[1].split(",")]
    k = next((i for i in range(2, len(gen)) if gen[i] not in gen[:i]), None)
    if k is None:
        sys.exit("generation.py: no new id among the generated tokens")
    data = bytearray(open(src, "rb").read())
    _, at = key_offset(data, "tokenizer.ggml.eos_token_id")
    if struct.unpack_from("<I", data, at)[0] != 4:
        sys.exit("generation.py: tokenizer.ggml.eos_token_id is not a u32")
    struct.pack_into("<I", data, at + 4, gen[k])
    open(dst, "wb").write(data)
    open(prefix_path, "w").write(",".join(map(str, gen[:k])))
    ids = ",".join(map(str, gen[:k + 1]))
    open(check_path, "w").write(
        f"IDS: {{{{^}}}}{prompt}{{{{$}}}}\n"
        f"IDS-NEXT: {{{{^}}}}{ids}{{{{$}}}}\n"
        f"ERR: generated {k + 1} tokens in {{{{.*}}}} stopped: end-of-generation token {gen[k]}\n"
        f"BYTES: {{{{^}}}}{(k + 1) * vocab * 4}{{{{$}}}}\n")


def pick_stop(text_path, offset, length, stop_path, expect_path):
    text = open(text_path, "rb").read()
    stop = next((text[i:i + length] for i in range(offset, len(text) - length + 1)
                 if all(0x21 <= b < 0x7F for b in text[i:i + length])), None)
    if stop is None:
        sys.exit(f"generation.py: no {length} printable ASCII bytes after {offset}")
    open(stop_path, "wb").write(stop)
    open(expect_path, "wb").write(text[:text.find(stop)])


def rename_key(src, key, new, dst):
    if len(new) != len(key):
        sys.exit("generation.py: the new key must be as long as the old")
    data = bytearray(open(src, "rb").read())
    at, end = key_offset(data, key)
    data[end - len(key):end] = new.encode()
    open(dst, "wb").write(data)


def read_ids(path):
    lines = open(path).read().split("\n")
    return lines[0], [int(t) for t in lines[1].split(",") if t]


def check_greedy(ids_path, logits_path, vocab):
    _, gen = read_ids(ids_path)
    data = open(logits_path, "rb").read()
    if len(data) != len(gen) * vocab * 4:
        sys.exit(f"generation.py: {len(data)} bytes of logits for {len(gen)} tokens")
    for i, token in enumerate(gen):
        row = struct.unpack_from(f"<{vocab}f", data, i * vocab * 4)
        best = max(range(vocab), key=lambda v: (row[v], -v))
        if best != token:
            sys.exit(f"generation.py: step {i}: generated {token}, argmax {best}")


def check_prefix(short_path, long_path):
    (p1, g1), (p2, g2) = read_ids(short_path), read_ids(long_path)
    if p1 != p2 or g2[:len(g1)] != g1:
        sys.exit(f"generation.py: {short_path} does not begin {long_path}")


def check_cache_bytes(plan_path, runs):
    plan = json.load(open(plan_path))
    slots, context = plan["options"]["max_batch"], plan["options"]["max_context"]
    attention = {i: k for i, k in enumerate(plan["kernels"])
                 if k.get("recipe") == "attention_cached"}
    if not attention:
        sys.exit("generation.py: the plan has no attention_cached kernel")
    own = {}
    for positions, out in runs:
        text = open(out, "rb").read()  # the generated text may not be UTF-8
        profile = json.loads(text[text.index(b'{"backend"'):])
        for k in profile["kernels"]:
            if k["index"] not in attention:
                continue
            states = [i["state"] for i in attention[k["index"]]["inputs"]
                      if "state" in i]
            per_position = sum(plan["state"][s]["bytes"] for s in states) / (
                slots * context)
            rest = k["bytes"] - per_position * positions
            if abs(own.setdefault(k["index"], rest) - rest) > 0.5:
                sys.exit(f"generation.py: kernel {k['index']} at {positions} "
                         f"positions moves {k['bytes']} bytes: {rest} besides "
                         f"the caches, {own[k['index']]} in the first run")
    if set(own) != set(attention):
        sys.exit("generation.py: the profiles miss attention_cached kernels")


if __name__ == "__main__":
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "force-eos":
        force_eos(*args)
    elif cmd == "pick-stop":
        pick_stop(args[0], int(args[1]), int(args[2]), args[3], args[4])
    elif cmd == "rename-key":
        rename_key(*args)
    elif cmd == "check-greedy":
        check_greedy(args[0], args[1], int(args[2]))
    elif cmd == "check-prefix":
        check_prefix(*args)
    elif cmd == "check-cache-bytes":
        check_cache_bytes(args[0], [(int(args[i]), args[i + 1])
                                    for i in range(1, len(args), 2)])
    else:
        sys.exit(f"generation.py: unknown command {cmd}")
