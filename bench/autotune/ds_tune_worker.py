#!/usr/bin/env python3
"""bench/autotune/ds_tune_worker.py: the training script DeepSpeed's own autotuner launches
(bench/autotune/ds_autotune.py), run under bench/deepspeed/.venv's Python, one process per rank.

  ds_tune_worker.py [--local_rank=N] --model MODEL.json --data TOKENS --steps N
                    --deepspeed_config (CONFIG.json | base64 of the config)

The model, data rule, initialisation and thread setting are those of bench/deepspeed/ds_worker.py
"train" (GPT-2 of MODEL's shape, the parameters of tests/ref/gpt2_torch.py, one module per block,
gloo, torch.set_num_threads(ZT_DS_THREADS, default 1)); the difference is gradient accumulation:
each optimizer step s takes the global batch of step s (train_batch_size rows), rank r its rows
r*B/W..(r+1)*B/W-1, and feeds them as gradient_accumulation_steps micro-batches of
train_micro_batch_size_per_gpu rows (forward, engine.backward, engine.step each), so every
(micro-batch, accumulation) split of one global batch trains the same rows per step.
The autotuner passes the config as base64 after --deepspeed_config (its scheduler replaces the
path) and --local_rank=N (DeepSpeed's launcher); with the config's "autotuning" section enabled,
DeepSpeed's engine itself ends the process after end_profile_step (it writes metrics.json and
calls exit()). Without it, rank 0 prints one line
  ds_result ms_per_step=<median ms per optimizer step after 2 warm-up steps> steps=... world=...
            threads=... optimizer=... stage=... mbs=... gas=... train_batch_size=...
timed like ds_worker.py: wall clock between two barriers around the step's micro-batches.
Any failure: one line "ds_error <message>" and exit 1 (the autotuner reads an experiment's stderr
for the word "error"; the message goes to stderr too, so a failed experiment is seen as failed).
"""
import argparse
import base64
import json
import os
import statistics
import sys
import time
import traceback
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "ref"))
sys.path.insert(0, os.path.join(ROOT, "bench", "deepspeed"))
from ds_worker import gpt2_module  # noqa: E402  (the same GPT-2 module as bench/deepspeed/run)
os.environ.setdefault("DS_ACCELERATOR", "cpu")
# The autotuner marks an experiment failed when its stderr holds the word "error" anywhere;
# a library's warning must not decide that (real failures still reach stderr, see fail()).
warnings.filterwarnings("ignore")


def fail(msg):
    line = "ds_error %s" % " ".join(str(msg).split())[:2000]
    print(line, flush=True)
    print(line, file=sys.stderr, flush=True)
    sys.exit(1)


def load_config(s):
    if os.path.exists(s):
        with open(s) as f:
            return json.load(f)
    return json.loads(base64.urlsafe_b64decode(s).decode("utf-8"))


def train(a):
    import torch
    import deepspeed
    import gpt2_torch as ref  # the project's PyTorch reference: shapes, data rule, init

    torch.set_num_threads(int(os.environ.get("ZT_DS_THREADS", "1")))
    m = ref.load_model_shape(a.model)
    ds = load_config(a.deepspeed_config)
    W, r = int(os.environ["WORLD_SIZE"]), int(os.environ["RANK"])
    mbs = int(ds.get("train_micro_batch_size_per_gpu", 1))
    gas = int(ds.get("gradient_accumulation_steps", 1))
    B = int(ds.get("train_batch_size", mbs * gas * W))
    if B != mbs * gas * W:
        fail("train_batch_size %d != micro batch %d x accumulation %d x ranks %d" % (B, mbs, gas, W))
    T = m["seq_len"]
    tok = ref.load_tokens(a.data, m["vocab_size"])
    lo = r * (B // W)
    steps = []  # per step: gas (idx, tgt) micro-batches of this rank's rows
    for s in range(1, a.steps + 1):
        x, y = ref.step_batch(tok, s, B, T)
        steps.append([(x[lo + k * mbs:lo + (k + 1) * mbs].contiguous(),
                       y[lo + k * mbs:lo + (k + 1) * mbs].contiguous()) for k in range(gas)])
    init = dict(ref.init_weights(m, ds.get("seed", 1)))

    deepspeed.init_distributed(dist_backend="gloo")
    model = gpt2_module(m, init)
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(),
                                           config=ds)
    dist = torch.distributed
    times = []
    for s in range(1, a.steps + 1):
        dist.barrier()
        t0 = time.perf_counter()
        lv = 0.0
        for idx, tgt in steps[s - 1]:
            loss = engine(idx, tgt)
            engine.backward(loss)
            engine.step()
            lv += loss.item() / gas
        dist.barrier()
        times.append((time.perf_counter() - t0) * 1e3)
        if r == 0:
            print("step %d loss %.6f ms %.1f" % (s, lv, times[-1]), flush=True)
    if r == 0:
        zero = ds.get("zero_optimization", {}).get("stage", 0)
        print("ds_result ms_per_step=%.3f steps=%d world=%d threads=%d optimizer=%s stage=%s "
              "mbs=%d gas=%d train_batch_size=%d" % (
                  statistics.median(times[2:]) if len(times) > 2 else times[-1],
                  max(len(times) - 2, 1), W, torch.get_num_threads(),
                  type(engine.optimizer).__name__, zero, mbs, gas, B), flush=True)
    dist.barrier()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--local_rank", type=int, default=0)
    ap.add_argument("--model", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--deepspeed_config", required=True)
    a = ap.parse_args()
    try:
        train(a)
    except SystemExit:
        raise  # DeepSpeed's autotuning exit after end_profile_step, or fail()
    except BaseException as e:
        tb = traceback.format_exc().strip().splitlines()
        print("\n".join(tb[-15:]), file=sys.stderr, flush=True)
        fail("%s: %s (at %s)" % (type(e).__name__, e, tb[-3].strip() if len(tb) > 2 else "?"))


if __name__ == "__main__":
    main()
