"""tests/apps/servelib.py: zt-serve for the tests: start it on a free loopback port, talk
HTTP to it (plain requests, Server-Sent Events streams), read its metrics, stop it."""
import http.client
import json
import os
import re
import signal
import subprocess
import threading
import time


class Server:
    """zt-serve ARGS --port 0, up once it prints the port it listens on"""

    def __init__(self, exe, args, env=None, wait=180):
        self.p = subprocess.Popen([exe] + args + ["--port", "0"], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True,
                                  env=dict(os.environ, **(env or {})))
        self.lines = []
        self.port = None
        ready = threading.Event()

        def read():
            for line in self.p.stderr:
                self.lines.append(line)
                m = re.search(r"listening on http://[^:]+:(\d+)", line)
                if m:
                    self.port = int(m.group(1))
                    ready.set()
            ready.set()

        self.reader = threading.Thread(target=read, daemon=True)
        self.reader.start()
        ready.wait(wait)
        if self.port is None:
            self.p.kill()
            raise RuntimeError("zt-serve did not start:\n" + "".join(self.lines)[-3000:])

    def stderr(self):
        return "".join(self.lines)

    def stop(self, sig=signal.SIGTERM, timeout=120):
        """send sig, wait for the exit; its code"""
        if self.p.poll() is None:
            self.p.send_signal(sig)
        try:
            rc = self.p.wait(timeout)
        except subprocess.TimeoutExpired:
            self.p.kill()
            rc = self.p.wait()
            self.lines.append("(killed after %d s)\n" % timeout)
        self.reader.join(10)
        return rc

    def rss_kib(self):
        with open("/proc/%d/status" % self.p.pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        return -1

    def cpu_seconds(self):
        """user + system CPU time the server has used"""
        with open("/proc/%d/stat" % self.p.pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def conn(self, timeout=120):
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)

    def request(self, method, path, body=None, headers=None, timeout=120):
        """(status, headers dict (lower-case names), body bytes)"""
        c = self.conn(timeout)
        data = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
        h = dict(headers or {})
        if data is not None:
            h.setdefault("Content-Type", "application/json")
        c.request(method, path, body=data, headers=h)
        r = c.getresponse()
        out = (r.status, {k.lower(): v for k, v in r.getheaders()}, r.read())
        c.close()
        return out

    def post_json(self, path, obj, timeout=120):
        """(status, parsed body or None)"""
        status, _, body = self.request("POST", path, obj, timeout=timeout)
        try:
            return status, json.loads(body)
        except ValueError:
            return status, None

    def stream(self, obj, stop_after=None, timeout=120):
        """POST /v1/completions with stream: (status, content type, the events' data strings);
        stop_after: close the connection after that many events"""
        c = self.conn(timeout)
        c.request("POST", "/v1/completions", body=json.dumps(dict(obj, stream=True)).encode(),
                  headers={"Content-Type": "application/json"})
        r = c.getresponse()
        events, ctype = [], r.getheader("Content-Type", "")
        if r.status != 200:
            r.read()
            c.close()
            return r.status, ctype, events
        buf = b""
        while True:
            chunk = r.read1(4096) if hasattr(r, "read1") else r.read(1)
            if not chunk:
                break
            buf += chunk
            while b"\n\n" in buf:
                ev, buf = buf.split(b"\n\n", 1)
                data = [l[6:] for l in ev.decode().split("\n") if l.startswith("data: ")]
                if data:
                    events.append("\n".join(data))
            if stop_after is not None and len(events) >= stop_after:
                break
        c.close()
        return 200, ctype, events

    def metrics(self):
        """/metrics as {series: value}"""
        _, _, body = self.request("GET", "/metrics")
        out = {}
        for line in body.decode().splitlines():
            if line and not line.startswith("#"):
                k, v = line.rsplit(" ", 1)
                out[k] = float(v)
        return out


def served_model(runner, tokenizer, ctx=64):
    """a small GPT-2 (2 layers, 64 wide, vocabulary 2000, context ctx) trained 4 steps with
    runner (trainlib.Runner): zt-serve's and zt-generate's model arguments"""
    model = runner.write("model.json", {"vocab_size": 2000, "seq_len": ctx, "n_embd": 64,
                                        "n_layer": 2, "n_head": 4})
    data = runner.tokens("tokens.bin", [(i * 37 + i // 7) % 1999 for i in range(8000)])
    ds = runner.write("ds.json", {"train_batch_size": 4, "train_micro_batch_size_per_gpu": 4,
                                  "optimizer": {"type": "AdamW", "params": {"lr": 3e-3}}})
    _, weights, _ = runner.train("w", 1, ["--model", model, "--data", data, "--steps", "4",
                                          "--ds-config", ds])
    return ["--model", model, "--weights", weights, "--tokenizer", tokenizer]


def stream_text(events):
    """the text of a completion's stream events (choice 0), its finish_reason, whether it ended
    with [DONE], the usage object if one came"""
    text, reason, usage = "", None, None
    for e in events:
        if e == "[DONE]":
            continue
        o = json.loads(e)
        for ch in o.get("choices", []):
            text += ch["text"]
            reason = ch["finish_reason"] or reason
        usage = o.get("usage") or usage
    return text, reason, bool(events) and events[-1] == "[DONE]", usage
