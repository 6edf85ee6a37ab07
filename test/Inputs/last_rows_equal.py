#!/usr/bin/env python3
"""Prints "equal" if raw float32 file LAST is the last rows of file ALL.

usage: last_rows_equal.py ALL LAST   (bit-for-bit comparison)
"""
import sys
from array import array

full = array("f", open(sys.argv[1], "rb").read())
last = array("f", open(sys.argv[2], "rb").read())
ok = len(last) > 0 and len(full) % len(last) == 0 and \
    full[len(full) - len(last):].tobytes() == last.tobytes()
print("equal" if ok else f"DIFFER ({len(full)} and {len(last)} values)")
