#!/usr/bin/env python3
"""bench/sched_priority.py: what zerotask's critical-path priorities (ZT_SCHED_PRIORITY, issue 6)
do to a step, per StarPU policy that honours priorities.

Per case and policy, the same training run with ZT_SCHED_PRIORITY=1 and =0, alternated in one
session (on, off, on, ...) so the machine's drift hits both; per run the mean step time of the
steps after the first; printed: the medians and the ratio on / off (below 1: the priorities
help). Losses must be bit-identical between the two (checked: priorities reorder, never change).

Cases: "s0" one rank, stage 0, 2 workers; "s2x2" two ranks, stage 2 (reduce-scatter and
all-gather per bucket); "s3x2" two ranks, stage 3 with a small live-parameter window (the
backward gathers again); "s3nvme" one rank, stage 3 with optimizer state and parameters on NVMe
(swap I/O queue ordered by priority).

Usage: python3 bench/sched_priority.py [--zt build/apps/zt-train] [--model M] [--steps 6]
           [--reps 3] [--cases s0,s2x2,s3x2,s3nvme] [--policies prio,dmdas,lws]
           [--envs default,Haswell] [--nvme DIR]
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

import benchlib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def ds_for(case, base, nvme):
    d = dict(base)
    micro = d["train_micro_batch_size_per_gpu"]
    ranks = 2 if case.endswith("x2") else 1
    d["train_batch_size"] = micro * ranks
    z = {"s0": {"stage": 0},
         "s2x2": {"stage": 2, "reduce_bucket_size": 2000000},
         "s3x2": {"stage": 3, "reduce_bucket_size": 2000000,
                  "stage3_max_live_parameters": 3000000,
                  "stage3_prefetch_bucket_size": 3000000},
         "s3nvme": {"stage": 3, "offload_optimizer": {"device": "nvme", "nvme_path": nvme},
                    "offload_param": {"device": "nvme", "nvme_path": nvme}}}[case]
    d["zero_optimization"] = z
    return d, ranks

def run(args, cfg, ranks, env, work):
    log = os.path.join(work, "log.jsonl")
    cmd = [args.zt, "--ds-config", cfg, "--model", args.model, "--data", args.data,
           "--steps", str(args.steps), "--log", log, "--quiet"]
    if ranks > 1:
        cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(ranks), "-x",
               "STARPU_NCPU=1"] + [x for k in ("OPENBLAS_CORETYPE", "STARPU_SCHED",
                                                "ZT_SCHED_PRIORITY") if k in env
                                   for x in ("-x", "%s=%s" % (k, env[k]))] + cmd
    p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit("zt-train failed (%d): %s" % (p.returncode, p.stderr[-2000:]))
    with open(log) as f:
        recs = [json.loads(l) for l in f]
    return statistics.mean(r["ms"] for r in recs[1:]), [r["loss"] for r in recs]

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    benchlib.train_args(ap)
    ap.add_argument("--cases", default="s0,s2x2,s3x2,s3nvme")
    ap.add_argument("--policies", default="prio,dmdas,lws")
    ap.add_argument("--nvme", default=os.path.join(ROOT, "build", "bench-nvme"))
    args = ap.parse_args()
    if not os.path.exists(args.data):
        sys.exit("no %s: run scripts/prepare-demo.sh first" % args.data)
    with open(args.ds) as f:
        base = json.load(f)
    os.makedirs(args.nvme, exist_ok=True)
    print("critical-path priorities: %s, %d steps (mean of steps 2..%d), %d repetitions, "
          "alternated" % (os.path.basename(args.model), args.steps, args.steps, args.reps))
    print("| case | policy | OpenBLAS env | priorities on ms/step | off ms/step | on / off | "
          "runs (on / off) | losses identical |")
    print("|---|---|---|---|---|---|---|---|")
    for case in args.cases.split(","):
        ds, ranks = ds_for(case, base, args.nvme)
        with tempfile.TemporaryDirectory() as work:
            cfg = os.path.join(work, "ds.json")
            with open(cfg, "w") as f:
                json.dump(ds, f)
            for pol in args.policies.split(","):
                for name, env in benchlib.openblas_envs(args.envs):
                    env = dict(env, STARPU_SILENT="1", STARPU_SCHED=pol)
                    if ranks == 1:
                        env.setdefault("STARPU_NCPU", "2")
                    on, off, same = [], [], True
                    for _ in range(args.reps):
                        a, la = run(args, cfg, ranks, dict(env, ZT_SCHED_PRIORITY="1"), work)
                        b, lb = run(args, cfg, ranks, dict(env, ZT_SCHED_PRIORITY="0"), work)
                        on.append(a)
                        off.append(b)
                        same = same and la == lb
                    m1, m0 = statistics.median(on), statistics.median(off)
                    print("| %s | %s | %s | %.1f | %.1f | %.3f | %s / %s | %s |" % (
                        case, pol, name, m1, m0, m1 / m0, " ".join("%.0f" % x for x in on),
                        " ".join("%.0f" % x for x in off), "yes" if same else "NO"),
                        flush=True)
    shutil.rmtree(args.nvme, ignore_errors=True)

if __name__ == "__main__":
    main()
