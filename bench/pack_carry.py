#!/usr/bin/env python3
"""Packs plan folders for the GPU machine into one xz tarball.

A device call carries the working tree and its `carry` paths, 64 MiB in
all; the tree alone is ~27 MB. Plan folders are mostly pretty-printed
plan.json files and cubins, which compress well (the differential suite's
41 MB folder packs into 23 MB, the full Qwen4-Exp decode A/B plans into
0.3 MB; random-weight GGUFs do not shrink). Every plan.json goes into the
archive minified (same JSON, no indentation); the folders here stay as
they are.

  here:  python3 bench/pack_carry.py build-carry/NAME.tar.xz DIR [DIR ...]
  there: tar xJf build-carry/NAME.tar.xz     (carry build-carry)

Paths are stored relative to the repository root, so the folders unpack
where the scripts expect them.
"""
import argparse
import io
import json
import lzma
import os
import sys
import tarfile


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("archive")
    ap.add_argument("dirs", nargs="+")
    a = ap.parse_args()
    for d in a.dirs:
        if not os.path.isdir(d):
            print(f"pack_carry: error: {d}: no such folder", file=sys.stderr)
            return 2
    os.makedirs(os.path.dirname(os.path.abspath(a.archive)), exist_ok=True)
    tmp = a.archive + ".tmp"
    raw = packed = 0
    with lzma.open(tmp, "wb", preset=6) as xz, \
            tarfile.open(fileobj=xz, mode="w") as tar:
        for d in a.dirs:
            for root, dirs, files in os.walk(d):
                dirs.sort()
                for f in sorted(files):
                    path = os.path.join(root, f)
                    data = open(path, "rb").read()
                    raw += len(data)
                    if f == "plan.json":
                        data = json.dumps(json.loads(data),
                                          separators=(",", ":")).encode()
                    info = tarfile.TarInfo(os.path.normpath(path))
                    info.size = len(data)
                    info.mode = os.stat(path).st_mode & 0o777
                    tar.addfile(info, io.BytesIO(data))
    os.replace(tmp, a.archive)
    packed = os.path.getsize(a.archive)
    print(f"pack_carry: {a.archive}: {raw / 1e6:.1f} MB of files in "
          f"{packed / 1e6:.1f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
