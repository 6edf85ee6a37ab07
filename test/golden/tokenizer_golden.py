#!/usr/bin/env python3
"""Golden test: strata's tokenizer (runtime/tokenizer) against llama.cpp.

1. llama.cpp's own tokenizer test vocabularies ggml-vocab-qwen2.gguf and
   ggml-vocab-qwen35.gguf with their .inp/.out cases (as test-tokenizer-0
   runs them: no BOS, special tokens not parsed) come from llama-cpp-python
   0.3.36's sdist (vendor/llama.cpp/models/), fetched once with
   `pip download` into --cache-dir; every case must give equal ids.
2. A seeded generator makes several thousand texts per vocabulary (CJK,
   emoji with ZWJ sequences and modifiers, combining marks, runs of
   whitespace, newlines and tabs, digits of many lengths, English
   contractions in both cases, mixed scripts, special tokens inside text),
   tokenised with and without parsing special tokens and adding BOS, by
   llama_cpp.Llama(vocab_only=True).tokenize and by strata; the ids must be
   equal, and strata's decode of its ids (streamed token by token) must give
   the text back.

PCRE2 10.42 knows Unicode 14; llama.cpp's tables are newer. Characters
assigned since (about 5,100, none in common use) may split differently, so
the generator draws from Unicode 14's assigned characters only.

Usage: tokenizer_golden.py --batch TOKENIZER_BATCH --cache-dir DIR --workdir DIR
       [--cases N] [--seed S]
Exits 0 if all equal, 1 on a mismatch, 77 (ctest: skipped) if the files
cannot be fetched (no network) or llama_cpp is missing.
"""

import argparse
import os
import random
import shutil
import struct
import subprocess
import sys
import tarfile
import tempfile
import time
import unicodedata

SDIST = "llama-cpp-python==0.3.36"
VOCABS = ["qwen2", "qwen35"]


def skip(why):
    print(f"SKIPPED: {why}")
    sys.exit(77)


def fetch(cache):
    """The vocab files in cache, fetched from the sdist if not there yet."""
    names = [f"ggml-vocab-{v}.gguf{ext}" for v in VOCABS for ext in ("", ".inp", ".out")]
    if all(os.path.exists(os.path.join(cache, n)) for n in names):
        return
    os.makedirs(cache, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        try:
            r = subprocess.run(
                [sys.executable, "-m", "pip", "download", "--no-binary", ":all:",
                 "--no-deps", "--disable-pip-version-check", SDIST, "-d", tmp],
                capture_output=True, text=True, timeout=420)
        except subprocess.TimeoutExpired:
            skip(f"fetching {SDIST}'s sdist took more than 420 s")
        tars = [f for f in os.listdir(tmp) if f.endswith(".tar.gz")]
        if r.returncode != 0 or not tars:
            skip(f"cannot fetch {SDIST}'s sdist: {(r.stderr or r.stdout).strip()[-300:]}")
        with tarfile.open(os.path.join(tmp, tars[0])) as tf:
            members = {os.path.basename(m.name): m for m in tf.getmembers()
                       if "/vendor/llama.cpp/models/" in m.name}
            for n in names:
                if n not in members:
                    sys.exit(f"tokenizer_golden: {n} is not in {tars[0]}")
                src = tf.extractfile(members[n])
                part = os.path.join(cache, n + ".part")
                with open(part, "wb") as f:
                    shutil.copyfileobj(src, f)
                os.replace(part, os.path.join(cache, n))


def llama_cases(path):
    """test-tokenizer-0's reading of NAME.inp / NAME.out."""
    raw = open(path + ".inp", "rb").read().decode("utf-8")
    sep = "\n__ggml_vocab_test__\n"
    inputs = raw.split(sep)
    # test-tokenizer-0 keeps a final piece only up to the end of the file.
    outs = [line.strip() for line in open(path + ".out", encoding="utf-8").read().split("\n")]
    outs = outs[:len(inputs)]
    if len(outs) != len(inputs):
        sys.exit(f"tokenizer_golden: {path}: {len(inputs)} inputs, {len(outs)} outputs")
    return [(s, [int(t) for t in o.split()]) for s, o in zip(inputs, outs)]


# ----------------------------------------------------------------------------
# The generator
# ----------------------------------------------------------------------------

def assigned(cp):
    """A character Unicode 14 assigned (not Cn, Cs), where Python's own
    Unicode database is 14 or older; else only the blocks below."""
    c = chr(cp)
    return unicodedata.category(c) not in ("Cn", "Cs")


UNIDATA_OK = tuple(int(x) for x in unicodedata.unidata_version.split(".")[:1]) <= (14,)

WS = [" ", " ", " ", "\t", "\n", "\n", "\r", "\r\n", "\u00a0", "\u3000", "\u2009",
      "\u200a", "\u2028", "\u2029", "\u0085", "\u000b", "\u000c", "\u1680", "\u202f",
      "\u205f", "\u180e"]
PUNCT = list("!\"#$%&()*+,-./:;<=>?@[\\]^_`{|}~") + list("“”‘’—–…«»¿¡、。，・「」€£¥©®™°±×÷")
CONTRACTIONS = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'T", "'RE", "'Ve",
                "'M", "'LL", "'lL", "'D", "'x", "'", "''", "'é", "'ſ", "'K"]
WORDS = ["hello", "World", "THE", "don", "it", "we", "they", "I", "can", "Straße",
         "naïve", "café", "über", "Ωmega", "привет", "Мир", "γειά", "مرحبا", "שלום",
         "नमस्ते", "क्षत्रिय", "สวัสดี", "こんにちは", "カタカナ", "안녕하세요", "中文", "漢字",
         "tokenizer", "llama", "Qwen", "x", "ǅ", "ﬁ", "İstanbul", "ſ", "K"]
EMOJI = ["🦙", "😀", "😂", "🤖", "🚀", "🎉", "❤️", "👍🏽", "👋🏿",
         "👨\u200d👩\u200d👧\u200d👦", "👩🏽\u200d💻", "🏳️\u200d🌈", "🧑\u200d🤝\u200d🧑",
         "1️⃣", "#️⃣", "🇺🇸", "🇯🇵🇩🇪", "☕", "✨", "🫠"]
MARKS = list(range(0x0300, 0x0370)) + [0x0483, 0x0591, 0x05B0, 0x064B, 0x0650,
                                       0x093F, 0x094D, 0x0E31, 0x0E48, 0x20D7, 0xFE0F,
                                       0x1AB0, 0x1DC0, 0x20E3]
SCRIPT_RANGES = [(0x4E00, 0x9FFF), (0x3041, 0x3096), (0x30A1, 0x30FA), (0xAC00, 0xD7A3),
                 (0x0410, 0x044F), (0x0391, 0x03C9), (0x0621, 0x064A), (0x0905, 0x0939),
                 (0x0E01, 0x0E2E), (0x05D0, 0x05EA), (0x00C0, 0x00FF), (0x0100, 0x017F),
                 (0x1F600, 0x1F64F), (0x1F300, 0x1F5FF), (0x2000, 0x206F), (0x2190, 0x21FF),
                 (0xFF01, 0xFF5E), (0x0660, 0x0669), (0x0966, 0x096F), (0x2160, 0x2188),
                 (0x00B2, 0x00BE), (0x1D400, 0x1D7FF), (0x20000, 0x2A6DF)]
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "[PAD151646]", "[PAD151935]",
            "[PAD151700]", "<|im_", "<|im_start|", "im_end|>", "<|", "|>", "[PAD", "]"]


def piece(rng):
    k = rng.random()
    if k < 0.12:
        w = rng.choice(WORDS)
        return w.upper() if rng.random() < 0.2 else w
    if k < 0.22:
        return rng.choice(["", " "]) + rng.choice(WORDS[:10]) + rng.choice(CONTRACTIONS)
    if k < 0.32:
        return "".join(rng.choice("0123456789") for _ in range(rng.choice([1, 2, 3, 4, 5, 7, 10, 16, 33])))
    if k < 0.44:
        return "".join(rng.choice(WS) for _ in range(rng.randint(1, 9)))
    if k < 0.54:
        lo, hi = rng.choice(SCRIPT_RANGES)
        out = ""
        while len(out) < rng.randint(1, 6):
            cp = rng.randint(lo, hi)
            if assigned(cp):
                out += chr(cp)
        return out
    if k < 0.62:
        return "".join(rng.choice(EMOJI) for _ in range(rng.randint(1, 3)))
    if k < 0.70:
        base = rng.choice(["a", "e", "Z", " ", "1", "!", "", "\n", "क", "ก", "ا"])
        return base + "".join(chr(rng.choice(MARKS)) for _ in range(rng.randint(1, 3)))
    if k < 0.78:
        return rng.choice(["", " "]) + "".join(rng.choice(PUNCT) for _ in range(rng.randint(1, 5)))
    if k < 0.86:
        return rng.choice(SPECIALS)
    if k < 0.90:
        return chr(rng.choice(list(range(0, 0x20)) + [0x7F, 0xAD, 0x200B, 0x200D, 0xFEFF]))
    if k < 0.95 and UNIDATA_OK:
        while True:
            cp = rng.randint(0x80, 0x2FFFF)
            if assigned(cp) and not (0xD800 <= cp <= 0xDFFF):
                return chr(cp)
    return rng.choice(["Hello, world!", " the end.", "It's", "I'M HERE", "you'll",
                       "e.g.", "3.14159", "$100", "a-b_c", "x=1;y=2", "    def f():",
                       "\n\n\n", "\t\tindent", "https://example.com/a?b=c"])


def make_text(rng):
    n = rng.choice([1, 1, 2, 3, 4, 6, 8, 12, 20])
    sep = rng.choice(["", "", " ", "\n"])
    return sep.join(piece(rng) for _ in range(n))


def batch_records(cases):
    out = bytearray()
    for text, add, special in cases:
        b = text.encode("utf-8")
        out += struct.pack("<BI", (1 if add else 0) | (2 if special else 0), len(b)) + b
    return bytes(out)


def run_batch(tool, gguf, cases, workdir, tag):
    inp = os.path.join(workdir, f"{tag}.cases")
    out = os.path.join(workdir, f"{tag}.out")
    with open(inp, "wb") as f:
        f.write(batch_records(cases))
    r = subprocess.run([tool, gguf, inp, out], capture_output=True, text=True)
    if r.returncode != 0:
        print(f"FAIL: {tag}: tokenizer-batch exited {r.returncode}: {r.stderr.strip()}")
        sys.exit(1)
    results = []
    for line in open(out, encoding="utf-8").read().split("\n")[:len(cases)]:
        ids, dec = line.split("\t", 1)
        if ids == "ERROR":
            results.append((None, dec))
        else:
            results.append(([int(x) for x in ids.split(",")] if ids else [],
                            bytes.fromhex(dec)))
    if len(results) != len(cases):
        sys.exit(f"tokenizer_golden: {tag}: {len(results)} results for {len(cases)} cases")
    return results


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", required=True, help="the tokenizer-batch tool")
    ap.add_argument("--cache-dir", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--cases", type=int, default=4000, help="generated texts per vocabulary")
    ap.add_argument("--seed", type=int, default=20261202)
    a = ap.parse_args()
    os.makedirs(a.workdir, exist_ok=True)
    t0 = time.time()
    fetch(a.cache_dir)
    failures = 0

    # 1. llama.cpp's own cases.
    for v in VOCABS:
        gguf = os.path.join(a.cache_dir, f"ggml-vocab-{v}.gguf")
        cases = llama_cases(gguf)
        got = run_batch(a.batch, gguf, [(s, False, False) for s, _ in cases], a.workdir, f"{v}-inp")
        equal = 0
        for (s, want), (ids, dec) in zip(cases, got):
            if ids == want:
                equal += 1
            elif failures < 20:
                failures += 1
                print(f"FAIL: {v}.inp {s!r}: strata {ids if ids is not None else dec}, llama.cpp {want}")
        print(f"{v}: llama.cpp's .inp/.out cases: {equal}/{len(cases)} equal")
        if equal != len(cases):
            failures += 1

    try:
        import llama_cpp
    except ImportError as e:
        if failures:
            return 1
        skip(f"llama_cpp is missing ({e}); the .inp/.out cases passed")

    # 2. Generated texts against llama-cpp-python.
    for vi, v in enumerate(VOCABS):
        gguf = os.path.join(a.cache_dir, f"ggml-vocab-{v}.gguf")
        llm = llama_cpp.Llama(model_path=gguf, vocab_only=True, verbose=False)
        rng = random.Random(a.seed * 10 + vi)
        cases = []
        for i in range(a.cases):
            text = make_text(rng)
            if i % 500 == 0:
                # A few long texts: whole paragraphs of everything.
                text = "".join(make_text(rng) for _ in range(60))
            cases.append((text, rng.random() < 0.3, rng.random() < 0.6))
        got = run_batch(a.batch, gguf, cases, a.workdir, f"{v}-gen")
        equal = round_trip = 0
        for (text, add, special), (ids, dec) in zip(cases, got):
            want = llm.tokenize(text.encode("utf-8"), add_bos=add, special=special)
            if ids == want:
                equal += 1
            elif failures < 40:
                failures += 1
                print(f"FAIL: {v} add_bos={add} special={special} {text!r}:\n"
                      f"  strata    {ids if ids is not None else dec}\n  llama.cpp {want}")
            if ids is not None and dec == text.encode("utf-8"):
                round_trip += 1
            elif ids is not None and failures < 40:
                failures += 1
                print(f"FAIL: {v}: decode does not give the text back: {text!r} -> {dec!r}")
        print(f"{v}: generated texts: {equal}/{len(cases)} equal to llama.cpp, "
              f"{round_trip}/{len(cases)} decoded back to the text")
        if equal != len(cases) or round_trip != len(cases):
            failures += 1
    print(f"tokenizer_golden: {time.time() - t0:.1f} s")
    if failures:
        print("FAIL")
        return 1
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
