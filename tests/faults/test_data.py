#!/usr/bin/env python3
"""tests/faults/test_data.py: a token file that changes while zt-train reads it ends the run with
one clear line (exit 1), never a crash (SIGBUS, SIGSEGV) or a hang.

Cases (each on its own token file of many pages, with many steps so that the run is
still training when the file changes; the file is changed once the run has printed its first
progress line, so every case hits a run that is past start-up):
  - the file is truncated to its header: "tokens FILE: file shrank to 1024 bytes while
    training (expected ...)";
  - the file is truncated inside its tokens (at a point every read of a batch crosses, so the
    next step fails): the same, with that size;
  - the tokens are overwritten in place with an id >= vocab_size: "tokens FILE: token ... at
    byte ... is 60000, not below vocab_size 64" (the file is checked at open, so only the read of
    each batch can see this).

Usage: test_data.py APPS_DIR MPIEXEC WORKDIR
"""
import os
import struct
import subprocess

import faultlib as F

F.setup()
ZT = F.prog("zt-train")
base = F.tiny_run()
NTOK = 50000  # tokens: many pages, so that a mapped reader would fault past the end
TIMEOUT = 30


def start_run(data):
    """zt-train on data with many steps and its progress lines on; returns the process once it
    has printed the first step (or None when it never did)"""
    args = F.with_arg(F.with_arg(base, "--data", data), "--steps", "100000000")
    args.remove("--quiet")
    p = subprocess.Popen([ZT] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    for line in p.stdout:
        if line.startswith("step "):
            return p
    return p


def changed_under_run(label, data, change, words):
    """start a run on data, change the file with change(path) after its first step, then expect
    exit 1 and one error line holding words"""
    p = start_run(data)
    change(data)
    try:
        _, err = p.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        p.kill()
        p.communicate()
        F.check(label, False, "no answer %d s after the change (a hang)" % TIMEOUT)
        return
    lines = [l for l in err.splitlines() if l.strip()]
    ok = (p.returncode == 1 and len(lines) == 1 and lines[0].startswith("zerotask: error: ") and
          all(w in lines[0] for w in words))
    F.check(label, ok, "exit %d, %r" % (p.returncode, lines))


def copy_tokens(name):
    return F.write_tokens(name, [i % 64 for i in range(NTOK)])


def truncate_to(size):
    return lambda path: os.truncate(path, size)


def overwrite_ids(value):
    def change(path):
        with open(path, "r+b") as f:  # in place: the same inode the run has open
            f.seek(1024)
            f.write(struct.pack("<%dH" % NTOK, *([value] * NTOK)))
    return change


data = copy_tokens("shrink_header.bin")
changed_under_run("truncated to its header while training", data, truncate_to(1024),
                  ["tokens %s" % data, "shrank to 1024 bytes", "expected %d" % (1024 + 2 * NTOK)])
# cut inside the first row's tokens: whatever step the run has reached, its next read crosses
# the cut, so the error comes at once (a cut far ahead would take many steps to reach)
data = copy_tokens("shrink_tokens.bin")
CUT = 1024 + 2 * 5 + 1  # five tokens and half of the sixth
changed_under_run("truncated inside its tokens while training", data, truncate_to(CUT),
                  ["tokens %s" % data, "shrank to %d bytes" % CUT])
data = copy_tokens("rewritten.bin")
changed_under_run("ids >= vocab_size written in place while training", data, overwrite_ids(60000),
                  ["tokens %s" % data, "at byte", "is 60000", "vocab_size 64"])
F.finish()
