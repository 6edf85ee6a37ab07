#!/usr/bin/env python3
"""The instruction mix of a plan's sm_90 kernels, main loop first.

Why: the H200 profile says how long a kernel takes, not why. For the
matrix-unit kernels the first question is whether the loop around the
HMMAs is issue-bound: how many other instructions (decode, address math,
LDS, branches) each HMMA.16816 carries. This reads the cubins of a compiled
plan (no GPU needed), finds each kernel's innermost loop with the most
HMMAs (the backward branch that encloses them) and prints its length, its
HMMA count, the instructions per HMMA and the most frequent opcodes.

    python3 bench/sass_mix.py build-full/plan-last [KERNEL_INDEX ...]

Without indices it reports every distinct module with an HMMA. cuobjdump
comes from $STRATA_CUOBJDUMP, PATH, or the copy Triton ships.
"""
import argparse
import collections
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys

INSTR = re.compile(r"\s+/\*([0-9a-f]+)\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)(.*);")


def find_cuobjdump() -> str:
    """The cuobjdump to use, or exit with what was looked for."""
    for cand in (os.environ.get("STRATA_CUOBJDUMP"), shutil.which("cuobjdump")):
        if cand and os.access(cand, os.X_OK):
            return cand
    spec = importlib.util.find_spec("triton")  # locates, does not import
    for root in (spec.submodule_search_locations or []) if spec else []:
        cand = os.path.join(root, "backends", "nvidia", "bin", "cuobjdump")
        if os.access(cand, os.X_OK):
            return cand
    sys.exit("sass_mix: error: no cuobjdump (set STRATA_CUOBJDUMP, put it on "
             "PATH, or install triton, which ships one)")


def instructions(cuobjdump: str, cubin: str) -> list:
    """(address, opcode, operands) of every SASS instruction of \\p cubin."""
    out = subprocess.run([cuobjdump, "-sass", cubin], capture_output=True,
                         text=True)
    if out.returncode != 0:
        sys.exit(f"sass_mix: error: {cubin}: cuobjdump failed: "
                 f"{out.stderr.strip().splitlines()[:1]}")
    found = []
    for line in out.stdout.splitlines():
        m = INSTR.match(line)
        if m:
            found.append((int(m.group(1), 16), m.group(2), m.group(3)))
    return found


def main_loop(ins: list):
    """The loop (backward branch target .. branch) holding the most HMMAs:
    (length, hmma count, Counter of opcodes), or None."""
    best = None
    for addr, op, rest in ins:
        if not op.startswith("BRA"):
            continue
        t = re.search(r"0x([0-9a-f]+)", rest)
        if not t or int(t.group(1), 16) >= addr:
            continue
        lo = int(t.group(1), 16)
        body = [o for a, o, _ in ins if lo <= a <= addr]
        hmma = sum(1 for o in body if o.startswith("HMMA"))
        if hmma and (best is None or hmma > best[1] or
                     (hmma == best[1] and len(body) < best[0])):
            best = (len(body), hmma,
                    collections.Counter(o.split(".")[0] for o in body))
    return best


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("plan", help="a compiled sm_90 plan folder (plan.json + kernels/*.cubin)")
    ap.add_argument("kernels", nargs="*", type=int, help="kernel indices (default: all with HMMA)")
    ap.add_argument("--top", type=int, default=8, help="opcodes listed per kernel")
    a = ap.parse_args()
    try:
        plan = json.load(open(os.path.join(a.plan, "plan.json")))
    except (OSError, ValueError) as e:
        sys.exit(f"sass_mix: error: {a.plan}: cannot read plan.json: {e}")
    kernels = plan.get("kernels", [])
    picks = a.kernels or range(len(kernels))
    cuobjdump = find_cuobjdump()
    seen = set()
    for i in picks:
        if not 0 <= i < len(kernels):
            sys.exit(f"sass_mix: error: no kernel {i} (the plan has {len(kernels)})")
        code = kernels[i].get("code") or {}
        module = code.get("module", "")
        if not module.endswith(".cubin"):
            sys.exit(f"sass_mix: error: kernel {i} has no cubin ({module or 'no code'}): "
                     "compile the plan where ptxas is on PATH")
        if module in seen and not a.kernels:
            continue
        seen.add(module)
        loop = main_loop(instructions(cuobjdump, os.path.join(a.plan, module)))
        label = kernels[i].get("label") or kernels[i].get("recipe", "?")
        if loop is None:
            if a.kernels:
                print(f"{i:5d} {label}: no loop with HMMA")
            continue
        n, h, mix = loop
        ops = ", ".join(f"{op} {c}" for op, c in mix.most_common(a.top))
        print(f"{i:5d} {label} ({code.get('symbol')}): main loop {n} instructions, "
              f"{h} HMMA, {n / h:.1f} per HMMA; {ops}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
