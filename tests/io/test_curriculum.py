#!/usr/bin/env python3
"""tests/io/test_curriculum.py: zerotask's curriculum schedule equals DeepSpeed's at every step.

Runs curriculum_table (tests/io/curriculum_table.c) over a set of legacy "curriculum_learning"
sections and compares each step's sequence length with the same schedule written here in Python
from DeepSpeed's formulas (deepspeed/runtime/data_pipeline/curriculum_scheduler.py; not imported,
not copied), driven as the legacy engine drives it: update_difficulty(global_steps + 1) before the
forward of every step, so 1-based step s gets update_difficulty(s) after the calls of steps
1..s - 1. When a DeepSpeed virtualenv is found (ZT_DEEPSPEED_VENV, else
<source>/bench/deepspeed/.venv) DeepSpeed's own CurriculumScheduler is compared too; without one
that part is skipped.

Usage: test_curriculum.py CURRICULUM_TABLE [SOURCE_DIR]
"""
import json
import math
import os
import subprocess
import sys

TABLE = sys.argv[1]
SOURCE = sys.argv[2] if len(sys.argv) > 2 else os.path.join(os.path.dirname(__file__), "..", "..")


def linear(lo, hi, total, step):
    sc = {"total_curriculum_step": total, "difficulty_step": step}
    return {"min_difficulty": lo, "max_difficulty": hi, "schedule_type": "fixed_linear",
            "schedule_config": sc}


def root(lo, hi, total, step, degree):
    sc = {"total_curriculum_step": total, "difficulty_step": step, "root_degree": degree}
    return {"min_difficulty": lo, "max_difficulty": hi, "schedule_type": "fixed_root",
            "schedule_config": sc}


def discrete(lo, hi, difficulty, max_step):
    return {"min_difficulty": lo, "max_difficulty": hi, "schedule_type": "fixed_discrete",
            "schedule_config": {"difficulty": difficulty, "max_step": max_step}}


# (name, section without enabled/curriculum_type, steps)
CASES = [
    ("linear step 8", linear(8, 1024, 100, 8), 150),
    ("linear step 1", linear(1, 100, 37, 1), 60),
    ("linear step 64, max not a multiple", linear(64, 1000, 50, 64), 120),
    ("linear step 3", linear(3, 100, 7, 3), 40),
    ("linear one-step curriculum", linear(8, 64, 1, 8), 5),
    ("linear long", linear(8, 1024, 30000, 8), 32000),
    ("linear min == max", linear(64, 64, 100, 8), 20),
    ("root 2", root(8, 2048, 1000, 8, 2), 1200),
    ("root 3", root(16, 512, 333, 16, 3), 400),
    ("root 3 step 1", root(1, 1000, 997, 1, 3), 1100),
    ("root 2.5", root(64, 1024, 500, 64, 2.5), 600),
    ("root 1 (linear)", root(8, 1024, 123, 8, 1), 150),
    ("root 7 step 1", root(5, 4096, 2000, 1, 7), 2100),
    ("root 0.5 (square)", root(8, 512, 300, 8, 0.5), 320),
    # double rounding decides the floor: exact arithmetic gives 30 at step 29, Python's doubles
    # (29 / 100 = 0.29 rounded, times 100 is 28.999999999999996) give 29
    ("linear, rounding at step 29", linear(1, 101, 100, 1), 110),
    # (1 / 8) ** (1 / 3) is 0.5 with pow but 0.49999999999999994 with glibc's cbrt
    ("root 3, pow not cbrt", root(1, 1001, 8, 1, 3), 10),
    ("root 3, pow not cbrt, step 8", root(8, 4096, 64, 8, 3), 70),
    # exact arithmetic gives 926 at step 6845, doubles 925
    ("root 2, rounding at step 6845", root(1, 1001, 8000, 1, 2), 8100),
    ("discrete", discrete(8, 64, [8, 16, 32, 64], [3, 10, 20]), 30),
    ("discrete, down after max", discrete(8, 64, [16, 64, 32], [2, 4]), 10),
    ("discrete, never at max", discrete(8, 64, [32, 16, 48], [5, 9]), 15),
    ("discrete min == max", discrete(32, 32, [8, 16], [3]), 8),
]


def ds_get_difficulty(cl, g):
    """DeepSpeed's get_difficulty(global_steps) for the section cl, from its formulas"""
    sc = cl["schedule_config"]
    lo, hi = cl["min_difficulty"], cl["max_difficulty"]
    if cl["schedule_type"] == "fixed_discrete":
        steps, values = sc["max_step"], sc["difficulty"]
        later = [v for m, v in zip(steps, values) if g <= m]
        return later[0] if later else values[-1]
    degree = sc["root_degree"] if cl["schedule_type"] == "fixed_root" else 1
    # Python doubles: float(g) / T, then ** (C's pow), a multiply and an add, then floor
    frac = (float(g) / sc["total_curriculum_step"]) ** (1.0 / degree)
    x = math.floor(frac * (hi - lo) + lo)
    x = x - x % sc["difficulty_step"]
    return x if x < hi else hi


def ds_run(cl, n):
    """the difficulty of steps 1..n: current starts at min and follows get_difficulty while it
    is below max"""
    current, out = cl["min_difficulty"], []
    for s in range(1, n + 1):
        if current < cl["max_difficulty"]:
            current = ds_get_difficulty(cl, s)
        out.append(current)
    return out


DS_SCRIPT = r"""
import json, sys
from deepspeed.runtime.data_pipeline.curriculum_scheduler import CurriculumScheduler
out = []
for cl, n in json.load(sys.stdin):
    sched = CurriculumScheduler(cl)
    out.append([sched.update_difficulty(s) for s in range(1, n + 1)])
print("tables: " + json.dumps(out))  # DeepSpeed logs to stdout too
"""


def deepspeed_tables():
    """DeepSpeed's own tables, or None when no DeepSpeed virtualenv is found"""
    venv = os.environ.get("ZT_DEEPSPEED_VENV") or os.path.join(SOURCE, "bench", "deepspeed",
                                                                ".venv")
    python = os.path.join(venv, "bin", "python")
    if not os.access(python, os.X_OK):
        return None
    env = dict(os.environ, DS_ACCELERATOR="cpu")
    todo = json.dumps([[cl, n] for _, cl, n in CASES])
    r = subprocess.run([python, "-c", DS_SCRIPT], input=todo, capture_output=True, text=True,
                       env=env, timeout=300)
    if r.returncode != 0:
        sys.exit("FAIL: DeepSpeed's CurriculumScheduler (%s): %s" % (python,
                                                                      r.stderr.strip()[-2000:]))
    lines = [x for x in r.stdout.splitlines() if x.startswith("tables: ")]
    if not lines:
        sys.exit("FAIL: DeepSpeed's CurriculumScheduler printed no tables: %s" % r.stdout[-2000:])
    return json.loads(lines[-1][len("tables: "):])


def zerotask_tables():
    """curriculum_table's lines, one per case, as lists of ints"""
    n = max(steps for _, _, steps in CASES)
    args = [TABLE, str(n)]
    for _, cl, _ in CASES:
        section = dict(cl, enabled=True, curriculum_type="seqlen")
        args.append(json.dumps({"train_batch_size": 8, "curriculum_learning": section}))
    r = subprocess.run(args, capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        sys.exit("FAIL: %s exited %d: %s" % (TABLE, r.returncode, r.stderr.strip()))
    lines = r.stdout.splitlines()
    if len(lines) != len(CASES):
        sys.exit("FAIL: %s printed %d lines for %d configs" % (TABLE, len(lines), len(CASES)))
    tables = []
    for (name, _, steps), line in zip(CASES, lines):
        if line.startswith("error: "):
            sys.exit("FAIL: %s: zerotask refused the config: %s" % (name, line))
        tables.append([int(v) for v in line.split()][:steps])
    return tables


def compare(who, got, want):
    """count of cases whose tables differ, each reported at its first differing step"""
    bad = 0
    for (name, _, _), g, w in zip(CASES, got, want):
        if g != w:
            s = next((i for i, (a, b) in enumerate(zip(g, w)) if a != b), min(len(g), len(w)))
            print("FAIL %s: zerotask vs %s differ first at step %d: %s vs %s"
                  % (name, who, s + 1, g[s:s + 5], w[s:s + 5]))
            bad += 1
    return bad


def main():
    ours = zerotask_tables()
    bad = compare("DeepSpeed's formulas", ours, [ds_run(cl, n) for _, cl, n in CASES])
    theirs = deepspeed_tables()
    if theirs is not None:
        bad += compare("DeepSpeed's CurriculumScheduler", ours, theirs)
    steps = sum(n for _, _, n in CASES)
    if bad:
        sys.exit("test_curriculum.py: %d of %d schedules differ" % (bad, len(CASES)))
    print("test_curriculum.py: ok (%d schedules, %d steps%s)"
          % (len(CASES), steps, ", DeepSpeed's scheduler too" if theirs is not None else ""))


if __name__ == "__main__":
    main()
