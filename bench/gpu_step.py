#!/usr/bin/env python3
"""bench/gpu_step.py: one GPT-2 training step on the GPU, zerotask against PyTorch on the same GPU.

Rows (issue 8), each the median ms/step of --steps steps after 2 warm-up, from the same
safetensors initialisation, data and DeepSpeed config (bench/configs), one rank:
  zerotask GPU          zt-train of the CUDA build (-DZT_USE_CUDA=ON; StarPU's CUDA workers take
                        the tasks with a CUDA body)
  zerotask GPU+Offload  the same with zero_optimization stage 2 and offload_optimizer cpu
                        (ZeRO-Offload: AdamW and its state on the CPU, pinned host buffers)
  zerotask GPU bf16     the first with bf16.enabled
  PyTorch GPU           tests/ref/gpt2_torch.py --bench --device cuda (fused AdamW, fused
                        attention) with the peer Python (its image's PyTorch)
  PyTorch GPU bf16      the same under torch.autocast(bfloat16)
and prints tokens/s, achieved TFLOP/s (6 N + 12 L T C per token, N the non-embedding parameters
plus the tied head) and the ratio of each row to PyTorch's time in the same precision
(below 1: faster).

Usage: bench/gpu_step.py [--build build-cuda] [--peer python3] [--configs gpt2-124M]
                         [--steps 8] [--device cuda] [--json FILE]
Without a CUDA device it says so and exits 2. `--device cpu --build build` runs the same
pipeline on the CPU build and PyTorch on the CPU, to check the script where no GPU is lent (its
figures are not GPU figures).
"""
import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time

from benchlib import run_or_exit  # bench/benchlib.py

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ORACLE = os.path.join(ROOT, "tests", "ref", "gpt2_torch.py")


def run(cmd, env, what):
    return run_or_exit("gpu_step", cmd, env, what)


def flops_per_token(m):
    V, T, C, L = m["vocab_size"], m["seq_len"], m["n_embd"], m["n_layer"]
    n = L * (12 * C * C + 13 * C) + 2 * C + V * C  # blocks, ln_f, tied head (no wpe)
    return 6 * n + 12 * L * T * C


def device_check(peer, env):
    smi = shutil.which("nvidia-smi")
    out = subprocess.run([smi, "-L"], capture_output=True, text=True).stdout if smi else ""
    p = subprocess.run([peer, "-c", "import torch; print(torch.__version__, "
                        "torch.cuda.is_available())"], env=env, capture_output=True, text=True)
    ok = p.returncode == 0 and p.stdout.split()[-1:] == ["True"]
    if not ok:
        print("gpu_step: no CUDA device: nvidia-smi -L says %r, %s says %r (use --device cpu "
              "--build build to check the script without one)"
              % (out.strip() or "(no nvidia-smi)", peer, (p.stdout or p.stderr).strip()[-300:]),
              file=sys.stderr)
        sys.exit(2)
    return out.strip().splitlines()[0] if out.strip() else "a CUDA device"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build-cuda"))
    ap.add_argument("--peer", default="python3", help="Python with PyTorch (CUDA)")
    ap.add_argument("--configs", default="gpt2-124M")
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--data", default=os.path.join(ROOT, "data", "fortunes.bin"))
    ap.add_argument("--out", default=os.path.join(ROOT, "build", "bench", "gpu_step"))
    ap.add_argument("--json", help="write the rows here")
    a = ap.parse_args()
    if a.steps < 3:
        ap.error("--steps must be >= 3 (2 warm-up steps are not counted)")
    zt = os.path.join(a.build, "apps", "zt-train")
    for f, how in ((zt, "build it (docs/cuda.md)"), (a.data, "run scripts/prepare-demo.sh")):
        if not os.path.exists(f):
            sys.exit("gpu_step: %s is missing: %s first" % (f, how))
    os.makedirs(a.out, exist_ok=True)
    env = dict(os.environ, STARPU_SILENT="1")
    dev = device_check(a.peer, env) if a.device == "cuda" else "CPU (script check, not a GPU)"
    print("zerotask %s vs PyTorch (%s) on %s; %d steps (2 warm-up)" % (zt, a.peer, dev, a.steps))

    rows = []
    for cname in a.configs.split(","):
        model = os.path.join(ROOT, "bench", "configs", cname + "_model.json")
        dsf = os.path.join(ROOT, "bench", "configs", cname + "_ds.json")
        if not os.path.exists(model):
            sys.exit("gpu_step: unknown config %r (no %s)" % (cname, model))
        with open(model) as f:
            m = json.load(f)
        with open(dsf) as f:
            ds = json.load(f)
        tokens = ds["train_batch_size"] * m["seq_len"]
        init = os.path.join(a.out, cname + "_init.safetensors")
        if not os.path.exists(init):
            run([a.peer, ORACLE, "--model", model, "--write-init", init, "--seed", "1"], env,
                "writing the initialisation")
        off = dict(ds, zero_optimization={"stage": 2, "offload_optimizer": {"device": "cpu"}})
        offf = os.path.join(a.out, cname + "_offload_ds.json")
        with open(offf, "w") as f:
            json.dump(off, f)
        bff = os.path.join(a.out, cname + "_bf16_ds.json")
        with open(bff, "w") as f:
            json.dump(dict(ds, bf16={"enabled": True}), f)
        res, D = {}, "GPU" if a.device == "cuda" else "CPU"
        for name, cfgf in (("zerotask " + D, dsf), ("zerotask %s+Offload" % D, offf),
                           ("zerotask %s bf16" % D, bff)):
            log = os.path.join(a.out, cname + "_zt.jsonl")
            if os.path.exists(log):
                os.remove(log)
            run([zt, "--ds-config", cfgf, "--model", model, "--data", a.data, "--init-from",
                 init, "--steps", str(a.steps), "--log", log, "--quiet"], env, name)
            with open(log) as f:
                res[name] = statistics.median([json.loads(l)["ms"] for l in f][2:])
        for name, amp in (("PyTorch " + D, []), ("PyTorch %s bf16" % D, ["--autocast", "bf16"])):
            out = run([a.peer, ORACLE, "--model", model, "--ds-config", dsf, "--data", a.data,
                       "--init", init, "--steps", str(a.steps), "--bench", "--device",
                       a.device] + amp, env, name)
            mm = re.search(r"^ms/step ([0-9.]+)", out, re.M)
            if not mm:
                sys.exit("gpu_step: no ms/step line from %s:\n%s" % (name, out[-1000:]))
            res[name] = float(mm.group(1))
        fpt = flops_per_token(m)
        for name, ms in res.items():
            peer = "PyTorch %s bf16" % D if name.endswith("bf16") else "PyTorch " + D
            r = {"config": cname, "row": name, "ms_per_step": ms,
                 "tokens_per_s": tokens / (ms / 1e3),
                 "tflops": fpt * tokens / (ms / 1e3) / 1e12,
                 "ratio_vs_pytorch": ms / res[peer]}
            rows.append(r)
            print("  %-10s %-22s %9.2f ms/step %10.0f tokens/s %7.2f TFLOP/s  ratio %.2f"
                  % (cname, name, ms, r["tokens_per_s"], r["tflops"], r["ratio_vs_pytorch"]),
                  flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
                       "device": dev, "command": " ".join(sys.argv), "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
