#!/usr/bin/env python3
"""tests/graph/test_mpi_failures.py: what a multi-rank job does when something goes wrong.

  - a rank that skips a collective (ZT_TEST_SKIP_COLLECTIVE, test only): past ZT_COMM_TIMEOUT
    the waiting rank reports which rank has not reached which collective (number and task
    name) and the job exits non-zero, well before the test's own time limit;
  - a rank killed mid-step (SIGKILL): every other rank is gone and mpirun exits non-zero within
    60 s, with a message naming the lost rank;
  - a config error under mpirun is reported once (by rank 0), not once per rank, exit 2; so is
    a pipeline of 2 stages on 4 ranks whose partition cuts between ln_f and the head (each
    rank's place planned and printed, then refused);
  - a pipeline whose stages do not fit the host memory: each rank's one line names its stage
    (the estimate is the stage's), exit 1;
  - no rank leaves a partial export behind in any of these.

Usage: test_mpi_failures.py ZT_TRAIN MPIEXEC WORKDIR
"""
import os
import re
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "ref"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from trainlib import Runner  # noqa: E402
from gpt2_torch import write_tokens  # noqa: E402  (llm.c token files)

ZT, MPIEXEC, WORK = sys.argv[1], sys.argv[2], sys.argv[3]
os.makedirs(WORK, exist_ok=True)
MPI = [MPIEXEC, "--allow-run-as-root", "--oversubscribe", "-x", "STARPU_NCPU=1",
       "-x", "STARPU_SILENT=1"]


write = Runner(ZT, MPIEXEC, WORK).write  # JSON inputs in WORK


model = write("model.json", {"vocab_size": 64, "seq_len": 16, "n_embd": 64, "n_layer": 2,
                             "n_head": 4})
data = os.path.join(WORK, "tokens.bin")
toks = [(i * 5 + i // 7) % 64 for i in range(4000)]
write_tokens(data, toks)
ds = write("ds.json", {"train_batch_size": 8, "train_micro_batch_size_per_gpu": 4,
                       "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
                       "steps_per_print": 1,
                       "zero_optimization": {"stage": 2, "reduce_bucket_size": 20000}})
bad = []


def run(args, env=(), np_=2, timeout=120):
    cmd = list(MPI) + ["-np", str(np_)]
    for kv in env:
        cmd += ["-x", kv]
    t0 = time.time()
    p = subprocess.run(cmd + [ZT] + args, capture_output=True, text=True, timeout=timeout)
    return p, time.time() - t0


# 1. rank 1 skips collective #4: after the timeout, rank 0 reports that rank 1 has not reached #4,
# or rank 1 (waiting in #5) reports that it never entered the #4 rank 0 waits in, whichever
# times out first: both name rank 1 and collective #4
out = os.path.join(WORK, "skip.safetensors")
p, took = run(["--ds-config", ds, "--model", model, "--data", data, "--steps", "3", "--export",
               out], env=["ZT_COMM_TIMEOUT=5", "ZT_TEST_SKIP_COLLECTIVE=1:4"])
msg = [l for l in p.stderr.splitlines() if "ZT_COMM_TIMEOUT=5" in l]
want = [re.compile(r"rank 0: collective #4 comm_\w+ .*has waited \d+ s .*rank 1 has not "
                   r"reached it \(its last collective: #\d+ comm_\w+"),
        re.compile(r"rank 1: collective #5 comm_\w+ .*has waited \d+ s .*rank 0 has not "
                   r"reached it \(its last collective: #4 comm_\w+.*which this rank never "
                   r"entered\)")]
hit = [l for l in msg if any(w.search(l) for w in want)]
if p.returncode == 0 or not hit or took > 60 or os.path.exists(out):
    bad.append("skipped collective: exit %d after %.0f s, reports %s\n%s"
               % (p.returncode, took, msg, p.stderr[-1500:]))
else:
    print("skipped collective: exit %d after %.0f s: %s" % (p.returncode, took, hit[0]))

# 2. rank 1 killed mid-step: the job ends within 60 s, non-zero, naming rank 1
wrap = os.path.join(WORK, "wrap.sh")
with open(wrap, "w") as f:
    f.write('#!/bin/sh\necho $$ > %s/pid.$OMPI_COMM_WORLD_RANK\nexec %s "$@"\n' % (WORK, ZT))
os.chmod(wrap, 0o755)
for r in (0, 1):
    if os.path.exists(os.path.join(WORK, "pid.%d" % r)):
        os.remove(os.path.join(WORK, "pid.%d" % r))
out = os.path.join(WORK, "kill.safetensors")
proc = subprocess.Popen(list(MPI) + ["-np", "2", wrap, "--ds-config", ds, "--model", model,
                                     "--data", data, "--steps", "100000", "--export", out],
                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
lines, killed, t_kill = [], False, None
deadline = time.time() + 120
while time.time() < deadline:
    line = proc.stdout.readline()
    if not line:
        break
    lines.append(line)
    if not killed and re.match(r"\s*step\s+3/", line):  # mid-run: the pipeline is busy
        pid = int(open(os.path.join(WORK, "pid.1")).read())
        os.kill(pid, signal.SIGKILL)
        killed, t_kill = True, time.time()
        break
try:
    _, err = proc.communicate(timeout=90)
except subprocess.TimeoutExpired:
    proc.kill()
    _, err = proc.communicate()
    err += "\n(test: still running 90 s after the kill)"
took = time.time() - t_kill if t_kill else -1
named = [l for l in err.splitlines() if re.search(r"rank 1\b", l)]
if not killed or proc.returncode == 0 or took > 60 or not named or os.path.exists(out):
    bad.append("killed rank: killed=%s exit %s after %.0f s, lines naming rank 1: %s\n%s"
               % (killed, proc.returncode, took, named, err[-1500:]))
else:
    print("killed rank 1: exit %d after %.1f s: %s" % (proc.returncode, took, named[0].strip()))

# 3. a config error under mpirun: one message (rank 0's), exit 2
dsbad = write("ds_bad.json", {"train_batch_size": 8, "optimizer": {"type": "AdamW", "params":
                                                                    {"lr": 1e-3}},
                              "zero_optimization": {"stage": 7}})
p, _ = run(["--ds-config", dsbad, "--model", model, "--data", data, "--steps", "1"], np_=3)
msg = [l for l in (p.stdout + p.stderr).splitlines() if "error:" in l]
if p.returncode != 2 or len(msg) != 1 or "zero_optimization.stage" not in msg[0]:
    bad.append("config error under mpirun: exit %d, messages %s" % (p.returncode, msg))
else:
    print("config error, 3 ranks: exit 2, one message: %s" % msg[0])

# 4. a pipeline of 2 stages on 4 ranks (2 replicas each) whose partition cuts between ln_f and
# the head: read, checked and planned (each rank's place printed), then refused at start-up:
# one message, exit 2, no hang
dspipe = write("ds_pipe.json", {"train_batch_size": 16, "train_micro_batch_size_per_gpu": 4,
                                "gradient_accumulation_steps": 2,
                                "pipeline": {"stages": 2, "partition": "type:ln_f|head"}})
p, _ = run(["--ds-config", dspipe, "--model", model, "--data", data, "--steps", "1"], np_=4)
msg = [l for l in (p.stdout + p.stderr).splitlines() if "error:" in l]
plan = [l for l in p.stdout.splitlines() if l.startswith("pipeline: rank ")]
if p.returncode != 2 or len(msg) != 1 or "cuts between ln_f and the head" not in msg[0] or \
        len(plan) != 4 or \
        "rank 3: data-parallel rank 1 of 2, stage 1 of 2: layers" not in plan[3]:
    bad.append("pipeline stages 2 on 4 ranks: exit %d, messages %s, plan %s" % (p.returncode, msg,
                                                                               plan))
else:
    print("pipeline, 4 ranks: exit 2, one message: %s" % msg[0])

# 5. a pipeline whose stages do not fit the host memory: each rank names its own stage (the
# estimate is the stage's, not the whole model's), exit 1, no hang
wide = write("model_wide.json", {"vocab_size": 1000000000, "seq_len": 8, "n_embd": 1000000,
                                 "n_layer": 2, "n_head": 2})
dspipe2 = write("ds_pipe2.json", {"train_batch_size": 8, "train_micro_batch_size_per_gpu": 4,
                                  "gradient_accumulation_steps": 2,
                                  "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
                                  "pipeline": {"stages": 2}})
p, _ = run(["--ds-config", dspipe2, "--model", wide, "--data", data, "--steps", "1"])
msg = [l for l in (p.stdout + p.stderr).splitlines() if "error:" in l]
if p.returncode != 1 or len(msg) != 2 or \
        not all("GiB of host memory" in m for m in msg) or \
        not any("pipeline stage 0 of 2" in m for m in msg) or \
        not any("pipeline stage 1 of 2" in m for m in msg):
    bad.append("pipeline stages beyond the memory: exit %d, messages %s" % (p.returncode, msg))
else:
    print("pipeline beyond the memory: exit 1: %s" % msg[0])

for b in bad:
    print("FAIL", b)
print("%d problems" % len(bad))
sys.exit(1 if bad else 0)
