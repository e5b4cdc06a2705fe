#!/usr/bin/env python3
"""bench/offload_overlap.py: step time in memory vs with optimizer state (and parameters) on NVMe.

A gpt2-124M-shaped model (bench/configs/gpt2-124M_*.json), one rank, in one run, alternating:
  mem-s1    ZeRO stage 1, everything in host memory
  nvme-s1   stage 1, offload_optimizer nvme            (exp_avg, exp_avg_sq on disk)
  mem-s3    stage 3 in memory
  nvme-s3   stage 3, offload_optimizer + offload_param nvme (parameter shards on disk too)
For each: median ms/step over the steps after the first, the bytes moved per step, and from the
trace (--trace; transfers are recorded on the I/O-thread tracks) the swap time and the fraction
of it hidden behind compute (I/O intervals overlapping any worker's task). Ratios: nvme-s1 /
mem-s1 and nvme-s3 / mem-s3 (target <= 1.15 when the bytes take less time than the compute at
fio bandwidth). Run under both OpenBLAS environments (default and OPENBLAS_CORETYPE=Haswell).

Usage: python3 bench/offload_overlap.py [--build build] [--dir /work/.bench_offload]
       [--steps 4] [--reps 1] [--data data/fortunes.bin] [--envs default,Haswell]
       [--modes mem-s1,nvme-s1,mem-s3,nvme-s3] [--buffer-count N] [--thread-count N]
--buffer-count sets offload_optimizer.buffer_count and --thread-count aio.thread_count (else
the config defaults: "auto" (as many buffers as ZT_SWAP_BUFFER_MEM, 512M, holds) and 1).
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


def intervals_union(iv):
    iv = sorted(iv)
    out = []
    for a, b in iv:
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return out


def overlap(a, u):
    """length of interval a covered by the sorted disjoint union u"""
    s = 0.0
    for x, y in u:
        if y <= a[0]:
            continue
        if x >= a[1]:
            break
        s += min(a[1], y) - max(a[0], x)
    return s


def trace_io(path, skip_step=1):
    with open(path) as f:
        ev = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
    io = [e for e in ev if e["tid"] >= 1000 and e["args"]["step"] > skip_step]
    comp = [e for e in ev if e["tid"] < 1000 and e["args"]["step"] > skip_step and
            e["name"] not in ("swap_in", "swap_out")]
    u = intervals_union([(e["ts"], e["ts"] + e["dur"]) for e in comp])
    tot = sum(e["dur"] for e in io)
    hid = sum(overlap((e["ts"], e["ts"] + e["dur"]), u) for e in io)
    nbytes = sum(e["args"]["bytes"] for e in io)
    steps = len({e["args"]["step"] for e in io}) or 1
    return tot / 1e3 / steps, (hid / tot if tot else 1.0), nbytes / steps


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--dir", default="/work/.bench_offload")
    ap.add_argument("--data", default=os.path.join(ROOT, "data", "fortunes.bin"))
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--envs", default="default,Haswell")
    ap.add_argument("--modes", default="mem-s1,nvme-s1,mem-s3,nvme-s3")
    ap.add_argument("--buffer-count", type=int)
    ap.add_argument("--thread-count", type=int)
    a = ap.parse_args()
    zt = os.path.join(a.build, "apps", "zt-train")
    os.makedirs(a.dir, exist_ok=True)
    with open(os.path.join(HERE, "configs", "gpt2-124M_ds.json")) as f:
        base = json.load(f)
    model = os.path.join(HERE, "configs", "gpt2-124M_model.json")
    nv = {"device": "nvme", "nvme_path": a.dir}
    nvo = dict(nv)
    if a.buffer_count:
        nvo["buffer_count"] = a.buffer_count
    if a.thread_count:
        base["aio"] = dict(base.get("aio", {}), thread_count=a.thread_count)
    modes = {
        "mem-s1": {"stage": 1},
        "nvme-s1": {"stage": 1, "offload_optimizer": dict(nvo)},
        "mem-s3": {"stage": 3},
        "nvme-s3": {"stage": 3, "offload_optimizer": dict(nvo), "offload_param": dict(nv)},
    }
    for k in list(modes):
        if k not in a.modes.split(","):
            del modes[k]
    if any("mem-" + k.split("-")[1] not in modes for k in modes):
        sys.exit("--modes: each nvme-sN needs its mem-sN")
    cfgs = {}
    for k, z in modes.items():
        d = dict(base, zero_optimization=z, steps_per_print=1)
        cfgs[k] = os.path.join(a.dir, k + "_ds.json")
        with open(cfgs[k], "w") as f:
            json.dump(d, f)
    envs = openblas_envs(a.envs)
    print("zerotask offload_overlap: gpt2-124M shape, 1 rank, STARPU_NCPU=2, %d steps, "
          "offload_optimizer.buffer_count %s, aio.thread_count %s"
          % (a.steps, a.buffer_count or "auto (default)", a.thread_count or "1 (default)"))
    for ename, env in envs:
        env = dict(env, STARPU_NCPU="2", STARPU_SILENT="1")
        res = {k: [] for k in modes}
        io = {}
        for _ in range(a.reps):
            for k in modes:
                log = os.path.join(a.dir, k + ".jsonl")
                tr = os.path.join(a.dir, k + "_trace.json")
                cmd = [zt, "--ds-config", cfgs[k], "--model", model, "--data", a.data,
                       "--steps", str(a.steps), "--log", log, "--quiet", "--trace", tr]
                p = subprocess.run(cmd, env=env, capture_output=True, text=True)
                if p.returncode != 0:
                    sys.exit("zt-train %s failed:\n%s" % (k, p.stderr[-2000:]))
                with open(log) as f:
                    ms = [json.loads(l)["ms"] for l in f][1:]
                res[k].append(statistics.median(ms))
                if k.startswith("nvme"):
                    io[k] = trace_io(tr)
                os.unlink(tr)
        print("\nOpenBLAS env: %s" % ename)
        print("| mode | ms/step | ratio to in-memory | swap MB/step | swap ms/step | hidden |")
        print("|---|---|---|---|---|---|")
        for k in modes:
            m = statistics.median(res[k])
            ref = statistics.median(res["mem-" + k.split("-")[1]])
            if k in io:
                t, h, b = io[k]
                extra = "%.0f | %.0f | %.0f%%" % (b / 1e6, t, 100 * h)
            else:
                extra = "- | - | -"
            print("| %s | %.0f | %.3f | %s |" % (k, m, m / ref, extra))
    shutil.rmtree(a.dir, ignore_errors=True)


if __name__ == "__main__":
    main()
