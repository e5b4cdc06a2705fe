#!/usr/bin/env python3
"""tests/graph/test_determinism.py: the same seed and config give bit-identical per-step losses
and final weights across repeated runs, across StarPU schedulers (eager, lws, ws, prio, dmda,
dmdas, random) and across worker counts (STARPU_NCPU 1 and 2); with the AVX-512 GEMM (ZT_GEMM=auto
on an AVX-512 CPU) also whatever OPENBLAS_CORETYPE says. ZT_GEMM=openblas is deterministic too,
with its own bits and losses within 1e-4 of ours; a bad ZT_GEMM is a one-line error. bf16
training on each bf16 engine the CPU has (ZT_GEMM=amx, avx512bf16) is bit-identical across
schedulers and worker counts, and within 1e-2 of the widened run (ZT_GEMM=avx512); naming an
engine the CPU lacks is a one-line error (exit 2). Under the sanitizers (ZT_TEST_SANITIZED=1)
4 of the 14 scheduler and worker-count runs, one core type.

Usage: test_determinism.py ZT_TRAIN_BINARY WORKDIR
"""
import hashlib
import json
import os
import random
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "ref"))
from gpt2_torch import write_tokens  # noqa: E402  (llm.c token files)
from trainlib import sanitized  # noqa: E402

ZT, WORK = sys.argv[1], sys.argv[2]
os.makedirs(WORK, exist_ok=True)

model = os.path.join(WORK, "model.json")
ds = os.path.join(WORK, "ds.json")
data = os.path.join(WORK, "tokens.bin")
with open(model, "w") as f:
    json.dump({"vocab_size": 64, "seq_len": 12, "n_embd": 32, "n_layer": 2, "n_head": 2}, f)
with open(ds, "w") as f:
    json.dump({"train_batch_size": 6, "train_micro_batch_size_per_gpu": 3,
               "gradient_accumulation_steps": 2, "gradient_clipping": 0.5,
               "optimizer": {"type": "AdamW", "params": {"lr": 0.01, "weight_decay": 0.1}},
               "scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 3,
                                                             "warmup_max_lr": 0.01}},
               "seed": 7}, f)
rng = random.Random(5)
# a learnable stream (next token = previous + 7, with a little noise) so the loss falls
toks = [(i * 7 + rng.randrange(2)) % 64 for i in range(3000)]
write_tokens(data, toks)


ds16 = os.path.join(WORK, "ds_bf16.json")
with open(ds) as f, open(ds16, "w") as g:
    json.dump(dict(json.load(f), bf16={"enabled": True}), g)


def run(label, env, config=ds):
    log = os.path.join(WORK, "log_%s.jsonl" % label)
    out = os.path.join(WORK, "w_%s.safetensors" % label)
    p = subprocess.run([ZT, "--ds-config", config, "--model", model, "--data", data, "--steps", "5",
                        "--log", log, "--export", out, "--quiet"],
                       env=dict(os.environ, **env), capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        print("FAIL %s: exit %d\n%s" % (label, p.returncode, p.stderr), file=sys.stderr)
        sys.exit(1)
    with open(log) as f:
        losses = [json.loads(l)["loss"] for l in f]
    # compare the exact decimal text of each loss (%.17g round-trips a double) and the weights
    with open(log) as f:
        texts = [l.split('"loss": ')[1].split(",")[0] for l in f]
    with open(out, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    return texts, digest, losses


runs = {}
every = [(s, n) for s in ("eager", "lws", "ws", "prio", "dmda", "dmdas", "random")
         for n in ("1", "2")]
for sched, ncpu in sanitized(every, [("eager", "1"), ("lws", "2"), ("dmdas", "2"),
                                     ("random", "2")]):
    runs["%s-ncpu%s" % (sched, ncpu)] = run("%s_%s" % (sched, ncpu),
                                            {"STARPU_SCHED": sched, "STARPU_NCPU": ncpu})
runs["lws-ncpu2-repeat"] = run("repeat", {"STARPU_SCHED": "lws", "STARPU_NCPU": "2"})
avx512 = "avx512f" in open("/proc/cpuinfo").read()
if avx512:
    # ZT_GEMM=auto is zerotask's AVX-512 GEMM here: OpenBLAS's core type does not reach it
    for ct in sanitized(["Haswell", "SkylakeX"], ["SkylakeX"]):
        runs["lws-ncpu2-coretype-" + ct] = run(ct, {"STARPU_SCHED": "lws", "STARPU_NCPU": "2",
                                                    "OPENBLAS_CORETYPE": ct})
else:
    print("no AVX-512F here: ZT_GEMM=auto is OpenBLAS; the core-type runs are skipped")

# the OpenBLAS engine is deterministic too (its own bits): across schedulers and worker counts
blas = {label: run("blas_" + label, dict(env, ZT_GEMM="openblas"))
        for label, env in [("lws-ncpu2", {"STARPU_SCHED": "lws", "STARPU_NCPU": "2"}),
                           ("eager-ncpu1", {"STARPU_SCHED": "eager", "STARPU_NCPU": "1"}),
                           ("dmdas-ncpu2", {"STARPU_SCHED": "dmdas", "STARPU_NCPU": "2"})]}

ref_label = "lws-ncpu2"
ref = runs[ref_label]
bad = 0
for label, (texts, digest, losses) in runs.items():
    same = texts == ref[0] and digest == ref[1]
    print("%-18s %s losses %s weights %s" % (label, "ok  " if same else "DIFF", texts[-1], digest[:12]))
    if not same:
        bad += 1
if len(set(ref[0])) < 2:
    print("FAIL losses do not change between steps: %s" % ref[0], file=sys.stderr)
    bad += 1
if ref[2][-1] >= ref[2][0]:
    print("FAIL loss did not fall: %s" % ref[2], file=sys.stderr)
    bad += 1
bref = blas["lws-ncpu2"]
for label, (texts, digest, losses) in blas.items():
    same = texts == bref[0] and digest == bref[1]
    print("openblas %-18s %s losses %s weights %s" % (label, "ok  " if same else "DIFF", texts[-1],
                                                      digest[:12]))
    if not same:
        bad += 1
# both engines train the same model: the losses agree to float rounding, not bits
for a, b in zip(ref[2], bref[2]):
    if abs(a - b) > 1e-4 * max(1.0, abs(b)):
        print("FAIL engines disagree: %s vs %s" % (ref[2], bref[2]), file=sys.stderr)
        bad += 1
        break
# a bad engine name is a one-line error before training
p = subprocess.run([ZT, "--ds-config", ds, "--model", model, "--data", data, "--steps", "1",
                    "--quiet"], env=dict(os.environ, ZT_GEMM="mkl"), capture_output=True,
                   text=True, timeout=120)
want = "ZT_GEMM=mkl: expected one of auto, avx512, openblas"
if p.returncode == 0 or want not in p.stderr or len(p.stderr.strip().splitlines()) != 1:
    print("FAIL ZT_GEMM=mkl: exit %d, stderr %r (want one line with %r)"
          % (p.returncode, p.stderr, want), file=sys.stderr)
    bad += 1
if not avx512:
    p = subprocess.run([ZT, "--ds-config", ds, "--model", model, "--data", data, "--steps", "1",
                        "--quiet"], env=dict(os.environ, ZT_GEMM="avx512"), capture_output=True,
                       text=True, timeout=120)
    if p.returncode == 0 or "no AVX-512F" not in p.stderr:
        print("FAIL ZT_GEMM=avx512 without AVX-512F: exit %d, %r" % (p.returncode, p.stderr),
              file=sys.stderr)
        bad += 1

# bf16 on each bf16 engine: deterministic across schedulers and worker counts, close to the
# widened run; an engine the CPU lacks is refused in one line
flags = open("/proc/cpuinfo").read()
wide = run("bf16_widen", {"ZT_GEMM": "avx512"}, ds16) if avx512 else None
checked = 0
for name, flag, needs in [("avx512bf16", "avx512_bf16", "AVX512-BF16"),
                          ("amx", "amx_bf16", "AMX-BF16")]:
    if flag not in flags.split():
        p = subprocess.run([ZT, "--ds-config", ds16, "--model", model, "--data", data, "--steps",
                            "1", "--quiet"], env=dict(os.environ, ZT_GEMM=name),
                           capture_output=True, text=True, timeout=120)
        one = p.stderr.strip().splitlines()
        if p.returncode != 2 or len(one) != 1 or "ZT_GEMM=%s: this CPU has no %s" % (name, needs) \
                not in one[0]:
            print("FAIL ZT_GEMM=%s without %s: exit %d, %r" % (name, flag, p.returncode, p.stderr),
                  file=sys.stderr)
            bad += 1
        checked += 1
        continue
    eng = {label: run("bf16_%s_%s" % (name, label), dict(env, ZT_GEMM=name), ds16)
           for label, env in [("lws-ncpu2", {"STARPU_SCHED": "lws", "STARPU_NCPU": "2"}),
                              ("eager-ncpu1", {"STARPU_SCHED": "eager", "STARPU_NCPU": "1"}),
                              ("dmdas-ncpu2", {"STARPU_SCHED": "dmdas", "STARPU_NCPU": "2"})]}
    first = eng["lws-ncpu2"]
    for label, (texts, digest, losses) in eng.items():
        same = texts == first[0] and digest == first[1]
        print("bf16 %-10s %-12s %s losses %s weights %s" % (name, label, "ok  " if same else "DIFF",
                                                            texts[-1], digest[:12]))
        bad += 0 if same else 1
        checked += 1
    if wide and any(abs(a - b) > 1e-2 * abs(b) for a, b in zip(first[2], wide[2])):
        print("FAIL bf16 on %s: losses %s, widened %s (beyond 1e-2)" % (name, first[2], wide[2]),
              file=sys.stderr)
        bad += 1
print("%d passed, %d failed" % (len(runs) + len(blas) + checked - bad, bad))
sys.exit(1 if bad else 0)
