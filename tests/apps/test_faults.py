#!/usr/bin/env python3
"""tests/apps/test_faults.py: inputs that are not what they claim to be end with one clear line.

Each case runs zt-train under a timeout and asserts: the documented exit code (2 for the
config and model files, 1 for data and weights), exactly one stderr line "zerotask: error: ..." naming the input and what was
wrong, and no hang. Cases so far:
  - every file zt-train reads given as a FIFO (nothing ever writes it: an open that blocks would
    hang until the timeout) or as a character device (/dev/zero, which would never end) is
    refused as "not a regular file" before anything reads it;
  - every ZT_* knob of the table (`zt-train --help-env=markdown`, so a new knob cannot skip
    this) with a value its type refuses (an int or bool out of range or not a number, a size
    without a unit we know, a string outside its choices) stops the run with exit 2 and one line
    "NAME=value: expected ..." instead of falling back to a default.

Usage: test_faults.py ZT_TRAIN WORKDIR
"""
import json
import os
import shutil
import struct
import subprocess
import sys

ZT, WORK = sys.argv[1], sys.argv[2]
shutil.rmtree(WORK, ignore_errors=True)
os.makedirs(WORK)
bad = []


def path(name):
    return os.path.join(WORK, name)


def write_json(name, obj):
    with open(path(name), "w") as f:
        json.dump(obj, f)
    return path(name)


def fifo(name):
    os.mkfifo(path(name))
    return path(name)


MODEL = write_json("model.json", {"vocab_size": 64, "seq_len": 8, "n_embd": 16, "n_layer": 1,
                                  "n_head": 2})
DS = write_json("ds.json", {"train_batch_size": 2,
                            "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}})
DATA = path("tokens.bin")
with open(DATA, "wb") as f:
    f.write(struct.pack("<256i", 20240520, 1, 400, *([0] * 253)))
    f.write(struct.pack("<400H", *[i % 64 for i in range(400)]))


def expect(label, args, code, words, timeout=60):
    """zt-train ARGS exits with code and one error line holding every word in words"""
    try:
        p = subprocess.run([ZT] + args, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        bad.append(label)
        print("FAIL %s: no answer after %d s (a hang)" % (label, timeout), flush=True)
        return
    lines = [l for l in p.stderr.splitlines() if l.strip()]
    ok = (p.returncode == code and len(lines) == 1 and
          lines[0].startswith("zerotask: error: ") and all(w in lines[0] for w in words))
    print("%s %s: exit %d, %r" % ("ok  " if ok else "FAIL", label, p.returncode, lines),
          flush=True)
    if not ok:
        bad.append(label)


base = ["--ds-config", DS, "--model", MODEL, "--data", DATA, "--steps", "1", "--quiet"]


def with_arg(flag, value):
    a = list(base)
    if flag in a:
        a[a.index(flag) + 1] = value
    else:
        a += [flag, value]
    return a


for name, flag, what, code in (("data.fifo", "--data", "tokens", 1),
                               ("ds.fifo", "--ds-config", "config", 2),
                               ("model.fifo", "--model", "model shape", 2),
                               ("init.fifo", "--init-from", "safetensors", 1)):
    p = fifo(name)
    expect("%s a FIFO" % flag, with_arg(flag, p), code, [what, p, "not a regular file"])
for flag, what, code in (("--data", "tokens", 1), ("--init-from", "safetensors", 1),
                         ("--ds-config", "config", 2)):
    expect("%s /dev/zero" % flag, with_arg(flag, "/dev/zero"), code,
           [what, "/dev/zero", "not a regular file"])

# every knob of the table, strictly: values each type refuses
table = subprocess.run([ZT, "--help-env=markdown"], capture_output=True, text=True).stdout
knobs = [(m[0], m[1]) for m in
         (l.strip("|").split("|")[:2] for l in table.splitlines() if l.startswith("| `ZT_"))]
knobs = [(n.strip().strip("`"), t.strip()) for n, t in knobs]
BAD = {"int": ["abc", "99999999999999999999", "1.5"], "bool": ["2", "yes", "-1"],
       "size": ["12Q", "-1", "lots"], "string": ["no-such-value"]}
check_ok = len(knobs) >= 10
print("%s knob table: %d ZT_* knobs" % ("ok  " if check_ok else "FAIL", len(knobs)))
if not check_ok:
    bad.append("knob table")
for name, typ in knobs:
    for value in BAD.get(typ, ["?"]):
        env = dict(os.environ, **{name: value})
        try:
            p = subprocess.run([ZT] + base, capture_output=True, text=True, timeout=60, env=env)
        except subprocess.TimeoutExpired:
            p = None
        lines = [l for l in (p.stderr if p else "").splitlines() if l.strip()]
        ok = (p is not None and p.returncode == 2 and len(lines) == 1 and
              lines[0].startswith("zerotask: error: %s=%s: expected" % (name, value)))
        print("%s %s=%s (%s): %s" % ("ok  " if ok else "FAIL", name, value, typ,
                                     "exit %d, %r" % (p.returncode, lines) if p else "a hang"),
              flush=True)
        if not ok:
            bad.append("%s=%s" % (name, value))

if bad:
    print("test_faults: %d case(s) failed: %s" % (len(bad), ", ".join(bad)))
    sys.exit(1)
print("test_faults: all cases passed")
