#!/usr/bin/env python3
"""tests/graph/test_cuda_model.py: the whole GPT-2 step of the GPU build on a GPU against the same
build with its CUDA workers switched off (STARPU_NCUDA=0: the CPU bodies, the CPU build's bits).

Needs a CUDA device (skips with 77 without one; test_cuda_build.py covers that case). One rank:
  - fp32: per-step losses within 1e-4 (relative) of the CPU run's, step 1's gradients of every
    tensor within 1e-4 of the CPU's (normalised: the largest difference over the largest
    magnitude), the exported weights within Adam's reach of them (an update moves a weight by
    about lr at most, so gradients near zero, whose sign rounding decides, may move it the other
    way: at most 2 lr per step apart), and at least one task on a CUDA worker (read from the
    trace: the workers StarPU names "CUDA ...");
  - ZeRO-Offload (stage 2, offload_optimizer cpu) on the GPU: losses within 1e-4 of the GPU run's;
  - bf16 on the GPU: losses within 1e-2 of the CPU bf16 run's.
It prints which task kinds ran on the GPU and how many, so that a device check can tell what the
GPU took. The model is MODEL_JSON (the device check uses bench/configs/gpt2-124M_model.json).

Usage: test_cuda_model.py CUDA_ZT_TRAIN MODEL_JSON WORKDIR [STEPS]
(ZT_TEST_RUN_LIMIT: seconds one zt-train run may take, default 120; a run past it fails)
"""
import array
import json
import os
import random
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from trainlib import Runner, f32_tensors  # noqa: E402

ZT, MODEL, WORK = sys.argv[1:4]
STEPS = int(sys.argv[4]) if len(sys.argv) > 4 else 3
RUN_LIMIT = int(os.environ.get("ZT_TEST_RUN_LIMIT", "120"))  # s per zt-train run

smi = subprocess.run(["sh", "-c", "nvidia-smi -L 2>/dev/null"], capture_output=True, text=True)
if smi.returncode != 0 or "GPU" not in smi.stdout:
    print("SKIP test_cuda_model: no CUDA device (nvidia-smi -L: %r)" % smi.stdout.strip())
    sys.exit(77)

run = Runner(ZT, "mpiexec", WORK, env={"STARPU_SILENT": "1"})
with open(MODEL) as f:
    m = json.load(f)
rng = random.Random(7)
data = run.tokens("tokens.bin", [rng.randrange(m["vocab_size"]) for _ in range(200000)],
                  wide=m["vocab_size"] > 65535)
base = {"train_batch_size": 4, "train_micro_batch_size_per_gpu": 4, "gradient_clipping": 1.0,
        "seed": 11, "optimizer": {"type": "AdamW", "params": {"lr": 3e-4, "weight_decay": 0.1}}}


try:  # numpy where the machine has it (the GPU images do): 124M-element compares in seconds
    import numpy as np
except ImportError:
    np = None


def weights(path):
    """every tensor of a safetensors file as {name: floats}; F32 only"""
    out = {}
    for name, raw in f32_tensors(path).items():
        if np is not None:
            out[name] = np.frombuffer(raw, dtype=np.float32).astype(np.float64)
        else:
            out[name] = array.array("f")
            out[name].frombytes(raw)
    return out


def max_abs_diff(a, b):
    if np is not None:
        return float(np.max(np.abs(np.asarray(a, dtype=np.float64) -
                                   np.asarray(b, dtype=np.float64))))
    return max(abs(x - y) for x, y in zip(a, b))


def rel_diff(a, b):
    """the largest difference over the largest magnitude of a"""
    scale = float(np.max(np.abs(np.asarray(a, dtype=np.float64)))) if np is not None else \
        max(abs(x) for x in a)
    return max_abs_diff(a, b) / max(scale, 1e-30)


def gpu_kinds(trace):
    """{kind: tasks on CUDA workers}, {kind: all tasks} from a Chrome trace of zt-train"""
    with open(trace) as f:
        ev = json.load(f)
    ev = ev["traceEvents"] if isinstance(ev, dict) else ev
    cuda = {(e["pid"], e["tid"]) for e in ev if e.get("ph") == "M" and
            e.get("name") == "thread_name" and e["args"]["name"].startswith("CUDA")}
    on_gpu, total = {}, {}
    for e in ev:
        if e.get("ph") != "X":
            continue
        k = e.get("args", {}).get("kind", e.get("name"))
        total[k] = total.get(k, 0) + 1
        if (e["pid"], e["tid"]) in cuda:
            on_gpu[k] = on_gpu.get(k, 0) + 1
    return on_gpu, total


def train(label, ds, env, trace=False, grads=False):
    args = ["--ds-config", run.write(label + "_ds.json", ds), "--model", MODEL, "--data", data,
            "--steps", str(STEPS)]
    if trace:
        args += ["--trace", run.path(label + "_trace.json")]
    if grads:
        args += ["--dump-grads", run.path(label + "_grads.safetensors")]
    recs, w, _ = run.train(label, 1, args, env=env, timeout=RUN_LIMIT)
    print("%-12s ms/step %s" % (label, [round(r["ms"], 1) for r in recs]), flush=True)
    return [r["loss"] for r in recs], w


# CTest switches CUDA workers off for every test (STARPU_NCUDA=0 in tests/CMakeLists.txt):
# the GPU runs ask for the one device again
CPU, GPU = {"STARPU_NCUDA": "0"}, {"STARPU_NCUDA": "1"}
cpu_loss, cpu_w = train("fp32_cpu", base, CPU, grads=True)
gpu_loss, gpu_w = train("fp32_gpu", base, GPU, trace=True, grads=True)
on_gpu, total = gpu_kinds(run.path("fp32_gpu_trace.json"))
print("tasks on the GPU (kind: on GPU / all): " + ", ".join(
    "%s %d/%d" % (k, on_gpu.get(k, 0), n) for k, n in sorted(total.items())))
run.check(sum(on_gpu.values()) > 0, "at least one task ran on a CUDA worker (%d of %d)"
          % (sum(on_gpu.values()), sum(total.values())))
dl = rel_diff(cpu_loss, gpu_loss)
run.check(len(gpu_loss) == STEPS and dl <= 1e-4, "fp32 losses GPU %s vs CPU %s: relative %.3g "
          "<= 1e-4" % (gpu_loss, cpu_loss, dl))
gc, gg = weights(run.path("fp32_cpu_grads.safetensors")), weights(run.path("fp32_gpu_grads."
                                                                          "safetensors"))
worst = max((rel_diff(gc[k], gg[k]), k) for k in gc)
run.check(worst[0] <= 1e-4, "fp32 step-1 gradients: worst tensor %s normalised %.3g <= 1e-4"
          % (worst[1], worst[0]))
wc, wg = weights(cpu_w), weights(gpu_w)
lr = base["optimizer"]["params"]["lr"]
worst = max((max_abs_diff(wc[k], wg[k]), k) for k in wc)
run.check(worst[0] <= 2 * lr * STEPS, "fp32 exported weights: worst tensor %s differs by %.3g "
          "<= 2 lr steps = %.3g" % (worst[1], worst[0], 2 * lr * STEPS))

off = dict(base, zero_optimization={"stage": 2, "offload_optimizer": {"device": "cpu"}})
off_loss, _ = train("offload_gpu", off, GPU)
do = rel_diff(gpu_loss, off_loss)
run.check(do <= 1e-4, "ZeRO-Offload on the GPU: losses %s vs GPU-only %s: relative %.3g <= 1e-4"
          % (off_loss, gpu_loss, do))

bf = dict(base, bf16={"enabled": True})
bcpu, _ = train("bf16_cpu", bf, CPU)
bgpu, _ = train("bf16_gpu", bf, GPU)
db = rel_diff(bcpu, bgpu)
run.check(db <= 1e-2, "bf16 on the GPU: losses %s vs CPU %s: relative %.3g <= 1e-2"
          % (bgpu, bcpu, db))
sys.exit(run.finish("test_cuda_model"))
