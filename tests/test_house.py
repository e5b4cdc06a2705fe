#!/usr/bin/env python3
"""tests/test_house.py: the house keeps its shape (STYLE.md sections 3-4, docs/architecture.md).

Checks every C/CUDA source of the library and the programs:
  - layering: a file includes only headers of its own folder or of the folders below it
    (kernels, io -> nothing; sched -> io; tasks -> sched, io, kernels; graph -> tasks, sched, io;
    apps -> the installed headers); graph/ makes no starpu_ call and includes no kernels header;
    io/ and kernels/ never include starpu.h;
  - size: no file of io/, sched/, tasks/, graph/, apps/ above 900 lines; no function above 120
    lines; no line above 100 columns (kernels/ included).
Each finding is one line naming the file, the line and the rule; the test fails on any.

Usage: test_house.py SOURCE_DIR
"""
import os
import re
import sys

ROOT = sys.argv[1]
LAYERS = ["kernels", "io", "sched", "tasks", "graph", "apps"]
ALLOWED = {"kernels": {"kernels"}, "io": {"io"}, "sched": {"sched", "io"},
           "tasks": {"tasks", "sched", "io", "kernels"},
           "graph": {"graph", "tasks", "sched", "io"},
           "apps": {"apps", "graph", "tasks", "sched", "io"}}
MAX_FILE, MAX_FUNC, MAX_COL = 900, 120, 100
SOURCES = (".c", ".h", ".cu", ".cuh")

bad = []


def sources(folder):
    for dirpath, _, files in os.walk(os.path.join(ROOT, folder)):
        for f in sorted(files):
            if f.endswith(SOURCES):
                yield os.path.join(dirpath, f)


# where each of our headers lives
home = {}
for layer in LAYERS:
    for path in sources(layer):
        if path.endswith((".h", ".cuh")):
            home[os.path.basename(path)] = layer


def rel(path):
    return os.path.relpath(path, ROOT)


def check_includes(layer, path, lines):
    for i, line in enumerate(lines, 1):
        m = re.match(r'\s*#\s*include\s*[<"]([^>"]+)[>"]', line)
        if not m:
            continue
        name = m.group(1)
        if name == "starpu.h" and layer in ("io", "kernels", "graph"):
            bad.append("%s:%d: %s/ includes starpu.h" % (rel(path), i, layer))
        owner = home.get(os.path.basename(name))
        if owner and owner not in ALLOWED[layer]:
            bad.append("%s:%d: %s/ includes %s from %s/ (a dependency up the layers)"
                       % (rel(path), i, layer, name, owner))


def check_starpu_calls(path, lines):
    for i, line in enumerate(lines, 1):
        code = line.split("//")[0]
        if re.search(r"\bstarpu_\w+\s*\(", code) and not code.lstrip().startswith("*"):
            bad.append("%s:%d: graph/ calls StarPU directly (go through tasks/)" % (rel(path), i))


def functions(lines):
    """(name, first line, length) of each function defined at file scope: a line at column 0
    that opens a definition, up to the closing brace at column 0"""
    start = name = None
    for i, line in enumerate(lines, 1):
        if start is None:
            m = re.match(r"^[A-Za-z_][\w \*]*?\b(\w+)\s*\(", line)
            head = line.split("(")[0]
            if m and not line.rstrip().endswith(";") and not line.startswith("typedef") and \
                    "=" not in head and not line.startswith("#"):
                start, name = i, m.group(1)
                if line.rstrip().endswith("}"):  # a one-line function
                    start = None
            continue
        if line.startswith("}"):
            yield name, start, i - start + 1
            start = None
        elif line.rstrip().endswith(";") and line[:1] not in (" ", "\t", "") and "(" in line:
            start = None  # a prototype spread over lines


for layer in LAYERS:
    for path in sources(layer):
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = f.read().split("\n")
        check_includes(layer, path, lines)
        if layer == "graph":
            check_starpu_calls(path, lines)
        n = len(lines) - (lines[-1] == "")
        if layer != "kernels" and n > MAX_FILE:
            bad.append("%s: %d lines (at most %d)" % (rel(path), n, MAX_FILE))
        for i, line in enumerate(lines, 1):
            if len(line) > MAX_COL:
                bad.append("%s:%d: %d columns (at most %d)" % (rel(path), i, len(line), MAX_COL))
        for name, first, length in functions(lines):
            if length > MAX_FUNC:
                bad.append("%s:%d: function %s is %d lines (at most %d)"
                           % (rel(path), first, name, length, MAX_FUNC))

for b in bad:
    print(b)
print("test_house: %s" % ("%d finding(s)" % len(bad) if bad else "the house keeps its shape"))
sys.exit(1 if bad else 0)
