#!/usr/bin/env python3
"""tests/faults/test_trace.py: a damaged replay file (.ztr) ends every zt-trace command that reads
it with one line naming the file, the line and the field, and exit 1, quickly.

A real replay file is recorded by a two-step zt-train run (--trace), then damaged one way per
case; every command that reads a replay file (summary, replay, project, plot) runs on each, under
a timeout, and must print exactly one line "zt-trace: error: trace FILE line N: FIELD VALUE:
expected ..." (or the file-level message for an empty or non-replay file) and exit 1. The cases:
a negative worker id, a worker id at or above the "# meta" line's workers, a rank at or above its
world, NaN, Inf, negative and too large times, an end before its start, a start before its
submission, a recompute mark other than 0 or 1, a duplicate id, a dependency on an id no task
has, a self-dependency, a cycle (a dependency on a later task), more or fewer dependencies than
announced, a kind name too long, a "# meta" value out of range (cores=nan, workers=0), a
"# meta" line after the tasks, a truncated last line, binary garbage in a line and as the whole
file, an empty file.

The replay is bounded on what passes: steps of zero length, and times near the largest accepted,
replay and summarise within the timeout, exit 0, and print no "nan" or "inf"; so do a trace of
100k tasks all ready at once and one of 40k steps recorded in reverse (no quadratic pass).

Usage: test_trace.py APPS_DIR MPIEXEC WORKDIR
"""
import os
import re

import faultlib as F

F.setup()
ZT, ZTT = F.prog("zt-train"), F.prog("zt-trace")
PREFIX = "zt-trace: error: "
TIMEOUT = 60  # generous: sanitizer builds are several times slower

trace_json = F.path("run.json")
p = F.run([ZT] + F.with_arg(F.tiny_run(), "--steps", "2") + ["--trace", trace_json], 120)
F.check("record a trace", p is not None and p.returncode == 0 and
        os.path.exists(F.path("run.ztr")), "zt-train --trace: %s" % (
            "hang" if p is None else "exit %d %s" % (p.returncode, p.stderr[-500:])))
with open(F.path("run.ztr")) as f:
    LINES = f.read().splitlines(True)
HEAD = 2  # the header and the "# meta" line
WORDS = [l.split() for l in LINES]  # column 1: id, 7: worker, 9-11: submit, start, end
RECOMPUTE, NDEPS = 17, 18  # columns of a version 4 line; the dependencies follow ndeps


def task_lines():
    return range(HEAD, len(LINES))


def with_deps():
    """the first task line with a dependency"""
    return next(i for i in task_lines() if int(WORDS[i][NDEPS]) > 0)


def changed(i, col, value):
    """LINES with column col of line i set to value"""
    w = list(WORDS[i])
    w[col] = value
    out = list(LINES)
    out[i] = " ".join(w) + "\n"
    return out


def write(name, lines_or_bytes):
    data = lines_or_bytes if isinstance(lines_or_bytes, bytes) else \
        "".join(lines_or_bytes).encode()
    with open(F.path(name), "wb") as f:
        f.write(data)
    return F.path(name)


def commands(path):
    return [("summary", [ZTT, "summary", path]), ("replay", [ZTT, "replay", path]),
            ("replay --workers 1", [ZTT, "replay", path, "--workers", "1"]),
            ("project", [ZTT, "project", path, "--ranks", "8"]),
            ("plot", [ZTT, "plot", path, "--out", F.path("plot")])]


def case(label, content, words):
    """every command on content: exit 1 and one line holding the file and words"""
    path = write(label.replace(" ", "_") + ".ztr", content)
    for name, cmd in commands(path):
        F.expect("%s: %s" % (label, name), cmd, 1, [path] + words, TIMEOUT, prefix=PREFIX)


# a task line in the first step submitted after time 0 (the first task submitted is at 0.000,
# and which line it lands on depends on the schedule), so a start of 0 is before its submission
i = next(k for k in task_lines() if k >= HEAD + 3 and float(WORDS[k][9]) > 0)
n = i + 1     # its line number
d = with_deps()
dep = int(WORDS[d][NDEPS + 1])
meta = LINES[1]

case("negative worker", changed(i, 7, "-1"), ["line %d:" % n, "worker -1: expected"])
case("worker at the meta count", changed(i, 7, re.search(r"workers=(\d+)", meta).group(1)),
     ["line %d:" % n, "worker", "expected"])
case("rank at the world size", changed(i, 0, "1"), ["line %d:" % n, "rank 1: expected"])
case("nan start", changed(i, 10, "nan"), ["line %d:" % n, "start_us nan: expected"])
case("inf end", changed(i, 11, "inf"), ["line %d:" % n, "end_us inf: expected"])
case("negative submit", changed(i, 9, "-5.000"), ["line %d:" % n, "submit_us -5.000: expected"])
case("huge end", changed(i, 11, "1e300"), ["line %d:" % n, "end_us 1e300: expected"])
case("nan cpu time", changed(i, 12, "nan"), ["line %d:" % n, "cpu_us nan: expected"])
case("end before start", changed(i, 11, "0.000"), ["line %d:" % n, "end_us 0.000: expected"])
case("start before submit", changed(i, 10, "0.000"), ["line %d:" % n, "start_us 0.000: expected"])
case("recompute 2", changed(i, RECOMPUTE, "2"), ["line %d:" % n, "recompute 2: expected 0 or 1"])
case("duplicate id", LINES + [LINES[i]],
     ["line %d:" % (len(LINES) + 1), "id %s: expected" % WORDS[i][1], "line %d" % n])
# a missing dependency: the task dep's line dropped; the first line that names it is reported
j = next(k for k in task_lines() if WORDS[k][0] == "0" and int(WORDS[k][1]) == dep)
first = next(k for k in task_lines() if WORDS[k][0] == "0" and str(dep) in WORDS[k][NDEPS + 1:])
case("missing dependency", LINES[:j] + LINES[j + 1:],
     ["line %d:" % (first + 1 if first < j else first), "dependency %d: expected" % dep])
case("self dependency", changed(d, NDEPS + 1, WORDS[d][1]),
     ["line %d:" % (d + 1), "dependency %s: expected" % WORDS[d][1], "itself"])
# a cycle: the dependency dep (line j) also waits for the task d (which waits for dep)
cyc = WORDS[j][:NDEPS] + [str(int(WORDS[j][NDEPS]) + 1)] + WORDS[j][NDEPS + 1:] + [WORDS[d][1]]
case("cycle", LINES[:j] + [" ".join(cyc) + "\n"] + LINES[j + 1:],
     ["line %d:" % (j + 1), "dependency %s: expected" % WORDS[d][1]])
case("more deps than announced", changed(d, NDEPS, "0"), ["line %d:" % (d + 1), "more listed"])
case("fewer deps than announced", changed(d, NDEPS, "9"), ["line %d:" % (d + 1), "fewer listed"])
case("long kind", changed(i, 2, "k" * 40), ["line %d:" % n, "kind", "expected"])
case("meta cores nan", [LINES[0], meta.replace(" cores=", " cores=nan x=")] + LINES[2:],
     ["line 2:", "cores=nan", "expected"])
case("meta workers 0", [LINES[0], re.sub(r"workers=\d+", "workers=0", meta)] + LINES[2:],
     ["line 2:", "workers=0", "expected"])
case("meta after tasks", LINES + [meta], ["line %d:" % (len(LINES) + 1), "# meta"])
case("truncated last line", LINES[:-1] + [LINES[-1][:len(LINES[-1]) // 2]],
     ["line %d:" % len(LINES), "truncated"])
case("garbage in a line", LINES[:i] + [LINES[i][:20] + "\x00\x01\xfe\x7f" + LINES[i][24:]] +
     LINES[i + 1:], ["line %d:" % n])
case("garbage file", bytes((k * 37 + 11) % 256 for k in range(4096)),
     ["not a zerotask replay file"])
case("empty file", b"", ["empty"])

# on what passes, bounded and finite: zero-length steps, and times near the largest accepted
zero = [LINES[0], meta] + [" ".join(w[:9] + ["0.000"] * 3 + w[12:]) + "\n" for w in WORDS[HEAD:]]
zero = [l for l in zero if l.split()[3:4] != ["2"]]  # one step: windows must start in order
big = [LINES[0], meta] + [" ".join(w[:9] + ["%.3f" % (9e14 + float(x)) for x in w[9:12]] +
                                   w[12:]) + "\n" for w in WORDS[HEAD:]]
for label, content in (("zero-length step", zero), ("times near the limit", big)):
    path = write(label.replace(" ", "_") + ".ztr", content)
    for name, cmd in commands(path)[:4] + [("summary --json", [ZTT, "summary", path, "--json"])]:
        q = F.run(cmd, TIMEOUT)
        F.check("%s: %s" % (label, name), q is not None and q.returncode == 0 and
                not re.search(r"\b(nan|inf)\b", q.stdout, re.I),
                "hang" if q is None else "exit %d, %r" % (q.returncode, q.stderr.strip() or
                                                           q.stdout[-200:]))
# large traces that pass, in bounded time (every sort, look-up and dispatch O(n log n)): 100k
# independent tasks submitted at once (a ready list of 100k under every policy), and 40k steps
# of one task each, recorded in reverse (a window per task, records out of order)
HDR = [LINES[0], "# meta world=1 ranks_per_node=1 cores=2 workers=2\n"]
flat = ["0 %d matmul_forward 1 0 0 -1 %d 0 0.000 %d.000 %d.500 0.5 0 8 8 0 0 0\n" % (k, k % 2, k, k)
        for k in range(1, 100001)]
steps = ["0 %d matmul_forward %d 0 0 -1 0 0 %d.000 %d.500 %d.900 0.5 0 8 8 0 0 %s\n" %
         (k, k, 10 * k, 10 * k, 10 * k, "1 %d" % (k - 1) if k > 1 else "0")
         for k in range(40000, 0, -1)]
for label, content in (("100k ready tasks", HDR + flat), ("40k steps", HDR + steps)):
    path = write(label.replace(" ", "_") + ".ztr", content)
    for name, cmd in commands(path)[:4] + [("replay --policy cp", commands(path)[2][1] +
                                            ["--policy", "cp"])]:
        q = F.run(cmd, TIMEOUT)
        F.check("%s: %s" % (label, name), q is not None and q.returncode == 0,
                "no answer after %d s" % TIMEOUT if q is None else "exit %d %s" % (
                    q.returncode, q.stderr.strip()))
F.finish()
