#!/usr/bin/env python3
"""Oracle: strata's host sampler (runtime/Sampler) against llama.cpp's samplers.

llama.cpp's samplers run through llama-cpp-python's low-level API
(llama_sampler_init_penalties / _top_k / _top_p / _min_p / _temp_ext / _dist
and the off-by-default stages of its default chain, llama_sampler_apply on a
llama_token_data_array over random logits), strata's chain through
`sampler-oracle-check` (test/unit/runtime/sampler_tool.cpp, which prints
Sampler::distribution). Per case both must keep the same candidates (those
with probability > 1e-30: below that llama.cpp's float32 flushes to 0 what
strata's double keeps), with the same probabilities (llama.cpp's `dist`
normalises them in float32: |difference| <= 1e-5) and the same logits after
the penalties and the temperature (relative 1e-5). The draw itself is not
compared: llama.cpp's is std::mt19937 and std::uniform_real_distribution.

Configurations (each --cases random cases): every stage alone (penalties,
top_k, top_p, min_p, temperature, greedy), llama.cpp's default chain at its
default values, and the default chain with random values. llama.cpp's
default chain is built as common_sampler_init builds it (common/sampling.cpp
of llama-cpp-python 0.3.36): penalties, [dry: needs a model's vocabulary; off
at its default], top_n_sigma(-1), top_k, typical(1), top_p, min_p,
xtc(0, 0.1), temp_ext(t, 0, 1), dist; so the stages strata leaves out are in
it, at their defaults.

Vocabularies of 2 to 6,000 tokens (above 1,024 llama.cpp's top_p and
partial sorts take their bucket paths), normal logits, some masked (-inf);
histories drawn mostly from the likeliest tokens, so the penalties move the
cuts. float32 (llama.cpp) and double (strata) may decide a cut either way
where a threshold is within rounding of a candidate's value (top_p's running
sum: 1e-5 plus twice float32's summation error; min_p's log-ratio and two
logits at a cut or at the argmax: relative 1e-5; a probability within a
factor e of 1e-30): such cases are found with a double-precision model of
the chain and redrawn (their number is printed).

Exit status: 0 all cases agree, 1 any mismatch, 77 (ctest: skipped) where
llama_cpp or numpy cannot be imported.

usage: sampler_oracle.py --tool build/bin/sampler-oracle-check --workdir DIR
                         [--cases 250] [--seed 1]
"""

import argparse
import ctypes
import math
import os
import subprocess
import sys
import time

try:
    import numpy as np
    import llama_cpp as L
except ImportError as e:  # pragma: no cover - environment, not a failure
    print(f"sampler_oracle: SKIPPED: {e}")
    sys.exit(77)

PROB_BAR = 1e-5
LOGIT_BAR = 1e-5
MARGIN = 1e-5  # cuts closer than this to a threshold are redrawn
TINY = 1e-30  # survivors: candidates with a probability above this

# strata's option names (runtime/SamplerOptions.def) and llama.cpp's
# defaults (common/common.h), which are strata's defaults too.
DEFAULTS = dict(temperature=0.8, top_k=40, top_p=0.95, min_p=0.05,
                penalty_last_n=64, penalty_repeat=1.0, penalty_freq=0.0,
                penalty_present=0.0)
ALL_OFF = dict(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0,
               penalty_last_n=0, penalty_repeat=1.0, penalty_freq=0.0,
               penalty_present=0.0)

TOKEN_DATA = np.dtype([("id", "<i4"), ("logit", "<f4"), ("p", "<f4")])
assert TOKEN_DATA.itemsize == ctypes.sizeof(L.llama_token_data)


def f32(x):
    return float(np.float32(x))


# ---------------------------------------------------------------------------
# Cases
# ---------------------------------------------------------------------------

def random_logits(rng):
    kind = rng.integers(0, 3)
    n = int([rng.integers(2, 64), rng.integers(64, 1024),
             rng.integers(1025, 6000)][kind])
    sigma = float(rng.choice([0.5, 1.0, 2.0, 4.0]))
    logits = (rng.normal(0.0, sigma, n) + rng.normal(0.0, 3.0)).astype(np.float32)
    if n > 4 and rng.random() < 0.2:  # masked tokens, never the top one
        top = int(np.argmax(logits))
        masked = rng.choice(n, size=int(rng.integers(1, n // 2)), replace=False)
        logits[masked[masked != top]] = -np.inf
    return logits


def random_history(rng, logits, last_n):
    n = len(logits)
    length = int(rng.integers(0, 3 * max(last_n, 1) + 5))
    likely = np.argsort(-logits, kind="stable")[:20]
    picks = [int(rng.choice(likely)) if rng.random() < 0.7 else int(rng.integers(0, n))
             for _ in range(length)]
    return np.array(picks, dtype=np.int32)


def random_penalties(rng):
    return dict(penalty_last_n=int(rng.choice([1, 4, 16, 64, 300])),
                penalty_repeat=f32(rng.choice([0.7, 1.0, 1.1, 1.5, 3.0])),
                penalty_freq=f32(rng.choice([0.0, 0.1, 0.5, -0.3])),
                penalty_present=f32(rng.choice([0.0, 0.2, 1.0, -0.5])))


def random_options(config, rng, n):
    o = dict(ALL_OFF)
    if config == "penalties":
        o.update(random_penalties(rng))
    elif config == "top_k":
        o["top_k"] = int(rng.choice([1, 2, 5, 40, 100, n, n + 7]))
    elif config == "top_p":
        o["top_p"] = f32(rng.choice([0.05, 0.3, 0.5, 0.8, 0.9, 0.95, 0.99]))
    elif config == "min_p":
        o["min_p"] = f32(rng.choice([0.01, 0.05, 0.1, 0.3, 0.7, 1.0]))
    elif config == "temperature":
        o["temperature"] = f32(rng.choice([0.1, 0.5, 0.8, 1.5, 3.0]))
    elif config == "greedy":
        o["temperature"] = 0.0
        o.update(random_penalties(rng))
    elif config == "chain_default":
        o = dict(DEFAULTS)
    elif config == "chain_random":
        o = dict(DEFAULTS)
        o.update(random_penalties(rng))
        o["top_k"] = int(rng.choice([0, 1, 10, 40, 200]))
        o["top_p"] = f32(rng.choice([0.5, 0.8, 0.95, 1.0]))
        o["min_p"] = f32(rng.choice([0.0, 0.02, 0.05, 0.2]))
        o["temperature"] = f32(rng.choice([0.0, 0.3, 0.8, 1.0, 1.7]))
    else:
        raise ValueError(config)
    return o


CONFIGS = ["penalties", "top_k", "top_p", "min_p", "temperature", "greedy",
           "chain_default", "chain_random"]


# ---------------------------------------------------------------------------
# A double-precision model of the chain: only to find cases that float32 and
# double arithmetic may decide differently (it is compared with nothing).
# ---------------------------------------------------------------------------

def near_a_threshold(o, logits, history):
    l = logits.astype(np.float64)
    ids = np.nonzero(np.isfinite(l))[0]
    l = l[ids]
    n_win = min(len(history), o["penalty_last_n"])
    if n_win and not (o["penalty_repeat"] == 1 and o["penalty_freq"] == 0
                      and o["penalty_present"] == 0):
        window = history[len(history) - n_win:]
        pos = {int(t): i for i, t in enumerate(ids)}
        tokens, counts = np.unique(window, return_counts=True)
        for t, c in zip(tokens, counts):
            i = pos.get(int(t))
            if i is None:
                continue
            v = l[i]
            v = v * o["penalty_repeat"] if v <= 0 else v / o["penalty_repeat"]
            l[i] = v - (c * o["penalty_freq"] + o["penalty_present"])
    in_id_order = l.copy()
    order = np.lexsort((ids, -l))
    l = l[order]

    def tie_at(cut):  # two logits within MARGIN across a cut
        return 0 < cut < len(l) and l[cut - 1] - l[cut] <= MARGIN * max(1.0, abs(l[cut]))

    if 0 < o["top_k"] < len(l):
        if tie_at(o["top_k"]):
            return True
        l = l[:o["top_k"]]
    if o["top_p"] < 1:
        p = np.exp(l - l[0])
        p /= p.sum()
        cum = np.cumsum(p)
        # llama.cpp's softmax sums float32 terms one by one in the array's
        # order (sorted after top_k, else token order), then its running sum
        # adds float32 probabilities: over thousands of tokens it strays from
        # the exact sum by 1e-5 and more. Its stray, emulated in float32
        # (np.cumsum adds in sequence, unlike np.sum):
        top = np.float32(l[0])
        terms = l if o["top_k"] > 0 else in_id_order
        total32 = np.cumsum(np.exp(terms.astype(np.float32) - top), dtype=np.float32)[-1]
        p32 = np.exp(l.astype(np.float32) - top) / total32
        cum32 = np.cumsum(p32, dtype=np.float32)
        stray = np.abs(cum32.astype(np.float64) - cum)
        if np.any(np.abs(cum - o["top_p"]) <= MARGIN + 2 * stray):
            return True
        cut = int(np.argmax(cum >= o["top_p"])) + 1 if np.any(cum >= o["top_p"]) else len(l)
        if tie_at(cut):
            return True
        l = l[:cut]
    if o["min_p"] > 0:
        # llama.cpp compares logit >= max + log(min_p) in float32.
        gap = l - l[0] - math.log(o["min_p"])
        if np.any(np.abs(gap) <= MARGIN * np.maximum(1.0, np.abs(l))):
            return True
        l = l[gap >= 0]
    if o["temperature"] == 0 and tie_at(1):
        return True
    # Survivors are compared down to probability TINY (llama.cpp's float32
    # flushes what double keeps far below that): keep clear of that edge.
    if o["temperature"] > 0:
        z = (l - l[0]) / o["temperature"]
        logp = z - math.log(np.exp(z).sum())
        if np.any(np.abs(logp - math.log(TINY)) < 1.0):
            return True
    return False


# ---------------------------------------------------------------------------
# llama.cpp
# ---------------------------------------------------------------------------

def llama_chain(config, o, n_vocab, history, seed):
    """The llama.cpp chain for one case, with the history accepted."""
    samplers = []
    pen = L.llama_sampler_init_penalties(n_vocab, o["penalty_last_n"], o["penalty_repeat"],
                                         o["penalty_freq"], o["penalty_present"])
    for t in history:
        L.llama_sampler_accept(pen, int(t))
    if config.startswith("chain") or config == "greedy":
        samplers = [pen,
                    L.llama_sampler_init_top_n_sigma(-1.0),
                    L.llama_sampler_init_top_k(o["top_k"]),
                    L.llama_sampler_init_typical(1.0, 0),
                    L.llama_sampler_init_top_p(o["top_p"], 0),
                    L.llama_sampler_init_min_p(o["min_p"], 0),
                    L.llama_sampler_init_xtc(0.0, 0.1, 0, seed),
                    L.llama_sampler_init_temp_ext(o["temperature"], 0.0, 1.0)]
    else:
        L.llama_sampler_free(pen)
        samplers = [{
            "penalties": lambda: L.llama_sampler_init_penalties(
                n_vocab, o["penalty_last_n"], o["penalty_repeat"],
                o["penalty_freq"], o["penalty_present"]),
            "top_k": lambda: L.llama_sampler_init_top_k(o["top_k"]),
            "top_p": lambda: L.llama_sampler_init_top_p(o["top_p"], 0),
            "min_p": lambda: L.llama_sampler_init_min_p(o["min_p"], 0),
            "temperature": lambda: L.llama_sampler_init_temp(o["temperature"]),
        }[config]()]
        if config == "penalties":
            for t in history:
                L.llama_sampler_accept(samplers[0], int(t))
    samplers.append(L.llama_sampler_init_dist(seed))
    chain = L.llama_sampler_chain_init(L.llama_sampler_chain_default_params())
    for s in samplers:
        L.llama_sampler_chain_add(chain, s)
    return chain


def llama_distribution(config, o, logits, history, seed):
    """{id: (logit, p)} of the candidates llama.cpp leaves with p > 0."""
    n = len(logits)
    buf = np.zeros(n, dtype=TOKEN_DATA)
    buf["id"] = np.arange(n, dtype=np.int32)
    buf["logit"] = logits
    cur = L.llama_token_data_array(buf.ctypes.data_as(L.llama_token_data_p), n, -1, False)
    chain = llama_chain(config, o, n, history, seed)
    try:
        L.llama_sampler_apply(chain, ctypes.byref(cur))
    finally:
        L.llama_sampler_free(chain)
    size = int(cur.size)
    if ctypes.cast(cur.data, ctypes.c_void_p).value == buf.ctypes.data:
        out = buf[:size]
    else:  # a sampler moved the array (none does in 0.3.36)
        out = np.array([(cur.data[i].id, cur.data[i].logit, cur.data[i].p)
                        for i in range(size)], dtype=TOKEN_DATA)
    return {int(r["id"]): (float(r["logit"]), float(r["p"])) for r in out if r["p"] > TINY}


# ---------------------------------------------------------------------------
# strata
# ---------------------------------------------------------------------------

def option_text(o):
    return " ".join(f"{k}={v!r}" if isinstance(v, float) else f"{k}={v}"
                    for k, v in o.items())


def strata_distributions(tool, workdir, cases):
    logits = np.concatenate([c["logits"] for c in cases]).astype("<f4")
    history = np.concatenate([c["history"] for c in cases] + [np.zeros(0, np.int32)]).astype("<i4")
    lines, lo, ho = [], 0, 0
    for c in cases:
        lines.append(f"{lo} {len(c['logits'])} {ho} {len(c['history'])} {option_text(c['options'])}")
        lo += len(c["logits"])
        ho += len(c["history"])
    paths = [os.path.join(workdir, f) for f in ("cases.txt", "logits.f32", "history.i32")]
    with open(paths[0], "w") as f:
        f.write("\n".join(lines) + "\n")
    logits.tofile(paths[1])
    history.tofile(paths[2])
    r = subprocess.run([tool] + paths, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"sampler-oracle-check failed:\n{r.stderr}")
    out, it = [], iter(r.stdout.splitlines())
    for line in it:
        head = line.split(" ", 3)
        assert head[0] == "case" and int(head[1]) == len(out), line
        if head[2] == "error":
            out.append(head[3])
            continue
        d = {}
        for _ in range(int(head[3])):
            i, lg, p = next(it).split()
            if float(p) > TINY:
                d[int(i)] = (float(lg), float(p))
        out.append(d)
    assert len(out) == len(cases)
    return out


# ---------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tool", required=True, help="sampler-oracle-check")
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--cases", type=int, default=250, help="per configuration")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    os.makedirs(a.workdir, exist_ok=True)
    start = time.time()
    L.llama_backend_init()
    rng = np.random.default_rng(a.seed)

    cases, redrawn = [], {c: 0 for c in CONFIGS}
    for config in CONFIGS:
        for _ in range(a.cases):
            while True:
                logits = random_logits(rng)
                o = random_options(config, rng, len(logits))
                history = random_history(rng, logits, o["penalty_last_n"])
                if not near_a_threshold(o, logits, history):
                    break
                redrawn[config] += 1
            cases.append(dict(config=config, logits=logits, history=history, options=o,
                              seed=int(rng.integers(0, 2**31))))
    ours = strata_distributions(a.tool, a.workdir, cases)

    failures = []
    stats = {c: dict(cases=0, survivors=0, dp=0.0, dl=0.0) for c in CONFIGS}
    for index, (c, got) in enumerate(zip(cases, ours)):
        want = llama_distribution(c["config"], c["options"], c["logits"], c["history"], c["seed"])
        s = stats[c["config"]]
        s["cases"] += 1
        what = f"case {index} ({c['config']}, vocab {len(c['logits'])}, {option_text(c['options'])})"
        if isinstance(got, str):
            failures.append(f"{what}: strata refused it: {got}")
            continue
        if set(got) != set(want):
            only_ours = sorted(set(got) - set(want))[:8]
            only_llama = sorted(set(want) - set(got))[:8]
            failures.append(f"{what}: survivors differ: {len(got)} vs llama.cpp's {len(want)}; "
                            f"only strata {only_ours}, only llama.cpp {only_llama}")
            continue
        s["survivors"] += len(got)
        t = c["options"]["temperature"]
        for i, (logit, p) in got.items():
            wl, wp = want[i]
            dp = abs(p - wp)
            # llama.cpp's logits after temp_ext are divided by t; greedy sets
            # the others to -inf and leaves the survivor's.
            ours_logit = logit / t if t > 0 else logit
            dl = abs(ours_logit - wl) / max(1.0, abs(wl))
            s["dp"] = max(s["dp"], dp)
            s["dl"] = max(s["dl"], dl)
            if dp > PROB_BAR or dl > LOGIT_BAR:
                failures.append(f"{what}: token {i}: p {p:.9g} vs {wp:.9g}, "
                                f"logit {ours_logit:.9g} vs {wl:.9g}")
                break

    print(f"sampler_oracle: llama-cpp-python {L.__version__}, seed {a.seed}, "
          f"{len(cases)} cases in {time.time() - start:.1f} s")
    print(f"{'configuration':<15} {'cases':>6} {'redrawn':>8} {'survivors':>10} "
          f"{'max |dp|':>10} {'max rel dlogit':>15}")
    for config in CONFIGS:
        s = stats[config]
        print(f"{config:<15} {s['cases']:>6} {redrawn[config]:>8} {s['survivors']:>10} "
              f"{s['dp']:>10.2e} {s['dl']:>15.2e}")
    if failures:
        print(f"sampler_oracle: FAILED: {len(failures)} of {len(cases)} cases differ")
        for f in failures[:20]:
            print("  " + f)
        return 1
    print(f"sampler_oracle: ok (bars: |dp| <= {PROB_BAR:g}, relative dlogit <= {LOGIT_BAR:g})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
