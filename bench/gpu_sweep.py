#!/usr/bin/env python3
"""bench/gpu_sweep.py: where a GPU step's time goes, and which settings move it.

Runs zt-train of the CUDA build on one config (default gpt2-124M, bench/configs) under several
settings and prints each one's median ms/step (steps after 2 warm-up) beside the first
setting's, with its first losses (a setting that changes the sums shows here):
  default             as shipped (with CUDA workers ZT_GRAPH_CHUNKS defaults to 1)
  chunks 4            ZT_GRAPH_CHUNKS=4, the CPU's default: four row blocks per tensor
  chunks 1            ZT_GRAPH_CHUNKS=1: one block per tensor, one task per op, nothing to gather
  pipeline 4          STARPU_CUDA_PIPELINE=4: the CUDA worker queues up to 4 tasks ahead
  chunks 1, pipeline 4
  chunks 1, 2 streams STARPU_NWORKER_PER_CUDA=2: two CUDA workers (streams) on the one GPU
  chunks 1, 4 CPU workers   STARPU_NCPU=4: fewer idle CPU workers beside the CUDA one
  chunks 1, offload   ZeRO-Offload (stage 2, optimizer on the CPU)
  chunks 1, bf16      bf16.enabled
Then a profile of chunks 4 and chunks 1: one run each with ZT_CUDA_SYNC=1 (every CUDA task
waits for its stream, so a task's traced time is the GPU's) and a trace, and per kind of task
the GPU milliseconds and task count of the last step: the kernels worth a faster version.

Usage: bench/gpu_sweep.py [--build build-cuda] [--config gpt2-124M] [--steps 6]
                          [--only "NAME;NAME"] [--no-profile]
Runs on a CPU build too (`--build build`: the same pipeline, CPU figures, no CUDA rows in the
profile), which is how the script is checked where no GPU is lent.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SETTINGS = [
    ("default", {}, {}),
    ("chunks 4", {"ZT_GRAPH_CHUNKS": "4"}, {}),
    ("chunks 1", {"ZT_GRAPH_CHUNKS": "1"}, {}),
    ("pipeline 4", {"STARPU_CUDA_PIPELINE": "4"}, {}),
    ("chunks 1, pipeline 4", {"ZT_GRAPH_CHUNKS": "1", "STARPU_CUDA_PIPELINE": "4"}, {}),
    ("chunks 1, 2 streams", {"ZT_GRAPH_CHUNKS": "1", "STARPU_NWORKER_PER_CUDA": "2"}, {}),
    ("chunks 1, 4 CPU workers", {"ZT_GRAPH_CHUNKS": "1", "STARPU_NCPU": "4"}, {}),
    ("chunks 1, offload", {"ZT_GRAPH_CHUNKS": "1"},
     {"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}}),
    ("chunks 1, bf16", {"ZT_GRAPH_CHUNKS": "1"}, {"bf16": {"enabled": True}}),
]


def train(a, label, env, ds_extra, trace=None):
    """[(ms, loss)] per step of one zt-train run"""
    with open(os.path.join(ROOT, "bench", "configs", a.config + "_ds.json")) as f:
        ds = dict(json.load(f), **ds_extra)
    tag = label.replace(" ", "").replace(",", "_")
    dsf, log = os.path.join(a.out, tag + "_ds.json"), os.path.join(a.out, tag + ".jsonl")
    with open(dsf, "w") as f:
        json.dump(ds, f)
    if os.path.exists(log):
        os.remove(log)
    cmd = [os.path.join(a.build, "apps", "zt-train"), "--ds-config", dsf, "--model",
           os.path.join(ROOT, "bench", "configs", a.config + "_model.json"), "--data", a.data,
           "--steps", str(a.steps), "--log", log, "--quiet"] + (["--trace", trace] if trace else [])
    p = subprocess.run(cmd, env=dict(os.environ, STARPU_SILENT="1", **env),
                       capture_output=True, text=True)
    if p.returncode != 0:
        print("  %-22s FAILED (exit %d): %s" % (label, p.returncode, p.stderr.strip()[-300:]),
              flush=True)
        return None
    with open(log) as f:
        return [(r["ms"], r["loss"]) for r in map(json.loads, f)]


def kinds_of_last_step(trace):
    """{kind: [GPU ms, tasks]} of the last step's tasks on CUDA workers"""
    with open(trace) as f:
        ev = json.load(f)
    ev = ev["traceEvents"] if isinstance(ev, dict) else ev
    cuda = {(e["pid"], e["tid"]) for e in ev if e.get("ph") == "M" and
            e.get("name") == "thread_name" and e["args"]["name"].startswith("CUDA")}
    tasks = [e for e in ev if e.get("ph") == "X" and "step" in e.get("args", {})]
    last = max(e["args"]["step"] for e in tasks)
    out = {}
    for e in tasks:
        if e["args"]["step"] == last and (e["pid"], e["tid"]) in cuda:
            k = out.setdefault(e["args"]["kind"], [0.0, 0])
            k[0] += e["dur"] / 1e3
            k[1] += 1
    return out


def profile(a, label, env):
    trace = os.path.join(a.out, label.replace(" ", "") + "_sync_trace.json")
    recs = train(a, label + ", ZT_CUDA_SYNC", dict(env, ZT_CUDA_SYNC="1"), {}, trace)
    if recs is None:
        return
    kinds = kinds_of_last_step(trace)
    total = sum(v[0] for v in kinds.values())
    print("profile %s (ZT_CUDA_SYNC=1): step %.1f ms, GPU busy %.1f ms in %d CUDA tasks"
          % (label, recs[-1][0], total, sum(v[1] for v in kinds.values())), flush=True)
    for k, (ms, n) in sorted(kinds.items(), key=lambda kv: -kv[1][0]):
        print("  %-26s %8.2f ms %5d tasks %8.1f us/task" % (k, ms, n, 1e3 * ms / n))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build-cuda"))
    ap.add_argument("--config", default="gpt2-124M")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--data", default=os.path.join(ROOT, "data", "fortunes.bin"))
    ap.add_argument("--out", default=os.path.join(ROOT, "build", "bench", "gpu_sweep"))
    ap.add_argument("--only", help="setting names separated by ; (default: all)")
    ap.add_argument("--no-profile", action="store_true")
    a = ap.parse_args()
    if a.steps < 3:
        ap.error("--steps must be >= 3 (2 warm-up steps are not counted)")
    os.makedirs(a.out, exist_ok=True)
    chosen = [s for s in SETTINGS if not a.only or s[0] in a.only.split(";")]
    print("gpu_sweep: %s, %s, %d steps (2 warm-up)" % (a.build, a.config, a.steps), flush=True)
    base = None
    for label, env, ds_extra in chosen:
        recs = train(a, label, env, ds_extra)
        if recs is None:
            continue
        ms = statistics.median(r[0] for r in recs[2:])
        base = base or ms
        print("  %-22s %9.2f ms/step  x%.2f of %s  losses %s" % (
            label, ms, ms / base, chosen[0][0], [round(r[1], 6) for r in recs[:3]]), flush=True)
    if not a.no_profile:
        for label, env, _ in SETTINGS[1:3]:
            profile(a, label, env)
    return 0


if __name__ == "__main__":
    sys.exit(main())
