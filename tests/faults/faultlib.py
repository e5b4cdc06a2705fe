"""tests/faults/faultlib.py: what every fault test shares.

A fault test runs one of our programs on an input that is wrong and asserts the contract of a
bad input: the documented exit code, exactly one stderr line "zerotask: error: ..." holding the
words that name the input and what was wrong, and an answer within a timeout (never a hang).
Each test script imports this module, calls setup(), runs its cases with expect(), and ends with
finish().

Command line of every fault test: SCRIPT APPS_DIR MPIEXEC WORKDIR
  APPS_DIR  the build's apps/ folder (zt-train, zt-ckpt, zt-trace, zt-prepare)
  MPIEXEC   mpiexec, for the cases that need several ranks
  WORKDIR   a scratch folder, emptied first
"""
import json
import os
import shutil
import struct
import subprocess
import sys

APPS = MPIEXEC = WORK = None
bad = []
# the sanitizer pass (ZT_TEST_SANITIZED=1, tests/CMakeLists.txt): sizes that only time a code
# path (not its memory use) are smaller there; the release pass runs them in full
SANITIZED = os.environ.get("ZT_TEST_SANITIZED", "0") == "1"


def setup():
    """read the command line and empty WORKDIR"""
    global APPS, MPIEXEC, WORK
    if len(sys.argv) != 4:
        sys.exit("usage: %s APPS_DIR MPIEXEC WORKDIR" % sys.argv[0])
    APPS, MPIEXEC, WORK = sys.argv[1], sys.argv[2], sys.argv[3]
    shutil.rmtree(WORK, ignore_errors=True)
    os.makedirs(WORK)


def prog(name):
    """the path of one of our programs: zt-train, zt-ckpt, zt-trace, zt-prepare"""
    return os.path.join(APPS, name)


def path(name):
    return os.path.join(WORK, name)


def write_json(name, obj):
    with open(path(name), "w") as f:
        json.dump(obj, f)
    return path(name)


def write_tokens(name, tokens):
    """an llm.c token file (uint16 tokens after a 256-int header)"""
    with open(path(name), "wb") as f:
        f.write(struct.pack("<256i", 20240520, 1, len(tokens), *([0] * 253)))
        f.write(struct.pack("<%dH" % len(tokens), *tokens))
    return path(name)


def tiny_run():
    """a model, a DeepSpeed config and a token file for a run of a second or less; returns the
    zt-train arguments of one step"""
    model = write_json("model.json", {"vocab_size": 64, "seq_len": 8, "n_embd": 16,
                                      "n_layer": 1, "n_head": 2})
    ds = write_json("ds.json", {"train_batch_size": 2,
                                "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}})
    data = write_tokens("tokens.bin", [i % 64 for i in range(400)])
    return ["--ds-config", ds, "--model", model, "--data", data, "--steps", "1", "--quiet"]


def with_arg(args, flag, value):
    """args with flag set to value (replaced where present, appended otherwise)"""
    a = list(args)
    if flag in a:
        a[a.index(flag) + 1] = value
    else:
        a += [flag, value]
    return a


def run(cmd, timeout=60, env=None):
    """run cmd; returns the CompletedProcess, or None after a timeout"""
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                              env=None if env is None else dict(os.environ, **env))
    except subprocess.TimeoutExpired:
        return None


def error_lines(p):
    return [l for l in p.stderr.splitlines() if l.strip()]


def check(label, ok, detail):
    """record one case's verdict"""
    print("%s %s: %s" % ("ok  " if ok else "FAIL", label, detail), flush=True)
    if not ok:
        bad.append(label)
    return ok


def expect(label, cmd, code, words, timeout=60, env=None, prefix="zerotask: error: "):
    """cmd exits with code and one stderr line that starts with prefix and holds every word in
    words; returns the process (None after a hang)"""
    p = run(cmd, timeout, env)
    if p is None:
        check(label, False, "no answer after %d s (a hang)" % timeout)
        return None
    lines = error_lines(p)
    ok = (p.returncode == code and len(lines) == 1 and lines[0].startswith(prefix) and
          all(w in lines[0] for w in words))
    check(label, ok, "exit %d, %r" % (p.returncode, lines))
    return p


def finish():
    name = os.path.basename(sys.argv[0])
    if bad:
        print("%s: %d case(s) failed: %s" % (name, len(bad), ", ".join(bad)))
        sys.exit(1)
    print("%s: all cases passed" % name)
