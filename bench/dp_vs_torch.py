#!/usr/bin/env python3
"""bench/dp_vs_torch.py: data-parallel training, zerotask ZeRO stages against PyTorch DDP.

Config "small" (bench/configs/small_model.json + small_ds.json: V8192 T128 C384 L6 NH6, global
batch 8, AdamW, gradient clipping) on 2 ranks x 1 core each, back to back in one run:
  * zerotask (build/apps/zt-train under mpirun -np 2, STARPU_NCPU=1) at ZeRO stages 0, 1, 2 and
    3, each from a ds config derived from small_ds.json (zero_optimization {stage, overlap_comm,
    reduce/allgather_bucket_size 5e5; stage 3 with DeepSpeed's stage3_* defaults), micro = B/2,
    accumulation 1). A stage zt-train refuses would show as "not available (<its error
    line>)";
  * PyTorch DDP and DDP + torch.distributed.optim.ZeroRedundancyOptimizer (local optimizer
    AdamW), backend gloo, 2 processes x 1 thread, with Debian's torch 1.13 (/usr/bin/python3)
    and every --peer PYTHON. The model, data rule and initialisation are those of the project's
    PyTorch reference tests/ref/gpt2_torch.py (imported; its benchmark settings: fused
    attention in torch >= 2), with multi-tensor (foreach) AdamW, the ds config's
    hyper-parameters and clipping; rank r trains rows r*B/2 .. (r+1)*B/2-1 of each step's
    global batch, as zerotask's rank r does.
REPS repetitions run in alternation (zt stages 0-3, then each peer's DDP and DDP + ZeRO) under
each OpenBLAS environment (the machine's default, and OPENBLAS_CORETYPE=Haswell). A run's
figure is the median ms/step of its steps after 2 warm-up steps (zt-train: the "ms" of its
--log; PyTorch: rank 0's wall clock between two barriers around the step); the table shows the
median over the REPS runs and the ratios to DDP + ZeroRedundancyOptimizer (torch 1.13) and to
zerotask stage 0.

Communication hidden behind compute, from zerotask's trace (Chrome "X" events: name = task
kind, comm kinds "comm_*", pid = rank, tid = worker; steps >= 3): per rank, C = total duration
of the comm tasks and H = the part of the comm tasks' intervals during which a compute task of
the same rank runs on another worker; hidden = H / C. A comm task occupies its worker for the
whole collective, so with STARPU_NCPU=1 (the benchmark's setting) H = 0 by construction; the
fraction is reported for the last rep's stage-2 run and for one extra stage-2 run with
STARPU_NCPU=2 (2 ranks x 2 workers, oversubscribed on 2 cores: overlap in time there is not
free compute, the ranks share the cores).

Usage: bench/dp_vs_torch.py [--reps 2] [--steps 6] [--peer PYTHON]... [--build build]
                            [--envs default,haswell] [--out /tmp/zt-dp-bench]
Needs a Release build (scripts/demo.sh), OpenMPI's mpirun, data/fortunes.bin
(scripts/prepare-demo.sh) and torch (with gloo) in the peer interpreters. The driver uses only
the standard library; the PyTorch code runs in child processes started with the peer's Python
(this file with --worker).
"""
import argparse
import bisect
import collections
import json
import os
import re
import statistics
import subprocess
import sys
import time

import benchlib  # bench/benchlib.py: free_port (the peers run this file too)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL = os.path.join(ROOT, "bench", "configs", "small_model.json")
DS = os.path.join(ROOT, "bench", "configs", "small_ds.json")
NRANKS = 2
STAGES = (0, 1, 2, 3)
BUCKET = 500000  # elements, DeepSpeed's unit for reduce_bucket_size / allgather_bucket_size
ENVS = {"default": "machine default", "haswell": "OPENBLAS_CORETYPE=Haswell"}
UNAVAILABLE = 3  # exit status of a worker whose torch lacks gloo or ZeroRedundancyOptimizer


def fail(msg):
    sys.exit("dp_vs_torch: " + msg)


# ---------------------------------------------------------------------------------------------
# zerotask

def stage_config(out, s, base):
    """small_ds.json with zero_optimization.stage s and micro x 1 x NRANKS = train_batch_size."""
    ds = dict(base)
    B = ds["train_batch_size"]
    if B % NRANKS:
        fail("train_batch_size %d of %s is not divisible by %d ranks" % (B, DS, NRANKS))
    ds["train_micro_batch_size_per_gpu"] = B // NRANKS
    ds["gradient_accumulation_steps"] = 1
    ds["zero_optimization"] = {"stage": s, "overlap_comm": True, "reduce_bucket_size": BUCKET,
                               "allgather_bucket_size": BUCKET}
    path = os.path.join(out, "ds_stage%d.json" % s)
    with open(path, "w") as f:
        json.dump(ds, f, indent=1)
        f.write("\n")
    return path


def error_line(text):
    lines = [l.strip() for l in text.splitlines() if l.strip()]
    for l in lines:
        if "error" in l.lower():
            return l
    return lines[-1] if lines else "no output"


def run_zt(a, zt, ds, log, env_x, ncpu=1, trace=None):
    """zt-train on NRANKS ranks; returns (median ms/step after 2 warm-up, None) or
    (None, error line)."""
    cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(NRANKS),
           "-x", "STARPU_NCPU=%d" % ncpu, "-x", "STARPU_SILENT=1"]
    for kv in env_x:
        cmd += ["-x", kv]
    cmd += [zt, "--ds-config", ds, "--model", MODEL, "--data", a.data, "--steps", str(a.steps),
            "--log", log, "--quiet"]
    if trace:
        cmd += ["--trace", trace]
    if os.path.exists(log):
        os.remove(log)
    env = dict(os.environ)
    env.pop("OPENBLAS_CORETYPE", None)
    try:
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    except subprocess.TimeoutExpired:
        return None, "timed out after 600 s"
    if p.returncode != 0:
        return None, "exit %d: %s" % (p.returncode, error_line(p.stderr + p.stdout))
    with open(log) as f:
        ms = [json.loads(l)["ms"] for l in f if l.strip()]
    if len(ms) != a.steps:
        return None, "log %s has %d steps, expected %d" % (log, len(ms), a.steps)
    return statistics.median(ms[2:]), None


# ---------------------------------------------------------------------------------------------
# PyTorch peers (driver side)

def peer_version(py):
    try:
        p = subprocess.run([py, "-c", "import torch; print(torch.__version__)"],
                           capture_output=True, text=True, timeout=120)
    except OSError:
        return None
    return p.stdout.strip() if p.returncode == 0 else None


def run_peer(a, py, mode, env_extra, tag):
    """NRANKS worker processes of this file under `py`; returns (ms, None) or (None, why)."""
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1",
               MASTER_ADDR="127.0.0.1", MASTER_PORT=str(benchlib.free_port()))
    env.pop("OPENBLAS_CORETYPE", None)
    env.update(env_extra)
    procs, logs = [], []
    for r in range(NRANKS):
        logs.append(os.path.join(a.out, "%s_%s_rank%d.log" % (tag, mode, r)))
        with open(logs[-1], "w") as f:
            procs.append(subprocess.Popen(
                [py, os.path.abspath(__file__), "--worker", mode, "--rank", str(r),
                 "--world", str(NRANKS), "--data", a.data, "--steps", str(a.steps)],
                env=env, stdout=f, stderr=subprocess.STDOUT))
    t0, failed_at = time.time(), None
    while any(p.poll() is None for p in procs):
        if failed_at is None and any(p.poll() not in (None, 0) for p in procs):
            failed_at = time.time()  # one rank died: the other may wait in gloo forever
        if (failed_at is not None and time.time() - failed_at > 20) or time.time() - t0 > 600:
            for p in procs:
                if p.poll() is None:
                    p.kill()
        time.sleep(0.1)
    outs = []
    for lg in logs:
        with open(lg) as f:
            outs.append(f.read())
    for r, p in enumerate(procs):
        m = re.search(r"^unavailable: (.*)$", outs[r], re.M)
        if m:
            return None, "not available (%s)" % m.group(1)
    for r, p in enumerate(procs):
        if p.returncode != 0:
            return None, "failed (rank %d exit %d: %s; see %s)" % (
                r, p.returncode, error_line(outs[r]), logs[r])
    m = re.search(r"^ms/step ([0-9.]+)", outs[0], re.M)
    if not m:
        return None, "failed (no ms/step line; see %s)" % logs[0]
    return float(m.group(1)), None


# ---------------------------------------------------------------------------------------------
# PyTorch worker (runs under the peer's Python; torch is imported only here)

def worker(a):
    import datetime
    import torch
    import torch.distributed as dist
    sys.path.insert(0, os.path.join(ROOT, "tests", "ref"))
    import gpt2_torch as ref  # the project's PyTorch reference: model, data rule, init

    torch.set_num_threads(1)
    ver = torch.__version__
    if not dist.is_available() or not getattr(dist, "is_gloo_available", lambda: False)():
        print("unavailable: torch %s has no torch.distributed gloo backend" % ver, flush=True)
        return UNAVAILABLE
    ZeRO = None
    if a.worker == "zero":
        try:
            from torch.distributed.optim import ZeroRedundancyOptimizer as ZeRO
        except ImportError as e:
            print("unavailable: torch %s: no ZeroRedundancyOptimizer (%s)" % (ver, e), flush=True)
            return UNAVAILABLE

    m = ref.load_model_shape(MODEL)
    cfg = ref.load_ds_config(DS)
    B, T, W, r = cfg["train_batch_size"], m["seq_len"], a.world, a.rank
    if B % W:
        raise ref.UsageError("train_batch_size %d is not divisible by %d ranks" % (B, W))
    rows = slice(r * (B // W), (r + 1) * (B // W))  # zerotask's rank r rows (accumulation 1)
    tok = ref.load_tokens(a.data, m["vocab_size"])
    batches = [tuple(t[rows].contiguous() for t in ref.step_batch(tok, s, B, T))
               for s in range(1, a.steps + 1)]  # outside timing

    dist.init_process_group("gloo", rank=r, world_size=W,
                            timeout=datetime.timedelta(seconds=300))
    weights = ref.init_weights(m, cfg["seed"])
    mask = torch.ones(T, T, dtype=torch.bool).tril()

    class GPT2(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.names = [n for n, _ in weights]
            self.ps = torch.nn.ParameterList([torch.nn.Parameter(t.clone()) for _, t in weights])

        def forward(self, idx, tgt):
            return ref.gpt2_loss(dict(zip(self.names, self.ps)), m, idx, tgt, mask, fast=True)

    model = torch.nn.parallel.DistributedDataParallel(GPT2())
    params = list(model.parameters())
    kw = dict(lr=cfg["lr"], betas=cfg["betas"], eps=cfg["eps"],
              weight_decay=cfg["weight_decay"], foreach=True)
    opt_class = torch.optim.AdamW if cfg["adam_w_mode"] else torch.optim.Adam
    if ZeRO is None:
        opt = opt_class(params, **kw)
    else:
        try:
            opt = ZeRO(params, optimizer_class=opt_class, **kw)
        except Exception as e:  # noqa: BLE001 - any refusal of this torch's ZeRO is reported
            print("unavailable: torch %s: ZeroRedundancyOptimizer(%s) failed: %s"
                  % (ver, opt_class.__name__, e), flush=True)
            dist.destroy_process_group()
            return UNAVAILABLE
    clip = cfg["gradient_clipping"]

    times = []
    for s in range(1, a.steps + 1):
        lr = ref.lr_for_step(cfg, s, "deepspeed")
        for g in opt.param_groups:
            g["lr"] = lr
        dist.barrier()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = model(*batches[s - 1])
        loss.backward()
        gn = float(torch.nn.utils.clip_grad_norm_(params, clip)) if clip > 0 else float("nan")
        opt.step()
        lv = loss.item()
        dist.barrier()
        ms = (time.perf_counter() - t0) * 1e3
        times.append(ms)
        mean = torch.tensor([lv / W])
        dist.all_reduce(mean)  # the step loss over the global batch (outside timing)
        if r == 0:
            print("step %d loss %.6f grad_norm %.4f ms %.1f" % (s, float(mean), gn, ms),
                  flush=True)
    if r == 0:
        print("ms/step %.3f (median of %d steps after 2 warm-up; torch %s; %s; %d ranks x %d "
              "thread)" % (statistics.median(times[2:]), len(times) - 2, ver,
                           "DDP + ZeroRedundancyOptimizer" if ZeRO else "DDP", W,
                           torch.get_num_threads()), flush=True)
    dist.destroy_process_group()
    return 0


# ---------------------------------------------------------------------------------------------
# trace: how much of the comm tasks' time overlaps compute of the same rank

def merge(iv):
    out = []
    for b, e in sorted(iv):
        if out and b <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([b, e])
    return out


def covered(merged, starts, b, e):
    """Length of [b, e) covered by the sorted disjoint intervals `merged`."""
    tot, i = 0.0, max(0, bisect.bisect_right(starts, b) - 1)
    while i < len(merged) and merged[i][0] < e:
        tot += max(0.0, min(e, merged[i][1]) - max(b, merged[i][0]))
        i += 1
    return tot


def comm_hidden(path, first_step=3):
    """Per rank: (workers, steps, wall ms/step, comm ms/step, overlapped ms/step, hidden)."""
    with open(path) as f:
        ev = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
    last = max(e["args"]["step"] for e in ev)
    first = min(first_step, last)
    ev = [e for e in ev if e["args"]["step"] >= first]
    nsteps = last - first + 1
    res = {}
    for rank in sorted({e["pid"] for e in ev}):
        mine = [e for e in ev if e["pid"] == rank]
        tids = sorted({e["tid"] for e in mine})
        comp = {t: [(e["ts"], e["ts"] + e["dur"]) for e in mine
                    if e["tid"] == t and not e["name"].startswith("comm_")] for t in tids}
        others = {}
        for t in tids:
            mg = merge([iv for u in tids if u != t for iv in comp[u]])
            others[t] = (mg, [x[0] for x in mg])
        c = h = 0.0
        for e in mine:
            if e["name"].startswith("comm_"):
                c += e["dur"]
                mg, st = others[e["tid"]]
                h += covered(mg, st, e["ts"], e["ts"] + e["dur"])
        wall = max(e["ts"] + e["dur"] for e in mine) - min(e["ts"] for e in mine)
        res[rank] = (len(tids), nsteps, wall / 1e3 / nsteps, c / 1e3 / nsteps, h / 1e3 / nsteps,
                     h / c if c else float("nan"))
    return res


def print_hidden(title, path):
    print(title)
    for rank, (nw, ns, wall, c, h, frac) in comm_hidden(path).items():
        print("    rank %d (%d worker%s, steps >= 3, per step): wall %.1f ms, comm tasks %.1f ms "
              "(%.1f%% of wall), overlapped by compute on another worker %.1f ms: hidden %.1f%%, "
              "exposed %.1f ms" % (rank, nw, "s" if nw > 1 else "", wall, c, 100 * c / wall, h,
                                   100 * frac, c - h))


# ---------------------------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--peer", action="append", default=[],
                    help="another Python with torch (e.g. a virtualenv's); Debian's is always run")
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--envs", default="default,haswell",
                    help="OpenBLAS environments, comma-separated: default, haswell")
    ap.add_argument("--data", default=os.path.join(ROOT, "data", "fortunes.bin"))
    ap.add_argument("--out", default="/tmp/zt-dp-bench")
    # worker mode (internal): one rank of a PyTorch peer
    ap.add_argument("--worker", choices=("ddp", "zero"), help=argparse.SUPPRESS)
    ap.add_argument("--rank", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--world", type=int, default=NRANKS, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.steps < 3:
        ap.error("--steps must be >= 3 (2 warm-up steps are not counted)")
    if a.reps < 1:
        ap.error("--reps must be >= 1")
    if a.worker:
        return worker(a)

    t_start = time.time()
    envs = []
    for e in a.envs.split(","):
        if e not in ENVS:
            ap.error("unknown --envs entry %r (expected default or haswell)" % e)
        envs.append(e)
    zt = os.path.join(a.build, "apps", "zt-train")
    for f, how in ((zt, "build zerotask (Release: scripts/demo.sh)"),
                   (a.data, "run scripts/prepare-demo.sh")):
        if not os.path.exists(f):
            fail("%s is missing: %s first" % (f, how))
    if subprocess.run(["sh", "-c", "command -v mpirun"], capture_output=True).returncode:
        fail("mpirun is not on PATH (install OpenMPI)")
    os.makedirs(a.out, exist_ok=True)
    with open(DS) as f:
        base = json.load(f)
    with open(MODEL) as f:
        shape = json.load(f)
    dss = {s: stage_config(a.out, s, base) for s in STAGES}

    peers = []
    for py in ["/usr/bin/python3"] + a.peer:
        v = peer_version(py)
        if v is None:
            print("note: %s has no torch; skipped" % py)
        else:
            peers.append((py, "torch " + ".".join(v.split(".")[:2]), v))
    if not peers:
        fail("no peer Python has torch (Debian's python3-torch at /usr/bin/python3, or --peer)")
    ref_name = "DDP + ZeRO (%s)" % peers[0][1]
    print("zerotask %s vs PyTorch DDP (%s); config small (V%d T%d C%d L%d NH%d, global batch %d); "
          "%d ranks x 1 core; %d reps x %d steps (2 warm-up); envs %s"
          % (zt, ", ".join(v for _, _, v in peers), shape["vocab_size"], shape["seq_len"],
             shape["n_embd"], shape["n_layer"], shape["n_head"], base["train_batch_size"], NRANKS,
             a.reps, a.steps, ", ".join(ENVS[e] for e in envs)), flush=True)

    contenders = ["zerotask stage %d" % s for s in STAGES]
    for _, pname, _ in peers:
        contenders += ["DDP (%s)" % pname, "DDP + ZeRO (%s)" % pname]
    res = {e: collections.defaultdict(list) for e in envs}
    why = {e: {} for e in envs}
    trace = os.path.join(a.out, "trace_stage2.json")
    trace_env = envs[0]
    for e in envs:
        env_x = ["OPENBLAS_CORETYPE=Haswell"] if e == "haswell" else []
        env_kv = dict(kv.split("=", 1) for kv in env_x)
        for rep in range(a.reps):
            got = []
            for s in STAGES:
                name = "zerotask stage %d" % s
                tr = trace if (s == 2 and rep == a.reps - 1 and e == trace_env) else None
                ms, err = run_zt(a, zt, dss[s], os.path.join(a.out, "zt_stage%d.jsonl" % s),
                                 env_x, trace=tr)
                if ms is None:
                    if s == STAGES[-1]:
                        if name not in why[e]:
                            print("  stage %d: not available (%s)" % (s, err), flush=True)
                        why[e][name] = "not available (%s)" % err
                        got.append("s%d n/a" % s)
                        continue
                    fail("zt-train stage %d (%s) failed: %s" % (s, ENVS[e], err))
                res[e][name].append(ms)
                got.append("s%d %.1f" % (s, ms))
            for py, pname, _ in peers:
                tag = re.sub(r"[^A-Za-z0-9.]+", "", pname)
                for mode, label in (("ddp", "DDP (%s)"), ("zero", "DDP + ZeRO (%s)")):
                    name = label % pname
                    ms, err = run_peer(a, py, mode, env_kv, tag)
                    if ms is None:
                        why[e][name] = err
                        got.append("%s n/a" % name)
                        print("  note: %s: %s" % (name, err), flush=True)
                    else:
                        res[e][name].append(ms)
                        got.append("%s %.1f" % (name, ms))
            print("  %-26s rep %d: %s" % (ENVS[e], rep + 1, " | ".join(got)), flush=True)

    extra = os.path.join(a.out, "trace_stage2_ncpu2.json")
    env_x = ["OPENBLAS_CORETYPE=Haswell"] if trace_env == "haswell" else []
    ms2, err2 = run_zt(a, zt, dss[2], os.path.join(a.out, "zt_stage2_ncpu2.jsonl"), env_x,
                       ncpu=2, trace=extra)
    if ms2 is None:
        fail("zt-train stage 2 with STARPU_NCPU=2 failed: %s" % err2)

    med = {e: {k: statistics.median(v) for k, v in res[e].items()} for e in envs}
    print()
    print("| contender | OpenBLAS env | ms/step | ratio vs %s | ratio vs our stage 0 |" % ref_name)
    print("|---|---|---|---|---|")
    for e in envs:
        refv, s0 = med[e].get(ref_name), med[e].get("zerotask stage 0")
        for c in contenders:
            if c not in med[e]:
                print("| %s | %s | %s | | |" % (c, ENVS[e], why[e].get(c, "not run")))
                continue
            v = med[e][c]
            print("| %s | %s | %.1f | %s | %s |" % (c, ENVS[e], v,
                                                   "%.2fx" % (v / refv) if refv else "n/a",
                                                   "%.2fx" % (v / s0) if s0 else "n/a"))
    print()
    for e in envs:
        zero_peers = [(med[e][c], c) for c in contenders
                      if c.startswith("DDP + ZeRO") and c in med[e]]
        s0, s2, s3 = (med[e].get("zerotask stage %d" % s) for s in (0, 2, 3))
        if zero_peers:
            best, bname = min(zero_peers)
            t1 = "%s (%.2fx of the fastest, %s)" % ("yes" if s2 < best else "no", s2 / best,
                                                    bname)
        else:
            t1 = "no peer ran"
        t2 = ("%s (%.2fx)" % ("yes" if s3 <= 1.3 * s0 else "no", s3 / s0) if s3 is not None
              else why[e].get("zerotask stage 3", "not run"))
        print("target (%s): zerotask stage 2 faster than DDP + ZeroRedundancyOptimizer: %s; "
              "stage 3 within 1.3x of stage 0: %s" % (ENVS[e], t1, t2))

    print()
    print("Communication hidden behind compute (zerotask trace, steps >= 3). Per rank: C = total "
          "time of the comm_* tasks,\nH = the part of their intervals during which a compute task "
          "of the same rank runs on another worker;\nhidden = H / C, exposed = C - H. A comm task "
          "holds its worker for the whole collective.")
    print_hidden("  benchmark setting, stage 2, last rep, %s, STARPU_NCPU=1 (one worker: hidden "
                 "is 0 by construction; exposed = all of C):" % ENVS[trace_env], trace)
    print_hidden("  extra run, stage 2, %s, STARPU_NCPU=2 (2 ranks x 2 workers = 4 workers on 2 "
                 "cores: %.1f ms/step; overlap in time, but the ranks share the cores):"
                 % (ENVS[trace_env], ms2), extra)
    print()
    print("total time %.0f s; logs, configs and traces in %s" % (time.time() - t_start, a.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
