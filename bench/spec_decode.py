#!/usr/bin/env python3
"""Speculative decoding (strata-run --spec K) against plain decoding: speed.

  python3 bench/spec_decode.py --plan PLAN --gguf FILE --tokens-file F
      [--name NAME --tokens-file F ...] [-n 128] [--spec 2,4,8]
      [--repeat 3] [--bin build/bin] [--results bench/results]
      [-- EXTRA strata-run ARGS (--backend cuda, --synthetic-weights 1 ...)]

For each prompt (a --tokens-file of ids; --name labels it, default the
file's name), runs `strata-run PLAN -n N --ignore-eos` without --spec and
with each K, --repeat times, and keeps the fastest generation time (the
timings line's "generated ... in X ms": decode only, the prompt excluded).
Prints and writes (RESULTS/spec-decode-<date>.txt) one row per run: tokens/s,
the speedup over plain decoding, the model runs, the drafts proposed and
accepted, the acceptance rate, rollbacks and rows run again, and whether
the generated ids equal plain decoding's (on the cpu backend they must; on
a GPU a run of several rows may round differently from a run of one, so a
near-tie may flip). The plan must return every row's logits
(strata-compile --logits all).
"""
import argparse
import datetime
import os
import re
import subprocess
import sys
import tempfile

GENERATED = re.compile(r"generated (\d+) tokens in ([0-9.]+) ms")
RUNS = re.compile(r"(\d+) model runs? on")
DRAFTS = re.compile(
    r"drafts (\d+) proposed, (\d+) accepted \(([0-9.]+) %\) in (\d+) runs "
    r"\((\d+) rejected mid-way\), (\d+) rollbacks \((\d+) rows run again, "
    r"(\d+) bytes of state copied\)")


def run_once(args, extra, tokens_file, k, ids_out):
    cmd = [os.path.join(args.bin, "strata-run"), args.plan, "--gguf",
           args.gguf, "--tokens-file", tokens_file, "-n", str(args.n),
           "--ignore-eos", "--dump-ids", ids_out] + extra
    if k:
        cmd += ["--spec", str(k)]
    p = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                       text=True, errors="replace")
    if p.returncode != 0:
        sys.exit(f"spec_decode: {' '.join(cmd)} failed:\n{p.stderr}")
    g = GENERATED.search(p.stderr)
    r = RUNS.search(p.stderr)
    d = DRAFTS.search(p.stderr)
    return (float(g.group(2)), int(g.group(1)), int(r.group(1)),
            d.groups() if d else None)


def main():
    argv = sys.argv[1:]
    extra = []
    if "--" in argv:
        extra = argv[argv.index("--") + 1:]
        argv = argv[:argv.index("--")]
    ap = argparse.ArgumentParser()
    ap.add_argument("--plan", required=True)
    ap.add_argument("--gguf", required=True)
    ap.add_argument("--tokens-file", action="append", required=True)
    ap.add_argument("--name", action="append", default=[])
    ap.add_argument("-n", type=int, default=128)
    ap.add_argument("--spec", default="2,4,8")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--bin", default="build/bin")
    ap.add_argument("--results", default="bench/results")
    args = ap.parse_args(argv)
    ks = [int(k) for k in args.spec.split(",")]
    names = args.name + [os.path.basename(f)
                         for f in args.tokens_file[len(args.name):]]
    when = datetime.datetime.utcnow().strftime("%Y-%m-%d %H:%M")
    extras = " ".join(extra) or "-"
    commit = subprocess.run(["git", "describe", "--always", "--dirty"],
                            capture_output=True, text=True).stdout.strip()
    lines = [f"# strata-run --spec: {when} UTC, commit {commit or '?'}, "
             f"{os.cpu_count()} cpus, plan {args.plan}, -n {args.n}, best "
             f"of {args.repeat}, extra args: {extras}",
             f"{'prompt':14} {'K':>3} {'tok/s':>8} {'speedup':>7} {'runs':>5} "
             f"{'drafts':>6} {'accepted':>8} {'rate %':>6} {'rollbacks':>9} "
             f"{'rows again':>10} same ids"]
    print("\n".join(lines), flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        for name, tokens in zip(names, args.tokens_file):
            base_ms = None
            base_ids = os.path.join(tmp, f"{name}.0.ids")
            for k in [0] + ks:
                ids = os.path.join(tmp, f"{name}.{k}.ids")
                best = None
                for _ in range(args.repeat):
                    r = run_once(args, extra, tokens, k, ids)
                    if best is None or r[0] < best[0]:
                        best = r
                ms, n, runs, d = best
                if k == 0:
                    base_ms = ms
                same = open(ids).read() == open(base_ids).read()
                rate = n / ms * 1e3 if ms else 0.0
                if d:
                    proposed, accepted, pct, _, _, back, again, _ = d
                else:
                    proposed = accepted = pct = back = again = "-"
                row = (f"{name:14} {k:>3} {rate:8.1f} {base_ms / ms:7.2f} "
                       f"{runs:5} {proposed:>6} {accepted:>8} {pct:>6} "
                       f"{back:>9} {again:>10} {'yes' if same else 'NO'}")
                lines.append(row)
                print(row, flush=True)
    os.makedirs(args.results, exist_ok=True)
    stamp = datetime.datetime.utcnow().strftime("%Y%m%dT%H%M%SZ")
    out = os.path.join(args.results, f"spec-decode-{stamp}.txt")
    open(out, "w").write("\n".join(lines) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
