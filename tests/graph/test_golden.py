#!/usr/bin/env python3
"""tests/graph/test_golden.py: the training results are the same bits as the recorded ones.

A matrix of short zt-train runs (ZeRO stages 0-3 on 1-3 ranks, gradient accumulation, stage 1
without reduce-scatter, optimizer/parameter offload to cpu and nvme, bf16 and fp16 (with a forced
overflow), checkpoint save + exact resume, a 2 -> 1 rank reshard, the demo model's configs and
--dump-grads) is run, and each run's per-step losses (the --log values printed with 17
significant digits, with the step's lr, gradient norm, loss scale and skip flag) and the SHA-256 of its exported weights (and gradient dump) are compared
with tests/graph/golden_bits.json. The recorded file was made by the code before a refactoring,
so a refactoring that changes one bit of one loss or weight fails here, naming the case.

The sums of our AVX-512 GEMM depend on K only and every other kernel is written in ISO C11 with
a fixed summation order, so the bits are the same on every AVX-512F CPU; without AVX-512F the
products go through OpenBLAS (other bits) and the test skips (77). The runs use ZT_GEMM=avx512:
the bf16 engines (AMX, AVX512-BF16) that ZT_GEMM=auto picks for bf16 products differ between
CPUs, and test_precision and test_gemm_bf16 prove them. Under the sanitizers
(ZT_TEST_SANITIZED=1) the plain stages run on 2 ranks only (no case of 3 ranks).

Usage: test_golden.py ZT_TRAIN MPIEXEC WORKDIR GOLDEN_JSON [--record]
"""
import hashlib
import json
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from trainlib import SANITIZED, Runner, sanitized, zero_section  # noqa: E402

ZT, MPIEXEC, WORK, GOLDEN = sys.argv[1:5]
RECORD = "--record" in sys.argv[5:]
if RECORD and SANITIZED:
    sys.exit("test_golden: --record needs every case: unset ZT_TEST_SANITIZED")
ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
STEPS = 4


def cpu_has_avx512f():
    with open("/proc/cpuinfo") as f:
        return any(l.startswith("flags") and " avx512f" in l for l in f)


if not cpu_has_avx512f():
    print("test_golden: skipped: the CPU has no AVX-512F (products go through OpenBLAS)")
    sys.exit(77)
os.environ["ZT_GEMM"] = "avx512"

R = Runner(ZT, MPIEXEC, WORK)
MODEL = R.write("model.json", {"vocab_size": 64, "seq_len": 16, "n_embd": 32, "n_layer": 2,
                               "n_head": 2})
DATA = R.tokens("tokens.bin", [(7 * i + (i * i) % 5) % 64 for i in range(4000)])
NVME = R.path("nvme")
os.makedirs(NVME, exist_ok=True)
NV = {"device": "nvme", "nvme_path": NVME}


def ds(label, stage, batch=8, accum=1, opt=None, par=None, extra=None, zero=None):
    cfg = {"train_batch_size": batch, "gradient_accumulation_steps": accum,
           "gradient_clipping": 1.0, "seed": 5,
           "optimizer": {"type": "AdamW", "params": {"lr": 3e-3, "weight_decay": 0.05}},
           "scheduler": {"type": "WarmupLR", "params": {"warmup_min_lr": 1e-3,
                                                         "warmup_max_lr": 3e-3,
                                                         "warmup_num_steps": 2}},
           "zero_optimization": dict(zero_section(stage, opt, par), **(zero or {}))}
    cfg.update(extra or {})
    return R.write(label + "_ds.json", cfg)


def digest(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def result(label, n, cfg, args=(), model=MODEL, data=DATA, env=None):
    """one run: its losses (as printed in --log) and the digest of its exported weights"""
    recs, out, _ = R.train(label, n, ["--ds-config", cfg, "--model", model, "--data", data,
                                      "--quiet"] + list(args), env)
    keys = ("loss", "lr", "grad_norm", "loss_scale", "skipped")
    return {"losses": [" ".join(repr(r.get(k)) for k in keys) for r in recs],
            "weights": digest(out)}


cases = {}


def case(label, n, cfg, args=(), **kw):
    cases["%s_n%d" % (label, n)] = result("%s_n%d" % (label, n), n, cfg,
                                          ["--steps", str(STEPS)] + list(args), **kw)
    print("ran %s_n%d" % (label, n), flush=True)


# ZeRO stages 0-3 on 1-3 ranks, with and without gradient accumulation
for stage in range(4):
    for n in sanitized((1, 2, 3), (2,)):  # the sanitizers: 1 rank in the cases below
        batch = 12 if n == 3 else 8
        case("s%d" % stage, n, ds("s%d_b%d" % (stage, batch), stage, batch=batch))
    case("s%d_accum2" % stage, 2, ds("s%d_accum2" % stage, stage, accum=2))
case("s1_allreduce", 2, ds("s1_allreduce", 1, zero={"reduce_scatter": False}))
# offload: optimizer state on cpu / nvme, stage-3 parameters on nvme
case("s2_opt_cpu", 1, ds("s2_opt_cpu", 2, opt={"device": "cpu"}))
case("s2_opt_nvme", 2, ds("s2_opt_nvme", 2, opt=dict(NV, buffer_count=2)))
case("s3_opt_par_nvme", 2, ds("s3_opt_par_nvme", 3, opt=dict(NV), par=dict(NV)))
case("s3_opt_par_nvme", 1, ds("s3_opt_par_nvme1", 3, opt=dict(NV, buffer_count=1), par=dict(NV)),
     env={"ZT_OPT_GROUP_ELEMS": "1024"})
# mixed precision: bf16 and fp16 (an initial scale that overflows: skipped steps), with offload
BF16 = {"bf16": {"enabled": True}}
FP16 = {"fp16": {"enabled": True, "initial_scale_power": 18, "loss_scale_window": 2}}
case("bf16_s0", 1, ds("bf16_s0", 0, extra=BF16))
case("bf16_s3", 2, ds("bf16_s3", 3, extra=BF16))
case("bf16_s3_par_nvme", 1, ds("bf16_s3_par_nvme", 3, opt=dict(NV), par=dict(NV), extra=BF16))
case("fp16_s2", 2, ds("fp16_s2", 2, accum=2, extra=FP16))
case("fp16_s1_opt_nvme", 1, ds("fp16_s1_opt_nvme", 1, opt=dict(NV), extra=FP16))

# checkpoint: save at step 2, resume to step 4 (same world, and 2 -> 1 ranks resharded)
for label, stage, n, n2, opt, par, extra in (
        ("ckpt_s2", 2, 2, 2, None, None, None),
        ("ckpt_s3_nvme", 3, 2, 2, dict(NV), dict(NV), None),
        ("ckpt_bf16_s1", 1, 1, 1, None, None, BF16),
        ("reshard_s3", 3, 2, 1, None, None, None)):
    cfg = ds(label, stage, opt=opt, par=par, extra=extra)
    ck = R.path(label + "_ckpt")
    shutil.rmtree(ck, ignore_errors=True)
    first = result(label + "_first", n, cfg, ["--steps", "2", "--save-dir", ck])
    cfg2 = ds(label + "_resumed", stage if n2 == n else 0, opt=opt if n2 == n else None,
              par=par if n2 == n else None, extra=extra)
    second = result(label + "_resumed", n2, cfg2, ["--steps", str(STEPS), "--resume", ck])
    cases[label] = {"losses": first["losses"] + second["losses"], "weights": second["weights"],
                    "saved_weights": first["weights"]}
    print("ran %s" % label, flush=True)

# the demo's own model and configs (on this test's tokens: vocabulary 64 < 256)
for label, cfg, n in (("demo", "demo_ds.json", 1), ("demo_zero2", "demo_zero2_ds.json", 2)):
    case(label, n, os.path.join(ROOT, "configs", cfg),
         model=os.path.join(ROOT, "configs", "demo_model.json"))
# the summed gradients of step 1 (all-gathered from the shards at stage 3)
grads = R.path("s3_grads.safetensors")
case("s3_dump_grads", 2, ds("s3_dump", 3), ["--dump-grads", grads])
cases["s3_dump_grads_n2"]["grads"] = digest(grads)

if RECORD:
    with open(GOLDEN, "w") as f:
        json.dump(cases, f, indent=1, sort_keys=True)
        f.write("\n")
    print("test_golden: recorded %d cases in %s" % (len(cases), GOLDEN))
    sys.exit(0)

with open(GOLDEN) as f:
    golden = json.load(f)
# under the sanitizers only the cases they ran
for name in sorted(cases) if SANITIZED else sorted(set(golden) | set(cases)):
    want, got = golden.get(name), cases.get(name)
    if want is None or got is None:
        R.check(False, "%s: %s" % (name, "not recorded" if want is None else "not run"))
        continue
    for key in sorted(set(want) | set(got)):
        R.check(want.get(key) == got.get(key),
                "%s %s: %s" % (name, key, "same bits" if want.get(key) == got.get(key) else
                               "recorded %s, got %s" % (want.get(key), got.get(key))))
sys.exit(R.finish("test_golden"))
