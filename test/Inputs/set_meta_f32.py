#!/usr/bin/env python3
"""Copies a GGUF with one f32 metadata value replaced, in place in the bytes.

usage: set_meta_f32.py IN KEY VALUE OUT   (VALUE as Python's float() reads it:
"nan", "inf", "-inf", "1e-6")
"""
import struct
import sys

src, key, value, dst = sys.argv[1:5]
data = bytearray(open(src, "rb").read())
# A key is stored as u64 length + bytes, then its u32 value type (6 = f32).
needle = struct.pack("<Q", len(key)) + key.encode()
at = data.index(needle) + len(needle)
if struct.unpack_from("<I", data, at)[0] != 6:
    sys.exit(f"{key} is not an f32")
struct.pack_into("<f", data, at + 4, float(value))
open(dst, "wb").write(data)
