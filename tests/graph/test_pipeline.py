#!/usr/bin/env python3
"""tests/graph/test_pipeline.py: GPT-2 trained as a pipeline of stages (docs/pipeline.md), one
rank each or two data-parallel replicas each, against the same training on one rank.

Checked (a tiny GPT-2 of 4 layers, 4 steps, gradient clipping on):
  - (dp, pp) = (1, 2) and (1, 3), accumulation 2 and 1: per-step losses within 1e-5 of the
    1-rank run's (relative), exported weights within 1e-3 (the largest difference) and with
    the 1-rank file's tensor names in its order; step 1's gradients (--dump-grads) within 1e-5
    of the 1-rank run's, normalised, the tied wte's included (the embedding's and the head's
    parts summed between the first and the last stage);
  - a model whose layer tensors have odd sizes (n_embd 9): the same losses (the draws skipped
    for another stage's parameters are whole Box-Muller pairs, as a 1-rank run draws them);
  - bit-identical losses and weights for a repeat, for STARPU_SCHED=eager and for the GPipe
    schedule (the same sums, only the memory differs);
  - bf16: losses within 1e-3 of the 1-rank bf16 run's;
  - the schedules' memory bound, counted in the trace (a micro-batch's row block is in flight
    on a stage from its first forward task to its last input-gradient task there): 1F1B at most `stages` per
    stage, GPipe at most all of the accumulation's and more than 1F1B's on some stage; the
    trace names each rank's process by its stage, and zt-trace summary gives each step's bubble
    (in [0, 1)) beside (P-1)/(M+P-1), for (2, 2) per replica;
  - activation checkpointing in a stage (every layer): (1, 2) bit-identical to storing
    everything, with recompute tasks in its trace (each stage plans its own layers: a window of
    1); (2, 2) within 1e-5 of 1 rank; (1, 2) of 6 layers with the kept inputs on NVMe through
    the thread engine (a window of 1: an input of each stage through the file), 1F1B with 4
    micro-batches (two per activation set) and GPipe, bit-identical to storing everything;
  - the optimizer offloaded in a stage: (1, 2) to host memory, (2, 2) to NVMe: losses 1e-5;
  - checkpoints: a (2, 2) run saving at step 2 trains as one that does not, writes one shard per
    rank (zt-ckpt verify passes), and resumes as 1 rank and (1, 3) (losses 1e-5 of the 1-rank
    run) and as (2, 2) (bit-identical to the unbroken run); a 1-rank checkpoint resumes as
    (1, 2); a deeper model's imported weights are refused by a pipeline (one line, exit 1);
  - refused with one line and exit 2, before the runtime starts: activation checkpointing's
    inputs on NVMe through io_uring, a partition that cuts between ln_f and the head;
  - the start-up memory check sizes each rank's stage: a model too large for this machine is
    refused with about half the whole model's need on each of 2 stages;
  - a stage that stops (SIGSTOP, as a hung rank) under ZT_COMM_TIMEOUT=5: the job ends
    non-zero within a bounded time and rank 0's line names rank 1: the message it waited for
    (point-to-point) or the step's host-side sum it never joined (the collective watchdog).

With ZT_TEST_SANITIZED=1 (the sanitizer pass's ctest) one layout of each code path runs:
accumulation 2 only, ZeRO-1 only for (2, 2), the repeat (not eager), no (2, 1), NVMe offload
only, the checkpoint resumed as 1 rank and (2, 2), activation checkpointing not on (2, 2), its
inputs on NVMe with 1F1B only.

Usage: test_pipeline.py ZT_TRAIN MPIEXEC WORKDIR
"""
import json
import os
import re
import signal
import struct
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from trainlib import SANITIZED, Runner, f32_tensors  # noqa: E402

ZT, MPIEXEC, WORK = sys.argv[1:4]
# under the sanitizers (ctest's environment) one layout of each code path, not every variant
FULL = not SANITIZED
run = Runner(ZT, MPIEXEC, WORK, env={"STARPU_SILENT": "1", "ZT_COMM_TIMEOUT": "60"})
model, data = run.tiny_gpt2(n_layer=4)
BASE = {"train_micro_batch_size_per_gpu": 4, "seed": 5, "gradient_clipping": 1.0,
        "optimizer": {"type": "AdamW", "params": {"lr": 3e-3, "weight_decay": 0.01}}}


def ds(name, accum=2, stages=1, **extra):
    d = dict(BASE, train_batch_size=4 * accum, gradient_accumulation_steps=accum)
    d.update(extra)
    if stages > 1:
        d["pipeline"] = dict(d.get("pipeline", {}), stages=stages)
    return run.write(name + ".json", d)


def weights(path):
    """{name: floats} in the file's order (F32)"""
    return {k: struct.unpack("<%df" % (len(b) // 4), b) for k, b in f32_tensors(path).items()}


def max_diff(a, b):
    return max(max(abs(x - y) for x, y in zip(a[k], b[k])) for k in a)


def rel(a, b):
    return max(abs(x - y) / max(abs(y), 1e-30) for x, y in zip(a, b))


def train(label, n, cfg, env=None, grads=False, trace=False):
    args = ["--ds-config", cfg, "--model", model, "--data", data, "--steps", "4"]
    if grads:
        args += ["--dump-grads", run.path(label + "_grads.safetensors")]
    if trace:
        args += ["--trace", run.path(label + "_trace.json")]
    recs, w, _ = run.train(label, n, args, env=env)
    return [r["loss"] for r in recs], w


def against_one_rank(tag, got, got_w, ref_tag, ref, ref_w):
    """losses 1e-5, exported weights 1e-3 (names and order), step-1 gradients 1e-5"""
    wr, wg = weights(ref_w), weights(got_w)
    run.check(len(got) == 4 and rel(got, ref) <= 1e-5,
              "%s: losses %s vs 1 rank %s (relative %.2g <= 1e-5)" % (
                  tag, got, ref, rel(got, ref) if len(got) == 4 else -1))
    run.check(list(wg) == list(wr) and max_diff(wg, wr) <= 1e-3,
              "%s: exported weights: the 1-rank file's names in its order, largest "
              "difference %.2g <= 1e-3" % (tag, max_diff(wg, wr)))
    gr, gg = (weights(run.path(x + "_grads.safetensors")) for x in (ref_tag, tag))
    worst = max((max(abs(x - y) for x, y in zip(gg[k], gr[k])) /
                 max(max(abs(x) for x in gr[k]), 1e-30), k) for k in gr)
    run.check(worst[0] <= 1e-5, "%s: step-1 gradients within 1e-5 of 1 rank's, normalised "
              "(worst %s: %.2g)" % (tag, worst[1], worst[0]))


for accum in (2, 1) if FULL else (2,):
    ref, ref_w = train("ref_a%d" % accum, 1, ds("ref_a%d" % accum, accum), grads=True)
    for stages in (2, 3):
        tag = "pp%d_a%d" % (stages, accum)
        got, got_w = train(tag, stages, ds(tag, accum, stages), grads=True)
        against_one_rank(tag, got, got_w, "ref_a%d" % accum, ref, ref_w)

# ---- (dp, pp) = (2, 2): two replicas per stage, 4 ranks on the machine's cores ----
cfg_a4 = ds("ref_a4", 4, zero_optimization={"stage": 1})
ref, ref_w = train("ref_a4", 1, cfg_a4, grads=True)
dp2pp2 = {}
for zs in (0, 1) if FULL else (1,):
    tag = "dp2pp2_z%d" % zs
    dp2pp2[zs] = ds(tag, 2, 2, train_batch_size=16, zero_optimization={"stage": zs})
    got, got_w = train(tag, 4, dp2pp2[zs], grads=True)
    against_one_rank(tag, got, got_w, "ref_a4", ref, ref_w)
    if zs == 1:
        dp2pp2_losses, dp2pp2_w = got, got_w
# bits: a repeat and another scheduler of (2, 2); (dp, pp) = (2, 1), data parallelism alone
for label, env in (("repeat", None), ("eager", {"STARPU_SCHED": "eager"}))[:2 if FULL else 1]:
    got, got_w = train("dp2pp2_" + label, 4, dp2pp2[1], env=env, trace=label == "repeat")
    with open(got_w, "rb") as f, open(dp2pp2_w, "rb") as g:
        same = f.read() == g.read()
    run.check(got == dp2pp2_losses and same, "(2, 2) %s: losses and weights bit-identical (%s "
              "vs %s)" % (label, got, dp2pp2_losses))
if FULL:
    got, got_w = train("dp2pp1", 2, ds("dp2pp1", 2, 1, train_batch_size=16,
                                       pipeline={"stages": 1}, zero_optimization={"stage": 1}),
                       grads=True)
    against_one_rank("dp2pp1", got, got_w, "ref_a4", ref, ref_w)

# ---- activation checkpointing in a stage: each activation set recomputes in its own window ----
AC = {"number_checkpoints": 4}
# (each stage plans its own 2 layers: a window of 1 makes one of them recompute)
acl, acw = train("ac_pp2", 2, ds("ac_pp2", 2, 2, activation_checkpointing=AC),
                 env={"ZT_RECOMPUTE_WINDOW": "1"}, trace=True)
pl, pw = train("noac_pp2", 2, ds("noac_pp2", 2, 2))
with open(acw, "rb") as f, open(pw, "rb") as g:
    same = f.read() == g.read()
ZTT = os.path.join(os.path.dirname(ZT), "zt-trace")
acs = json.loads(subprocess.run([ZTT, "summary", run.path("ac_pp2_trace.json"), "--json"],
                                capture_output=True, text=True, timeout=120).stdout)
recomp = sum(x.get("recompute_ms", 0) for x in acs.get("steps", []))
run.check(acl == pl and same and recomp > 0, "(1, 2) with every layer checkpointed: losses and "
          "weights bit-identical to storing everything (%s vs %s), recompute in the trace %.2f "
          "ms" % (acl, pl, recomp))
if FULL:  # the sanitizers: checkpointing in a stage on 2 ranks above
    got, _ = train("ac_dp2pp2", 4, ds("ac_dp2pp2", 2, 2, train_batch_size=16,
                                       activation_checkpointing=AC))
    run.check(len(got) == 4 and rel(got, ref) <= 1e-5, "(2, 2) with every layer checkpointed: "
              "losses %s vs 1 rank %s" % (got, ref))
# the kept inputs on NVMe in a stage: each activation set has its own input sets and file
# regions (1F1B with 4 micro-batches: 2 sets, each serving 2 micro-batches a step). 6 layers, 3
# a stage, all checkpointed, a recompute window of 1: on each stage 2 layers recompute, their
# inputs move, and one of them goes through the file. The swap through the thread engine (with
# io_uring, refused: a stage's swap writes were seen to stall, docs/pipeline.md)
os.makedirs(run.path("nvme"), exist_ok=True)
deep6 = run.write("deep6_model.json", {"vocab_size": 64, "seq_len": 16, "n_embd": 32,
                                       "n_layer": 6, "n_head": 2})
ACN = {"number_checkpoints": 6, "offload": {"device": "nvme", "nvme_path": run.path("nvme")}}
for sched, accum in (("1f1b", 4), ("gpipe", 2))[:2 if FULL else 1]:
    got = {}
    for tag, extra in (("plain", {}), ("acnv", {"activation_checkpointing": ACN})):
        name = "%s_%s_a%d" % (tag, sched, accum)
        got[tag] = run.train(name, 2, [
            "--ds-config", ds(name, accum, 2, pipeline={"schedule": sched}, **extra),
            "--model", deep6, "--data", data, "--steps", "4"],
            env={"ZT_RECOMPUTE_WINDOW": "1", "ZT_AIO_ENGINE": "threads"})
    with open(got["acnv"][1], "rb") as f, open(got["plain"][1], "rb") as g:
        same = f.read() == g.read()
    moved = [int(x) for x in re.findall(r"(\d+) through NVMe", got["acnv"][2].stdout)]
    run.check([r["loss"] for r in got["acnv"][0]] == [r["loss"] for r in got["plain"][0]] and
              same and moved == [1, 1], "(1, 2) %s, %d micro-batches, 6 layers checkpointed, "
              "their inputs on NVMe: losses and weights bit-identical to storing everything; "
              "inputs through NVMe per stage %s (expected 1 each)" % (sched, accum, moved))
p = run.launch(2, ["--ds-config", ds("acnv", 2, 2, activation_checkpointing=dict(
    AC, offload={"device": "nvme", "nvme_path": run.path("nvme")})), "--model", model,
                   "--data", data, "--steps", "1"], timeout=120)
errs = [l for l in (p.stdout + p.stderr).splitlines() if "error:" in l]
run.check(p.returncode == 2 and len(errs) == 1 and "ZT_AIO_ENGINE=threads" in errs[0],
          "the same through io_uring: exit %d, %s" % (p.returncode, errs))

# ---- the optimizer offloaded inside a stage: to host memory (ZeRO-Offload), to NVMe ----
os.makedirs(run.path("nvme"), exist_ok=True)
for label, n, dp, off in (("(1, 2) offload cpu", 2, 1, {"device": "cpu"}),
                          ("(2, 2) offload nvme", 4, 2, {"device": "nvme",
                                                         "nvme_path": run.path("nvme")}))[
                                                             0 if FULL else 1:]:
    tag = "off_" + off["device"]
    cfg = ds(tag, 4 // dp, 2, train_batch_size=16,
             zero_optimization={"stage": 1, "offload_optimizer": off})
    got, _ = train(tag, n, cfg)
    run.check(len(got) == 4 and rel(got, ref) <= 1e-5, "%s: losses %s vs 1 rank %s (relative "
              "%.2g <= 1e-5)" % (label, got, ref, rel(got, ref) if len(got) == 4 else -1))

# ---- checkpoints: a pipeline saves one shard per rank and resumes in any layout ----
CK, CK1 = run.path("ck"), run.path("ck1")
saved, _, _ = run.train("ck_save", 4, ["--ds-config", dp2pp2[1], "--model", model, "--data", data,
                                       "--steps", "2", "--save-dir", CK])
run.check([r["loss"] for r in saved] == dp2pp2_losses[:2] and
          sorted(os.listdir(os.path.join(CK, "step2"))) ==
          ["meta.json"] + ["rank%d.zts" % r for r in range(4)],
          "(2, 2) saving at step 2: losses %s as unsaved, one shard per rank: %s" % (
              [r["loss"] for r in saved], sorted(os.listdir(os.path.join(CK, "step2")))))
ZCK = os.path.join(os.path.dirname(ZT), "zt-ckpt")
v = subprocess.run([ZCK, "verify", CK], capture_output=True, text=True, timeout=120)
run.check(v.returncode == 0, "zt-ckpt verify of the (2, 2) checkpoint: %s" % (
    v.stdout + v.stderr).strip()[-300:])
for label, n, cfg in (("1 rank", 1, cfg_a4), ("(2, 2)", 4, dp2pp2[1]),
                      ("(1, 3)", 3, ds("ck_pp3", 4, 3)))[:3 if FULL else 2]:
    recs, _, _ = run.train("ck_" + label.strip("()").replace(", ", "_").replace(" ", ""), n, [
        "--ds-config", cfg, "--model", model, "--data", data, "--steps", "4", "--resume", CK])
    got = [r["loss"] for r in recs]
    want = dp2pp2_losses[2:] if n == 4 else ref[2:]
    ok = got == want if n == 4 else len(got) == 2 and rel(got, want) <= 1e-5
    run.check(ok, "(2, 2) checkpoint resumed as %s: steps 3-4 losses %s vs %s (%s)" % (
        label, got, want, "bit-identical to the unbroken (2, 2) run" if n == 4 else
        "the 1-rank run's, relative 1e-5"))
run.train("ck1_save", 1, ["--ds-config", cfg_a4, "--model", model, "--data", data, "--steps", "2",
                          "--save-dir", CK1])
recs, _, _ = run.train("ck1_pp2", 2, ["--ds-config", ds("ck_pp2", 4, 2), "--model", model, "--data",
                                      data, "--steps", "4", "--resume", CK1])
got = [r["loss"] for r in recs]
run.check(len(got) == 2 and rel(got, ref[2:]) <= 1e-5, "a 1-rank checkpoint resumed as (1, 2): "
          "steps 3-4 losses %s vs %s" % (got, ref[2:]))
# a deeper model's weights imported (no model shape recorded): each stage finds its own tensors
# there, but the checkpoint holds more than the stages together: refused on every rank
deep = run.write("deep_model.json", {"vocab_size": 64, "seq_len": 16, "n_embd": 32, "n_layer": 6,
                                      "n_head": 2})
_, deep_w, _ = run.train("deep", 1, ["--ds-config", ds("deep", 1), "--model", deep, "--data", data,
                                     "--steps", "1"])
subprocess.run([ZCK, "import", "--safetensors", deep_w, "--out", run.path("ck_deep")],
               capture_output=True, text=True, timeout=120, check=True)
p = run.launch(2, ["--ds-config", ds("ck_deep_pp2", 1, 2), "--model", model, "--data", data,
                   "--steps", "2", "--resume", run.path("ck_deep")], timeout=120)
errs = [l for l in (p.stdout + p.stderr).splitlines() if "error:" in l]
# the rank that learnt of the failure from the other (ZT_ERR_PEER) must not end the job: that
# could kill rank 0 before it prints the cause
# (Open MPI's banner names the rank that called MPI_Abort; it sometimes fails to print it at
# all, so rank 0's is not required)
run.check(p.returncode == 1 and any("another model's checkpoint" in e for e in errs) and
          "MPI_ABORT was invoked on rank 1" not in p.stdout + p.stderr,
          "a 6-layer model's imported weights into a 4-layer pipeline: exit %d, %s, rank 1 "
          "left the job's end to rank 0" % (p.returncode, errs[:2]))

# ---- odd tensors: every skipped parameter's draws are whole Box-Muller pairs ----
odd = run.write("odd_model.json", {"vocab_size": 64, "seq_len": 16, "n_embd": 9, "n_layer": 4,
                                   "n_head": 3})
odd_args = ["--ds-config", ds("odd", 1), "--model", odd, "--data", data, "--steps", "2"]
r1, _, _ = run.train("odd_ref", 1, odd_args)
r2, _, _ = run.train("odd_pp2", 2, odd_args[:1] + [ds("odd2", 1, 2)] + odd_args[2:])
run.check(rel([x["loss"] for x in r2], [x["loss"] for x in r1]) <= 1e-5,
          "n_embd 9 (odd c_attn and c_proj sizes): pp2 losses %s vs 1 rank %s" % (
              [x["loss"] for x in r2], [x["loss"] for x in r1]))

# ---- bits: repeat, another scheduler, the GPipe schedule ----
cfg2 = ds("pp2", 2, 2)
base_l, base_w = train("bits", 2, cfg2)
for label, cfg, env in (("repeat", cfg2, None), ("eager", cfg2, {"STARPU_SCHED": "eager"}),
                        ("gpipe", ds("gpipe", 2, 2, pipeline={"schedule": "gpipe"}), None)):
    l, w = train("bits_" + label, 2, cfg, env=env)
    with open(w, "rb") as f, open(base_w, "rb") as g:
        same = f.read() == g.read()
    run.check(l == base_l and same, "pp2 %s: losses and weights bit-identical to the first run "
              "(%s vs %s)" % (label, l, base_l))

# ---- bf16 ----
bl, _ = train("bf16_ref", 1, ds("bf16_ref", 2, bf16={"enabled": True}))
bp, _ = train("bf16_pp2", 2, ds("bf16_pp2", 2, 2, bf16={"enabled": True}))
run.check(rel(bp, bl) <= 1e-3, "bf16 pp2: losses %s vs 1 rank %s (relative %.2g <= 1e-3)"
          % (bp, bl, rel(bp, bl)))
# the replicas hold parts of the fp32 master weights (ZeRO-1): the export consolidates them
bl, blw = train("bf16_ref4", 1, ds("bf16_ref4", 4, bf16={"enabled": True}))
bp, bpw = train("bf16_dp2pp2", 4, ds("bf16_dp2pp2", 2, 2, train_batch_size=16, bf16={
    "enabled": True}, zero_optimization={"stage": 1}))
run.check(rel(bp, bl) <= 1e-3 and max_diff(weights(bpw), weights(blw)) <= 1e-2,
          "bf16 (dp, pp) = (2, 2) ZeRO-1: losses %s vs 1 rank %s (relative %.2g <= 1e-3), "
          "exported weights within %.2g <= 1e-2" % (bp, bl, rel(bp, bl),
                                                    max_diff(weights(bpw), weights(blw))))


# ---- the schedules' memory bound, counted in the trace ----
FWD = ("_forward", "crossentropy")
# the input-gradient chain; the weight- and bias-gradient tasks sum over all rows, no row block's
BWD = ("_backward", "_backward_inp")


def in_flight(ztr, step):
    """per rank: the most micro-batches in flight on one row block, from the block's first
    forward task to its last input-gradient task (a task of a micro-batch's row block b waits
    for its own data only, so block 0 of micro-batch m may start while blocks 1-3 of m - 2 end)"""
    span = {}
    with open(ztr) as f:
        for line in f:
            if line.startswith("#"):
                continue
            x = line.split()
            rank, kind, st, mb, blk = int(x[0]), x[2], int(x[3]), int(x[5]), int(x[6])
            if st != step or mb < 0 or blk < 0:
                continue
            s, e = span.setdefault((rank, blk, mb), [float("inf"), float("-inf")])
            if kind.endswith(FWD):
                span[(rank, blk, mb)][0] = min(s, float(x[10]))
            if kind.endswith(BWD):
                span[(rank, blk, mb)][1] = max(e, float(x[11]))
    most = {}
    for rank, blk in {k[:2] for k in span}:
        pts = sorted([(s, 1) for k, (s, e) in span.items() if k[:2] == (rank, blk)] +
                     [(e, -1) for k, (s, e) in span.items() if k[:2] == (rank, blk)])
        cur = top = 0
        for _, d in pts:
            cur += d
            top = max(top, cur)
        most[rank] = max(most.get(rank, 0), top)
    return [most[r] for r in sorted(most)]


for sched, bound in (("1f1b", 2), ("gpipe", 4)):
    cfg = ds("flight_" + sched, 4, 2, pipeline={"schedule": sched})
    train("flight_" + sched, 2, cfg, trace=True)
    got = in_flight(run.path("flight_%s_trace.ztr" % sched), 3)
    # GPipe allows every micro-batch in flight; how many are at once is the schedule's timing
    # (a slow run may not reach all of them), so it must pass 1F1B's bound somewhere, not reach
    # its own
    ok = all(g <= bound for g in got) and (sched == "1f1b" or max(got) > 2)
    run.check(len(got) == 2 and ok, "%s, 2 stages, 4 micro-batches: micro-batches in flight per "
              "stage %s (bound %d%s)" % (sched, got, bound, ", above 1F1B's 2 on a stage"
                                         if sched == "gpipe" else ""))

# the trace: the stages as processes, and zt-trace summary's bubble per step
ZTT = os.path.join(os.path.dirname(ZT), "zt-trace")
summary = json.loads(subprocess.run([ZTT, "summary", run.path("flight_1f1b_trace.json"), "--json"],
                                    capture_output=True, text=True, timeout=120).stdout)
pipe = summary.get("pipeline", {})
with open(run.path("flight_1f1b_trace.json")) as f:
    names = [e["args"]["name"] for e in json.load(f)["traceEvents"]
             if e.get("name") == "process_name"]
run.check(pipe.get("stages") == 2 and abs(pipe.get("theory", 0) - 0.2) < 1e-9 and
          len(pipe.get("steps", [])) == 4 and
          all(0 <= x["bubble"] < 1 and x["imbalance"] >= 1 for x in pipe["steps"]) and
          names == ["rank 0: stage 0 of 2", "rank 1: stage 1 of 2"],
          "trace: processes %s; zt-trace summary's pipeline %s" % (names, pipe))
# (2, 2): the bubble of each replica's two stages (world ranks 0, 2 and 1, 3), averaged
summary = json.loads(subprocess.run([ZTT, "summary", run.path("dp2pp2_repeat_trace.json"),
                                     "--json"], capture_output=True, text=True,
                                    timeout=120).stdout)
pipe = summary.get("pipeline", {})
run.check(pipe.get("stages") == 2 and pipe.get("replicas") == 2 and
          len(pipe.get("steps", [])) == 4 and
          all(0 <= x["bubble"] < 1 and x["imbalance"] >= 1 for x in pipe["steps"]),
          "(2, 2) trace: zt-trace summary's pipeline of 2 stages x 2 replicas %s" % pipe)

# ---- refusal: a cut between ln_f and the head ----
p = run.launch(2, ["--ds-config", ds("cut", 2, 2, pipeline={"partition": "type:ln_f|head"}),
                   "--model", model, "--data", data, "--steps", "1"], timeout=120)
errs = [l for l in (p.stdout + p.stderr).splitlines() if "error:" in l]
run.check(p.returncode == 2 and len(errs) == 1 and "cuts between ln_f and the head" in errs[0],
          "pipeline with a cut between ln_f and the head: exit %d, %s" % (p.returncode, errs))

# ---- the start-up memory check sizes a rank's stage, not the whole model ----
huge = run.write("huge_model.json", {"vocab_size": 64, "seq_len": 8, "n_embd": 120000,
                                     "n_layer": 4, "n_head": 2})
need = {}
for label, n, cfg in (("1 rank", 1, ds("huge1", 1, 1)), ("2 stages", 2, ds("huge2", 1, 2))):
    p = run.launch(n, ["--ds-config", cfg, "--model", huge, "--data", data, "--steps", "1"],
                   timeout=120)
    got = [float(x) for x in re.findall(r"needs about ([0-9.]+) GiB of host memory", p.stderr)]
    need[label] = got
    run.check(p.returncode != 0 and len(got) == n, "%s, layers of 120000 x 120000: refused, "
              "each rank naming its need (%s)" % (label, got))
if len(need["1 rank"]) == 1 and len(need["2 stages"]) == 2:
    whole, stage = need["1 rank"][0], max(need["2 stages"])
    run.check(0.45 * whole <= stage <= 0.55 * whole, "each of 2 stages needs about half the "
              "whole model's host memory: %.1f of %.1f GiB" % (stage, whole))

# ---- a stage that stops ----
wrap = run.path("wrap.sh")
with open(wrap, "w") as f:
    f.write('#!/bin/sh\necho $$ > %s/pid.$OMPI_COMM_WORLD_RANK\nexec %s "$@"\n' % (WORK, ZT))
os.chmod(wrap, 0o755)
cmd = [MPIEXEC, "--allow-run-as-root", "--oversubscribe", "-np", "2", "-x", "STARPU_NCPU=1",
       "-x", "STARPU_SILENT=1", "-x", "ZT_COMM_TIMEOUT=5", wrap, "--ds-config", cfg2, "--model",
       model, "--data", data, "--steps", "100000", "--log", run.path("stop.jsonl")]
proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
deadline = time.time() + 120
while time.time() < deadline and proc.poll() is None:
    if os.path.exists(run.path("stop.jsonl")) and sum(1 for _ in open(run.path("stop.jsonl"))) >= 3:
        break
    time.sleep(0.05)
pid = int(open(run.path("pid.1")).read())
os.kill(pid, signal.SIGSTOP)
t0 = time.time()
try:
    _, err = proc.communicate(timeout=60)
except subprocess.TimeoutExpired:
    proc.kill()
    _, err = proc.communicate()
took = time.time() - t0
for sig in (signal.SIGCONT, signal.SIGKILL):
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass
# where rank 0 waits when rank 1 stops: on a message from it (p2p: "timed out") or in a
# host-side sum of the step (the collective watchdog: "has sent nothing", "has not reached")
lines = [l for l in err.splitlines() if "error:" in l and "rank 1" in l and
         ("timed out" in l or "has sent nothing" in l or "has not reached" in l)]
run.check(proc.returncode not in (0, None) and took < 45 and len(lines) >= 1,
          "stage 1 stopped: exit %s after %.0f s, %s" % (proc.returncode, took,
                                                          lines[:1] or err[-1500:]))
sys.exit(run.finish("test_pipeline"))
