#!/usr/bin/env python3
"""bench/trace_overhead.py: what `zt-train --trace` costs a step (issue 6: under 3%).

The same training run with and without --trace, alternated in one session (traced, untraced,
traced, ...) so that the machine's drift hits both; per run the mean step time of the steps
after the first; the ratio traced / untraced of the medians over the repetitions, per OpenBLAS
environment (benchlib.openblas_envs). Also the time zt-train spends writing the trace at exit
(not part of a step) and the file sizes.

Usage: python3 bench/trace_overhead.py [--zt build/apps/zt-train] [--model M --ds D]
           [--steps 6] [--reps 3] [--ranks 1] [--envs default,Haswell]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import benchlib


def run(args, env, ranks, trace, work):
    log = os.path.join(work, "log.jsonl")
    cmd = [args.zt, "--ds-config", args.ds, "--model", args.model, "--data", args.data,
           "--steps", str(args.steps), "--log", log, "--quiet"]
    if trace:
        cmd += ["--trace", os.path.join(work, "trace.json")]
    if ranks > 1:
        cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(ranks), "-x",
               "STARPU_NCPU=1"] + [x for k in ("OPENBLAS_CORETYPE",) if k in env
                                   for x in ("-x", "%s=%s" % (k, env[k]))] + cmd
    t0 = time.time()
    p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    wall = time.time() - t0
    if p.returncode != 0:
        sys.exit("zt-train failed (%d): %s" % (p.returncode, p.stderr[-2000:]))
    with open(log) as f:
        ms = [json.loads(l)["ms"] for l in f][1:]
    return statistics.mean(ms), wall


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    benchlib.train_args(ap)
    ap.add_argument("--ranks", type=int, default=1)
    args = ap.parse_args()
    if not os.path.exists(args.data):
        sys.exit("no %s: run scripts/prepare-demo.sh first" % args.data)
    if args.ranks > 1:  # the batch rule: batch = micro x accumulation x world
        with open(args.ds) as f:
            ds = json.load(f)
        ds["train_batch_size"] = ds["train_micro_batch_size_per_gpu"] * args.ranks
        fd, args.ds = tempfile.mkstemp(suffix=".json")
        with os.fdopen(fd, "w") as f:
            json.dump(ds, f)
    print("trace overhead: %s, %d steps (mean of steps 2..%d), %d rank(s), %d repetitions, "
          "alternated" % (os.path.basename(args.model), args.steps, args.steps, args.ranks,
                          args.reps))
    print("| OpenBLAS env | untraced ms/step | traced ms/step | traced / untraced | "
          "runs (untraced / traced) | trace.json MB | trace.ztr MB |")
    print("|---|---|---|---|---|---|---|")
    for name, env in benchlib.openblas_envs(args.envs):
        env = dict(env, STARPU_SILENT="1")
        if args.ranks == 1:
            env.setdefault("STARPU_NCPU", "2")
        plain, traced = [], []
        with tempfile.TemporaryDirectory() as work:
            sizes = (0, 0)
            for _ in range(args.reps):
                plain.append(run(args, env, args.ranks, False, work)[0])
                traced.append(run(args, env, args.ranks, True, work)[0])
                sizes = tuple(os.path.getsize(os.path.join(work, f)) / 1e6
                              for f in ("trace.json", "trace.ztr"))
        p, t = statistics.median(plain), statistics.median(traced)
        print("| %s | %.1f | %.1f | %.3f | %s / %s | %.1f | %.1f |" % (
            name, p, t, t / p, " ".join("%.0f" % x for x in plain),
            " ".join("%.0f" % x for x in traced), sizes[0], sizes[1]), flush=True)


if __name__ == "__main__":
    main()
