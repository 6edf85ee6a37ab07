#!/usr/bin/env python3
"""The llama.cpp peer benchmark's numbers (bench/llamacpp_run.sh).

  fragment  one model's results: llama-bench's JSONL (-o jsonl) and the
            strata-run lines the run script kept (pp<T> time/repeat/graph
            lines of plan-prefill, the tg<N> timings line of plan-decode)
            -> one JSON
  report    every fragment -> PREFIX.txt (machine, date, commits, every
            number, the ratio table strata / llama.cpp for pp512, pp16384
            and tg128) and PREFIX.json; fragments fetched from several
            device calls can be joined here the same way

strata's rates: prefill is T / the median of runs 2-4 (--repeat 4, graph
replays); decode is (N - 1) / the generation time of -n N (N = 129: the
first token is sampled from the prompt's logits, the other 128 are decode
steps, llama-bench's tg128).
"""
import argparse
import datetime
import json
import re
import sys


def parse_llama(path):
    out = {}
    try:
        lines = open(path).read().splitlines()
    except OSError as e:
        return {"error": str(e)}
    for line in lines:
        line = line.strip()
        if not line.startswith("{"):
            continue
        r = json.loads(line)
        if r.get("n_gen", 0) == 0:
            test = "pp%d" % r["n_prompt"]
        elif r.get("n_prompt", 0) == 0:
            test = "tg%d" % r["n_gen"]
        else:
            test = "pp%d+tg%d" % (r["n_prompt"], r["n_gen"])
        out[test] = {k: r.get(k) for k in (
            "avg_ts", "stddev_ts", "avg_ns", "n_batch", "n_ubatch", "flash_attn",
            "n_gpu_layers", "build_commit", "build_number", "gpu_info", "backends",
            "model_type", "model_size", "model_n_params", "samples_ts")}
    return out


TIME = re.compile(r"^pp(\d+) time: load ([\d.]+) ms, run ([\d.]+) ms .*\(([\d.]+) tokens, (\d+) kernels")
REPEAT = re.compile(r"^pp(\d+) repeat: (\d+) runs: first ([\d.]+) ms, then min ([\d.]+) ms, median ([\d.]+) ms")
GRAPH = re.compile(r"^pp(\d+) graph: (.*)")
TIMINGS = re.compile(r"^tg(\d+) timings: load ([\d.]+) ms; prompt (\d+) tokens in ([\d.]+) ms .*; "
                     r"generated (\d+) tokens in ([\d.]+) ms")


def parse_strata(path):
    out, errors = {}, []
    try:
        lines = open(path).read().splitlines()
    except OSError as e:
        return {"error": str(e)}
    for line in lines:
        if m := TIME.match(line):
            t = out.setdefault("pp" + m[1], {})
            t.update(load_ms=float(m[2]), first_ms=float(m[3]), kernels=int(m[5]))
        elif m := REPEAT.match(line):
            t = out.setdefault("pp" + m[1], {})
            T = int(m[1])
            t.update(runs=int(m[2]), min_ms=float(m[4]), median_ms=float(m[5]),
                     tokens_per_s=T * 1e3 / float(m[5]))
        elif m := GRAPH.match(line):
            out.setdefault("pp" + m[1], {})["graph"] = m[2]
        elif m := TIMINGS.match(line):
            n, ms = int(m[5]), float(m[6])
            out["tg" + m[1]] = {"load_ms": float(m[2]), "prompt_tokens": int(m[3]),
                                "prompt_ms": float(m[4]), "generated": n, "generate_ms": ms,
                                "decode_steps": n - 1,
                                "tokens_per_s": (n - 1) * 1e3 / ms if ms > 0 else None}
        elif "error" in line:
            errors.append(line)
    if errors:
        out["errors"] = errors
    return out


def fragment(a):
    frag = {"model": a.model, "synth": a.synth, "plan_commit": a.plan_commit,
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "llama": parse_llama(a.llama), "strata": parse_strata(a.strata)}
    with open(a.output, "w") as f:
        json.dump(frag, f, indent=1)
    print(json.dumps({k: frag[k] for k in ("model", "llama", "strata")}))


def fmt(x, spec="%.1f"):
    return "-" if x is None else spec % x


def report(a):
    frags = []
    for p in a.fragments:
        try:
            f = json.load(open(p))
        except (OSError, ValueError) as e:
            print("skipping %s: %s" % (p, e), file=sys.stderr)
            continue
        if not isinstance(f, dict) or not {"model", "synth", "date"} <= f.keys():
            print("skipping %s: not a model's fragment" % p, file=sys.stderr)
            continue
        frags.append(f)
    now = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    lines = ["# llama.cpp (CUDA, llama-bench) against strata on the same GGUF files",
             "# %s; %s" % (now, a.machine),
             "# strata commit %s" % a.commit]
    table = []
    for f in frags:
        ll, st = f.get("llama", {}), f.get("strata", {})
        anyl = next(iter(v for v in ll.values() if isinstance(v, dict)), {})
        lines += ["", "== %s (%s), results of %s" % (f["model"], f["synth"], f["date"]),
                  "   strata plans from commit %s" % f.get("plan_commit"),
                  "   llama.cpp build %s (%s), %s, -ngl %s, -fa %s, batch %s, ubatch %s, model %s bytes, %s params" % (
                      anyl.get("build_commit"), anyl.get("build_number"), anyl.get("backends"),
                      anyl.get("n_gpu_layers"), anyl.get("flash_attn"), anyl.get("n_batch"),
                      anyl.get("n_ubatch"), anyl.get("model_size"), anyl.get("model_n_params"))]
        for k in ("error",):
            if k in ll:
                lines.append("   llama.cpp: %s" % ll[k])
        for e in st.get("errors", []):
            lines.append("   strata: %s" % e)
        tests = sorted({t for t in list(ll) + list(st) if re.match(r"^(pp|tg)\d+$", t)},
                       key=lambda t: (t[:2] == "tg", int(t[2:])))
        for t in tests:
            l, s = ll.get(t, {}), st.get(t, {})
            lt, stt = l.get("avg_ts"), s.get("tokens_per_s")
            ratio = stt / lt if lt and stt else None
            table.append({"model": f["model"], "test": t, "llama_tokens_per_s": lt,
                          "llama_stddev": l.get("stddev_ts"), "strata_tokens_per_s": stt,
                          "ratio": ratio})
            detail = ""
            if t.startswith("pp") and s:
                detail = "strata: first run %s ms, min %s ms, median %s ms of %s runs, %s kernels, load %s ms" % (
                    fmt(s.get("first_ms")), fmt(s.get("min_ms")), fmt(s.get("median_ms")),
                    s.get("runs"), s.get("kernels"), fmt(s.get("load_ms"), "%.0f"))
            elif s:
                detail = "strata: %s decode steps in %s ms after a %s-token prompt (%s ms), load %s ms" % (
                    s.get("decode_steps"), fmt(s.get("generate_ms")), s.get("prompt_tokens"),
                    fmt(s.get("prompt_ms")), fmt(s.get("load_ms"), "%.0f"))
            lines.append("   %-8s llama.cpp %s +- %s tokens/s; %s" % (
                t, fmt(lt), fmt(l.get("stddev_ts")), detail))
    lines += ["", "== strata / llama.cpp (tokens/s; > 1: strata faster)",
              "| model | test | llama.cpp tokens/s | strata tokens/s | strata / llama.cpp |",
              "|---|---|---:|---:|---:|"]
    for r in table:
        lines.append("| %s | %s | %s | %s | %s |" % (
            r["model"], r["test"], fmt(r["llama_tokens_per_s"]), fmt(r["strata_tokens_per_s"]),
            fmt(r["ratio"], "%.2f")))
    text = "\n".join(lines) + "\n"
    with open(a.output + ".txt", "w") as f:
        f.write(text)
    with open(a.output + ".json", "w") as f:
        json.dump({"date": now, "machine": a.machine, "commit": a.commit, "table": table,
                   "fragments": frags}, f, indent=1)
    print(text, end="")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    f = sub.add_parser("fragment")
    f.add_argument("--model", required=True)
    f.add_argument("--synth", default="")
    f.add_argument("--plan-commit", default="unknown")
    f.add_argument("--llama", required=True)
    f.add_argument("--strata", required=True)
    f.add_argument("-o", "--output", required=True)
    r = sub.add_parser("report")
    r.add_argument("--machine", default="unknown")
    r.add_argument("--commit", default="unknown")
    r.add_argument("-o", "--output", required=True, help="PREFIX: writes PREFIX.txt and PREFIX.json")
    r.add_argument("fragments", nargs="*")
    a = ap.parse_args()
    fragment(a) if a.cmd == "fragment" else report(a)


if __name__ == "__main__":
    main()
