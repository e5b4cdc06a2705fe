#!/usr/bin/env python3
"""tests/apps/test_trace_predict.py: zt-trace replay predicts runs it has not seen (issue 6).

1. A trace recorded with STARPU_NCPU=2 (one rank), replayed with one worker, predicts the step
   time measured with STARPU_NCPU=1 within 15%.
2. A trace recorded on 2 ranks (ZeRO stage 2, STARPU_NCPU=1 each), replayed with 3 ranks,
   predicts the step time measured on 3 ranks within 20%. On this 2-core machine 3 ranks
   oversubscribe the cores: the replay puts the workers on the recorded cores round robin (two
   ranks share one core, as Linux keeps threads where they run), and the ranks' collectives
   make everyone wait for the slowest. (Fair sharing of both cores by all three, `--shared-cores`,
   predicts 25-30% too little here: measured while writing this test.)

Both measurements are taken in this test, next to the recording, with the same model and
per-rank batch (mean of the steps after the first). Why 15% and 20%: step times of a run
repeated on this machine move by about 5% (a 2-core VM with a noisy neighbour), and the model
leaves out what it cannot see in a trace: memory-bandwidth sharing between concurrent tasks (which
makes the recorded two-worker tasks slightly slower than alone), Linux moving threads between
cores, and the host threads (the submitting thread, MPI progress). Each effect is a few percent
(measured: -3% to +9% over six pairs of runs); the tolerances are the issue's. Runs once more (a fresh recording and
measurement) before failing, as a noisy neighbour can spoil one pair of runs.

Usage: test_trace_predict.py ZT_TRAIN ZT_TRACE MPIEXEC WORKDIR
"""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "graph"))
import trainlib  # noqa: E402

ZT, ZTT, MPI, WORK = sys.argv[1:5]
run = trainlib.Runner(ZT, MPI, WORK)
V = 2048
model = run.write("model.json", {"vocab_size": V, "seq_len": 64, "n_embd": 256, "n_layer": 3,
                                 "n_head": 4})
data = run.tokens("tokens.bin", [(31 * i + i // 7) % V for i in range(60000)])
STEPS = 5


def ds(world, stage):
    return run.write("ds%d.json" % world, {
        "train_batch_size": 8 * world, "train_micro_batch_size_per_gpu": 8,
        "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
        "zero_optimization": {"stage": stage}})


def measure(label, world, stage, env=None, trace=False):
    args = ["--ds-config", ds(world, stage), "--model", model, "--data", data, "--steps",
            str(STEPS), "--quiet"]
    if trace:
        args += ["--trace", run.path(label + ".json")]
    log, _, _ = run.train(label, world, args, env)
    ms = [x["ms"] for x in log[1:]]
    return sum(ms) / len(ms)


def predict(label, *opts):
    p = subprocess.run([ZTT, "replay", run.path(label + ".ztr"), "--json"] + list(opts),
                       capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        print("FAIL zt-trace replay %s: %s" % (label, p.stderr))
        sys.exit(1)
    return json.loads(p.stdout)["predicted_ms"]


def workers_case(attempt):
    measure("ncpu2_%d" % attempt, 1, 0, {"STARPU_NCPU": "2"}, trace=True)
    m1 = measure("ncpu1_%d" % attempt, 1, 0, {"STARPU_NCPU": "1"})
    p1 = predict("ncpu2_%d" % attempt, "--workers", "1")
    return p1, m1


def ranks_case(attempt):
    measure("ranks2_%d" % attempt, 2, 2, trace=True)
    m3 = measure("ranks3_%d" % attempt, 3, 2)
    p3 = predict("ranks2_%d" % attempt, "--ranks", "3")
    return p3, m3


for name, case, tol in (("STARPU_NCPU=2 trace predicts STARPU_NCPU=1", workers_case, 0.15),
                        ("2-rank trace predicts 3 ranks", ranks_case, 0.20)):
    for attempt in (1, 2):
        p, m = case(attempt)
        err = p / m - 1
        if abs(err) < tol or attempt == 2:
            run.check(abs(err) < tol, "%s: predicted %.1f ms, measured %.1f ms (%+.1f%%, "
                      "tolerance %.0f%%%s)" % (name, p, m, 100 * err, 100 * tol,
                                               ", second try" if attempt == 2 else ""))
            break
        print("retry %s: predicted %.1f ms, measured %.1f ms (%+.1f%%)" % (name, p, m, 100 * err))
sys.exit(run.finish("test_trace_predict"))
