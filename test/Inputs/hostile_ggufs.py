#!/usr/bin/env python3
"""Hostile variants of a GGUF: strata-compile must refuse what strata-run
would refuse (the compiler never writes a plan its runtime refuses for the
same file).

usage: hostile_ggufs.py MODEL.strata GOOD.gguf WORKDIR

Makes each variant by patching GOOD.gguf's bytes in place (same lengths, so
the rest of the file stays as written), compiles it, and:
  - where strata-compile refuses: exit 1, one line, no signal, no plan
    folder left behind;
  - where it accepts: strata-run on the same file must run the plan (exit 0).
Prints one line per variant and "N passed, 0 failed" at the end; exits 1 on
any disagreement.
"""
import os
import shutil
import struct
import subprocess
import sys

model, good, work = sys.argv[1:4]
data = open(good, "rb").read()


def patch_string_value(buf, key, new):
    """The string value of metadata KEY replaced by NEW (same length)."""
    needle = struct.pack("<Q", len(key)) + key.encode()
    at = buf.index(needle) + len(needle)
    assert struct.unpack_from("<I", buf, at)[0] == 8, key  # string
    n = struct.unpack_from("<Q", buf, at + 4)[0]
    assert n == len(new), (key, n, new)
    out = bytearray(buf)
    out[at + 12:at + 12 + n] = new
    return bytes(out)


def patch_f32(buf, key, value):
    needle = struct.pack("<Q", len(key)) + key.encode()
    at = buf.index(needle) + len(needle)
    assert struct.unpack_from("<I", buf, at)[0] == 6, key
    out = bytearray(buf)
    struct.pack_into("<f", out, at + 4, value)
    return bytes(out)


def patch_u32(buf, key, value):
    needle = struct.pack("<Q", len(key)) + key.encode()
    at = buf.index(needle) + len(needle)
    assert struct.unpack_from("<I", buf, at)[0] == 4, key  # uint32
    out = bytearray(buf)
    struct.pack_into("<I", out, at + 4, value)
    return bytes(out)


def rename_tensor(buf, old, new):
    assert len(old) == len(new)
    needle = struct.pack("<Q", len(old)) + old.encode()
    return buf.replace(needle, struct.pack("<Q", len(new)) + new.encode(), 1)


# The key's bytes, then its u32 type, u64 length and the string.
key_at = data.index(b"general.architecture")
arch_len = struct.unpack_from("<Q", data, key_at + 24)[0]
arch_name = data[key_at + 32:key_at + 32 + arch_len].decode()
bad_utf8 = arch_name[:2].encode() + b"\xff" + arch_name[3:].encode()
other = ("llama" + "x" * 16)[:arch_len].encode()
prefix = arch_name + "."

variants = {
    "architecture-invalid-utf8": patch_string_value(
        data, "general.architecture", bad_utf8),
    "architecture-other": patch_string_value(data, "general.architecture",
                                             other),
    "eps-nan": patch_f32(data, prefix + "attention.layer_norm_rms_epsilon",
                         float("nan")),
    "eps-negative": patch_f32(data, prefix + "attention.layer_norm_rms_epsilon",
                              -1.0),
    "rope-inf": patch_f32(data, prefix + "rope.freq_base", float("inf")),
    "block-count-zero": patch_u32(data, prefix + "block_count", 0),
    "block-count-more": patch_u32(data, prefix + "block_count", 99),
    "head-count-zero": patch_u32(data, prefix + "attention.head_count", 0),
    "tensor-renamed": rename_tensor(data, "blk.0.attn_q.weight",
                                    "blk.0.attn_x.weight"),
    "truncated": data[:len(data) - 4096],
    "header-only": data[:64],
}

passed = failed = 0
os.makedirs(work, exist_ok=True)
for tag, blob in variants.items():
    path = os.path.join(work, tag + ".gguf")
    plan = os.path.join(work, tag + ".plan")
    shutil.rmtree(plan, ignore_errors=True)
    open(path, "wb").write(blob)
    c = subprocess.run(["strata-compile", model, "--gguf", path,
                        "--max-tokens", "4", "-o", plan],
                       capture_output=True, text=True, errors="replace")
    problem = None
    if c.returncode < 0:
        problem = f"strata-compile died of signal {-c.returncode}"
    elif c.returncode == 0:
        r = subprocess.run(["strata-run", plan, "--gguf", path, "--tokens",
                            "1,2,3", "--top", "1"],
                           capture_output=True, text=True, errors="replace")
        if r.returncode != 0:
            problem = ("strata-compile accepted it, strata-run refused: " +
                       r.stderr.strip())
        verdict = "compiled and ran"
    else:
        lines = [l for l in c.stderr.splitlines() if l.strip()]
        if c.returncode != 1:
            problem = f"strata-compile exited {c.returncode}, expected 1"
        elif os.path.exists(plan):
            problem = "strata-compile refused it but left a plan folder"
        elif not lines or ": error: " not in lines[0]:
            # "strata-compile: error: ..." or a diagnostic
            # "FILE:LINE:COL: error: ..." naming the description's line.
            problem = "no error line: " + c.stderr
        verdict = "refused: " + (lines[0] if lines else "")
    if problem:
        failed += 1
        print(f"FAIL {tag}: {problem}")
    else:
        passed += 1
        print(f"ok   {tag}: {verdict}")
print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
