#!/usr/bin/env python3
"""tests/apps/test_serve_openai.py: the official `openai` Python client, unchanged, against
zt-serve: completions (plain and streamed) with zt-generate's greedy text, the model list, and
its exception classes for a bad request and for an overloaded server.

The client comes from PyPI into a virtualenv made once and kept (ZT_OPENAI_VENV, default
~/.cache/zerotask/venv-openai: shared by the build trees); where it cannot be installed (no
network), the test says so and is skipped (77).

Usage: test_serve_openai.py ZT_TRAIN ZT_GENERATE ZT_SERVE MPIEXEC TOKENIZER_DIR WORKDIR
"""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "graph"))
from servelib import Server, served_model  # noqa: E402
from trainlib import Runner  # noqa: E402

TRAIN, GEN, SERVE, MPIEXEC, TOK, WORK = sys.argv[1:7]
VENV = os.environ.get("ZT_OPENAI_VENV") or os.path.join(os.path.expanduser("~"), ".cache",
                                                        "zerotask", "venv-openai")
PY = os.path.join(VENV, "bin", "python")


def client_python():
    """the virtualenv's python with `openai` importable, or None (why printed)"""
    if os.path.exists(PY) and subprocess.run([PY, "-c", "import openai"],
                                             capture_output=True).returncode == 0:
        return PY
    os.makedirs(os.path.dirname(VENV), exist_ok=True)
    steps = [["/usr/bin/python3", "-m", "venv", "--clear", VENV],
             [PY, "-m", "pip", "install", "-q", "--disable-pip-version-check", "openai>=1.0"]]
    for cmd in steps:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        if p.returncode != 0:
            print("SKIP: %s failed (exit %d): %s" % (" ".join(cmd[:4]), p.returncode,
                                                      (p.stderr or p.stdout)[-800:]))
            return None
    return PY


py = client_python()
if not py:
    sys.exit(77)

R = Runner(TRAIN, MPIEXEC, WORK)
base = served_model(R, TOK)
PROMPTS = ["Hello world", "The quick brown fox", "Once upon a time"]
p = subprocess.run([GEN] + base + ["--prompt", PROMPTS[0], "--max-new-tokens", "12",
                                   "--temperature", "0", "--json"],
                   capture_output=True, text=True, timeout=300)
want = json.loads(p.stdout)["text"]

CLIENT = r'''
import json, sys, openai
port, prompt = int(sys.argv[1]), sys.argv[2]
c = openai.OpenAI(base_url="http://127.0.0.1:%d/v1" % port, api_key="none", max_retries=0)
out = {"models": [m.id for m in c.models.list().data]}
r = c.completions.create(model="model", prompt=prompt, max_tokens=12, temperature=0)
out["text"], out["finish"], out["usage"] = r.choices[0].text, r.choices[0].finish_reason, \
    r.usage.completion_tokens
parts = []
for chunk in c.completions.create(model="model", prompt=prompt, max_tokens=12, temperature=0,
                                  stream=True):
    parts.extend(ch.text for ch in chunk.choices)
out["stream"] = "".join(parts)
try:
    c.completions.create(model="model", prompt=prompt, max_tokens=12, temperature=-3)
    out["bad"] = "no error"
except openai.BadRequestError as e:
    out["bad"] = ["BadRequestError", e.status_code, e.body.get("param") if e.body else None]
print(json.dumps(out))
'''

s = Server(SERVE, base)
try:
    q = subprocess.run([py, "-c", CLIENT, str(s.port), PROMPTS[0]], capture_output=True,
                       text=True, timeout=300)
    out = json.loads(q.stdout) if q.returncode == 0 else {}
    if q.returncode != 0:
        print(q.stderr[-3000:])
    R.check(out.get("models") == ["model"], "client.models.list(): the served model")
    R.check(out.get("text") == want and out.get("finish") == "length" and out.get("usage") == 12,
            "client.completions.create: zt-generate's greedy text (%r), length, 12 tokens" %
            out.get("text"))
    R.check(out.get("stream") == want, "stream=True: the chunks' text is the same text")
    R.check(out.get("bad") == ["BadRequestError", 400, "temperature"],
            "temperature -3: openai.BadRequestError, status 400, param temperature (%s)" %
            out.get("bad"))
finally:
    rc = s.stop()
R.check(rc == 0, "SIGTERM: exit 0")

OVERLOAD = r'''
import sys, threading, openai
port = int(sys.argv[1])
c = openai.OpenAI(base_url="http://127.0.0.1:%d/v1" % port, api_key="none", max_retries=0)
res = []
def one():
    try:
        c.completions.create(model="model", prompt="Once upon a time", max_tokens=50)
        res.append("ok")
    except openai.RateLimitError as e:
        res.append("429" if e.response.headers.get("retry-after") == "1" else "429 no header")
ts = [threading.Thread(target=one) for _ in range(6)]
[t.start() for t in ts]
[t.join() for t in ts]
print(" ".join(sorted(res)))
'''
s = Server(SERVE, base + ["--max-batch", "1", "--max-queue", "1"])
try:
    q = subprocess.run([py, "-c", OVERLOAD, str(s.port)], capture_output=True, text=True,
                       timeout=300)
    res = q.stdout.split()
    R.check(q.returncode == 0 and "ok" in res and "429" in res and "no" not in res,
            "6 clients at --max-batch 1 --max-queue 1: openai.RateLimitError (429, Retry-After) "
            "for the ones over capacity, the rest answered (%s)" % q.stdout.strip())
finally:
    s.stop()
sys.exit(R.finish("test_serve_openai"))
