#!/usr/bin/env python3
"""tests/faults/test_ranks.py: ranks that do not run the same job, or a rank that stops.

Cases (2 ranks under mpirun, MPMD syntax `-np 1 zt-train A : -np 1 zt-train B` for per-rank
arguments):
  - rank 1 started with another --data file, the same files blended with other weights, or
    another --init-from file: start-up stops with
    exit 2 and one line (rank 0's) "ranks differ: the --data file set (size+digest of each) of
    rank 1 differs from rank 0's", before any step;
  - the same contents under another path (a copy) on rank 1 is the same input: the run passes;
  - a bad ZT_* knob, found by every rank: exit 2 and one line (rank 0's), not one per rank;
  - rank 1 stopped mid-run (SIGSTOP from the test, not dead) with ZT_COMM_TIMEOUT=5: the job
    ends well within the test's time, non-zero, and rank 0's timeout line names rank 1 as the one
    that went silent in the collective (or in a host-side sum between collectives) or never came
    to it; the stopped process is then continued and killed;
  - the same with rank 1 stopped inside a collective for certain (it stops itself right after
    entering collective #20: ZT_TEST_SKIP_COLLECTIVE=1:20:stop): rank 0's line says that rank 1
    entered it but has sent nothing since, instead of blaming the transport (the collective that
    times out on rank 0 is #20 or a later one it has started meanwhile).
The time to the report is counted from the stop (or, when rank 1 stops itself, from rank 0's
banner: start-up, slow under sanitizers, does not count).

Under mpirun, stderr also holds mpirun's own notes; the error lines are those holding "error:".

Usage: test_ranks.py APPS_DIR MPIEXEC WORKDIR
"""
import os
import re
import shutil
import signal
import subprocess
import threading
import time

import faultlib as F

F.setup()
ZT = F.prog("zt-train")
MPI = [F.MPIEXEC, "--allow-run-as-root", "--oversubscribe", "-x", "STARPU_NCPU=1",
       "-x", "STARPU_SILENT=1"]
base = F.tiny_run()
data = base[base.index("--data") + 1]


def mpmd(args0, args1, env=()):
    """mpirun with rank 0 running zt-train args0 and rank 1 zt-train args1"""
    x = []
    for kv in env:
        x += ["-x", kv]
    return MPI + x + ["-np", "1", ZT] + args0 + [":", "-np", "1", ZT] + args1


def expect_mpi(label, cmd, code, words, timeout=120):
    """cmd exits with code and exactly one error line, holding every word in words"""
    p = F.run(cmd, timeout)
    if p is None:
        return F.check(label, False, "no answer after %d s (a hang)" % timeout)
    lines = [l for l in (p.stdout + p.stderr).splitlines() if "error:" in l]
    ok = (p.returncode == code and len(lines) == 1 and
          lines[0].startswith("zerotask: error: ") and all(w in lines[0] for w in words) and
          not re.search(r"^step ", p.stdout, re.M))
    return F.check(label, ok, "exit %d, %r" % (p.returncode, lines))


expect_mpi("a bad knob on every rank", MPI + ["-x", "ZT_COMM_TIMEOUT=abc", "-np", "2", ZT] + base,
           2, ["ZT_COMM_TIMEOUT=abc: expected"])

# --data: another file on rank 1 (same size, other tokens), then the same contents elsewhere
other = F.write_tokens("other.bin", [(i * 3) % 64 for i in range(400)])
expect_mpi("--data differs on rank 1", mpmd(base, F.with_arg(base, "--data", other)), 2,
           ["ranks differ: the --data file set (size+digest of each) of rank 1 differs from "
            "rank 0's"])
# the same files in a blend of other weights on rank 1: other global batches
blend0 = F.with_arg(base, "--data", "0.7:%s,0.3:%s" % (data, other))
blend1 = F.with_arg(base, "--data", "0.5:%s,0.5:%s" % (data, other))
expect_mpi("--data weights differ on rank 1", mpmd(blend0, blend1), 2,
           ["ranks differ: the --data file set (size+digest of each) of rank 1 differs"])
copy = F.path("copy_of_tokens.bin")
shutil.copy(data, copy)
p = F.run(mpmd(base, F.with_arg(base, "--data", copy)), 120)
F.check("--data: the same contents under another path", p is not None and p.returncode == 0,
        "exit %s" % (p.returncode if p else "(hang)"))

# --init-from: weights of two seeds
w1, w2 = F.path("w1.safetensors"), F.path("w2.safetensors")
for seed, w in (("1", w1), ("2", w2)):
    p = F.run([ZT] + base + ["--seed", seed, "--export", w], 120)
    F.check("make weights (seed %s)" % seed, p is not None and p.returncode == 0,
            "exit %s" % (p.returncode if p else "(hang)"))
expect_mpi("--init-from differs on rank 1",
           mpmd(base + ["--init-from", w1], base + ["--init-from", w2]), 2,
           ["ranks differ: the --init-from file (size+digest) of rank 1 differs from rank 0's"])


# rank 1 stopped mid-run: rank 0's watchdog names it and the job ends
def read_stamped(stream, seen):
    """read rank 0's stdout to its end, noting when its first line and its step 5 came"""
    for line in stream:
        seen.setdefault("first", time.time())
        if re.match(r"\s*step\s+5/", line):
            seen.setdefault("step5", time.time())


def collective_number(line):
    """N of the first "collective #N" in line; 0 when there is none"""
    m = re.search(r"collective #(\d+)", line)
    return int(m.group(1)) if m else 0


def stopped_rank(label, env, want, min_seq=0):
    """start a 2-rank run with rank 1 stopped (env: by itself, else by SIGSTOP at step 5); rank
    0's timeout line must match want and name a collective numbered min_seq or later"""
    model = F.write_json("model_stop.json", {"vocab_size": 64, "seq_len": 16, "n_embd": 64,
                                             "n_layer": 2, "n_head": 4})
    ds = F.write_json("ds_stop.json", {
        "train_batch_size": 8, "train_micro_batch_size_per_gpu": 4, "steps_per_print": 1,
        "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
        "zero_optimization": {"stage": 2, "reduce_bucket_size": 20000}})
    toks = F.write_tokens("tokens_stop.bin", [(i * 5 + i // 7) % 64 for i in range(4000)])
    wrap = F.path("wrap.sh")
    with open(wrap, "w") as f:
        f.write('#!/bin/sh\necho $$ > %s/pid.$OMPI_COMM_WORLD_RANK\nexec %s "$@"\n'
                % (F.WORK, ZT))
    os.chmod(wrap, 0o755)
    for r in (0, 1):
        if os.path.exists(F.path("pid.%d" % r)):
            os.remove(F.path("pid.%d" % r))
    cmd = MPI + ["-x", "ZT_COMM_TIMEOUT=5"] + env + ["-np", "2", wrap, "--ds-config", ds, "--model",
                 model, "--data", toks, "--steps", "100000"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen, err_parts = {}, []  # when rank 0's first line (its banner) and step 5 came; stderr
    readers = [threading.Thread(target=read_stamped, args=(proc.stdout, seen)),
               threading.Thread(target=lambda: err_parts.append(proc.stderr.read()))]
    for t in readers:
        t.start()
    # the clock starts once both ranks are past start-up (rank 0's banner), so that slow
    # start-ups (sanitizers) do not count; env: rank 1 stops itself, else the test stops it
    wanted = "first" if env else "step5"
    deadline = time.time() + 120
    while wanted not in seen and proc.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    pid, t_stop = None, seen.get(wanted)
    if t_stop is not None and not env:
        pid = int(open(F.path("pid.1")).read())
        os.kill(pid, signal.SIGSTOP)
        t_stop = time.time()
    hang = ""
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        hang = "\n(test: still running 60 s after the stop)"
    took = time.time() - t_stop if t_stop else -1
    if env and os.path.exists(F.path("pid.1")):
        pid = int(open(F.path("pid.1")).read())
    if pid:  # the stopped process: continue it and end it, whatever mpirun did
        for sig in (signal.SIGCONT, signal.SIGKILL):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
    for t in readers:  # the pipes close once every rank has gone
        t.join(timeout=30)
    err = "".join(err_parts) + hang
    lines = [l for l in err.splitlines() if "ZT_COMM_TIMEOUT=5" in l]
    named = [l for l in lines if re.search(want, l) and collective_number(l) >= min_seq]
    F.check(label,
            t_stop is not None and proc.returncode != 0 and 0 <= took < 45 and len(named) == 1,
            "exit %s after %.0f s, %r" % (proc.returncode, took, named or err[-1500:]))


stopped_rank("rank 1 stopped (SIGSTOP) mid-run", [],
             r"rank 0: .*(rank 1 (entered it but )?has sent nothing for \d+ s|rank 1 has not "
             r"reached it)")
stopped_rank("rank 1 stopped inside collective #20", ["-x", "ZT_TEST_SKIP_COLLECTIVE=1:20:stop"],
             r"rank 0: collective #\d+ \w+ .*has waited \d+ s .*rank 1 entered it but has sent "
             r"nothing for \d+ s .*stopped or descheduled\?", min_seq=20)
F.finish()
