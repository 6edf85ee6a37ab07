#!/usr/bin/env python3
"""Copies a GGUF without its vocabulary, as a real-size shapes-only file has it.

    python3 test/serve/no_vocab_gguf.py IN.gguf OUT.gguf

Every tokenizer.* key but tokenizer.ggml.eos_token_id is left out and
tokenizer.ggml.model is "no_vocab" (what `strata-gguf synth --preset full`
writes): strata-run then prints token ids and strata-serve serves ids in and
out. The tensor infos and the data section are copied byte for byte (their
offsets are relative to the data section, which starts at the next multiple
of general.alignment), so a plan compiled from IN runs on OUT; a
shapes-only IN (no data) gives a shapes-only OUT. Standard library only.
"""

import os
import struct
import sys

# GGUF value types: struct format of the scalars; 8 string, 9 array.
SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?",
           10: "Q", 11: "q", 12: "d"}


class Reader:
    def __init__(self, data):
        self.data, self.pos = data, 0

    def take(self, fmt):
        v = struct.unpack_from("<" + fmt, self.data, self.pos)
        self.pos += struct.calcsize("<" + fmt)
        return v[0]

    def string(self):
        n = self.take("Q")
        s = self.data[self.pos:self.pos + n]
        self.pos += n
        return s.decode("utf-8")

    def skip_value(self, vtype):
        if vtype in SCALARS:
            self.pos += struct.calcsize("<" + SCALARS[vtype])
        elif vtype == 8:
            self.string()
        elif vtype == 9:
            inner, n = self.take("I"), self.take("Q")
            for _ in range(n):
                self.skip_value(inner)
        else:
            raise ValueError(f"unknown GGUF value type {vtype} at byte {self.pos}")


def string_bytes(s):
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def strip_vocab(src, dst):
    with open(src, "rb") as f:
        data = f.read()
    r = Reader(data)
    if data[:4] != b"GGUF":
        raise ValueError(f"{src}: not a GGUF file")
    r.pos = 4
    version, n_tensors, n_kv = r.take("I"), r.take("Q"), r.take("Q")
    if version < 2:
        raise ValueError(f"{src}: GGUF version {version} (2 or 3 expected)")
    kept = []
    alignment = 32
    for _ in range(n_kv):
        start = r.pos
        key = r.string()
        vtype = r.take("I")
        value_at = r.pos
        r.skip_value(vtype)
        if key == "general.alignment" and vtype == 4:
            alignment = struct.unpack_from("<I", data, value_at)[0]
        if key.startswith("tokenizer.") and key != "tokenizer.ggml.eos_token_id":
            continue
        kept.append(data[start:r.pos])
    kept.append(string_bytes("tokenizer.ggml.model") + struct.pack("<I", 8) +
                string_bytes("no_vocab"))
    infos_at = r.pos
    for _ in range(n_tensors):
        r.string()
        n_dims = r.take("I")
        r.pos += 8 * n_dims + 4 + 8  # dims, type, offset
    infos = data[infos_at:r.pos]
    data_at = -(-r.pos // alignment) * alignment
    out = bytearray(b"GGUF" + struct.pack("<IQQ", version, n_tensors, len(kept)))
    for kv in kept:
        out += kv
    out += infos
    out += b"\0" * (-len(out) % alignment)
    out += data[data_at:]
    part = dst + ".part"
    with open(part, "wb") as f:
        f.write(out)
    os.replace(part, dst)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: no_vocab_gguf.py IN.gguf OUT.gguf")
    strip_vocab(sys.argv[1], sys.argv[2])
