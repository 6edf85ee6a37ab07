#!/usr/bin/env python3
"""strata-serve end to end, on the cpu backend, driven by the openai client.

A tiny synthetic qwen3 (Q8_0) with a real Qwen tokenizer and chat template:
llama.cpp's ggml-vocab-qwen2.gguf (fetched from llama-cpp-python 0.3.36's
sdist, as test/golden/tokenizer_golden.py does), copied in by
`strata-gguf synth --vocab`; a plan of 8 slots x 128 positions that returns
every row's logits (--logits all), runs of 16 rows.

--mode api: every endpoint through the openai client (its own types parse
  the answers), streaming and not, logprobs, stop strings, seeded sampling;
  greedy and seeded results equal strata-run's; the start-up refusals; the
  abuse list (malformed JSON, content type, body size, context, max_tokens,
  temperature, roles, content parts, n, unknown route, API key, slow-loris,
  a client gone mid-stream, 1000 rapid connect/close), each a 4xx JSON
  error naming the field, and the server still answers right after.
--mode load: 64 concurrent streaming clients against --parallel 8 and a
  queue of 32: every request completes or gets a clean 503, every greedy
  result equals its request run alone, the server's resident anonymous
  memory after a second wave is within 5 % of before it.
--mode ids: what the H200 benchmark (bench/serve_run.sh) relies on, with
  synth's own vocabulary (no download) and plain HTTP (no openai package):
  ignore_eos and return_token_ids (a seeded request that ends at an
  end-of-generation token, and the same with ignore_eos, both equal to
  strata-run's ids); a GGUF without a vocabulary (test/serve/no_vocab_gguf.py)
  served with --synthetic-weights: token ids in and out, equal to strata-run
  --synthetic-weights, streamed and concurrent; the requests such a server
  refuses (text, chat, stop strings, logprobs, ids past the vocabulary).

Exits 0 on success, 1 on a failure, 77 (ctest: skipped) where the vocabulary
cannot be fetched or the openai package is missing (api and load modes).
"""

import argparse
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "golden"))

FAILURES = []


def check(cond, what):
    if not cond:
        FAILURES.append(what)
        print(f"FAIL: {what}", flush=True)
    return cond


T0 = time.time()


def section(name):
    print(f"[{time.time() - T0:6.1f} s] {name}", flush=True)


def skip(why):
    print(f"SKIPPED: {why}")
    sys.exit(77)


class Server:
    """A strata-serve process on a free port."""

    def __init__(self, bin_dir, plan, gguf, *args):
        self.proc = subprocess.Popen(
            [os.path.join(bin_dir, "strata-serve"), plan, "--gguf", gguf,
             "--port", "0", "--threads", "2", *args],
            stderr=subprocess.PIPE, text=True)
        line = self.proc.stderr.readline()
        m = re.search(r"listening on http://([\d.]+):(\d+)", line)
        if not m:
            self.proc.kill()
            raise RuntimeError(f"strata-serve did not start: {line}"
                               f"{self.proc.stderr.read()}")
        self.host, self.port = m.group(1), int(m.group(2))
        self.url = f"http://{self.host}:{self.port}"
        # Drain stderr so the server never blocks on it.
        threading.Thread(target=self.proc.stderr.read, daemon=True).start()

    def rss_kb(self):
        """Resident anonymous memory: the mapped GGUF's pages (RssFile)
        come and go with the page cache, whatever the server does."""
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("RssAnon:"):
                    return int(line.split()[1])
        return 0

    def request(self, method, path, body=None, headers=None, raw=None):
        """(status, parsed JSON or text) of one request."""
        conn = http.client.HTTPConnection(self.host, self.port, timeout=60)
        h = {"Content-Type": "application/json"}
        h.update(headers or {})
        data = raw if raw is not None else (json.dumps(body) if body is not None else None)
        conn.request(method, path, body=data, headers=h)
        r = conn.getresponse()
        text = r.read().decode("utf-8", "replace")
        conn.close()
        try:
            return r.status, json.loads(text)
        except ValueError:
            return r.status, text

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = "hung"
        check(rc == 0, f"strata-serve exits 0 on SIGTERM (got {rc})")


def prepare(a):
    """The vocabulary, the model and the plans in a.workdir."""
    try:
        import tokenizer_golden
        tokenizer_golden.fetch(a.cache_dir)
    except SystemExit as e:
        if e.code == 77:
            raise
        skip(f"cannot fetch the vocabulary: {e}")
    os.makedirs(a.workdir, exist_ok=True)
    gguf = os.path.join(a.workdir, "qwen3-qwen2vocab.gguf")
    bin_ = lambda t: os.path.join(a.bin, t)
    if not os.path.exists(gguf):
        subprocess.run([bin_("strata-gguf"), "synth", "--arch", "qwen3", "--preset", "tiny",
                        "--seed", "1", "--types", "q8_0", "--vocab",
                        os.path.join(a.cache_dir, "ggml-vocab-qwen2.gguf"), "-o", gguf + ".part"],
                       check=True)
        os.replace(gguf + ".part", gguf)
    plans = {}
    for name, logits in (("all", "all"), ("last", "last")):
        plan = os.path.join(a.workdir, f"plan-{name}")
        subprocess.run([bin_("strata-compile"), os.path.join(a.source, "models", "qwen3.strata"),
                        "--gguf", gguf, "--max-tokens", "16", "--max-context", "128",
                        "--max-batch", "8", "--logits", logits, "--target", "host", "-o", plan],
                       check=True, stdout=subprocess.DEVNULL)
        plans[name] = plan
    return gguf, plans


def cli(a, plan, gguf, prompt, n, *extra):
    """strata-run's generated text."""
    r = subprocess.run([os.path.join(a.bin, "strata-run"), plan, "--gguf", gguf, "--prompt",
                        prompt, "-n", str(n), "--threads", "2", *extra],
                       capture_output=True, check=True)
    return r.stdout.decode("utf-8", "replace")


CHATML_HI = ("<|im_start|>system\nYou are a helpful assistant<|im_end|>\n"
             "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")


def metric(text, name):
    """The value of an unlabelled metric in /metrics' text, or None."""
    m = re.search(rf"^{name} (\S+)$", text, re.M)
    return float(m.group(1)) if m else None


def runs_add_up(text):
    """Every run of the model held decode rows, prompt chunks or both, so
    runs = prefill runs + decode runs - mixed runs, a prefill run holds one
    chunk or more, and each run's rows were counted once: (ok,
    description)."""
    runs, prefills, chunks, decodes, mixed, counted = (
        metric(text, n) for n in ("strata_model_runs_total", "strata_prefill_runs_total",
                                  "strata_prefill_chunks_total",
                                  "strata_decode_steps_total", "strata_mixed_runs_total",
                                  "strata_run_rows_count"))
    ok = None not in (runs, prefills, chunks, decodes, mixed, counted) and \
        runs == prefills + decodes - mixed and chunks >= prefills and counted == runs
    return ok, (f"{runs} runs, {prefills} with prompt chunks ({chunks} chunks), "
                f"{decodes} with decode rows, {mixed} mixed, {counted} counted in "
                "strata_run_rows")


def is_error(status, body, code, param=None):
    ok = (status == code and isinstance(body, dict) and "error" in body
          and isinstance(body["error"].get("message"), str))
    if ok and param is not None:
        ok = body["error"].get("param") == param
    return ok


def api_mode(a, gguf, plans):
    import openai

    # Start-up refusals: one line, non-zero status, before listening.
    def startup(args, code, needle):
        r = subprocess.run([os.path.join(a.bin, "strata-serve"), *args],
                           capture_output=True, text=True, timeout=60)
        check(r.returncode == code and needle in r.stderr,
              f"start-up {args[1:]}: status {code} and '{needle}' (got {r.returncode}: {r.stderr.strip()})")

    section("start-up refusals")
    startup([plans["all"], "--gguf", gguf, "--parallel", "9"], 1, "--max-batch 9")
    startup([plans["last"], "--gguf", gguf, "--parallel", "2"], 1, "strata-compile --logits all")
    startup([plans["all"], "--gguf", gguf, "--chat-format", "llama3"], 2, "chatml or none")
    startup([plans["all"], "--gguf", gguf, "--bogus", "1"], 2, "unknown option --bogus")
    startup([plans["all"]], 2, "missing --gguf")
    startup([plans["all"], "--gguf", gguf, "--host", "192.0.2.1"], 1, "cannot listen on 192.0.2.1:8080")
    # synth's own vocabulary has ChatML's tokens but no chat template.
    bare = os.path.join(a.workdir, "qwen3-synthvocab.gguf")
    if not os.path.exists(bare):
        subprocess.run([os.path.join(a.bin, "strata-gguf"), "synth", "--arch", "qwen3", "--preset",
                        "tiny", "--seed", "1", "-o", bare], check=True, stdout=subprocess.DEVNULL)
    startup([plans["all"], "--gguf", bare], 1, "no chat template (tokenizer.chat_template): give "
            "--chat-format chatml|none")

    # A --logits last plan serves one slot (its decode runs hold one row):
    # the same text as strata-run. Its prompt chunks and decode rows run
    # apart (the scheduler's old path: a last-row plan cannot mix them).
    prompt = "The quick brown fox"
    ref = cli(a, plans["all"], gguf, prompt, 12, "--temp", "0")
    one = Server(a.bin, plans["last"], gguf)
    try:
        st_, body = one.request("POST", "/v1/completions",
                                {"prompt": prompt, "max_tokens": 12, "temperature": 0})
        check(st_ == 200 and body["choices"][0]["text"] == ref,
              f"--logits last plan, --parallel 1: {st_} {body}")
        _, metrics = one.request("GET", "/metrics")
        ok, what = runs_add_up(metrics)
        check(ok and metric(metrics, "strata_mixed_runs_total") == 0 and
              metric(metrics, "strata_model_runs_total") == 12,
              f"--logits last plan: a prompt chunk, then 11 decode runs, none mixed: {what}")
    finally:
        one.stop()

    key = "sk-test-0123456789"
    srv = Server(a.bin, plans["all"], gguf, "--parallel", "4", "--api-key", key,
                 "--max-body", "65536", "--read-timeout", "1")
    try:
        client = openai.OpenAI(base_url=srv.url + "/v1", api_key=key, max_retries=0)
        # The --logits last plan generates the same text (one slot).
        check(cli(a, plans["last"], gguf, prompt, 12, "--temp", "0") == ref,
              "strata-run: the same text from the last-row plan")

        section("completions")
        # Completions, whole and streamed.
        c = client.completions.create(model="x", prompt=prompt, max_tokens=12, temperature=0)
        check(c.choices[0].text == ref, f"completion equals strata-run's: {c.choices[0].text!r} vs {ref!r}")
        check(c.usage.completion_tokens == 12 and c.usage.prompt_tokens > 0,
              f"completion usage {c.usage}")
        check(c.choices[0].finish_reason == "length", "finish_reason length")
        pieces = []
        finish = None
        for chunk in client.completions.create(model="x", prompt=prompt, max_tokens=12,
                                               temperature=0, stream=True):
            pieces.append(chunk.choices[0].text)
            finish = chunk.choices[0].finish_reason or finish
        check("".join(pieces) == ref and finish == "length", "streamed completion equals strata-run's")

        section("chat")
        # Chat: the Qwen2 template's ChatML with its default system message.
        chat_ref = cli(a, plans["all"], gguf, CHATML_HI, 10, "--temp", "0")
        m = client.chat.completions.create(model="x", messages=[{"role": "user", "content": "Hi"}],
                                           max_tokens=10, temperature=0)
        check(m.choices[0].message.content == chat_ref and m.choices[0].message.role == "assistant",
              f"chat equals strata-run on the ChatML text: {m.choices[0].message.content!r} vs {chat_ref!r}")
        deltas = []
        usage = None
        for chunk in client.chat.completions.create(
                model="x", messages=[{"role": "user", "content": "Hi"}], max_tokens=10,
                temperature=0, stream=True, stream_options={"include_usage": True}):
            if chunk.choices:
                deltas.append(chunk.choices[0].delta.content or "")
            if chunk.usage:
                usage = chunk.usage
        check("".join(deltas) == chat_ref, "streamed chat equals the whole one")
        check(usage is not None and usage.completion_tokens == 10, f"stream usage {usage}")

        # Seeded sampling: equal to strata-run's with the same seed (the
        # sampler's defaults are llama.cpp's in both).
        s_ref = cli(a, plans["all"], gguf, prompt, 12, "--temp", "0.9", "--seed", "5")
        s1 = client.completions.create(model="x", prompt=prompt, max_tokens=12,
                                       temperature=0.9, seed=5).choices[0].text
        check(s1 == s_ref, f"seeded sample equals strata-run's: {s1!r} vs {s_ref!r}")

        # Stop strings: the text before the first occurrence.
        stop = ref[len(ref) // 2:len(ref) // 2 + 3]
        st = client.completions.create(model="x", prompt=prompt, max_tokens=12, temperature=0,
                                       stop=[stop, "\u2603never"])
        check(st.choices[0].text == ref[:ref.index(stop)] and st.choices[0].finish_reason == "stop",
              f"stop {stop!r}: {st.choices[0].text!r}")

        # Log-probabilities: greedy picks the most likely token.
        lp = client.completions.create(model="x", prompt=prompt, max_tokens=4, temperature=0,
                                       logprobs=3)
        l = lp.choices[0].logprobs
        check(len(l.tokens) == 4 and len(l.top_logprobs) == 4
              and all(len(t) <= 3 for t in l.top_logprobs)
              and all(abs(max(t.values()) - v) < 1e-9 for t, v in zip(l.top_logprobs, l.token_logprobs))
              and all(v <= 0 for v in l.token_logprobs),
              f"completion logprobs {l}")
        cl = client.chat.completions.create(model="x", messages=[{"role": "user", "content": "Hi"}],
                                            max_tokens=3, temperature=0, logprobs=True, top_logprobs=2)
        content = cl.choices[0].logprobs.content
        check(len(content) == 3 and all(len(t.top_logprobs) == 2 for t in content)
              and all(abs(t.logprob - t.top_logprobs[0].logprob) < 1e-9 for t in content),
              f"chat logprobs {content}")

        models = client.models.list()
        check([mm.id for mm in models.data] == ["qwen3-qwen2vocab"], f"models {models}")

        section("abuse")
        # Abuse: each a 4xx JSON error naming the field.
        auth = {"Authorization": f"Bearer {key}"}
        st_, body = srv.request("POST", "/v1/completions", raw="{not json", headers=auth)
        check(is_error(st_, body, 400), f"malformed JSON: {st_} {body}")
        st_, body = srv.request("POST", "/v1/completions", raw='{"prompt":"a"}',
                                headers=dict(auth, **{"Content-Type": "text/plain"}))
        check(is_error(st_, body, 415), f"content type: {st_} {body}")
        st_, body = srv.request("POST", "/v1/completions", headers=auth,
                                raw=json.dumps({"prompt": "a" * 70000}))
        check(is_error(st_, body, 413), f"body over --max-body: {st_} {body}")
        bad = [
            ({"prompt": "hello " * 200}, "prompt"),
            ({"prompt": "a", "max_tokens": 0}, "max_tokens"),
            ({"prompt": "a", "max_tokens": -5}, "max_tokens"),
            ({"prompt": "a", "max_tokens": 10 ** 9}, "max_tokens"),
            ({"prompt": "a", "max_tokens": 200}, "max_tokens"),
            ({"prompt": "a", "temperature": -0.5}, "temperature"),
            ({"prompt": "a", "temperature": "warm"}, "temperature"),
            ({"prompt": "a", "top_p": 0}, "top_p"),
            ({"prompt": "a", "n": 2}, "n"),
            ({"prompt": "a", "stop": 5}, "stop"),
            ({"prompt": [99999999]}, "prompt"),
            ({"prompt": [1000000]}, "prompt"),
        ]
        for b, param in bad:
            st_, body = srv.request("POST", "/v1/completions", b, headers=auth)
            check(is_error(st_, body, 400, param), f"{b!r:.60}: 400 naming {param}: {st_} {body}")
        st_, body = srv.request("POST", "/v1/completions", headers=auth,
                                raw='{"prompt":"a","temperature":NaN}')
        check(is_error(st_, body, 400), f"temperature NaN: {st_} {body}")
        chat_bad = [
            ({"messages": [{"role": "wizard", "content": "x"}]}, "messages[0].role"),
            ({"messages": [{"role": "user", "content": [{"type": "image_url",
                                                         "image_url": {"url": "http://x"}}]}]},
             "messages[0].content[0].type"),
            ({"messages": [{"role": "user", "content": 5}]}, "messages[0].content"),
            ({"messages": "hi"}, "messages"),
            ({"messages": [{"role": "user", "content": "x"}], "max_completion_tokens": 0},
             "max_completion_tokens"),
            ({"messages": [{"role": "user", "content": "x"}], "max_completion_tokens": 500},
             "max_completion_tokens"),
            ({"messages": [{"role": "user", "content": "x " * 150}]}, "messages"),
            ({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function"}]},
             "tools"),
        ]
        for b, param in chat_bad:
            st_, body = srv.request("POST", "/v1/chat/completions", b, headers=auth)
            check(is_error(st_, body, 400, param), f"{b!r:.60}: 400 naming {param}: {st_} {body}")
        # The openai client's own error type for a 400.
        try:
            client.completions.create(model="x", prompt="a", max_tokens=0)
            check(False, "max_tokens 0 raises BadRequestError")
        except openai.BadRequestError as e:
            check(e.body.get("param") == "max_tokens" if isinstance(e.body, dict) else False,
                  f"BadRequestError names max_tokens: {e.body}")
        st_, body = srv.request("GET", "/v1/nothing", headers=auth)
        check(is_error(st_, body, 404), f"unknown route: {st_} {body}")

        # API key: missing or wrong is 401; /health needs none.
        for h in ({}, {"Authorization": "Bearer sk-wrong-0123456789"}, {"Authorization": key}):
            st_, body = srv.request("GET", "/v1/models", headers=h)
            check(is_error(st_, body, 401), f"key {h}: 401 {st_} {body}")
        try:
            openai.OpenAI(base_url=srv.url + "/v1", api_key="nope", max_retries=0).models.list()
            check(False, "a wrong key raises AuthenticationError")
        except openai.AuthenticationError:
            pass
        st_, body = srv.request("GET", "/health")
        check(st_ == 200 and body == {"status": "ok"}, f"health {st_} {body}")

        section("slow-loris")
        # Slow-loris: a request that never finishes its headers is dropped
        # after --read-timeout (1 s), and others are served meanwhile.
        loris = socket.create_connection((srv.host, srv.port))
        loris.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n")
        c2 = client.completions.create(model="x", prompt=prompt, max_tokens=12, temperature=0)
        check(c2.choices[0].text == ref, "served while a slow client holds a connection")
        loris.settimeout(10)
        t0 = time.time()
        try:
            got = loris.recv(4096)
        except (socket.timeout, ConnectionResetError):
            got = b"timeout"
        check(got != b"timeout" and time.time() - t0 < 8,
              f"the slow client is dropped (got {got[:40]!r} after {time.time() - t0:.1f} s)")
        loris.close()

        section("disconnect")
        # A client gone mid-stream frees its slot.
        s = socket.create_connection((srv.host, srv.port))
        req = json.dumps({"prompt": prompt, "max_tokens": 100, "temperature": 0, "stream": True})
        s.sendall((f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\n"
                   f"Content-Type: application/json\r\nContent-Length: {len(req)}\r\n\r\n{req}").encode())
        first = s.recv(4096)
        check(b"200 OK" in first, f"stream starts: {first[:60]!r}")
        s.close()
        deadline = time.time() + 20
        cancelled = busy = None
        while time.time() < deadline:
            _, metrics = srv.request("GET", "/metrics", headers=auth)
            cancelled = int(re.search(r"^strata_requests_cancelled_total (\d+)", metrics, re.M).group(1))
            busy = int(re.search(r"^strata_slots_busy (\d+)", metrics, re.M).group(1))
            if cancelled >= 1 and busy == 0:
                break
            time.sleep(0.2)
        check(cancelled >= 1 and busy == 0, f"disconnect cancels (cancelled {cancelled}, busy {busy})")

        section("rapid connect/close")
        # 1000 rapid connect/close.
        for i in range(1000):
            c_ = socket.create_connection((srv.host, srv.port))
            if i % 2:
                c_.sendall(b"GET /health HTTP/1.1\r\n")
            c_.close()

        section("still serving")
        # Still serving, and still right.
        c3 = client.completions.create(model="x", prompt=prompt, max_tokens=12, temperature=0)
        check(c3.choices[0].text == ref, "still serving the same text after the abuse")
        _, metrics = srv.request("GET", "/metrics", headers=auth)
        for name in ("strata_requests_total", "strata_prompt_tokens_total",
                     "strata_generated_tokens_total", "strata_queue_depth",
                     "strata_decode_batch_size_bucket", "strata_time_to_first_token_seconds_bucket",
                     "strata_inter_token_latency_seconds_count", "strata_model_runs_total",
                     "strata_mixed_runs_total", "strata_run_rows_bucket"):
            check(re.search(rf"^{name}(\{{[^}}]*\}})? \d", metrics, re.M) is not None,
                  f"/metrics has {name}")
        gen = int(re.search(r"^strata_generated_tokens_total (\d+)", metrics, re.M).group(1))
        check(gen >= 12 * 5, f"generated tokens counted ({gen})")
    finally:
        srv.stop()


def load_mode(a, gguf, plans):
    import openai

    clients, parallel, queue = 64, 8, 32
    srv = Server(a.bin, plans["all"], gguf, "--parallel", str(parallel), "--queue", str(queue))
    try:
        client = openai.OpenAI(base_url=srv.url + "/v1", api_key="none", max_retries=0,
                               timeout=120)
        # Seven short prompts and a long one (about 100 tokens: chunks of
        # 16 rows less the others' decode rows, in the same runs as those).
        prompts = [f"Story {i}: once" for i in range(7)]
        prompts.append("The history of the old city by the river, " * 10)
        # Each prompt alone (and one against strata-run).
        alone = {}
        for p in prompts:
            alone[p] = client.completions.create(model="x", prompt=p, max_tokens=6,
                                                 temperature=0).choices[0].text
        check(alone[prompts[0]] == cli(a, plans["all"], gguf, prompts[0], 6, "--temp", "0"),
              "alone equals strata-run")

        results = [None] * clients

        def one(i):
            p = prompts[i % len(prompts)]
            try:
                text = "".join(ch.choices[0].text for ch in client.completions.create(
                    model="x", prompt=p, max_tokens=6, temperature=0, stream=True))
                results[i] = ("ok", p, text)
            except openai.APIStatusError as e:
                results[i] = (e.status_code, p, e.body)
            except Exception as e:  # a broken stream or connection
                results[i] = ("broken", p, repr(e))

        section("load")
        t0 = time.time()
        threads = [threading.Thread(target=one, args=(i,)) for i in range(clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        seconds = time.time() - t0
        ok = [r for r in results if r[0] == "ok"]
        busy = [r for r in results if r[0] == 503]
        other = [r for r in results if r[0] not in ("ok", 503)]
        print(f"load: {clients} clients, {len(ok)} completed, {len(busy)} got 503, "
              f"{len(other)} other, {seconds:.1f} s", flush=True)
        check(not other, f"every request completes or gets a 503: {other[:3]}")
        check(len(ok) >= parallel + queue - 8, f"most of the slots and queue served ({len(ok)})")
        # The client hands over the body's "error" object.
        check(all(isinstance(r[2], dict) and "busy" in r[2].get("message", "") for r in busy),
              f"503s are JSON errors: {busy[:1]}")
        wrong = [(r[1], r[2], alone[r[1]]) for r in ok if r[2] != alone[r[1]]]
        check(not wrong, f"every greedy result equals its request alone: {wrong[:3]}")
        _, metrics = srv.request("GET", "/metrics")
        batch = re.search(r'^strata_decode_batch_size_bucket\{le="4"\} (\d+)', metrics, re.M)
        total = re.search(r"^strata_decode_batch_size_count (\d+)", metrics, re.M)
        check(batch and total and int(total.group(1)) > int(batch.group(1)),
              "some decode runs held more than 4 rows")
        # The long prompt's chunks ran in the same runs as the others'
        # decode rows (Session::step), and the counts add up.
        ok, what = runs_add_up(metrics)
        print(f"load: {what}", flush=True)
        check(ok and metric(metrics, "strata_mixed_runs_total") > 0,
              f"prompt chunks ran beside decode rows: {what}")
        # Memory: a second wave of the same leaves the RSS within 5 % (the
        # first wave grew it to its working size: thread stacks, the
        # allocator's per-thread arenas).
        time.sleep(1)
        rss_before = srv.rss_kb()
        threads = [threading.Thread(target=one, args=(i,)) for i in range(clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        check(all(r[0] in ("ok", 503) for r in results), "the second wave completes or gets 503s")
        time.sleep(1)
        rss_after = srv.rss_kb()
        print(f"load: RSS {rss_before} kB before, {rss_after} kB after", flush=True)
        check(abs(rss_after - rss_before) <= 0.05 * rss_before,
              f"RSS within 5 %: {rss_before} -> {rss_after} kB")
    finally:
        srv.stop()


def post_stream(srv, body):
    """(status, [events]) of a streaming completion, read with http.client:
    each `data:` line's JSON, without the final [DONE] (None if it was
    missing)."""
    conn = http.client.HTTPConnection(srv.host, srv.port, timeout=60)
    conn.request("POST", "/v1/completions", body=json.dumps(dict(body, stream=True)),
                 headers={"Content-Type": "application/json"})
    r = conn.getresponse()
    if r.status != 200:
        text = r.read().decode("utf-8", "replace")
        conn.close()
        return r.status, text
    events, done = [], False
    for line in r:
        line = line.strip()
        if line == b"data: [DONE]":
            done = True
        elif line.startswith(b"data: "):
            events.append(json.loads(line[6:]))
    conn.close()
    return r.status, events if done else None


def ids_mode(a):
    sys.path.insert(0, HERE)
    from no_vocab_gguf import strip_vocab

    work = os.path.join(a.workdir, "ids")
    os.makedirs(work, exist_ok=True)
    bin_ = lambda t: os.path.join(a.bin, t)
    # synth's own vocabulary (1000 tokens, ChatML's specials, EOS
    # <|endoftext|>) and the same model without it.
    vocab_gguf = os.path.join(work, "qwen3-synthvocab.gguf")
    novocab = os.path.join(work, "qwen3-novocab.gguf")
    if not os.path.exists(vocab_gguf):
        subprocess.run([bin_("strata-gguf"), "synth", "--arch", "qwen3", "--preset", "tiny",
                        "--seed", "1", "-o", vocab_gguf], check=True, stdout=subprocess.DEVNULL)
    strip_vocab(vocab_gguf, novocab)
    plan = os.path.join(work, "plan")
    subprocess.run([bin_("strata-compile"), os.path.join(a.source, "models", "qwen3.strata"),
                    "--gguf", vocab_gguf, "--max-tokens", "16", "--max-context", "128",
                    "--max-batch", "4", "--logits", "all", "--target", "host", "-o", plan],
                   check=True, stdout=subprocess.DEVNULL)

    def run_ids(gguf, prompt_args, n, *extra):
        """strata-run's generated ids (--dump-ids' second line)."""
        dump = os.path.join(work, "ids.txt")
        subprocess.run([bin_("strata-run"), plan, "--gguf", gguf, *prompt_args, "-n", str(n),
                        "--threads", "2", "--dump-ids", dump, *extra],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        with open(dump) as f:
            line = f.read().split("\n")[1]
        return [int(x) for x in line.split(",")] if line else []

    section("ignore_eos, return_token_ids")
    srv = Server(a.bin, plan, vocab_gguf, "--parallel", "4", "--chat-format", "none")
    try:
        sampling = {"temperature": 2, "top_k": 0, "top_p": 1, "min_p": 0}
        prompt, n = "The cat", 100
        # A seed whose sample reaches an end-of-generation token early.
        found = None
        for seed in range(200):
            st_, body = srv.request("POST", "/v1/completions",
                                    dict(sampling, prompt=prompt, max_tokens=n, seed=seed,
                                         return_token_ids=True))
            if not check(st_ == 200, f"seeded completion: {st_} {body}"):
                break
            c = body["choices"][0]
            if c["finish_reason"] == "stop":
                found = (seed, c)
                break
        if check(found is not None, "a seed in 0..199 whose sample ends at an end-of-generation token"):
            seed, c = found
            ids = c["token_ids"]
            print(f"ignore_eos: seed {seed} ends at token {len(ids)} (id {ids[-1]})", flush=True)
            check(0 < len(ids) < n and body["usage"]["completion_tokens"] == len(ids),
                  f"stopped early, the end token counted: {len(ids)} ids, usage {body['usage']}")
            args = ["--temp", "2", "--top-k", "0", "--top-p", "1", "--min-p", "0",
                    "--seed", str(seed)]
            check(ids == run_ids(vocab_gguf, ["--prompt", prompt], n, *args),
                  f"seed {seed}: token_ids equal strata-run's (the end token last)")
            st_, body = srv.request("POST", "/v1/completions",
                                    dict(sampling, prompt=prompt, max_tokens=n, seed=seed,
                                         return_token_ids=True, ignore_eos=True))
            e = body["choices"][0] if st_ == 200 else {}
            check(e.get("finish_reason") == "length" and len(e.get("token_ids", [])) == n
                  and e["token_ids"][:len(ids)] == ids and e["text"].startswith(c["text"])
                  and body["usage"]["completion_tokens"] == n,
                  f"ignore_eos: {n} tokens past the end token: {st_} {str(body)[:300]}")
            ref = run_ids(vocab_gguf, ["--prompt", prompt], n, *args, "--ignore-eos")
            check(e.get("token_ids") == ref, "ignore_eos: token_ids equal strata-run --ignore-eos's")
            text = cli(a, plan, vocab_gguf, prompt, n, *args, "--ignore-eos")
            check(e.get("text") == text, f"ignore_eos: text equals strata-run's ({e.get('text')!r:.80} vs {text!r:.80})")
        # Without return_token_ids the choices have no ids.
        st_, body = srv.request("POST", "/v1/completions", {"prompt": prompt, "max_tokens": 3})
        check(st_ == 200 and "token_ids" not in body["choices"][0], f"no token_ids unasked: {body}")
        # Streamed: every chunk says its ids, together the whole completion's.
        st_, events = post_stream(srv, {"prompt": prompt, "max_tokens": 8, "temperature": 0,
                                        "return_token_ids": True})
        whole = srv.request("POST", "/v1/completions", {"prompt": prompt, "max_tokens": 8,
                                                        "temperature": 0, "return_token_ids": True})
        got = [i for ev in events or [] for ch in ev["choices"] for i in ch["token_ids"]]
        check(st_ == 200 and events and got == whole[1]["choices"][0]["token_ids"] and len(got) == 8,
              f"streamed token_ids equal the whole completion's: {got}")
    finally:
        srv.stop()

    section("no vocabulary, synthetic weights")
    r = subprocess.run([bin_("strata-serve"), plan, "--gguf", novocab, "--synthetic-weights", "x"],
                       capture_output=True, text=True, timeout=60)
    check(r.returncode == 2 and "--synthetic-weights 'x'" in r.stderr,
          f"--synthetic-weights x: status 2 ({r.returncode}: {r.stderr.strip()})")
    srv = Server(a.bin, plan, novocab, "--parallel", "4", "--synthetic-weights", "3")
    try:
        prompts = [[(7 * i + 3 * k) % 997 for k in range(5 + 9 * i)] for i in range(4)]
        refs = [run_ids(novocab, ["--tokens", ",".join(map(str, p))], 12, "--temp", "0",
                        "--synthetic-weights", "3") for p in prompts]
        file_weights = run_ids(novocab, ["--tokens", ",".join(map(str, prompts[0]))], 12,
                               "--temp", "0")
        check(file_weights != refs[0], "strata-run: synthetic weights give other ids than the file's")
        st_, body = srv.request("POST", "/v1/completions",
                                {"prompt": prompts[0], "max_tokens": 12, "temperature": 0})
        c = body["choices"][0] if st_ == 200 else {}
        check(c.get("token_ids") == refs[0] and c.get("text") == ""
              and c.get("finish_reason") == "length" and body["usage"]["completion_tokens"] == 12,
              f"ids in, ids out (no text), equal to strata-run --synthetic-weights: {st_} {body} vs {refs[0]}")
        # Four streams at once, each equal to its prompt run alone.
        results = [None] * 4

        def one(i):
            results[i] = post_stream(srv, {"prompt": prompts[i], "max_tokens": 12, "temperature": 0,
                                           "ignore_eos": True,
                                           "stream_options": {"include_usage": True}})

        threads = [threading.Thread(target=one, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for i, (st_, events) in enumerate(results):
            ok = st_ == 200 and events is not None
            got = [t for ev in events for ch in ev["choices"] for t in ch.get("token_ids", [])] if ok else None
            usage = [ev["usage"] for ev in events if ev.get("usage")] if ok else []
            check(ok and got == refs[i] and usage and usage[0]["completion_tokens"] == 12
                  and usage[0]["prompt_tokens"] == len(prompts[i]),
                  f"stream {i} of 4 equals strata-run alone: {got} vs {refs[i]}, usage {usage}")
        # What a server without a vocabulary refuses, naming the field.
        for path, b, param in [
                ("/v1/completions", {"prompt": "hello"}, "prompt"),
                ("/v1/completions", {"prompt": [1, 2], "stop": ["x"]}, "stop"),
                ("/v1/completions", {"prompt": [1, 2], "logprobs": 1}, "logprobs"),
                ("/v1/completions", {"prompt": [1, 1000]}, "prompt"),
                ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}]},
                 "messages")]:
            st_, body = srv.request("POST", path, b)
            check(is_error(st_, body, 400, param), f"no vocabulary, {b}: 400 naming {param}: {st_} {body}")
        _, metrics = srv.request("GET", "/metrics")
        gen = int(re.search(r"^strata_generated_tokens_total (\d+)", metrics, re.M).group(1))
        check(gen == 12 * 5, f"generated tokens counted ({gen})")
    finally:
        srv.stop()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--source", required=True)
    ap.add_argument("--cache-dir", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--mode", choices=["api", "load", "ids"], required=True)
    a = ap.parse_args()
    t0 = time.time()
    if a.mode == "ids":
        ids_mode(a)
    else:
        try:
            import openai  # noqa: F401
        except ImportError:
            skip("the openai package is missing (scripts/install-deps.sh installs it)")
        gguf, plans = prepare(a)
        t0 = time.time()
        (api_mode if a.mode == "api" else load_mode)(a, gguf, plans)
    print(f"serve_{a.mode}: {time.time() - t0:.1f} s, {len(FAILURES)} failures")
    sys.exit(1 if FAILURES else 0)


if __name__ == "__main__":
    main()
