#!/usr/bin/env python3
"""tests/apps/test_serve.py: zt-serve end to end, over HTTP on a loopback port.

A small GPT-2 (2 layers, 64 wide, context 64) trained a few steps, the tokenizer of
tests/data/tokenizer (2000 tokens with <|endoftext|>). Checks:
  - bad command lines (missing or conflicting options, out-of-range numbers, a bad --host,
    missing files, a port in use): one error line, exit 2 (1 for files and the port);
  - /health, /v1/models, /v1/tokenize and /v1/detokenize (the ids zt-generate encodes);
  - greedy completions (a string, token ids, a list of strings) have zt-generate's text and
    token counts, with usage; a stop string cuts the text and says "stop";
  - a streamed completion is Server-Sent Events whose text is the non-streamed one, ending with
    a finish_reason chunk, the usage chunk when asked for, then data: [DONE]; so with curl;
  - 32 concurrent streaming clients each get exactly their own greedy text;
  - bad requests get a JSON error with the right status and field: malformed JSON, wrong
    types, unsupported fields, another model, empty or too long prompts, max_tokens beyond
    the context, token ids outside the vocabulary, a body over --max-body (413), unknown
    paths (404) and methods (405); unknown fields are ignored;
  - a client that sends part of its headers and stalls is cut off after --timeout;
  - beyond --max-batch + --max-queue a request gets 429 with Retry-After, never a wait (from
    its headers when the server is full: its body is not read); so beyond --max-prefill
    prompts without their first token, though the queue has room;
  - many streaming clients that drop mid-stream leave no running or waiting prompt in
    /metrics, the resident memory near where it was, and the server answering as before;
    clients that leave while their prompts are queued take them out of the queue unfed;
  - /metrics is Prometheus text with the counters and histograms;
  - an idle server (before and after all that) uses almost no CPU: its workers are parked;
  - SIGTERM drains: a running stream ends normally, new requests get 503 (so on a full
    server, whose 429 would otherwise come from the headers), exit status 0;
  - the engine failing under the server (its NVMe weights cut short): 500 for the request in
    flight, 503 afterwards, /health "failed", and SIGTERM still exits 0.

Usage: test_serve.py ZT_TRAIN ZT_GENERATE ZT_SERVE MPIEXEC TOKENIZER_DIR WORKDIR
"""
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "graph"))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "ref"))
from gpt2_bytes import bytes_to_unicode  # noqa: E402
from servelib import Server, served_model, stream_text  # noqa: E402
from trainlib import Runner  # noqa: E402

TRAIN, GEN, SERVE, MPIEXEC, TOK, WORK = sys.argv[1:7]
R = Runner(TRAIN, MPIEXEC, WORK)
CTX = 64

base = served_model(R, TOK, CTX)
PROMPTS = ["Hello world", "The quick brown fox", "Once upon a time there was",
           "Numbers: 1 2 3", "zerotask serves", "A", "What is the answer to",
           "  spaces   and\ttabs"]


def reference(prompts, max_new, stop=None):
    """zt-generate's records (greedy) for the prompts"""
    path = R.path("prompts.jsonl")
    with open(path, "w") as f:
        for p in prompts:
            f.write(json.dumps({"prompt": p}) + "\n")
    extra = ["--stop", stop] if stop else []
    p = subprocess.run([GEN] + base + ["--prompts", path, "--max-new-tokens", str(max_new),
                                       "--temperature", "0", "--json"] + extra,
                       capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        print("FAIL zt-generate: exit %d\n%s" % (p.returncode, p.stderr[-2000:]))
        sys.exit(1)
    return [json.loads(l) for l in p.stdout.splitlines() if l.strip()]


ref = reference(PROMPTS, 12)
ref_stop = reference(PROMPTS[:3], 20, stop="e")


def greedy(prompt, n=12, **kw):
    return dict({"model": "model", "prompt": prompt, "max_tokens": n, "temperature": 0}, **kw)


def command_line(s):
    """bad command lines: one error line, exit 2 (1 for what is not the command line: a
    missing tokenizer, a port in use), before any serving"""
    def expect(label, args, code, words):
        p = subprocess.run([SERVE] + args, capture_output=True, text=True, timeout=120)
        lines = p.stderr.strip().splitlines()
        R.check(p.returncode == code and len(lines) == 1 and "error" in lines[0] and
                all(w in lines[0] for w in words),
                "zt-serve %s: exit %d and one line naming %s (got %d: %s)" % (
                    label, code, words, p.returncode, p.stderr.strip()[-300:]))

    m, w, t = base[1], base[3], base[5]
    expect("without --model", ["--weights", w, "--tokenizer", t], 2, ["--model"])
    expect("--weights and --checkpoint", base + ["--checkpoint", WORK], 2, ["--checkpoint"])
    expect("without --tokenizer", ["--model", m, "--weights", w], 2, ["--tokenizer"])
    expect("--port 70000", base + ["--port", "70000"], 2, ["--port", "70000"])
    expect("--max-batch 0", base + ["--max-batch", "0"], 2, ["--max-batch"])
    expect("--max-body 10", base + ["--max-body", "10"], 2, ["--max-body"])
    expect("--max-prefill -1", base + ["--max-prefill", "-1"], 2, ["--max-prefill"])
    expect("--host bogus", base + ["--host", "bogus"], 2, ["--host", "bogus"])
    expect("unknown option", base + ["--frobnicate"], 2, ["--frobnicate"])
    expect("missing model file", ["--model", R.path("nope.json"), "--weights", w,
                                  "--tokenizer", t], 2, ["nope.json"])
    expect("missing tokenizer", ["--model", m, "--weights", w, "--tokenizer",
                                 R.path("no-tokenizer")], 1, ["no-tokenizer"])
    expect("missing weights", ["--model", m, "--weights", R.path("no.safetensors"),
                               "--tokenizer", t], 1, ["no.safetensors"])
    expect("a port in use", base + ["--port", str(s.port)], 1, [str(s.port)])


def idle_cpu(s):
    """between requests the StarPU workers are parked, not polling"""
    time.sleep(0.5)
    c0 = s.cpu_seconds()
    time.sleep(2.0)
    used = s.cpu_seconds() - c0
    R.check(used < 0.2, "an idle server uses %.2f s of CPU in 2 s (less than 0.2)" % used)


def basics(s):
    status, _, body = s.request("GET", "/health")
    R.check(status == 200 and json.loads(body) == {"status": "ok"}, "GET /health: 200 ok")
    status, _, body = s.request("GET", "/v1/models")
    m = json.loads(body)
    R.check(status == 200 and m["object"] == "list" and m["data"][0]["id"] == "model" and
            m["data"][0]["max_model_len"] == CTX, "GET /v1/models: the model, its context")
    for r, text in zip(ref, PROMPTS):
        st, tk = s.post_json("/v1/tokenize", {"prompt": text})
        st2, dt = s.post_json("/v1/detokenize", {"tokens": r["prompt_ids"]})
        R.check(st == 200 and tk["tokens"] == r["prompt_ids"] and tk["count"] ==
                len(r["prompt_ids"]) and st2 == 200 and dt["prompt"] == text,
                "tokenize/detokenize %r: zt-generate's ids, and back" % text)


def completions(s):
    for r, text in zip(ref, PROMPTS):
        st, o = s.post_json("/v1/completions", greedy(text))
        ok = st == 200 and o["object"] == "text_completion" and len(o["choices"]) == 1
        ch = o["choices"][0] if ok else {}
        R.check(ok and ch["text"] == r["text"] and ch["finish_reason"] ==
                ("length" if r["finish_reason"] == "length" else "stop") and
                o["usage"] == {"prompt_tokens": len(r["prompt_ids"]),
                               "completion_tokens": len(r["ids"]),
                               "total_tokens": len(r["prompt_ids"]) + len(r["ids"])},
                "greedy completion of %r: zt-generate's text, finish_reason and usage" % text)
    st, o = s.post_json("/v1/completions", greedy(ref[2]["prompt_ids"]))
    R.check(st == 200 and o["choices"][0]["text"] == ref[2]["text"],
            "a prompt of token ids: the text of the same prompt as a string")
    st, o = s.post_json("/v1/completions", greedy(PROMPTS[:4]))
    R.check(st == 200 and [c["text"] for c in o["choices"]] == [r["text"] for r in ref[:4]] and
            [c["index"] for c in o["choices"]] == [0, 1, 2, 3],
            "a list of 4 prompts: 4 choices in order, each its own text")
    for r, text in zip(ref_stop, PROMPTS[:3]):
        st, o = s.post_json("/v1/completions", greedy(text, 20, stop=["zzz", "e"]))
        R.check(st == 200 and o["choices"][0]["text"] == r["text"] and
                o["choices"][0]["finish_reason"] == ("stop" if r["finish_reason"] != "length"
                                                     else "length"),
                "stop [\"zzz\", \"e\"] on %r: zt-generate --stop's text (%r)" % (text, r["text"]))


def with_curl(s):
    """curl, as a user would call it: a completion and a stream (-N) of the same prompt"""
    url = "http://127.0.0.1:%d/v1/completions" % s.port
    body = json.dumps(greedy(PROMPTS[2]))
    p = subprocess.run(["curl", "-s", "-S", url, "-H", "Content-Type: application/json",
                        "-d", body], capture_output=True, text=True, timeout=120)
    o = json.loads(p.stdout) if p.returncode == 0 else {}
    R.check(o.get("choices", [{}])[0].get("text") == ref[2]["text"],
            "curl: the completion's text is zt-generate's")
    p = subprocess.run(["curl", "-s", "-S", "-N", url, "-d", json.dumps(greedy(PROMPTS[2],
                                                                               stream=True))],
                       capture_output=True, text=True, timeout=120)
    events = [l[6:] for l in p.stdout.split("\n") if l.startswith("data: ")]
    text, reason, done, _ = stream_text(events)
    R.check(p.returncode == 0 and text == ref[2]["text"] and done and reason == "length",
            "curl -N: the event stream's text is the same, then data: [DONE]")


def token_bytes():
    """the tokenizer's id -> bytes (byte-level BPE: each character of a token stands for a byte)"""
    u2b = {c: b for b, c in bytes_to_unicode().items()}
    with open(os.path.join(TOK, "vocab.json"), encoding="utf-8") as f:
        vocab = json.load(f)
    return {i: bytes(u2b[ch] for ch in tok) for tok, i in vocab.items()
            if all(ch in u2b for ch in tok)}


def whole_chars(b):
    """len of b up to its last whole UTF-8 character"""
    k = len(b)
    while k > 0 and (b[k - 1] & 0xC0) == 0x80:
        k -= 1
    if k == 0:
        return len(b)
    c = b[k - 1]
    need = 4 if c >= 0xF0 else 3 if c >= 0xE0 else 2 if c >= 0xC0 else 1
    return len(b) if len(b) - (k - 1) >= need else k - 1


def text_events(ids, tb):
    """how many tokens of ids bring new whole characters: one event each"""
    n, shown, out = 0, 0, b""
    for i in ids:
        out += tb.get(i, b"")
        w = whole_chars(out)
        n += w > shown
        shown = max(shown, w)
    return n


def streaming(s):
    tb = token_bytes()
    for r, text in list(zip(ref, PROMPTS))[:4]:
        st, ctype, ev = s.stream(greedy(text, stream_options={"include_usage": True}))
        got, reason, done, usage = stream_text(ev)
        texts = [json.loads(e)["choices"] for e in ev[:-1]]
        per_token = sum(1 for ch in texts if ch and ch[0]["text"] and not ch[0]["finish_reason"])
        R.check(st == 200 and ctype.startswith("text/event-stream") and got == r["text"] and
                done and reason == "length" and usage and usage["completion_tokens"] ==
                len(r["ids"]) and per_token == text_events(r["ids"], tb),
                "stream of %r: an event per token that shows text (%d, expected %d), the text, "
                "finish_reason, usage, [DONE]" % (text, per_token, text_events(r["ids"], tb)))
    results = [None] * 32

    def client(i):
        results[i] = s.stream(greedy(PROMPTS[i % len(PROMPTS)]))

    threads = [threading.Thread(target=client, args=(i,)) for i in range(32)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    good = sum(1 for i, res in enumerate(results) if res and res[0] == 200 and
               stream_text(res[2])[0] == ref[i % len(PROMPTS)]["text"] and stream_text(res[2])[2])
    R.check(good == 32, "32 concurrent streams: %d of 32 got exactly their greedy text" % good)


def bad_requests(s):
    def err(status, path, body, param, what, method="POST"):
        st, hdr, raw = s.request(method, path, body)
        try:
            e = json.loads(raw)["error"]
        except (ValueError, KeyError, TypeError):
            e = None
        R.check(st == status and e is not None and e["message"] and e["type"] and
                (param is None or e["param"] == param),
                "%s: %d with a JSON error%s (got %d %s)" % (
                    what, status, " naming %s" % param if param else "", st, raw[:200]))

    err(400, "/v1/completions", b"{\"prompt\": \"x\",", None, "malformed JSON")
    err(400, "/v1/completions", b"[1, 2]", None, "a body that is not an object")
    err(400, "/v1/completions", greedy("x", max_tokens="5"), "max_tokens", "max_tokens a string")
    err(400, "/v1/completions", greedy("x", temperature=-1), "temperature", "temperature -1")
    err(400, "/v1/completions", greedy("x", top_p=0), "top_p", "top_p 0")
    err(400, "/v1/completions", greedy("x", stream="yes"), "stream", "stream a string")
    err(400, "/v1/completions", greedy("x", stop=["a", "b", "c", "d", "e"]), "stop", "5 stops")
    err(400, "/v1/completions", dict(greedy("x"), n=2), "n", "n 2")
    err(400, "/v1/completions", greedy("x", echo=True), "echo", "echo true")
    err(400, "/v1/completions", greedy("x", logprobs=3), "logprobs", "logprobs 3")
    err(404, "/v1/completions", greedy("x", model="gpt-4"), "model", "another model")
    err(400, "/v1/completions", greedy(""), "prompt", "an empty prompt")
    err(400, "/v1/completions", greedy([5, 2000]), "prompt", "a token id >= vocab_size")
    err(400, "/v1/completions", {"model": "model"}, "prompt", "no prompt")
    err(400, "/v1/completions", greedy(list(range(CTX))), "prompt",
        "a prompt as long as the context")
    err(400, "/v1/completions", greedy([1, 2, 3], CTX - 2), "max_tokens",
        "prompt + max_tokens beyond the context")
    err(400, "/v1/completions", greedy("x", CTX + 1), "max_tokens", "max_tokens > context")
    err(404, "/v1/chat/completions", greedy("x"), None, "an unknown path")
    err(405, "/v1/completions", None, None, "GET on /v1/completions", method="GET")
    err(400, "/v1/tokenize", {"prompt": 5}, "prompt", "tokenize a number")
    err(400, "/v1/completions", greedy("a\u0000b"), None,
        "a prompt holding \\u0000 (refused, not cut short)")
    err(400, "/v1/detokenize", {"tokens": [1, -1]}, "tokens", "detokenize a negative id")
    err(400, "/v1/completions", greedy("x", repetition_penalty=1e-50), "repetition_penalty",
        "repetition_penalty 1e-50 (0 as a float)")
    st, o = s.post_json("/v1/detokenize", {"tokens": [65, 189, 66]})
    R.check(st == 200 and o["prompt"] == "a\ufffdb",
            "detokenize of the NUL byte's token: U+FFFD in its place (%r)" % (o and o["prompt"]))
    st, o = s.post_json("/v1/completions", dict(greedy(["Hi there"] * 3), temperature=1.0))
    texts = [c["text"] for c in o["choices"]] if st == 200 else []
    R.check(len(set(texts)) == 3, "3 equal prompts sampled without a seed: 3 different texts")
    st, o2 = s.post_json("/v1/completions", dict(greedy(["Hi there"] * 2), temperature=1.0,
                                                   seed=7))
    R.check(st == 200 and o2["choices"][0]["text"] == o2["choices"][1]["text"],
            "with a seed, equal prompts sample the same text")
    st, o = s.post_json("/v1/completions", greedy(PROMPTS[0], frobnicate={"x": 1}, user="me"))
    R.check(st == 200 and o["choices"][0]["text"] == ref[0]["text"],
            "unknown fields are ignored (as OpenAI's and vLLM's servers do)")


def too_large(s):
    """a body declared larger than --max-body: 413 before it is sent"""
    sock = socket.create_connection(("127.0.0.1", s.port), timeout=30)
    sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
                 b"\r\nContent-Length: 2000000\r\n\r\n")
    data = b""
    try:
        while True:
            chunk = sock.recv(4096)
            if not chunk:
                break
            data += chunk
            head, _, body = data.partition(b"\r\n\r\n")
            if b"\r\n\r\n" in data and body.rstrip().endswith(b"}}"):
                break
    except OSError:
        pass
    sock.close()
    head, _, body = data.partition(b"\r\n\r\n")
    try:
        e = json.loads(body)["error"]
    except (ValueError, KeyError):
        e = None
    R.check(head.startswith(b"HTTP/1.1 413") and e is not None and "--max-body" in e["message"],
            "a body over --max-body: 413 with a JSON error before the body is read (%r)" %
            data[:120])


def too_large_chunked(s):
    """a chunked body (no Content-Length) that grows past --max-body: 413 once it has ended"""
    sock = socket.create_connection(("127.0.0.1", s.port), timeout=60)
    sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
                 b"Content-Type: application/json\r\n\r\n")
    piece = b"x" * 65536
    for _ in range(20):  # 1.25 MiB
        sock.sendall(b"%x\r\n%s\r\n" % (len(piece), piece))
    sock.sendall(b"0\r\n\r\n")
    data = b""
    try:
        while b"}}" not in data:
            chunk = sock.recv(4096)
            if not chunk:
                break
            data += chunk
    except OSError:
        pass
    sock.close()
    R.check(data.startswith(b"HTTP/1.1 413") and b"--max-body" in data,
            "a chunked body over --max-body: 413 with a JSON error (%r)" % data[:60])


def slow_client(s, timeout):
    sock = socket.create_connection(("127.0.0.1", s.port))
    sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Le")
    sock.settimeout(timeout + 20)
    t0 = time.time()
    try:
        closed = sock.recv(1024) == b""
    except (socket.timeout, ConnectionResetError):
        closed = False
    waited = time.time() - t0
    sock.close()
    R.check(closed and waited < timeout + 10, "a client stalling inside its headers is cut off "
            "after --timeout %d s (after %.1f s)" % (timeout, waited))
    status, _, _ = s.request("GET", "/health")
    R.check(status == 200, "the server answers after the stalled client")


def storm(s):
    """clients drop mid-stream: no slot stays taken, memory settles, answers unchanged"""
    for i in range(3):  # warm-up: the allocator's arenas and the connection threads
        s.stream(greedy(PROMPTS[i], 30), stop_after=2)
    time.sleep(1.0)
    before = s.rss_kib()
    threads = [threading.Thread(target=s.stream, args=(greedy(PROMPTS[i % 8], 40),),
                                kwargs={"stop_after": 1 + i % 3}) for i in range(24)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    m = {}
    for _ in range(200):
        m = s.metrics()
        if m.get("zt_serve_requests_running") == 0 and m.get("zt_serve_requests_waiting") == 0:
            break
        time.sleep(0.1)
    R.check(m.get("zt_serve_requests_running") == 0 and m.get("zt_serve_requests_waiting") == 0
            and m.get("zt_serve_requests_unstarted") == 0
            and m.get("zt_serve_cancelled_total", 0) >= 1,
            "24 clients gone mid-stream: no prompt running, waiting or unstarted (%s), %d "
            "cancelled" % ({k: v for k, v in m.items() if re.search("running|waiting|unstarted", k)},
                m.get("zt_serve_cancelled_total", -1)))
    after = s.rss_kib()
    R.check(after - before < 16 * 1024, "resident memory after the storm: %d KiB, before: %d "
            "KiB (less than 16 MiB more)" % (after, before))
    st, o = s.post_json("/v1/completions", greedy(PROMPTS[1]))
    R.check(st == 200 and o["choices"][0]["text"] == ref[1]["text"],
            "after the storm: the same greedy text")


def metrics_text(s):
    status, hdr, body = s.request("GET", "/metrics")
    text = body.decode()
    names = ["zt_serve_requests_total", "zt_serve_prompt_tokens_total",
             "zt_serve_generation_tokens_total", "zt_serve_requests_running",
             "zt_serve_requests_waiting", "zt_serve_requests_unstarted",
             "zt_serve_max_prefill", "zt_serve_batch_occupancy",
             "zt_serve_time_to_first_token_seconds_bucket",
             "zt_serve_inter_token_latency_seconds_count"]
    m = s.metrics()
    R.check(status == 200 and hdr["content-type"].startswith("text/plain") and
            all(n in text for n in names) and "# TYPE zt_serve_time_to_first_token_seconds "
            "histogram" in text and m['zt_serve_requests_total{endpoint="/v1/completions",'
                                      'status="200"}'] > 40 and
            m["zt_serve_generation_tokens_total"] > 300,
            "/metrics: Prometheus text with the request counters, token counts, gauges and "
            "latency histograms")


def overload():
    """--max-batch 1 --max-queue 1: of 8 prompts sent at once, those beyond the 2 the server
    holds get 429 at once (with Retry-After and a JSON error), the others their text"""
    s = Server(SERVE, base + ["--max-batch", "1", "--max-queue", "1"])
    out, go = [], threading.Barrier(8)

    def one():
        go.wait()
        t0 = time.time()
        st, hdr, body = s.request("POST", "/v1/completions", greedy(PROMPTS[2], 50))
        out.append((st, time.time() - t0, hdr.get("retry-after"), json.loads(body)))

    threads = [threading.Thread(target=one) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    busy = [o for o in out if o[0] == 429]
    done = [o for o in out if o[0] == 200]
    R.check(len(out) == 8 and busy and len(busy) + len(done) == 8 and
            all(o[2] == "1" and o[3]["error"]["type"] == "rate_limit_error" and o[1] < 2.0
                for o in busy) and all("choices" in o[3] for o in done),
            "8 prompts at once, --max-batch 1 + --max-queue 1: %d got 429 with Retry-After "
            "(in at most %.2f s), %d their text" % (len(busy), max([o[1] for o in busy] or [0]),
                                                    len(done)))
    # full (the one slot and the one queue place taken by long streams): a completion is
    # refused from its headers, before its body is read or tokenized, so that even a body that
    # is not JSON (400 on a server with room) gets 429
    # (sent again and again while 4 clients keep streaming: full most of that time)
    stop = threading.Event()

    def keep_busy():
        while not stop.is_set():
            s.stream(greedy(PROMPTS[2], 40))

    held = [threading.Thread(target=keep_busy) for _ in range(4)]
    for t in held:
        t.start()
    seen, deadline = {}, time.time() + 30
    while time.time() < deadline and 429 not in seen:
        st, hdr, body = s.request("POST", "/v1/completions", b"{not json")
        seen[st] = (hdr.get("retry-after"), json.loads(body)["error"]["type"])
    stop.set()
    for t in held:
        t.join(120)
    R.check(seen.get(429) == ("1", "rate_limit_error") and set(seen) <= {400, 429},
            "full server: a body that is not JSON got %s (expected 429 from the headers, its "
            "body unread, while full; 400 otherwise)" % sorted(seen))
    for _ in range(100):  # a stream's slot is released just after its last event
        st, _ = s.post_json("/v1/completions", b"{not json")
        if st != 429:
            break
        time.sleep(0.02)
    R.check(st == 400, "the same body with room: %d (expected 400)" % st)
    R.check(s.stop() == 0, "SIGTERM after the overload: exit 0")


def prefill_limit():
    """--max-prefill 1 (one slot, queue room for 4, prompts fed a token a step): while a long
    prompt is being fed, another gets 429 naming the limit although the queue has room; once
    the first has its first token the same prompt is taken, and so is a completion of more
    prompts than the limit. (The long prompt may have its first
    token before the other arrives: tried up to 10 times.)"""
    s = Server(SERVE, base + ["--max-batch", "1", "--max-queue", "4", "--max-prefill", "1",
                              "--prefill-chunk", "1"])
    long_prompt = greedy([7 + i % 50 for i in range(CTX - 8)], 4)
    seen = []
    for _ in range(10):
        first = threading.Thread(target=s.post_json, args=("/v1/completions", long_prompt))
        first.start()
        while s.metrics().get("zt_serve_requests_unstarted") == 0 and first.is_alive():
            time.sleep(0.001)
        st, body = s.post_json("/v1/completions", greedy(PROMPTS[3], 4))
        seen.append(st)
        first.join(120)
        if st == 429:
            break
    msg = body and body.get("error", {}).get("message", "")
    R.check(st == 429 and "--max-prefill" in msg,
            "--max-prefill 1, a prompt being fed: another got %s (expected 429 naming "
            "--max-prefill: %r; tries %s)" % (st, msg, seen))
    st, body = s.post_json("/v1/completions", greedy(PROMPTS[:3], 4))
    R.check(st == 200 and len(body.get("choices", [])) == 3,
            "--max-prefill 1, idle: a completion of 3 prompts is taken whole: %d, %d choices "
            "(expected 200, 3)" % (st, len((body or {}).get("choices", []))))
    st, body = s.post_json("/v1/completions", greedy(PROMPTS[3], 4))
    m = s.metrics()
    R.check(st == 200 and m.get("zt_serve_requests_unstarted") == 0 and
            m.get("zt_serve_max_prefill") == 1,
            "--max-prefill 1 with the server idle again: %d (expected 200), unstarted %s, "
            "zt_serve_max_prefill %s" % (st, m.get("zt_serve_requests_unstarted"),
                                         m.get("zt_serve_max_prefill")))
    R.check(s.stop() == 0, "SIGTERM: exit 0")
    # full (the one prompt that may wait for its first token is being fed) and draining: the
    # drain's 503, not a full server's 429 (which is refused from the headers only while not
    # draining); the feeding may end first: tried up to 3 times
    for _ in range(3):
        s = Server(SERVE, base + ["--max-batch", "1", "--max-queue", "4", "--max-prefill", "1",
                                  "--prefill-chunk", "1"])
        held = threading.Thread(target=s.post_json, args=("/v1/completions", long_prompt))
        held.start()
        while s.metrics().get("zt_serve_requests_unstarted") == 0 and held.is_alive():
            time.sleep(0.001)
        s.p.send_signal(signal.SIGTERM)
        health = None
        while health != 503 and held.is_alive():
            health = s.request("GET", "/health")[0]
        try:
            st = s.request("POST", "/v1/completions", greedy(PROMPTS[3], 4))[0]
        except OSError:
            st = "refused"
        held.join(120)
        try:
            rc = s.p.wait(120)  # on its own: a second SIGTERM would stop it at once
        except subprocess.TimeoutExpired:
            rc = s.stop(signal.SIGKILL)
        if health == 503:
            break
    R.check(health == 503 and st == 503 and rc == 0,
            "full and draining: a completion got %s (expected 503; /health %s), exit %d" % (
                st, health, rc))


def queued_cancel():
    """clients that leave while their prompts wait for a slot: the prompts leave the queue
    without being prefilled (--max-batch 1: 8 long prompts ahead of them)"""
    s = Server(SERVE, base + ["--max-batch", "1", "--max-queue", "16"])
    lens = [len(s.post_json("/v1/tokenize", {"prompt": p})[1]["tokens"]) for p in PROMPTS]
    rows0 = s.metrics()['zt_serve_rows_total{kind="prefill"}']
    ahead = [threading.Thread(target=s.stream, args=(greedy(PROMPTS[2 + i % 4], 50),))
             for i in range(8)]
    for t in ahead:
        t.start()
    while serve_busy(s) < 8:
        time.sleep(0.005)
    for stream in (True, True, False):  # send, then hang up at once
        body = json.dumps(greedy(PROMPTS[0], 50, stream=stream)).encode()
        sock = socket.create_connection(("127.0.0.1", s.port))
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
                     b"application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        time.sleep(0.02)
        sock.close()
    for t in ahead:
        t.join(120)
    while serve_busy(s) > 0:
        time.sleep(0.01)
    m = s.metrics()
    rows = m['zt_serve_rows_total{kind="prefill"}'] - rows0
    want = sum(lens[2 + i % 4] for i in range(8))
    R.check(m["zt_serve_cancelled_total"] == 3 and rows == want and
            m["zt_serve_requests_unstarted"] == 0,
            "3 clients gone while queued (2 streamed, 1 plain): 3 cancelled (%d), prefill rows "
            "%d = the 8 others' prompts %d (theirs never fed), unstarted %d (expected 0)" % (
                m["zt_serve_cancelled_total"], rows, want, m["zt_serve_requests_unstarted"]))
    R.check(s.stop() == 0, "SIGTERM: exit 0")


def engine_failure():
    """the engine fails (its weights on NVMe cut short under it): the request in flight gets a
    500 naming the failure, later ones 503, /health says failed, SIGTERM still exits 0"""
    nvme = R.path("nvme")
    os.makedirs(nvme, exist_ok=True)
    cfg = R.write("nvme.json", {"zero_optimization": {"stage": 3, "offload_param": {
        "device": "nvme", "nvme_path": nvme, "buffer_count": 2}}})
    s = Server(SERVE, base + ["--ds-config", cfg])
    for d, _, files in os.walk(nvme):
        for f in files:
            os.truncate(os.path.join(d, f), 0)
    st, o = s.post_json("/v1/completions", greedy(PROMPTS[0]))
    msg = o["error"]["message"] if o and "error" in o else ""
    st2, _ = s.post_json("/v1/completions", greedy(PROMPTS[1]))
    st3, _, body = s.request("GET", "/health")
    R.check(st == 500 and "generation engine failed" in msg and st2 == 503 and st3 == 503 and
            json.loads(body)["status"] == "failed",
            "weights on NVMe truncated under the server: 500 (%s), then 503 (%d), /health 503 "
            "failed (%d)" % (msg[:120], st2, st3))
    R.check(s.stop() == 0, "SIGTERM after the failure: exit 0")


def drain(s):
    """SIGTERM while prompts run and wait: they all end normally; new requests get 503 (or,
    once the daemon stops accepting, no connection); exit status 0"""
    res = [None] * 20
    first = threading.Event()

    def client(i):
        try:
            res[i] = s.stream(greedy(PROMPTS[i % 8], 40))
        except OSError:  # sent once the daemon had stopped accepting
            res[i] = ("refused", "", [])
        first.set()

    threads = [threading.Thread(target=client, args=(i,)) for i in range(20)]
    for t in threads:
        t.start()
    while serve_busy(s) < 8 and not first.is_set():
        time.sleep(0.005)
    s.p.send_signal(signal.SIGTERM)
    time.sleep(0.05)
    try:
        late, _, _ = s.request("POST", "/v1/completions", greedy(PROMPTS[0]), timeout=10)
    except OSError:
        late = "refused"
    for t in threads:
        t.join(120)
    try:
        rc = s.p.wait(120)  # on its own: a second SIGTERM would stop it at once
    except subprocess.TimeoutExpired:
        rc = s.stop(signal.SIGKILL)
    ended = sum(1 for r in res if r and r[0] == 200 and stream_text(r[2])[2] and
                stream_text(r[2])[1])
    later = sum(1 for r in res if r and r[0] in (503, "refused"))
    m = re.search(r"draining (\d+) prompt", s.stderr())
    R.check(rc == 0 and m and ended == int(m.group(1)) > 0 and ended + later == 20 and
            late in (503, "refused"),
            "SIGTERM with %s of 20 streaming prompts in the server: those %d end with a "
            "finish_reason and [DONE], the %d sent after it and one more get 503 or no "
            "connection (%s), exit %d (statuses %s)" % (m and m.group(1), ended, later, late, rc,
                                                        [r and r[0] for r in res]))


def serve_busy(s):
    m = s.metrics()
    return m.get("zt_serve_requests_running", 0) + m.get("zt_serve_requests_waiting", 0)


s = Server(SERVE, base + ["--max-batch", "4", "--max-queue", "40", "--timeout", "3"])
try:
    idle_cpu(s)
    command_line(s)
    basics(s)
    completions(s)
    with_curl(s)
    streaming(s)
    bad_requests(s)
    too_large(s)
    too_large_chunked(s)
    slow_client(s, 3)
    storm(s)
    metrics_text(s)
    idle_cpu(s)
    drain(s)
finally:
    if s.p.poll() is None:
        s.stop(signal.SIGKILL)
    if R.bad:
        print(s.stderr()[-3000:])
overload()
prefill_limit()
queued_cancel()
engine_failure()
sys.exit(R.finish("test_serve"))
