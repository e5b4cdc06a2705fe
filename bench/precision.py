#!/usr/bin/env python3
"""bench/precision.py: fp32 against bf16 and fp16 training, side by side in one run.

For each model ("small" and "gpt2-124M", bench/configs) and each placement:
  mem    1 rank, ZeRO stage 0, everything in memory
  z2x2   2 ranks (mpirun, STARPU_NCPU=1 each), ZeRO stage 2 (gradients reduce-scattered,
         parameters all-gathered)
  nvme   1 rank, ZeRO stage 1 with the optimizer state on NVMe (offload_optimizer nvme in DIR)
  inf    1 rank, ZeRO stage 3 with optimizer state and parameters on NVMe (offload_param too)
it trains each precision in turn (the order rotates with the repetition) and reports:
  ms/step      median of the steps after the first (an untraced run of --steps steps)
  ratio        ms/step over fp32's in the same repetition
  comm MB      bytes of the collective tasks' buffers in step 2 on rank 0 (zt-train --trace;
               each rank sends (N-1)/N of them): 16-bit gradients and parameters halve it
  swap MB      bytes the swap tasks moved in step 2: the optimizer's (fp32 in every precision;
               with 16-bit parameters on NVMe the fp32 master weights move with the moments)
               and the stage-3 gathers' parameter reads (16-bit: half of fp32's)
  loss         the last step's loss (the precisions start from the same weights)
under each OpenBLAS environment (default, and OPENBLAS_CORETYPE=Haswell as this machine sets
it). Writes the table to stdout and, with --out, JSON.

With --curve N: also N steps of "small" on the demo corpus in each precision (default env),
and the final loss (mean of the last 10 steps) of bf16 and fp16 against fp32's.

Usage: python3 bench/precision.py [--models small,gpt2-124M] [--modes mem,z2x2,nvme,inf]
       [--steps-small 6] [--steps-124m 3] [--reps 1] [--envs default,Haswell] [--dir D]
       [--curve 200] [--out results.json]
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys

from benchlib import openblas_envs

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PRECS = ("fp32", "bf16", "fp16")
COMM = ("comm_allreduce", "comm_reduce_scatter", "comm_allgather")
SWAP = ("swap_in", "swap_out")


def config(model, mode, prec, d):
    ds = json.load(open(os.path.join(HERE, "configs", model + "_ds.json")))
    if mode == "z2x2":
        ds["train_micro_batch_size_per_gpu"] = ds["train_batch_size"] // 2
        ds["zero_optimization"] = {"stage": 2}
    elif mode in ("nvme", "inf"):
        nv = os.path.join(d, "nvme")
        os.makedirs(nv, exist_ok=True)
        z = {"stage": 1 if mode == "nvme" else 3,
             "offload_optimizer": {"device": "nvme", "nvme_path": nv}}
        if mode == "inf":
            z["offload_param"] = {"device": "nvme", "nvme_path": nv}
        ds["zero_optimization"] = z
    if prec != "fp32":
        ds[prec] = {"enabled": True}
    p = os.path.join(d, "%s_%s_%s.json" % (model, mode, prec))
    with open(p, "w") as f:
        json.dump(ds, f)
    return p


def run(a, env, model, mode, ds, steps, extra):
    ranks = 2 if mode == "z2x2" else 1
    cmd = [a.zt, "--ds-config", ds, "--model", os.path.join(HERE, "configs", model + "_model.json"),
           "--data", a.data, "--steps", str(steps), "--quiet"] + extra
    if ranks > 1:
        cmd = [a.mpiexec, "--allow-run-as-root", "--oversubscribe", "-np", str(ranks), "-x",
               "STARPU_NCPU=1", "-x", "STARPU_SILENT=1"] + \
              (["-x", "OPENBLAS_CORETYPE"] if "OPENBLAS_CORETYPE" in env else []) + cmd
    e = dict(env, STARPU_NCPU="2" if ranks == 1 else "1", STARPU_SILENT="1")
    p = subprocess.run(cmd, capture_output=True, text=True, env=e, timeout=3600)
    if p.returncode != 0:
        sys.exit("precision: %s %s failed (exit %d): %s" % (model, mode, p.returncode,
                                                           (p.stderr or p.stdout)[-1500:]))


def measure(a, env, model, mode, prec, d, steps):
    ds = config(model, mode, prec, d)
    log = os.path.join(d, "log.jsonl")
    run(a, env, model, mode, ds, steps, ["--log", log])
    recs = [json.loads(l) for l in open(log)]
    ms = statistics.median([r["ms"] for r in recs[1:]])
    trace = os.path.join(d, "trace.json")
    run(a, env, model, mode, ds, 2, ["--trace", trace])
    comm = swap = gath = 0
    with open(os.path.join(d, "trace.ztr")) as f:
        for line in f:
            if line.startswith("#"):
                continue
            x = line.split()
            rank, kind, step = int(x[0]), x[2], int(x[3])
            if rank != 0 or step != 2:
                continue
            b = max(int(x[14]), int(x[15]))
            if kind in COMM:
                comm += b
            elif kind == "swap_in" and int(x[16]) > 0:  # a gather's read (prefetch priority)
                gath += b
            elif kind in SWAP:
                swap += b
    return {"ms": ms, "comm_mb": comm / 1e6, "swap_mb": swap / 1e6, "gather_mb": gath / 1e6,
            "loss": recs[-1]["loss"], "skipped": sum(r.get("skipped", 0) for r in recs)}


def curve(a, steps):
    """final losses (mean of the last 10 steps) of `steps` steps of small per precision"""
    env = openblas_envs("default")[0][1]
    out = {}
    for p in PRECS:
        ds = config("small", "mem", p, a.dir)
        log = os.path.join(a.dir, "curve.jsonl")
        run(a, env, "small", "mem", ds, steps, ["--log", log])
        recs = [json.loads(l) for l in open(log)]
        out[p] = sum(r["loss"] for r in recs[-10:]) / min(10, len(recs))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--zt", default=os.path.join(ROOT, "build", "apps", "zt-train"))
    ap.add_argument("--mpiexec", default=shutil.which("mpirun") or "mpirun")
    ap.add_argument("--data", default=os.path.join(ROOT, "data", "fortunes.bin"))
    ap.add_argument("--models", default="small,gpt2-124M")
    ap.add_argument("--modes", default="mem,z2x2,nvme,inf")
    ap.add_argument("--curve", type=int, default=0)
    ap.add_argument("--steps-small", type=int, default=6)
    ap.add_argument("--steps-124m", type=int, default=3)
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--envs", default="default,Haswell")
    ap.add_argument("--dir", default="/work/.bench_precision")
    ap.add_argument("--out")
    a = ap.parse_args()
    for f in (a.zt, a.data):
        if not os.path.exists(f):
            sys.exit("precision: %s not found (build, and scripts/prepare-demo.sh)" % f)
    shutil.rmtree(a.dir, ignore_errors=True)
    os.makedirs(a.dir)
    rows = []
    print("zerotask bench/precision: %s; modes %s; %d repetition(s)" % (a.models, a.modes, a.reps))
    for ename, env in openblas_envs(a.envs):
        for model in a.models.split(","):
            steps = a.steps_small if model == "small" else a.steps_124m
            for mode in a.modes.split(","):
                res = {p: [] for p in PRECS}
                for rep in range(a.reps):
                    order = PRECS[rep % 3:] + PRECS[:rep % 3]
                    got = {p: measure(a, env, model, mode, p, a.dir, steps) for p in order}
                    for p in PRECS:
                        got[p]["ratio"] = got[p]["ms"] / got["fp32"]["ms"]
                        res[p].append(got[p])
                for p in PRECS:
                    med = {k: statistics.median([r[k] for r in res[p]]) for k in res[p][0]}
                    row = dict(env=ename, model=model, mode=mode, precision=p, **med)
                    rows.append(row)
                    print("%-7s %-9s %-4s %-4s  %9.1f ms/step  x%.3f  comm %8.2f MB  swap %8.2f "
                          "MB  gathers %7.2f MB  loss %.4f%s" % (
                              ename, model, mode, p, row["ms"], row["ratio"], row["comm_mb"],
                              row["swap_mb"], row["gather_mb"], row["loss"],
                              "  (%d skipped)" % row["skipped"] if row["skipped"] else ""),
                          flush=True)
    print("\n| env | model | placement | precision | ms/step | vs fp32 | comm MB/step | optimizer "
          "swap MB/step | gather reads MB/step | last loss |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print("| %s | %s | %s | %s | %.1f | %.3f | %.2f | %.2f | %.2f | %.4f |" % (
            r["env"], r["model"], r["mode"], r["precision"], r["ms"], r["ratio"], r["comm_mb"],
            r["swap_mb"], r["gather_mb"], r["loss"]))
    result = {"rows": rows}
    if a.curve > 0:
        c = curve(a, a.curve)
        result["curve"] = c
        print("\n%d steps of small on the demo corpus, final loss (mean of the last 10): fp32 "
              "%.4f, bf16 %.4f (%+.2f%%), fp16 %.4f (%+.2f%%)" % (
                  a.curve, c["fp32"], c["bf16"], 100 * (c["bf16"] / c["fp32"] - 1), c["fp16"],
                  100 * (c["fp16"] / c["fp32"] - 1)))
    if a.out:
        with open(a.out, "w") as f:
            json.dump(result, f, indent=1)
    shutil.rmtree(a.dir, ignore_errors=True)


if __name__ == "__main__":
    main()
