#!/usr/bin/env python3
"""Speculative decoding (strata-run --spec K) generates what plain decoding does.

For each arch (qwen3, qwen3moe, qwen3next, qwen4exp), on a tiny synthetic
model (strata-gguf synth --preset tiny --seed 1, F32 weights):
  strata-compile --max-context 96 --max-tokens 16 --logits all (a plan with
  generation state that returns every row's logits, as --spec needs)
  strata-run --tokens PROMPT -n 40 --ignore-eos --dump-ids --dump-logits
without --spec, then with --spec 1 and --spec 4, on two prompts: a
repetitive one (a 5-token phrase 4 times: prompt lookup finds drafts at
once) and one of 24 distinct ids (drafts only once the model's own text
repeats). Greedy, and once more at --temp 0.8 --seed 3 with --spec 4 (the
drafts are verified by the sampler itself, so sampling with a seed gives
the same tokens too).

The bars: every run with --spec has the ids of the run without it (the
--dump-ids files equal byte for byte) and its dumped logits (the logits each
token was chosen from) within NMSE 1e-12 of the plain run's (equal in fact
on the cpu backend: a row's numbers do not depend on the rows run with it).
The timings line's counts must be consistent (accepted <= proposed, at most
K drafts a run) and show the paths that matter: for the archs with
recurrent state (qwen3next, qwen4exp: conv windows, delta-rule states, the
PLE token history) some run rejected a draft after accepting one and the
state was rolled back; for the archs with caches only (qwen3, qwen3moe)
nothing is rolled back; on the repetitive prompt drafts are accepted.

Prints one line per run (acceptance, model runs, rollbacks, wall time) and
exits 1 naming the first failed bar.
"""
import argparse
import os
import re
import struct
import subprocess
import sys
import time

ARCHS = ["qwen3", "qwen3moe", "qwen3next", "qwen4exp"]
RECURRENT = {"qwen3next", "qwen4exp"}
PROMPTS = {
    "repetitive": [10, 20, 30, 40, 50] * 4,
    "distinct": [3, 141, 59, 265, 358, 979, 323, 846, 264, 338, 327, 950,
                 288, 419, 716, 939, 937, 510, 582, 97, 494, 459, 230, 781],
}
GENERATE = 40
NMSE_BAR = 1e-12

TIMINGS = re.compile(
    r"drafts (\d+) proposed, (\d+) accepted \([0-9.]+ %\) in (\d+) runs "
    r"\((\d+) rejected mid-way\), (\d+) rollbacks \((\d+) rows run again, "
    r"(\d+) bytes of state copied\); (\d+) model runs? on cpu")
PLAIN_RUNS = re.compile(r"; (\d+) model runs? on cpu")


def run(cmd):
    # The generated text (stdout) may hold bytes of unfinished characters.
    p = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                       text=True, errors="replace")
    if p.returncode != 0:
        sys.exit(f"spec_decode: {' '.join(cmd)} failed ({p.returncode}):\n"
                 f"{p.stderr}")
    return p.stderr


def floats(path):
    data = open(path, "rb").read()
    return struct.unpack(f"<{len(data) // 4}f", data)


def nmse(got, want):
    num = sum((g - w) * (g - w) for g, w in zip(got, want))
    den = sum(w * w for w in want)
    return num / den if den else num


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--source", required=True)
    ap.add_argument("--workdir", required=True)
    args = ap.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    tool = lambda name: os.path.join(args.bin, name)
    failures = []

    def bar(ok, what):
        if not ok:
            failures.append(what)
            print(f"FAIL: {what}")

    for arch in ARCHS:
        gguf = os.path.join(args.workdir, f"{arch}.gguf")
        plan = os.path.join(args.workdir, f"{arch}.plan")
        run([tool("strata-gguf"), "synth", "--arch", arch, "--preset", "tiny",
             "--seed", "1", "-o", gguf])
        run([tool("strata-compile"),
             os.path.join(args.source, "models", f"{arch}.strata"), "--gguf",
             gguf, "--max-context", "96", "--max-tokens", "16", "--logits",
             "all", "-o", plan])
        midway = rollbacks = 0
        for name, prompt in PROMPTS.items():
            ids = ",".join(map(str, prompt))
            for sampling in ([], ["--temp", "0.8", "--seed", "3"]):
                specs = [0, 1, 4] if not sampling else [0, 4]
                base = None
                for k in specs:
                    tag = f"{arch}.{name}.{'t08' if sampling else 'greedy'}.{k}"
                    out = os.path.join(args.workdir, tag)
                    cmd = [tool("strata-run"), plan, "--gguf", gguf,
                           "--tokens", ids, "-n", str(GENERATE),
                           "--ignore-eos", "--dump-ids", out + ".ids",
                           "--dump-logits", out + ".f32"] + sampling
                    if k:
                        cmd += ["--spec", str(k)]
                    t0 = time.monotonic()
                    err = run(cmd)
                    wall = time.monotonic() - t0
                    what = f"{arch} {name} {'--temp 0.8' if sampling else 'greedy'}"
                    if k == 0:
                        base = out
                        m = PLAIN_RUNS.search(err)
                        print(f"{what:32} plain    {int(m.group(1)):3} model "
                              f"runs, {wall * 1e3:6.0f} ms")
                        continue
                    m = TIMINGS.search(err)
                    if not m:
                        bar(False, f"{what} --spec {k}: no drafts in the "
                                   f"timings line: {err.strip()}")
                        continue
                    (proposed, accepted, verify, mid, back, rerun, copied,
                     runs) = map(int, m.groups())
                    midway += mid
                    rollbacks += back
                    rate = 100.0 * accepted / proposed if proposed else 0.0
                    print(f"{what:32} --spec {k} {runs:3} model runs, "
                          f"{wall * 1e3:6.0f} ms; drafts {proposed:3}, "
                          f"accepted {accepted:3} ({rate:5.1f} %), "
                          f"{mid} rejected mid-way, {back} rollbacks, "
                          f"{rerun} rows again, {copied} bytes copied")
                    bar(open(out + ".ids").read() == open(base + ".ids").read(),
                        f"{what} --spec {k}: ids differ from plain decoding")
                    got, want = floats(out + ".f32"), floats(base + ".f32")
                    bar(len(got) == len(want),
                        f"{what} --spec {k}: {len(got)} logits, plain "
                        f"{len(want)}")
                    err_nmse = nmse(got, want)
                    bar(err_nmse <= NMSE_BAR,
                        f"{what} --spec {k}: logits NMSE {err_nmse:.3g} > "
                        f"{NMSE_BAR}")
                    bar(accepted <= proposed <= k * verify,
                        f"{what} --spec {k}: counts inconsistent: {proposed} "
                        f"proposed, {accepted} accepted in {verify} runs")
                    if arch not in RECURRENT:
                        bar(back == 0 and copied == 0,
                            f"{what} --spec {k}: {back} rollbacks without "
                            f"recurrent state")
                    if name == "repetitive" and not sampling:
                        bar(accepted > 0,
                            f"{what} --spec {k}: no draft accepted on the "
                            f"repetitive prompt")
        if arch in RECURRENT:
            bar(midway > 0 and rollbacks > 0,
                f"{arch}: no run rejected a draft after accepting one "
                f"({midway}) or no rollback ({rollbacks}): the rollback path "
                f"did not run")
    if failures:
        sys.exit(f"spec_decode: {len(failures)} bar(s) failed; first: "
                 f"{failures[0]}")
    print("spec_decode: all passed")


if __name__ == "__main__":
    main()
