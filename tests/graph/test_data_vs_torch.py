#!/usr/bin/env python3
"""tests/graph/test_data_vs_torch.py: zt-train on a shuffled blend of two token files (one of
uint16 tokens, one of uint32) with DeepSpeed's sequence-length curriculum, against the PyTorch
float64 reference (tests/ref/gpt2_torch.py's Trainer) trained on the same rows truncated to the
scheduled length, from the same initial weights.

The rows of every step are zt-train's (--dump-data: file, position, scheduled length); the
reference reads the token files itself, cuts each row to T + 1 tokens at its position, then to
the scheduled length, and trains on that batch as DeepSpeed's seqlen curriculum does (inputs
and targets truncated, the mean loss over the positions left). Checked: the rows are whole
sequences of the blend; the scheduled lengths grow; the loss of every step to 1e-4 relative and
every parameter after the last step to 1e-3 relative per tensor. A mistake in reading the rows,
in the curriculum's masking (a position past the length that leaks into the loss or the
gradients) or in the loss's normalisation fails here.

Usage: test_data_vs_torch.py ZT_TRAIN GPT2_TORCH_PY WORKDIR
"""
import json
import os
import random
import subprocess
import sys

import numpy as np
import torch

ZT, ORACLE, WORK = sys.argv[1], sys.argv[2], sys.argv[3]
sys.path.insert(0, os.path.dirname(os.path.abspath(ORACLE)))
import gpt2_torch as ref  # noqa: E402  (the oracle's own model, trainer and safetensors)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from trainlib import Runner  # noqa: E402

STEPS, LOSS_TOL, PARAM_TOL = 7, 1e-4, 1e-3
V, T = 80, 16
R = Runner(ZT, None, WORK)  # a fresh WORK, its paths and files


def sh(cmd, what):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600,
                       env=dict(os.environ, OMP_NUM_THREADS="1", STARPU_SILENT="1"))
    if p.returncode != 0:
        print("FAIL %s: exit %d\n%s%s" % (what, p.returncode, p.stdout[-2000:], p.stderr[-2000:]))
        sys.exit(1)
    return p.stdout


rng = random.Random(9)
streams = [[(i * 3 + (rng.randrange(V) if rng.random() < 0.3 else 0)) % V for i in range(330)],
           [(i * 7 + (rng.randrange(V) if rng.random() < 0.3 else 0)) % V for i in range(209)]]
files = [R.tokens("a.bin", streams[0]), R.tokens("b.bin", streams[1], wide=True)]
model = R.write("model.json", {"vocab_size": V, "seq_len": T, "n_embd": 32, "n_layer": 2,
                             "n_head": 2})
ds = R.write("ds.json", {
    "train_batch_size": 4, "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 2,
    "gradient_clipping": 1.0, "seed": 21,
    "optimizer": {"type": "AdamW", "params": {"lr": 3e-3, "weight_decay": 0.1}},
    "curriculum_learning": {"enabled": True, "curriculum_type": "seqlen", "min_difficulty": 4,
                            "max_difficulty": 16, "schedule_type": "fixed_root",
                            "schedule_config": {"total_curriculum_step": 5,
                                                "difficulty_step": 4, "root_degree": 2}}})
init = R.path("init.safetensors")
sh([sys.executable, ORACLE, "--model", model, "--write-init", init, "--seed", "21"], "init")
log, params, dump = R.path("zt.jsonl"), R.path("zt.safetensors"), R.path("rows")
sh([ZT, "--ds-config", ds, "--model", model, "--data", "0.6:%s,0.4:%s" % tuple(files),
    "--data-order", "shuffle", "--init-from", init, "--steps", str(STEPS), "--log", log,
    "--export", params, "--dump-data", dump, "--quiet"], "zt-train")

bad = []
rows = {}
with open(dump + ".rank0") as f:
    for line in f:
        s, mb, k, fi, pos, act = map(int, line.split())
        rows.setdefault(s, {})[k] = (fi, pos, act)
lengths = [rows[s][0][2] for s in range(1, STEPS + 1)]
# DeepSpeed's fixed_root for step s (test_curriculum.py checks the formula at length)
want = [min(x - x % 4, 16) for x in (int((s / 5) ** 0.5 * 12 + 4) for s in range(1, STEPS + 1))]
print("  scheduled lengths %s" % lengths)
if lengths != want or len(set(lengths)) < 3:
    bad.append("curriculum lengths %s, DeepSpeed's %s" % (lengths, want))

m = ref.load_model_shape(model)
cfg = ref.load_ds_config(ds)
tr = ref.Trainer(m, cfg, ref.load_weights(init, m), torch.float64, "deepspeed")
with open(log) as f:
    ours = [json.loads(l) for l in f]
worst = 0.0
for s in range(1, STEPS + 1):
    idx, tgt = [], []
    for k in range(4):
        fi, pos, act = rows[s][k]
        if pos % T or pos + T + 1 > len(streams[fi]):
            bad.append("step %d row %d: position %d is not a whole sequence" % (s, k, pos))
            continue
        seq = streams[fi][pos:pos + T + 1]
        idx.append(seq[:act])
        tgt.append(seq[1:act + 1])
    loss, _, _ = tr.step(s, torch.tensor(idx), torch.tensor(tgt))
    e = abs(ours[s - 1]["loss"] - loss) / loss
    worst = max(worst, e)
    if e > LOSS_TOL:
        bad.append("loss of step %d: %.9g, reference %.9g (rel %.1e)" % (s, ours[s - 1]["loss"],
                                                                        loss, e))
print("  losses  worst relative error %.2e over %d steps" % (worst, STEPS))
mine, theirs = ref.st_read(params), dict(tr.weights())
for name, t in theirs.items():
    b = t.numpy()
    d = np.linalg.norm((mine[name].astype(np.float64) - b).ravel()) / np.linalg.norm(b.ravel())
    if not d <= PARAM_TOL:
        bad.append("parameter %s after %d steps: relative error %.2e" % (name, STEPS, d))
for b in bad:
    print("FAIL " + b)
print("test_data_vs_torch: %s" % ("all checks passed" if not bad else "%d failed" % len(bad)))
sys.exit(1 if bad else 0)
