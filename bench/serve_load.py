#!/usr/bin/env python3
"""Load client for strata-serve: N concurrent streaming completions.

    python3 bench/serve_load.py --url http://127.0.0.1:PORT --clients 16 \\
        --prompt-tokens 1024 --max-tokens 256 [--tokens-file F | --vocab V] \\
        [--json OUT.json]

Each client sends one POST /v1/completions with a prompt of exactly
--prompt-tokens token ids (client i: the base prompt rotated left by i, so
that the sequences differ, as strata-run --batch makes them; the base is
--tokens-file's first ids, repeated if short, or seeded random ids below
--vocab), max_tokens --max-tokens, temperature 0, stream, ignore_eos (every
request generates exactly max_tokens), return_token_ids (each chunk says
which tokens it carries: a token may add no text, and a model without a
vocabulary has none) and stream_options.include_usage. Standard library only
(http.client), so it runs on any machine with python3.

Measured per request, on the client: the time to first token (TTFT: from
sending the request to the first chunk with a token), the gaps between
chunks (a chunk of k tokens after a gap g counts k inter-token latencies of
g / k), the tokens and the finish. Summary:
  aggregate tokens/s   every generated token / (last finish - first send)
  decode-phase tokens/s  tokens that arrived while every stream was decoding
                       (after the last first token, up to the first finish) /
                       that time: the rate to set against a batched decode
  TTFT p50 / p99, ITL p50 / p99 (linear interpolation between ranks)
Exit status 0 when every request generated exactly max_tokens tokens
(usage agreeing), 1 otherwise (the summary says what failed).
"""

import argparse
import http.client
import json
import random
import sys
import threading
import time
import urllib.parse


def percentile(values, q):
    """The q-th percentile, linear between closest ranks (numpy's default)."""
    if not values:
        return float("nan")
    v = sorted(values)
    pos = (len(v) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (pos - lo)


def base_prompt(a):
    if a.tokens_file:
        with open(a.tokens_file) as f:
            ids = [int(x) for x in f.read().replace(",", " ").split()]
        if not ids:
            sys.exit(f"serve_load: {a.tokens_file} has no token ids")
        return [ids[i % len(ids)] for i in range(a.prompt_tokens)]
    rng = random.Random(a.seed)
    return [rng.randrange(a.vocab) for _ in range(a.prompt_tokens)]


class Stream:
    """One request: what it sent and what came back, with times."""

    def __init__(self, index, prompt):
        self.index = index
        self.prompt = prompt
        self.sent = self.first = self.done = None
        self.chunks = []  # (time, tokens in the chunk)
        self.ids = []
        self.finish = None
        self.usage = None
        self.error = None

    def run(self, host, port, body, timeout, start):
        conn = http.client.HTTPConnection(host, port, timeout=timeout)
        try:
            conn.connect()
            start.wait()
            self.sent = time.perf_counter()
            conn.request("POST", "/v1/completions", body=json.dumps(body),
                         headers={"Content-Type": "application/json"})
            r = conn.getresponse()
            if r.status != 200:
                self.error = f"HTTP {r.status}: {r.read()[:300]!r}"
                return
            while True:
                line = r.readline()
                if not line:
                    self.error = self.error or "the stream ended without [DONE]"
                    break
                line = line.strip()
                # Blank lines end events; ': waiting' comments keep the
                # connection alive while the request waits or prefills.
                if not line or line.startswith(b":"):
                    continue
                if not line.startswith(b"data: "):
                    continue
                payload = line[6:]
                if payload == b"[DONE]":
                    break
                now = time.perf_counter()
                event = json.loads(payload)
                if "error" in event:
                    self.error = f"stream error: {event['error'].get('message')}"
                    continue
                if event.get("usage"):
                    self.usage = event["usage"]
                for choice in event.get("choices", []):
                    ids = choice.get("token_ids") or []
                    if ids:
                        if self.first is None:
                            self.first = now
                        self.chunks.append((now, len(ids)))
                        self.ids.extend(ids)
                    if choice.get("finish_reason"):
                        self.finish = choice["finish_reason"]
            self.done = time.perf_counter()
        except Exception as e:  # a refused connection, a timeout, bad JSON
            self.error = f"{type(e).__name__}: {e}"
        finally:
            conn.close()

    def gaps(self):
        """Inter-token latencies: a chunk of k tokens after a gap g gives k
        gaps of g / k; tokens that came with the first token count 0."""
        out = []
        if not self.chunks:
            return out
        out += [0.0] * (self.chunks[0][1] - 1)
        for (t0, _), (t1, k) in zip(self.chunks, self.chunks[1:]):
            out += [(t1 - t0) / k] * k
        return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--url", required=True, help="http://HOST:PORT of strata-serve")
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--prompt-tokens", type=int, default=1024)
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--tokens-file", help="the base prompt's ids (commas or whitespace)")
    ap.add_argument("--vocab", type=int, default=248320,
                    help="random prompt ids are below this (without --tokens-file)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=300,
                    help="seconds a read may wait (the whole run is bounded by it too)")
    ap.add_argument("--json", help="write every number and each stream's ids here")
    a = ap.parse_args()

    u = urllib.parse.urlparse(a.url)
    host, port = u.hostname, u.port or 80
    base = base_prompt(a)
    streams = []
    for i in range(a.clients):
        k = i % len(base)
        streams.append(Stream(i, base[k:] + base[:k]))
    start = threading.Event()
    threads = []
    for s in streams:
        body = {"model": "strata", "prompt": s.prompt, "max_tokens": a.max_tokens,
                "temperature": 0, "stream": True, "ignore_eos": True,
                "return_token_ids": True, "stream_options": {"include_usage": True}}
        t = threading.Thread(target=s.run, args=(host, port, body, a.timeout, start),
                             daemon=True)
        t.start()
        threads.append(t)
    time.sleep(0.2)  # every connection open before the first request goes
    start.set()
    deadline = time.perf_counter() + a.timeout
    for t in threads:
        t.join(max(0.0, deadline - time.perf_counter()))
    hung = sum(t.is_alive() for t in threads)

    problems = []
    if hung:
        problems.append(f"{hung} streams still running after --timeout {a.timeout:.0f} s")
    for s in streams:
        if s.error:
            problems.append(f"stream {s.index}: {s.error}")
        elif len(s.ids) != a.max_tokens:
            problems.append(f"stream {s.index}: {len(s.ids)} tokens, not {a.max_tokens}")
        elif s.finish != "length":
            problems.append(f"stream {s.index}: finish_reason {s.finish!r}, not 'length'")
        elif not s.usage or s.usage.get("completion_tokens") != a.max_tokens \
                or s.usage.get("prompt_tokens") != a.prompt_tokens:
            problems.append(f"stream {s.index}: usage {s.usage}")

    ok = [s for s in streams if s.first is not None and s.done is not None]
    t_send = min((s.sent for s in streams if s.sent is not None), default=None)
    tokens = sum(len(s.ids) for s in streams)
    r = {"clients": a.clients, "prompt_tokens": a.prompt_tokens, "max_tokens": a.max_tokens,
         "tokens": tokens, "problems": problems}
    if ok and t_send is not None:
        t_end = max(s.done for s in ok)
        wall = t_end - t_send
        ttft = [s.first - s.sent for s in ok]
        itl = [g for s in ok for g in s.gaps()]
        # Every stream decoding: after the last first token, up to the
        # first stream's last token.
        a0 = max(s.first for s in ok)
        b0 = min(s.chunks[-1][0] for s in ok)
        window = [k for s in ok for (t, k) in s.chunks if a0 < t <= b0]
        r.update({
            "wall_s": wall,
            "aggregate_tokens_per_s": tokens / wall if wall > 0 else float("nan"),
            "decode_phase_s": b0 - a0,
            "decode_phase_tokens": sum(window),
            "decode_phase_tokens_per_s": sum(window) / (b0 - a0) if b0 > a0 else float("nan"),
            "ttft_s": {"p50": percentile(ttft, 50), "p99": percentile(ttft, 99),
                       "min": min(ttft), "max": max(ttft)},
            "itl_s": {"p50": percentile(itl, 50), "p99": percentile(itl, 99),
                      "mean": sum(itl) / len(itl) if itl else float("nan"),
                      "max": max(itl) if itl else float("nan")},
            "chunks_of_several_tokens": sum(1 for s in ok for (_, k) in s.chunks if k > 1),
            "per_stream_decode_tokens_per_s": [
                (len(s.ids) - 1) / (s.chunks[-1][0] - s.first)
                if s.chunks[-1][0] > s.first else float("nan") for s in ok],
        })
    r["streams"] = [{"index": s.index, "ttft_s": (s.first - s.sent) if s.first else None,
                     "tokens": len(s.ids), "finish": s.finish, "usage": s.usage,
                     "error": s.error, "ids": s.ids} for s in streams]

    print(f"serve_load: {a.clients} streams of {a.prompt_tokens} prompt ids, max_tokens "
          f"{a.max_tokens} (ignore_eos, temperature 0): {tokens} tokens generated")
    if "wall_s" in r:
        print(f"  aggregate: {r['aggregate_tokens_per_s']:.1f} tokens/s ({tokens} tokens in "
              f"{r['wall_s']:.2f} s, first send to last finish)")
        print(f"  decode phase (all {len(ok)} streams decoding): "
              f"{r['decode_phase_tokens_per_s']:.1f} tokens/s ({r['decode_phase_tokens']} tokens "
              f"in {r['decode_phase_s']:.2f} s)")
        t, i = r["ttft_s"], r["itl_s"]
        print(f"  TTFT: p50 {t['p50'] * 1e3:.1f} ms, p99 {t['p99'] * 1e3:.1f} ms "
              f"(min {t['min'] * 1e3:.1f}, max {t['max'] * 1e3:.1f})")
        print(f"  ITL:  p50 {i['p50'] * 1e3:.2f} ms, p99 {i['p99'] * 1e3:.2f} ms "
              f"(mean {i['mean'] * 1e3:.2f}, max {i['max'] * 1e3:.2f}); "
              f"{r['chunks_of_several_tokens']} chunks carried more than one token")
        per = r["per_stream_decode_tokens_per_s"]
        print(f"  per stream after its first token: {min(per):.2f} to {max(per):.2f} tokens/s")
    for p in problems:
        print(f"  FAIL: {p}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(r, f, indent=1)
    sys.exit(1 if problems or "wall_s" not in r else 0)


if __name__ == "__main__":
    main()
