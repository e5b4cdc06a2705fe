#!/usr/bin/env python3
"""tests/graph/test_zero.py: ZeRO data parallelism over MPI equals one rank.

For ZeRO stages 0, 1, 2, 3, N = 1, 2, 3 ranks (mpirun --oversubscribe) and gradient accumulation
1 and 2 (train_batch_size fixed, micro-batch derived), `zt-train` must give
  - per-step losses equal to the single-rank stage-0 run to 1e-5 relative,
  - exported weights after 5 steps equal to it to 1e-3 relative per tensor (another summation
    order of the gradients is another rounding, which Adam magnifies near zero),
  - bit-identical losses and weights when a configuration is run twice,
  - the memory accounting's rules (whole row blocks per rank: each share within one block of
    the even share, the shares adding up to the total): optimizer state 1/N at stage >= 1,
    gradient sums 1/N at stage >= 2 (plus the gradient-slot window), parameters 1/N at stage 3
    (plus the persistent parameters and the gathered-parameter window);
every STARPU_SCHED gives the same bits at stages 2 and 3 (no deadlock: the collectives are
ordered by a token); --dump-grads gives the summed gradients at every stage (all-gathered from the
shards at stages 2-3); at stage 3 a layer that left the gathered-parameter window is gathered
again for its backward (a small stage3_prefetch_bucket_size) and only once with a large window,
gathers run ahead of the forward on another worker (the trace), and the peak resident memory per
rank is well below stage 0's on a larger model; a run whose ranks are started with different
configs must stop with a clear error.
Under the sanitizers (ZT_TEST_SANITIZED=1): 7 of the 24 (stage, ranks, accumulation) runs that
still cover each value, one repeat, eager and dmda at stage 3, two gradient dumps.

Usage: test_zero.py ZT_TRAIN MPIEXEC WORKDIR
"""
import json
import os
import random
import re
import subprocess
import sys

import numpy as np

ZT, MPIEXEC, WORK = sys.argv[1], sys.argv[2], sys.argv[3]
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "ref"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from trainlib import Runner, sanitized  # noqa: E402
from gpt2_torch import st_read, write_tokens  # noqa: E402  (a plain safetensors reader)

STEPS = 5
LOSS_TOL, PARAM_TOL = 1e-5, 1e-3
os.makedirs(WORK, exist_ok=True)

MODEL = {"vocab_size": 96, "seq_len": 12, "n_embd": 48, "n_layer": 2, "n_head": 4}
BASE = {"train_batch_size": 12, "gradient_clipping": 0.5,
        "optimizer": {"type": "AdamW", "params": {"lr": 3e-3, "weight_decay": 0.05}},
        "scheduler": {"type": "WarmupLR", "params": {"warmup_min_lr": 1e-3,
                                                      "warmup_max_lr": 3e-3,
                                                      "warmup_num_steps": 3}},
        "seed": 21}


write = Runner(ZT, MPIEXEC, WORK).write  # JSON inputs in WORK


model = write("model.json", MODEL)
data = os.path.join(WORK, "tokens.bin")
rng = random.Random(3)
toks = [(i * 7 + (rng.randrange(96) if rng.random() < 0.2 else 0)) % 96 for i in range(5000)]
write_tokens(data, toks)


# stage 3: vectors (<= 4C = 192 elements) stay whole; the gathered-parameter window is the
# minimum (two slots per shape), so layers are gathered again for the backward
S3 = {"stage3_param_persistence_threshold": 200, "stage3_prefetch_bucket_size": 5000}
PERSIST = 2 * (48 * 6 + 144 + 192) * 4 + 2 * 48 * 4  # bytes of the persistent vectors


def ds_for(stage, n, accum, extra=None, tag=""):
    d = json.loads(json.dumps(BASE))
    d["train_micro_batch_size_per_gpu"] = BASE["train_batch_size"] // (n * accum)
    d["gradient_accumulation_steps"] = accum
    # small buckets, so several collectives of each kind run and overlap the backward
    d["zero_optimization"] = {"stage": stage, "reduce_bucket_size": 6000,
                              "allgather_bucket_size": 9000, "overlap_comm": True}
    if stage == 3:
        d["zero_optimization"].update(S3)
    if extra:
        d["zero_optimization"].update(extra)
    return write("ds_s%d_n%d_a%d%s.json" % (stage, n, accum, tag), d)


def launch(n, args, env=None, ncpu=1):
    cmd = [MPIEXEC, "--allow-run-as-root", "--oversubscribe", "-np", str(n),
           "-x", "STARPU_NCPU=%d" % ncpu, "-x", "STARPU_SILENT=1"]
    for k, v in (env or {}).items():
        cmd += ["-x", "%s=%s" % (k, v)]
    return subprocess.run(cmd + [ZT] + args, capture_output=True, text=True, timeout=300)


def train(label, stage, n, accum, extra=None):
    ds = ds_for(stage, n, accum, extra)
    log, out = (os.path.join(WORK, label + s) for s in (".jsonl", ".safetensors"))
    p = launch(n, ["--ds-config", ds, "--model", model, "--data", data, "--steps", str(STEPS),
                   "--log", log, "--export", out])
    if p.returncode != 0:
        print("FAIL %s: exit %d\n%s%s" % (label, p.returncode, p.stdout[-2000:], p.stderr[-3000:]))
        sys.exit(1)
    with open(log) as f:
        losses = [json.loads(l)["loss"] for l in f]
    with open(out, "rb") as f:
        blob = f.read()
    return losses, st_read(out), blob, memory(p.stdout)


def memory(stdout):
    """rank -> {params, grads, optim, pwin, gwin} in MiB, from the memory lines"""
    mem = {}
    for m in re.finditer(r"memory \(host, rank (\d+) of (\d+)\): params ([0-9.]+) MiB \| grads "
                         r"([0-9.]+) MiB \| optimizer ([0-9.]+) MiB.*?(?:windows: gathered params "
                         r"([0-9.]+) MiB, gradient slots ([0-9.]+) MiB)?$", stdout, re.M):
        mem[int(m.group(1))] = {"params": float(m.group(3)), "grads": float(m.group(4)),
                                "optim": float(m.group(5)), "pwin": float(m.group(6) or 0),
                                "gwin": float(m.group(7) or 0)}
    return mem


def share_ok(shares, total, n):
    """each rank within one row block (2304 elements here) of total/n, adding up to total (the
    printed figures are rounded to 0.001 MiB; own slices are padded to 16 floats)"""
    block = 2304 * 8 / 1048576  # (m and v: 8 bytes per element)
    return abs(sum(shares) - total) <= 0.003 * n and \
        all(abs(x - total / n) <= block + 0.003 for x in shares)


bad = []
ref_losses, ref_w, ref_blob, ref_mem = train("ref_s0_n1_a1", 0, 1, 1)
if ref_losses[-1] >= ref_losses[0]:
    bad.append("reference loss did not fall: %s" % ref_losses)
total = ref_mem[0]
print("reference (1 rank, stage 0): losses %s" % " ".join("%.6f" % x for x in ref_losses))
# under the sanitizers every stage, rank count and accumulation, not every combination
MATRIX = sanitized([(s, n, a) for s in (0, 1, 2, 3) for n in (1, 2, 3) for a in (1, 2)],
                   [(0, 2, 2), (1, 1, 1), (1, 3, 2), (2, 2, 1), (2, 3, 2), (3, 2, 2), (3, 3, 1)])
for stage, n, accum in MATRIX:
    label = "s%d_n%d_a%d" % (stage, n, accum)
    losses, w, blob, mem = train(label, stage, n, accum)
    lerr = max(abs(a - b) / abs(b) for a, b in zip(losses, ref_losses))
    werr, wname = 0.0, ""
    for name, r in ref_w.items():
        d = np.linalg.norm((w[name].astype(np.float64) - r).ravel())
        e = d / max(np.linalg.norm(r.astype(np.float64).ravel()), 1e-30)
        if e > werr:
            werr, wname = e, name
    ok = len(losses) == STEPS and lerr <= LOSS_TOL and werr <= PARAM_TOL
    # memory: optimizer state 1/N at stage >= 1 (8 bytes per element: m and v), gradient
    # sums 1/N at stage >= 2 (beside the slot window), parameters 1/N at stage 3 (beside
    # the persistent vectors, whole on every rank, and the gathered window)
    m = [mem.get(r) for r in range(n)]
    mem_ok = None not in m
    if mem_ok:
        pers = PERSIST / 1048576 if stage == 3 else 0.0
        opt = [x["optim"] for x in m]
        grd = [x["grads"] - x["gwin"] for x in m]
        par = [x["params"] - x["pwin"] - pers for x in m]
        whole = lambda xs, t: all(abs(x - t) <= 0.001 for x in xs)
        mem_ok = ((share_ok(opt, total["optim"], n) if stage >= 1 else
                   whole(opt, total["optim"])) and
                  (share_ok(grd, total["grads"], n) if stage >= 2 else
                   whole(grd, total["grads"])) and
                  (share_ok(par, total["params"] - pers, n) if stage == 3 else
                   whole(par, total["params"])))
    shares = ["%.3f/%.3f/%.3f" % (x["params"] - x["pwin"], x["grads"] - x["gwin"],
                                  x["optim"]) if x else "?" for x in m]
    print("%-10s %s losses rel %.1e | weights rel %.1e (%s) | MiB/rank params/grads/optim "
          "(windows apart) %s" % (label, "ok  " if ok and mem_ok else "FAIL", lerr, werr,
                                  wname, " ".join(shares)))
    if not ok:
        bad.append("%s: losses %s vs %s, weights %.2e" % (label, losses, ref_losses, werr))
    if not mem_ok:
        bad.append("%s: memory per rank %s, one rank's %s" % (label, m, total))

# --init-from at stage 3: each rank keeps its blocks of the loaded weights; the loss of one
# evaluation step equals the one rank stage 0's from the same file
def eval_loss(stage, n):
    p = launch(n, ["--ds-config", ds_for(stage, n, 1), "--model", model, "--data", data,
                   "--init-from", os.path.join(WORK, "ref_s0_n1_a1.safetensors"), "--eval-only"])
    m = re.search(r"eval loss ([0-9.]+)", p.stdout)
    if p.returncode != 0 or not m:
        bad.append("eval stage %d N=%d: exit %d %s" % (stage, n, p.returncode, p.stderr[-500:]))
        return None
    return float(m.group(1))


e0, e3 = eval_loss(0, 1), eval_loss(3, 2)
print("--init-from + --eval-only: stage 0 x 1 rank %s, stage 3 x 2 ranks %s" % (e0, e3))
if e0 is None or e3 is None or abs(e0 - e3) > LOSS_TOL * e0:
    bad.append("--init-from at stage 3: eval loss %s vs %s" % (e3, e0))

# the same configuration twice: bit-identical
for stage, n, accum in sanitized(((2, 3, 2), (1, 2, 1), (3, 3, 2)), ((3, 3, 2),)):
    a = train("rep1_s%d" % stage, stage, n, accum)
    b = train("rep2_s%d" % stage, stage, n, accum)
    same = a[0] == b[0] and a[2] == b[2]
    print("repeat s%d_n%d_a%d %s" % (stage, n, accum, "bit-identical" if same else "DIFFERS"))
    if not same:
        bad.append("repeat of stage %d N=%d differs" % (stage, n))

# every scheduler issues the collectives in the same order (the token): no deadlock, and the
# same bits as lws, with 2 workers per rank so that tasks really run out of order
def sched_run(sched, stage):
    label = "sched_%s_s%d" % (sched, stage)
    log, out = (os.path.join(WORK, label + s) for s in (".jsonl", ".safetensors"))
    p = launch(2, ["--ds-config", ds_for(stage, 2, 2), "--model", model, "--data", data,
                   "--steps", "3", "--log", log, "--export", out, "--quiet"],
               env={"STARPU_SCHED": sched}, ncpu=2)
    if p.returncode != 0:
        bad.append("%s: exit %d %s" % (label, p.returncode, p.stderr[-1000:]))
        return None
    with open(log) as f, open(out, "rb") as g:
        return [json.loads(l)["loss"] for l in f], g.read()


for stage in sanitized((2, 3), (3,)):
    base = sched_run("lws", stage)
    for sched in sanitized(("eager", "dmda", "prio", "ws"), ("eager", "dmda")):
        got = sched_run(sched, stage)
        same = base is not None and got == base
        print("STARPU_SCHED=%s, 2 ranks x 2 workers, stage %d: %s"
              % (sched, stage, "bit-identical to lws" if same else "DIFFERS"))
        if not same:
            bad.append("STARPU_SCHED=%s differs from lws at stage %d" % (sched, stage))

# the README's mpirun example config (configs/demo_zero2_ds.json) runs on 2 ranks
root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
p = launch(2, ["--ds-config", os.path.join(root, "configs", "demo_zero2_ds.json"), "--model",
               os.path.join(root, "configs", "demo_model.json"), "--data", data, "--steps", "2"])
if p.returncode != 0 or "x world 2 | ZeRO stage 2" not in p.stdout:
    bad.append("README example config: exit %d %s%s" % (p.returncode, p.stdout[-500:],
                                                        p.stderr[-500:]))
else:
    print("README example (configs/demo_zero2_ds.json, 2 ranks): ok")

# --dump-grads under mpirun: the step-1 gradients summed over the ranks (all-gathered from the
# shards at stage 2) equal one rank's, per tensor
def grads(label, stage, n):
    out = os.path.join(WORK, label + "_grads.safetensors")
    p = launch(n, ["--ds-config", ds_for(stage, n, 1), "--model", model, "--data", data,
                   "--steps", "1", "--dump-grads", out, "--quiet"])
    if p.returncode != 0:
        bad.append("%s: exit %d %s" % (label, p.returncode, p.stderr[-1000:]))
        return None
    return st_read(out)


g_ref = grads("g_s0_n1", 0, 1)
for stage, n in sanitized(((2, 2), (2, 3), (1, 2), (3, 2)), ((2, 3), (3, 2))):
    g = grads("g_s%d_n%d" % (stage, n), stage, n)
    if g is None or g_ref is None:
        continue
    gerr = max(np.linalg.norm((g[k].astype(np.float64) - r).ravel()) /
               max(np.linalg.norm(r.astype(np.float64).ravel()), 1e-30) for k, r in g_ref.items()
               if np.abs(r).max() > 1e-6)
    print("dump-grads s%d_n%d: max rel diff per tensor %.1e" % (stage, n, gerr))
    if gerr > LOSS_TOL:
        bad.append("dump-grads stage %d N=%d differs from one rank: %.2e" % (stage, n, gerr))

# the trace of a 2-rank run: one file, one process lane per rank, collectives visible, and (2
# workers per rank) gradient reductions running while the same rank still computes the backward
trace = os.path.join(WORK, "trace.json")
p = launch(2, ["--ds-config", ds_for(2, 2, 1), "--model", model, "--data", data, "--steps", "3",
               "--trace", trace, "--quiet"], ncpu=2)
if p.returncode != 0:
    bad.append("traced run: exit %d %s" % (p.returncode, p.stderr[-1000:]))
else:
    with open(trace) as f:
        ev = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
    pids = sorted({e["pid"] for e in ev})
    comm = [e for e in ev if e["name"].startswith("comm_")]
    kinds = sorted({e["name"] for e in comm})
    overlap = 0
    for c in comm:
        if c["name"] != "comm_reduce_scatter":
            continue
        for e in ev:
            if (e["pid"] == c["pid"] and e["tid"] != c["tid"] and "backward" in e["name"] and
                    e["ts"] < c["ts"] + c["dur"] and c["ts"] < e["ts"] + e["dur"]):
                overlap += 1
                break
    print("trace: ranks %s, collectives %s, %d reduce-scatters overlapping backward tasks"
          % (pids, kinds, overlap))
    if pids != [0, 1] or kinds != ["comm_allgather", "comm_reduce_scatter"] or overlap == 0:
        bad.append("trace: ranks %s, collective kinds %s, overlaps %d" % (pids, kinds, overlap))

# stage 3 on a 4-layer model, 2 ranks x 2 workers: with the smallest gathered-parameter window (two
# slots per shape) layers 0 and 1 have left it when the backward reaches them and are gathered
# again (8 gathers of their 4 matrices per step), layers 2 and 3 are not; with a window holding
# the whole model every layer is gathered once per step. Gathers run ahead of the forward: some
# start while an earlier layer's forward task runs on the other worker.
MODEL4 = dict(MODEL, n_layer=4)
model4 = write("model4.json", MODEL4)


def gathers(window):
    trace = os.path.join(WORK, "trace_s3_%d.json" % window)
    ds = ds_for(3, 2, 1, {"stage3_prefetch_bucket_size": window}, tag="_w%d" % window)
    p = launch(2, ["--ds-config", ds, "--model", model4, "--data", data, "--steps", "2",
                   "--trace", trace, "--quiet"], ncpu=2)
    if p.returncode != 0:
        bad.append("stage 3 window %d: exit %d %s" % (window, p.returncode, p.stderr[-1000:]))
        return {}, 0
    with open(trace) as f:
        ev = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
    count = {}
    for e in ev:
        a = e["args"]
        if e["name"] == "comm_allgather" and a["rank"] == 0 and a["step"] == 2 and a["layer"] >= 0:
            count[a["layer"]] = count.get(a["layer"], 0) + 1
    ahead = 0
    for g in ev:
        if g["name"] != "comm_allgather" or g["args"]["layer"] < 1:
            continue
        for e in ev:
            if (e["pid"] == g["pid"] and e["tid"] != g["tid"] and "forward" in e["name"] and
                    0 <= e["args"]["layer"] < g["args"]["layer"] and
                    e["ts"] < g["ts"] + g["dur"] and g["ts"] < e["ts"] + e["dur"]):
                ahead += 1
                break
    return count, ahead


small, ahead_small = gathers(0)
large, ahead_large = gathers(10 ** 8)
print("stage 3 gathers per layer in step 2, smallest window: %s; whole-model window: %s; "
      "gathers overlapping an earlier layer's forward: %d, %d"
      % (small, large, ahead_small, ahead_large))
if small != {0: 8, 1: 8, 2: 4, 3: 4} or large != {0: 4, 1: 4, 2: 4, 3: 4} or \
        ahead_small + ahead_large == 0:
    bad.append("stage 3 gathers: smallest window %s, whole window %s, ahead %d+%d"
               % (small, large, ahead_small, ahead_large))

# peak resident memory per rank, 2 ranks, on a model of 12.2M parameters (stage 0: 4 copies of
# 47 MiB per rank): stage 3 holds a half of parameters, gradients and optimizer state plus its
# windows, so its peak is far below stage 0's
BIG = {"vocab_size": 4096, "seq_len": 16, "n_embd": 384, "n_layer": 6, "n_head": 6}
big = write("model_big.json", BIG)


def peak(stage):
    ds = write("ds_big_s%d.json" % stage, dict(
        BASE, train_batch_size=4, train_micro_batch_size_per_gpu=2, gradient_accumulation_steps=1,
        zero_optimization={"stage": stage, "reduce_bucket_size": 2000000,
                           "stage3_prefetch_bucket_size": 4000000}))
    p = launch(2, ["--ds-config", ds, "--model", big, "--data", data, "--steps", "2"])
    mib = [float(x) for x in re.findall(r"peak memory \(rank \d of 2\): ([0-9.]+) MiB", p.stdout)]
    if p.returncode != 0 or len(mib) != 2:
        bad.append("peak memory stage %d: exit %d %s" % (stage, p.returncode, p.stderr[-500:]))
        return None
    return max(mib)


p0, p3 = peak(0), peak(3)
if p0 and p3:
    print("peak resident memory per rank, 12.2M parameters, 2 ranks: stage 0 %.1f MiB, stage 3 "
          "%.1f MiB (%.2fx)" % (p0, p3, p3 / p0))
    if p0 - p3 < 40:  # four copies of 47 MiB halved (94 MiB), less the windows
        bad.append("stage 3 peak memory %.1f MiB is not well below stage 0's %.1f" % (p3, p0))

# ranks started with different configs stop at start-up with a clear error, exit != 0
d1 = ds_for(1, 2, 1)
d2 = write("ds_other.json", dict(json.load(open(d1)), seed=99))
rankfile = os.path.join(WORK, "pick_config.sh")
with open(rankfile, "w") as f:
    f.write('#!/bin/sh\n[ "$OMPI_COMM_WORLD_RANK" = 1 ] && c=%s || c=%s\nexec %s --ds-config '
            '"$c" --model %s --data %s --steps 2\n' % (d2, d1, ZT, model, data))
os.chmod(rankfile, 0o755)
p = subprocess.run([MPIEXEC, "--allow-run-as-root", "--oversubscribe", "-np", "2", "-x",
                    "STARPU_NCPU=1", rankfile], capture_output=True, text=True, timeout=120)
msg = [l for l in p.stderr.splitlines() if l.startswith("zerotask: error:")]
if p.returncode == 0 or len(msg) != 1 or "rank 1" not in msg[0] or "config" not in msg[0]:
    bad.append("different configs: exit %d, messages %s" % (p.returncode, msg))
else:
    print("different configs: %s" % msg[0])

for b in bad:
    print("FAIL", b)
print("%d problems" % len(bad))
sys.exit(1 if bad else 0)
