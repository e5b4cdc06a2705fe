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
per-rank batch (the median of the steps after the first). zt-trace predicts another layout from
the tasks' recorded CPU times (--durations auto), for cores that serve the run alone. Why 15% and
20%: step times of a run repeated on this machine move by about 5% (a 2-core VM with a noisy
neighbour), and the model leaves out what it cannot see in a trace: memory-bandwidth sharing
between concurrent tasks, Linux moving threads between cores, and the host threads (the
submitting thread, MPI progress). Each effect is a few percent (measured: -2% to +7% over eight
rounds); the tolerances are the issue's. The rounds, the least-of-three and the load check that
sets a loaded round aside are explained at the bottom.

Usage: test_trace_predict.py ZT_TRAIN ZT_TRACE MPIEXEC WORKDIR
"""
import json
import os
import resource
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "graph"))
import trainlib  # noqa: E402

ZT, ZTT, MPI, WORK = sys.argv[1:5]
run = trainlib.Runner(ZT, MPI, WORK)
V = 2048
model = run.write("model.json", {"vocab_size": V, "seq_len": 64, "n_embd": 256, "n_layer": 3,
                                 "n_head": 4})
data = run.tokens("tokens.bin", [(31 * i + i // 7) % V for i in range(60000)])
STEPS = 6


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
    ms = sorted(x["ms"] for x in log[1:])
    return ms[len(ms) // 2]


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


def cpu_now():
    """(wall s, CPU s the machine spent busy (steal included), CPU s of this test and its
    finished children)"""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:9]]
    busy = (v[0] + v[1] + v[2] + v[5] + v[6] + v[7]) / os.sysconf("SC_CLK_TCK")
    me, ch = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.monotonic(), busy, me.ru_utime + me.ru_stime + ch.ru_utime + ch.ru_stime


def foreign_load(t0, t1):
    """cores other processes (or the hypervisor, as steal) used between two cpu_now()"""
    return max(0.0, ((t1[1] - t0[1]) - (t1[2] - t0[2])) / max(t1[0] - t0[0], 1e-9))


# A prediction is for cores that serve the run alone (zt-trace predicts another layout from the
# tasks' CPU times), so it can be checked only while no other process loads them: another
# process's load slows the recorded two-worker run in ways a trace cannot show (a preempted
# thread holding a lock the other worker waits for: +25-35% measured here with one busy loop
# beside the test, while the one-worker run it predicts stays as fast). A round is three
# alternating recordings and measurements, each side taken as the least of three (noise only adds
# time); a round during which other processes used more than LOAD_MAX cores is set aside and
# run again, up to ROUNDS times; if every round was loaded the test is skipped (CTest skip code
# 77) saying so; otherwise the first unloaded round must be within tolerance (a second unloaded
# round is allowed after a miss, as a noisy neighbour can spoil one round).
LOAD_MAX, ROUNDS = 0.25, 4
skipped = []
for name, case, tol in (("STARPU_NCPU=2 trace predicts STARPU_NCPU=1", workers_case, 0.15),
                        ("2-rank trace predicts 3 ranks", ranks_case, 0.20)):
    tries = 0
    for rnd in range(ROUNDS):
        c0 = cpu_now()
        pairs = [case(3 * rnd + k) for k in range(3)]
        load = foreign_load(c0, cpu_now())
        p, m = min(x[0] for x in pairs), min(x[1] for x in pairs)
        err = p / m - 1
        detail = "predicted %.1f ms, measured %.1f ms (%+.1f%%; least of %s and %s; other " \
                 "processes' load %.2f cores)" % (p, m, 100 * err,
                                                  "/".join("%.1f" % x[0] for x in pairs),
                                                  "/".join("%.1f" % x[1] for x in pairs), load)
        if load > LOAD_MAX:
            print("set aside (loaded machine) %s: %s" % (name, detail))
            continue
        tries += 1
        if abs(err) < tol or tries == 2:
            run.check(abs(err) < tol, "%s: %s, tolerance %.0f%%%s" % (
                name, detail, 100 * tol, ", second round" if tries == 2 else ""))
            break
        print("retry %s: %s" % (name, detail))
    else:
        if tries == 0:
            skipped.append(name)
        else:
            run.check(False, "%s: the one unloaded round missed (see above)" % name)
if skipped and not run.bad:
    print("SKIP %s: other processes used more than %.2f cores in each of %d rounds; a "
          "prediction for an idle machine cannot be checked on a loaded one" % (
              " and ".join(skipped), LOAD_MAX, ROUNDS))
    sys.exit(77)
sys.exit(run.finish("test_trace_predict"))
