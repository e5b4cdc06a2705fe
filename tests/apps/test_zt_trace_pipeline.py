#!/usr/bin/env python3
"""tests/apps/test_zt_trace_pipeline.py: `zt-trace pipeline`, the projection of a recorded run to
a pipeline of stages, checked against pipeline arithmetic computed here:

- a hand-written replay file (one worker; per step and layer a 1 ms forward and a 2 ms
  backward task on 4 layers, 0.4 ms of AdamW; the first step, the warm-up, 10x slower so that
  using it would show): cut by the measured time into 2 stages of 2 layers, 4 micro-batches,
  free messages: both schedules take (M + P - 1)(F + B) = 5 x 6 ms for the forwards and
  backwards, the bubble is (P - 1)/(M + P - 1) = 0.2, 1F1B keeps at most P - s micro-batches in
  flight on stage s and GPipe all M, the optimizer's 0.4 ms is shared out by parameters; with
  1 ms messages 1F1B's forwards and backwards end at 34 ms (worked out by hand: stage 0's last
  backward starts when stage 1's ends at 29 ms plus its message) and the tied embedding's
  gradient takes 1 ms;
- the same file by parameters and uniformly: the cut graph/pipe_plan.c makes for this shape;
  with --dp 2, each stage's gradients all-reduced in a ring: 2 (N-1) alpha + 2 (N-1)/N x 4 x its
  parameters / B before its optimizer, tokens/s counting both replicas;
- a run recorded here (tiny GPT-2, 2 micro-batches): one stage has no bubble and takes M x (its
  per-micro-batch work) for the forwards and backwards; two stages cut by time are no more
  imbalanced than by parameters;
- `zt-trace summary` of a hand-written (dp, pp) = (2, 2) trace: each replica's bubble (world
  rank s x dp + d holds stage s of replica d), averaged;
- bad input: no --stages, more stages than layer specs, an unknown schedule, a trace without
  the model's shape: one line "zt-trace: error: ...", exit 2 or 1.

Usage: test_zt_trace_pipeline.py ZT_TRAIN ZT_TRACE WORKDIR
"""
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "graph"))
import trainlib  # noqa: E402

ZT, ZTT, WORK = sys.argv[1:4]
run = trainlib.Runner(ZT, "mpiexec", WORK)

HEAD = ("# zerotask replay 4: rank id kind step layer mb blk worker node submit_us start_us "
        "end_us cpu_us waited_us bytes_read bytes_written prio recompute ndeps deps...\n")
META = ("# meta world=1 workers=1 micro_batch=1 grad_accum=1 seq_len=16 n_layer=4 n_embd=8 "
        "n_head=2 vocab_size=32\n")


def hand_trace(name, meta=META):
    """two steps on one worker, each task after the one before; step 1 ten times slower"""
    lines, tid, t = [], 0, 0.0
    for step, slow in ((1, 10), (2, 1)):
        work = [("matmul_forward", l, 1000) for l in range(4)] + \
               [("matmul_backward_inp", l, 2000) for l in reversed(range(4))] + \
               [("adamw", -1, 400)]
        for kind, layer, us in work:
            tid += 1
            dep = "1 %d" % (tid - 1) if tid > 1 else "0"
            lines.append("0 %d %s %d %d 0 -1 0 0 %.1f %.1f %.1f %.1f 0 8 8 0 0 %s" % (
                tid, kind, step, layer, t, t, t + us * slow, us * slow, dep))
            t += us * slow
    with open(run.path(name), "w") as f:
        f.write(HEAD + meta + "".join(x + "\n" for x in lines))
    return run.path(name)


def ztt(*args, ok=True):
    return trainlib.run_tool(ZTT, *args, ok=ok)


def project(path, *opts):
    return json.loads(ztt("pipeline", path, "--json", *opts).stdout)


def near(a, b, tol=1e-6):
    return abs(a - b) <= tol * max(1.0, abs(b))


z = hand_trace("uniform.ztr")
free = ("--alpha-us", "0", "--bw-gbs", "1e9")
for sched, flight in (("1f1b", [2, 1]), ("gpipe", [4, 4])):
    r = project(z, "--stages", "2", "--micro", "4", "--partition", "time", "--schedule", sched,
                *free)
    st = r["stage"]
    run.check([(s["first_spec"], s["last_spec"]) for s in st] == [(0, 2), (3, 6)],
              "%s: cut by time into specs 0-2 and 3-6 (two blocks each): %s" % (
                  sched, [(s["first_spec"], s["last_spec"]) for s in st]))
    run.check(all(near(s["fwd_ms"], 2.0) and near(s["bwd_ms"], 4.0) for s in st),
              "%s: per stage 2 ms forward and 4 ms backward per micro-batch (step 2 only): %s"
              % (sched, [(s["fwd_ms"], s["bwd_ms"]) for s in st]))
    run.check(near(r["pipeline_ms"], 30.0) and near(r["bubble"], 0.2) and
              near(r["bubble_theory"], 0.2),
              "%s: forwards and backwards in (M+P-1)(F+B) = 30 ms (%.6f), bubble 0.2 (%.6f)"
              % (sched, r["pipeline_ms"], r["bubble"]))
    run.check([s["in_flight"] for s in st] == flight, "%s: micro-batches in flight per stage "
              "%s, want %s" % (sched, [s["in_flight"] for s in st], flight))
    # AdamW's 0.4 ms by parameters: stage 0 holds embed and 2 blocks, stage 1 2 blocks, ln_f
    # and the tied head (which counts wte again)
    C, V, T = 8, 32, 16
    block = 12 * C * C + 13 * C
    p0, p1 = V * C + T * C + 2 * block, 2 * block + 2 * C + V * C
    want = [0.4 * p0 / (p0 + p1), 0.4 * p1 / (p0 + p1)]
    run.check(all(near(s["optim_ms"], w) for s, w in zip(st, want)) and
              near(r["step_ms"], 30.0 + max(want)),
              "%s: optimizer shares %s (want %s), step %.6f ms" % (
                  sched, [s["optim_ms"] for s in st], want, r["step_ms"]))

r = project(z, "--stages", "2", "--micro", "4", "--partition", "time", "--alpha-us", "1000",
            "--bw-gbs", "1e9")
run.check(near(r["pipeline_ms"], 34.0, 1e-5) and near(r["tied_ms"], 1.0, 1e-5),
          "1f1b with 1 ms messages: forwards and backwards %.6f ms (want 34), the tied "
          "gradient %.6f ms (want 1)" % (r["pipeline_ms"], r["tied_ms"]))
# two replicas of each stage: each stage's fp32 gradients all-reduced in a ring before its
# optimizer, 2 (N-1) alpha + 2 (N-1)/N x 4 x params / B; the run was ZeRO-0, so the optimizer's
# work is not split
r = project(z, "--stages", "2", "--micro", "4", "--partition", "time", "--dp", "2",
            "--alpha-us", "100", "--bw-gbs", "0.001")
C, V, T = 8, 32, 16
block = 12 * C * C + 13 * C
p0, p1 = V * C + T * C + 2 * block, 2 * block + 2 * C + V * C
want = [(2 * 100 + 4 * p / 1.0) / 1e3 for p in (p0, p1)]  # 0.001 GB/s = 1 byte/us
got = [s_["reduce_ms"] for s_ in r["stage"]]
run.check(r["dp"] == 2 and all(near(g, w, 1e-6) for g, w in zip(got, want)) and
          near(r["stage"][0]["optim_ms"], 0.4 * p0 / (p0 + p1)),
          "--dp 2: each stage's gradient all-reduce %s ms, want %s; optimizer not split" % (
              got, want))
run.check(near(r["tokens_per_s"], 2 * 4 * 1 * 16 / (r["step_ms"] / 1e3), 1e-6),
          "--dp 2: tokens/s counts both replicas' micro-batches: %.3f" % r["tokens_per_s"])
for part, cut in (("parameters", [(0, 2), (3, 6)]), ("uniform", [(0, 3), (4, 6)])):
    r = project(z, "--stages", "2", "--partition", part, *free)
    got = [(s["first_spec"], s["last_spec"]) for s in r["stage"]]
    run.check(got == cut and r["micro_batches"] == 1,
              "--partition %s: specs %s (want %s), 1 micro-batch (the recorded accumulation)"
              % (part, got, cut))
text = ztt("pipeline", z, "--stages", "2", "--micro", "4", "--partition", "time").stdout
run.check("0-2 (embed .. block 1)" in text and "bubble:" in text and "(P-1)/(M+P-1)" in text,
          "text output names each stage's specs and the bubble:\n" + text)

# ---- a recorded run ----
model, data = run.tiny_gpt2(n_layer=4)
ds = run.write("ds.json", {"train_batch_size": 4, "train_micro_batch_size_per_gpu": 2,
                           "gradient_accumulation_steps": 2,
                           "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}})
tr = run.path("rec.json")
run.train("rec", 1, ["--ds-config", ds, "--model", model, "--data", data, "--steps", "3",
                     "--trace", tr, "--quiet"])
one = project(tr, "--stages", "1")
s0 = one["stage"][0]
run.check(one["micro_batches"] == 2 and near(one["bubble"], 0.0) and
          near(one["pipeline_ms"], 2 * (s0["fwd_ms"] + s0["bwd_ms"]), 1e-5),
          "one stage: no bubble (%.6f), forwards and backwards = M x work (%.6f ms)" % (
              one["bubble"], one["pipeline_ms"]))
by_time = project(tr, "--stages", "2", "--partition", "time")
by_par = project(tr, "--stages", "2")
run.check(by_time["imbalance"] <= by_par["imbalance"] + 1e-9,
          "two stages: imbalance cut by time %.4f <= by parameters %.4f" % (
              by_time["imbalance"], by_par["imbalance"]))

# the measured times as a partition zt-train takes: the same cut as the projection's
text = ztt("pipeline", tr, "--stages", "2", "--partition", "time").stdout
snippet = [l for l in text.splitlines() if l.startswith("to train with the cut")]
pipe = json.loads("{" + snippet[0].split(": ", 1)[1] + "}")["pipeline"] if snippet else {}
dsw = run.write("ds_w.json", {"train_batch_size": 4, "train_micro_batch_size_per_gpu": 2,
                              "gradient_accumulation_steps": 2, "pipeline": pipe,
                              "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}})
p = run.launch(2, ["--ds-config", dsw, "--model", model, "--data", data, "--steps", "1"])
plan = [l for l in p.stdout.splitlines() if l.startswith("pipeline: rank 1:")]
want = "layers %d-%d" % (by_time["stage"][1]["first_spec"], by_time["stage"][1]["last_spec"])
run.check(p.returncode == 0 and by_time["partition_weights"] == pipe.get("partition_weights")
          and len(plan) == 1 and want in plan[0],
          "zt-train with the printed partition_weights: stage 1 %s (projection: %s)" % (
              plan, want))

# ---- zt-trace summary of a recorded (dp, pp) = (2, 2) run's trace, written by hand ----
# world rank s x dp + d holds stage s of replica d: replica 0 = ranks 0, 2 (10 ms each, one after
# the other: bubble 1 - 20 / (2 x 20) = 0.5), replica 1 = ranks 1, 3 (overlapping by 5 ms:
# 1 - 20 / (2 x 15) = 1/3); their mean 0.41667 (grouping ranks 0, 1 and 2, 3 would give 0.16667)
meta22 = ("# meta world=4 workers=1 micro_batch=1 grad_accum=2 pipeline_stages=2 seq_len=16 "
          "n_layer=4 n_embd=8 n_head=2 vocab_size=32\n")
spans = {0: (0, 10000), 2: (10000, 20000), 1: (0, 10000), 3: (5000, 15000)}
with open(run.path("dp2pp2.ztr"), "w") as f:
    f.write(HEAD + meta22)
    for r, (t0, t1) in sorted(spans.items()):
        f.write("%d %d matmul_forward 1 0 0 -1 0 0 %.1f %.1f %.1f %.1f 0 8 8 0 0 0\n"
                % (r, r + 1, t0, t0, t1, t1 - t0))
pipe = json.loads(ztt("summary", run.path("dp2pp2.ztr"), "--json").stdout).get("pipeline", {})
steps = pipe.get("steps", [{}])
run.check(pipe.get("stages") == 2 and pipe.get("replicas") == 2 and len(steps) == 1 and
          near(steps[0].get("bubble", -1), (0.5 + 1 / 3) / 2, 1e-6) and
          near(steps[0].get("imbalance", -1), 1.0, 1e-9),
          "(2, 2) trace: each replica's bubble (0.5 and 1/3), averaged: %s" % pipe)

# ---- bad input ----
bare = hand_trace("bare.ztr", meta="# meta world=1 workers=1 micro_batch=1 grad_accum=1\n")
for args, code, word in ((["pipeline", z], 2, "--stages"),
                         (["pipeline", z, "--stages", "8"], 2, "--stages 8"),
                         (["pipeline", z, "--stages", "2", "--schedule", "zigzag"], 2, "zigzag"),
                         (["pipeline", z, "--stages", "2", "--micro", "0"], 2, "--micro"),
                         (["pipeline", bare, "--stages", "2"], 1, "vocab_size")):
    p = ztt(*args, ok=False)
    err = p.stderr.strip().splitlines()
    run.check(p.returncode == code and len(err) == 1 and err[0].startswith("zt-trace: error: ")
              and word in err[0], "zt-trace %s: exit %d (want %d), %r" % (
                  " ".join(os.path.basename(a) for a in args), p.returncode, code, err))
sys.exit(run.finish("test_zt_trace_pipeline"))
