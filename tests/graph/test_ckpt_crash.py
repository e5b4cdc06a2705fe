#!/usr/bin/env python3
"""tests/graph/test_ckpt_crash.py: a checkpoint directory survives SIGKILL at any moment.

zt-train saves after every step (keep_last 2) into one directory and is killed with SIGKILL at
KILLS random moments (most of a step here is the save: shard writes, meta.json, renames,
`latest`, pruning). Each run resumes from what the previous one left. After every kill:
`zt-ckpt verify` of the directory (what `latest` names) succeeds, `latest` names a complete tag,
and a one-step resume from it works. At the end the losses of the surviving tag's resume are
compared with an uninterrupted run (bit-identical: the state saved is the state trained).

Usage: test_ckpt_crash.py ZT_TRAIN ZT_CKPT WORKDIR [KILLS]
"""
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "ref"))
sys.path.insert(0, HERE)
from gpt2_torch import write_tokens  # noqa: E402
from trainlib import Runner  # noqa: E402

ZT, ZCK, WORK = sys.argv[1], sys.argv[2], sys.argv[3]
KILLS = int(sys.argv[4]) if len(sys.argv) > 4 else 50
R = Runner(ZT, "", WORK, {"STARPU_SILENT": "1", "STARPU_NCPU": "1"})
model = R.write("model.json", {"vocab_size": 64, "seq_len": 16, "n_embd": 32, "n_layer": 2,
                               "n_head": 2})
data = R.path("tokens.bin")
rng = random.Random(7)
write_tokens(data, [rng.randrange(64) for _ in range(5000)])
cfg = R.write("ds.json", {"train_batch_size": 4, "train_micro_batch_size_per_gpu": 2,
                          "gradient_accumulation_steps": 2, "seed": 3,
                          "optimizer": {"type": "AdamW", "params": {"lr": 2e-3}},
                          "zero_optimization": {"stage": 1}, "checkpoint": {"keep_last": 2}})
CK = R.path("ck")
shutil.rmtree(CK, ignore_errors=True)
env = dict(os.environ, **R.env)


def latest_step():
    try:
        tag = open(os.path.join(CK, "latest")).read().strip()
    except OSError:
        return None
    return int(tag[4:])


def train(args):
    return subprocess.run([ZT, "--ds-config", cfg, "--model", model, "--data", data] + args,
                          capture_output=True, text=True, timeout=120, env=env)


kr = random.Random(12345)
SLOW = 4 if "ASAN_OPTIONS" in os.environ else 1  # the sanitizers' start-up and steps are slower
saved_seen = 0
for k in range(KILLS):
    before = latest_step()
    args = ["--ds-config", cfg, "--model", model, "--data", data, "--quiet",
            "--save-dir", CK, "--save-interval", "1", "--steps", str((before or 0) + 1000)]
    if before is not None:
        args += ["--resume", CK]
    p = subprocess.Popen([ZT] + args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                         env=env)
    time.sleep(kr.uniform(0.15, 1.2) * SLOW)
    p.send_signal(signal.SIGKILL)
    _, err = p.communicate()
    now = latest_step()
    if now is None:
        R.check(before is None, "kill %d: latest vanished (was step%s)" % (k, before))
        continue
    saved_seen += now != before
    v = subprocess.run([ZCK, "verify", CK], capture_output=True, text=True, timeout=60)
    r = train(["--resume", CK, "--steps", str(now + 1), "--quiet"])
    ok = v.returncode == 0 and r.returncode == 0 and now >= (before or 0)
    if not R.check(ok, "kill %d: latest step%d verifies (%s) and resumes (exit %d) %s"
                   % (k, now, v.stdout.strip() or v.stderr.strip(), r.returncode,
                      r.stderr.strip()[-300:])):
        break
R.check(saved_seen >= KILLS // 4, "the kills fell during training and saves: latest moved in "
        "%d of %d runs" % (saved_seen, KILLS))
tags = sorted(d for d in os.listdir(CK) if d.startswith("step"))
R.check(len(tags) <= 3 and all(os.path.exists(os.path.join(CK, t, "meta.json")) for t in tags),
        "keep_last 2 held through the kills, every visible tag complete (tags %s; a kill after "
        "a save and before its pruning may leave a third)" % tags)

# the surviving state is the trained state: its resume continues the uninterrupted losses
n = latest_step()
log_a, log_b = R.path("a.jsonl"), R.path("b.jsonl")
train(["--steps", str(n + 3), "--log", log_a, "--quiet"])
train(["--resume", CK, "--steps", str(n + 3), "--log", log_b, "--quiet"])
a = [json.loads(l) for l in open(log_a)][-3:]
b = [json.loads(l) for l in open(log_b)]
R.check([x["loss"] for x in a] == [x["loss"] for x in b] and len(b) == 3,
        "after %d kills the step%d checkpoint resumes to the uninterrupted losses" % (KILLS, n))
sys.exit(R.finish("test_ckpt_crash"))
