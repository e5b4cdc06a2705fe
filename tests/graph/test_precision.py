#!/usr/bin/env python3
"""tests/graph/test_precision.py: bf16 and fp16 training (config "bf16" / "fp16") against
PyTorch, loss scaling, determinism, exact resume and ZeRO on 2 ranks.

1. Numerics. tests/ref/gpt2_mp_torch.py is an explicit PyTorch GPT-2 that rounds to bf16/fp16
   exactly where zerotask stores 16-bit values (docs/precision.md). From the same init, 4 steps
   (gradient accumulation 2, clipping, a warmup schedule), per precision:
   - bf16 with its products widened to fp32 (ZT_GEMM=avx512, the fallback) against its
     float32-compute run: every step-1 gradient to 1e-6 relative, and a run of one step: its
     loss to 1e-6 and every fp32 master weight after it to 1e-5 relative per tensor (both
     compute in fp32 and round at the same points: only fp32 summation order and zerotask's
     exp/tanh (within 1.4 ulp) differ, which changes no bf16 gradient of step 1 and the masters
     by ~1e-7); its 4 steps get the float64 tolerances below (the key bias, whose exact
     gradient is zero, moves by +-lr each step in the direction of each side's fp32 noise,
     which depends on the CPU, and that spreads); fp16, whose rounding is 8x finer, sees that
     fp32 noise flip a few roundings, which then spread, and bf16 on the CPU's bf16 engine
     (ZT_GEMM=auto on a CPU with AMX or AVX512-BF16: the same exact products summed in the
     engine's order, and the attention's products on 16-bit operands, which the reference then
     rounds too: --bf16-products) are held to the float64 tolerances below, against both
     references;
   - against its float64-compute run (the exact reference): losses to 1e-4, gradients to 2e-3
     per tensor (a few percent of 16-bit values land on the other side of a rounding boundary,
     each one 2^-8 (bf16) or 2^-11 (fp16) relative), masters to 2e-2 per tensor, except the key
     third of attn.c_attn.bias, whose exact gradient is zero (softmax cancels it): each run's
     rounding noise moves it by up to lr per step in a direction of its own (Adam normalizes
     it), so it is bounded by twice the sum of the lrs;
   - the loss scales and skipped steps of fp16 equal the reference's.
2. Forced overflow (fp16, initial_scale_power 60, hysteresis 2, loss_scale_window 3): the
   gradients overflow until the scale falls far enough; zerotask's per-step scale and skip
   flags equal DeepSpeed's DynamicLossScaler rule applied to its own overflow flags (computed
   here independently) and the reference's run; the weights after steps that were all skipped
   are the initial weights bit for bit; an overflow at min_loss_scale ends the run with one
   line and exit 1.
3. Determinism: bf16 and fp16 losses bit-identical across two runs and the eager, lws, prio and
   dmdas schedulers with 1 and 2 workers.
4. Exact resume: 12 steps straight against 6 + a new process resuming for 6 (fp16 with
   overflows before and after the save; bf16 at ZeRO stage 2 on 2 ranks): identical losses,
   scales and exported weights. zt-ckpt export --dtype bf16 of that checkpoint: BF16 tensors,
   each the F32 export (the master weights) rounded by torch; a bad --dtype exits 2.
5. ZeRO stages 0-3 on 2 ranks (bf16 and fp16, 16-bit collectives): each tracks the 1-rank run
   (final loss within 1%); stage 1 gives stage 0's losses bit for bit and stage 3 stage 2's
   (where the 16-bit gradient sums are rounded is the same).
6. 16-bit parameters on NVMe (stage 3, offload_optimizer and offload_param nvme; the master
   weights go to the optimizer's swap file, the bf16/fp16 copy to the parameter file): bf16
   and fp16 on 1 and 2 ranks, many swap units (ZT_OPT_GROUP_ELEMS=2048), train bit-identically
   to stage 3 in memory (losses and exported weights); the parameter reads of the gathers move
   half the bytes of fp32's (--trace); saving (the masters read back from the swap file) and
   resuming is exact.
7. The loss curve: 200 steps of the demo model on the demo corpus (data/fortunes.bin, made by
   scripts/prepare-demo.sh; the test makes it when missing) in fp32, bf16 (the default
   engine) and fp16: final losses (mean of the last 10 steps) within 0.5% (bf16) and 2% (fp16)
   of fp32.

Usage: test_precision.py ZT_TRAIN MPIEXEC WORKDIR REF_DIR SOURCE_DIR [curve]
(parts 1-6, or with "curve" part 7 alone: ctest runs it as precision_curve, outside the
sanitizer pass). Under the sanitizers (ZT_TEST_SANITIZED=1) part 3 runs lws twice and dmdas,
part 5 bf16 alone, part 6 bf16 on 2 ranks and fp16 on 1.
"""
import json
import math
import os
import subprocess
import sys

import numpy as np

ZT, MPI, WORK, REFDIR, SRC = sys.argv[1:6]
sys.path.insert(0, REFDIR)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpt2_torch import st_read  # noqa: E402
from trainlib import Runner, sanitized, zero_section  # noqa: E402

R = Runner(ZT, MPI, WORK, {"STARPU_SILENT": "1"})
PY = sys.executable
MODEL = {"vocab_size": 64, "seq_len": 16, "n_embd": 32, "n_layer": 2, "n_head": 2}
BASE = {"train_batch_size": 4, "train_micro_batch_size_per_gpu": 2,
        "gradient_accumulation_steps": 2, "gradient_clipping": 1.0,
        "optimizer": {"type": "AdamW", "params": {"lr": 3e-3, "betas": [0.9, 0.95], "eps": 1e-8,
                                                  "weight_decay": 0.1}},
        "scheduler": {"type": "WarmupLR", "params": {"warmup_min_lr": 1e-3,
                                                     "warmup_max_lr": 3e-3,
                                                     "warmup_num_steps": 3}},
        "seed": 11}


def sh(cmd, what, timeout=600):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                       env=dict(os.environ, OMP_NUM_THREADS="1"))
    if p.returncode != 0:
        print("FAIL %s: exit %d\n%s%s" % (what, p.returncode, p.stdout[-2000:], p.stderr[-2000:]))
        sys.exit(1)
    return p


# two ranks: the same global batch, accumulation derived (1)
BASE2 = {k: v for k, v in BASE.items() if k != "gradient_accumulation_steps"}


def cfg(name, prec, base=BASE):
    d = dict(base)
    d[prec] = {"enabled": True}
    return R.write(name, d)


def tensors_close(got, want, tol, what, key_abs=None):
    """per tensor: |got - want| / |want| <= tol (key third of c_attn.bias: absolute key_abs)"""
    worst, bad = (0.0, ""), []
    for n, b in want.items():
        a = got.get(n)
        if a is None or a.shape != b.shape:
            bad.append(n)
            continue
        a, b = a.astype(np.float64), b.astype(np.float64)
        parts = [("", slice(None))]
        if key_abs is not None and n.endswith("attn.c_attn.bias"):
            C = b.shape[0] // 3
            parts = [("q", slice(0, C)), ("k", slice(C, 2 * C)), ("v", slice(2 * C, None))]
        for tag, sl in parts:
            d = float(np.linalg.norm(a[sl] - b[sl]))
            nb = float(np.linalg.norm(b[sl]))
            if tag == "k":
                if float(np.abs(a[sl] - b[sl]).max()) > key_abs:
                    bad.append(n + "[k]")
                continue
            e = d / nb if nb > 0 else d
            if not e <= tol:
                bad.append("%s%s (%.2e)" % (n, "[%s]" % tag if tag else "", e))
            if e > worst[0]:
                worst = (e, n)
    R.check(not bad, "%s: every tensor within %.0e (worst %.2e %s)%s" % (
        what, tol, worst[0], worst[1], "; off: " + ", ".join(bad[:4]) if bad else ""))


def native_bf16():
    """this CPU has a bf16 engine (AMX or AVX512-BF16: kernels/cpu/gemm_bf16.c)"""
    with open("/proc/cpuinfo") as f:
        flags = f.read()
    return "avx512_bf16" in flags or "amx_bf16" in flags


# ---- 1. numerics against the PyTorch reference -------------------------------------------------
def one_step(tag, ds, model, data, init, gemm):
    """one step (2 accumulated micro-batches, clipping, the warmup's first lr) against the
    float32-compute reference: the loss to 1e-6 relative, every fp32 master weight after the
    update to 1e-5 per tensor"""
    log, out, _ = R.train("num_one_%s" % gemm, 1,
                          ["--ds-config", ds, "--model", model, "--data", data, "--init-from",
                           init, "--steps", "1"], env={"ZT_GEMM": gemm})
    rj, rp, rg = (R.path("ref_one_float32.%s" % x) for x in ("json", "params.safetensors",
                                                           "grads.safetensors"))
    sh([PY, os.path.join(REFDIR, "gpt2_mp_torch.py"), "--model", model, "--ds-config", ds,
        "--data", data, "--init", init, "--steps", "1", "--precision", "bf16", "--compute",
        "float32", "--out-json", rj, "--params-out", rp, "--grads-out", rg], "reference one step")
    with open(rj) as f:
        ref = json.load(f)
    err = abs(log[0]["loss"] - ref["losses"][0]) / abs(ref["losses"][0]) if log else 1.0
    R.check(len(log) == 1 and err <= 1e-6,
            "%s vs float32 reference, one step: loss within 1e-06 (%.2e)" % (tag, err))
    tensors_close(st_read(out), st_read(rp), 1e-5, "%s vs float32 reference: master weights "
                  "after one step" % tag, key_abs=2 * sum(ref["lrs"]))


def numerics():
    model = R.write("model.json", MODEL)
    import random
    rng = random.Random(3)
    data = R.tokens("tok.bin", [(i * 5 + (rng.randrange(64) if rng.random() < 0.3 else 0)) % 64
                                for i in range(4000)])
    init = R.path("init.safetensors")
    sh([PY, os.path.join(REFDIR, "gpt2_torch.py"), "--model", model, "--write-init", init,
        "--seed", "11"], "reference init")
    # bf16 twice: its products widened to fp32 (ZT_GEMM=avx512, the fallback) and on the
    # CPU's bf16 engine (ZT_GEMM=auto), where there is one
    runs = [("bf16", "avx512"), ("fp16", "auto")]
    if native_bf16():
        runs.insert(1, ("bf16", "auto"))
    for prec, gemm in runs:
        ds = cfg("num_%s.json" % prec, prec)
        tag = "%s (ZT_GEMM=%s)" % (prec, gemm)
        grads = R.path("zt_grads_%s_%s.safetensors" % (prec, gemm))
        log, out, _ = R.train("num_%s_%s" % (prec, gemm), 1,
                              ["--ds-config", ds, "--model", model, "--data", data,
                               "--init-from", init, "--steps", "4", "--dump-grads", grads],
                              env={"ZT_GEMM": gemm})
        # the bf16 engines' attention products read 16-bit operands: the reference's too
        p16 = ["--bf16-products"] if gemm == "auto" and prec == "bf16" else []
        for comp in ("float32", "float64"):
            rj, rp, rg = (R.path("ref_%s_%s%s.%s" % (prec, comp, "_p16" if p16 else "", x))
                          for x in ("json", "params.safetensors", "grads.safetensors"))
            sh([PY, os.path.join(REFDIR, "gpt2_mp_torch.py"), "--model", model, "--ds-config",
                ds, "--data", data, "--init", init, "--steps", "4", "--precision", prec,
                "--compute", comp, "--out-json", rj, "--params-out", rp, "--grads-out", rg] + p16,
               "reference %s %s" % (prec, comp))
            with open(rj) as f:
                ref = json.load(f)
            # widened bf16 against the float32-compute reference: the same roundings from the
            # same fp32 arithmetic up to summation order and zerotask's exp/tanh (within 1.4
            # ulp), which move no bf16 rounding in step 1 (its gradients, then one_step's
            # update); over 4 steps the key bias (its exact gradient zero) moves by +-lr in the
            # direction of each side's fp32 noise, which differs between CPUs (so does the
            # reference's own with ATen's vector width), and that spreads: the trajectory gets
            # the float64 tolerances. fp16's 8x finer spacing lets that noise flip a few
            # roundings, and the bf16 engines sum each product in their own order (AMX: 32
            # products a step): the float64 tolerances throughout
            tight = comp == "float32" and prec == "bf16" and gemm == "avx512"
            if tight:
                one_step(tag, ds, model, data, init, gemm)
            ltol, gtol, ptol = 1e-4, 1e-6 if tight else 2e-3, 2e-2
            errs = [abs(o["loss"] - r) / abs(r) for o, r in zip(log, ref["losses"])]
            R.check(len(log) == 4 and max(errs) <= ltol,
                    "%s vs %s reference: losses within %.0e (worst %.2e)" % (tag, comp, ltol,
                                                                            max(errs)))
            tensors_close(st_read(grads), st_read(rg), gtol, "%s vs %s reference: step-1 "
                          "gradients" % (tag, comp))
            # the key bias's exact gradient is zero: each run's rounding noise moves it by up to
            # lr per step in a direction of its own (Adam normalizes the noise)
            tensors_close(st_read(out), st_read(rp), ptol, "%s vs %s reference: master weights "
                          "after 4 steps" % (tag, comp), key_abs=2 * sum(ref["lrs"]))
            if prec == "fp16":
                R.check([o["loss_scale"] for o in log] == ref["loss_scales"] and
                        [o["skipped"] for o in log] == ref["skipped"],
                        "fp16 vs %s reference: the same loss scales and skipped steps" % comp)
    return model, data, init


# ---- 2. forced overflow ------------------------------------------------------------------------
def ds_rule(overflows, init_scale, window, hyst, consecutive=False, min_scale=1.0):
    """DeepSpeed's DynamicLossScaler.update_scale: the scale each step used"""
    scale, it, last, cur, used = init_scale, 0, -1, hyst, []
    for of in overflows:
        used.append(scale)
        if of:
            if hyst == 1 or cur == 1:
                scale = max(scale / 2, min_scale)
            else:
                cur -= 1
            last = it
        else:
            if consecutive:
                cur = hyst
            if (it - last) % window == 0:
                if not consecutive:
                    cur = hyst
                scale *= 2
        it += 1
    return used


def overflow(model, data, init):
    f16 = {"enabled": True, "initial_scale_power": 60, "hysteresis": 2, "loss_scale_window": 3}
    d = dict(BASE, fp16=f16)
    ds = R.write("overflow.json", d)
    log, out, p = R.train("overflow", 1, ["--ds-config", ds, "--model", model, "--data", data,
                                          "--init-from", init, "--steps", "60"])
    flags = [o["skipped"] for o in log]
    scales = [o["loss_scale"] for o in log]
    R.check(flags[0] == 1 and flags[1] == 1 and 0 in flags,
            "forced overflow: the first steps are skipped, later ones applied (%d of 60 skipped)"
            % sum(flags))
    R.check(scales == ds_rule(flags, 2.0 ** 60, 3, 2),
            "forced overflow: the scale sequence is DeepSpeed's rule on the overflow flags (%s)"
            % " ".join("%g" % s for s in scales[:8]))
    R.check(any(scales[i + 1] > scales[i] for i in range(len(scales) - 1)),
            "forced overflow: the scale grows again after loss_scale_window clean steps")
    R.check("overflow in step 1, skipped" in p.stderr + p.stdout,
            "forced overflow: the skip is logged")
    rj = R.path("overflow_ref.json")
    sh([PY, os.path.join(REFDIR, "gpt2_mp_torch.py"), "--model", model, "--ds-config", ds,
        "--data", data, "--init", init, "--steps", "60", "--precision", "fp16", "--compute",
        "float32", "--out-json", rj], "reference overflow")
    with open(rj) as f:
        ref = json.load(f)
    R.check(flags == ref["skipped"] and scales == ref["loss_scales"],
            "forced overflow: the reference overflows on the same steps with the same scales")
    # steps that are all skipped leave the weights as they were
    log2, out2, _ = R.train("overflow_skipped", 1, ["--ds-config", ds, "--model", model,
                                                    "--data", data, "--init-from", init,
                                                    "--steps", "2"])
    a, b = st_read(out2), st_read(init)
    R.check(all(o["skipped"] for o in log2) and
            all(np.array_equal(a[k], b[k].astype(np.float32)) for k in b),
            "forced overflow: after 2 skipped steps the weights are the initial ones bit for bit")
    # at the minimum scale an overflow ends the run (DeepSpeed raises there)
    d = dict(BASE, fp16=dict(f16, hysteresis=1, min_loss_scale=2.0 ** 58))
    ds = R.write("overflow_min.json", d)
    q = R.launch(1, ["--ds-config", ds, "--model", model, "--data", data, "--init-from", init,
                     "--steps", "10", "--quiet"])
    errs = [l for l in q.stderr.splitlines() if l.startswith("zerotask: error:")]
    R.check(q.returncode == 1 and len(errs) == 1 and "minimum loss scale" in errs[0],
            "overflow at min_loss_scale: exit 1 and one line (%s)" % (errs[:1] or q.stderr[-200:]))


# ---- 3. determinism ----------------------------------------------------------------------------
def determinism(model, data, init):
    for prec in ("bf16", "fp16"):
        ds = cfg("det_%s.json" % prec, prec)
        runs = {}
        every = (("lws", 2, 0), ("lws", 2, 1), ("eager", 2, 0), ("prio", 2, 0), ("dmdas", 2, 0),
                 ("lws", 1, 0))
        for sched, ncpu, rep in sanitized(every, every[:2] + every[4:5]):
            log, _, _ = R.train("det_%s_%s_%d_%d" % (prec, sched, ncpu, rep), 1,
                                ["--ds-config", ds, "--model", model, "--data", data,
                                 "--init-from", init, "--steps", "6"],
                                env={"STARPU_SCHED": sched, "STARPU_NCPU": str(ncpu)})
            runs["%s/%d/%d" % (sched, ncpu, rep)] = [(o["loss"], o["grad_norm"]) for o in log]
        first = next(iter(runs.values()))
        R.check(all(v == first for v in runs.values()),
                "%s: losses and norms bit-identical over %s" % (prec, ", ".join(runs)))


# ---- 4. exact resume ---------------------------------------------------------------------------
def resume(model, data, init):
    cases = [("fp16", 1, 0, dict(BASE, fp16={"enabled": True, "initial_scale_power": 22,
                                             "hysteresis": 1, "loss_scale_window": 2})),
             ("bf16", 2, 2, dict(BASE2, bf16={"enabled": True},
                                 zero_optimization=zero_section(2)))]
    for prec, n, stage, d in cases:
        ds = R.write("resume_%s.json" % prec, d)
        args = ["--ds-config", ds, "--model", model, "--data", data, "--init-from", init]
        a, aout, _ = R.train("resume_%s_straight" % prec, n, args + ["--steps", "12"])
        ck = R.path("ck_%s" % prec)
        b1, _, _ = R.train("resume_%s_first" % prec, n, args + ["--steps", "6", "--save-dir", ck])
        b2, bout, _ = R.train("resume_%s_second" % prec, n, ["--ds-config", ds, "--model", model,
                                                             "--data", data, "--steps", "12",
                                                             "--resume", ck])
        b = b1 + b2
        key = lambda r: (r["step"], r["loss"], r["loss_scale"], r["skipped"])  # noqa: E731
        with open(aout, "rb") as f1, open(bout, "rb") as f2:
            same_w = f1.read() == f2.read()
        sk = [r["skipped"] for r in a]
        R.check([key(r) for r in a] == [key(r) for r in b] and same_w,
                "%s, %d rank(s), stage %d: 6 + resume 6 = 12 straight (losses, scales, skips, "
                "weights; skipped steps %s)" % (prec, n, stage,
                                                [i + 1 for i, x in enumerate(sk) if x]))
        if prec == "fp16":
            R.check(any(sk[:6]) and any(sk[6:]),
                    "fp16 resume: overflows happen before and after the save")
        else:
            export_bf16(ck, n)


def export_bf16(ck, nranks):
    """zt-ckpt export --dtype bf16 of a checkpoint: BF16 tensors that are exactly the F32
    export (the fp32 master weights) rounded by torch; a bad --dtype is refused"""
    import torch
    tool = os.path.join(os.path.dirname(ZT), "zt-ckpt")
    f32, b16 = R.path("export_f32.safetensors"), R.path("export_bf16.safetensors")
    p1 = subprocess.run([tool, "export", ck, "--safetensors", f32], capture_output=True, text=True)
    p2 = subprocess.run([tool, "export", ck, "--safetensors", b16, "--dtype", "bf16"],
                        capture_output=True, text=True)
    ok = p1.returncode == 0 and p2.returncode == 0
    if ok:
        with open(b16, "rb") as f:
            hlen = int.from_bytes(f.read(8), "little")
            hdr = json.loads(f.read(hlen))
            body = f.read()
        a = st_read(f32)
        for name, t in hdr.items():
            if name == "__metadata__":
                continue
            lo, hi = t["data_offsets"]
            got = torch.frombuffer(bytearray(body[lo:hi]), dtype=torch.int16)
            want = torch.from_numpy(a[name].copy()).to(torch.bfloat16).view(torch.int16)
            ok &= t["dtype"] == "BF16" and list(t["shape"]) == list(a[name].shape) and \
                torch.equal(got, want.reshape(-1))
    R.check(ok, "zt-ckpt export --dtype bf16 (%d-rank checkpoint): BF16 tensors equal to the F32 "
            "export rounded by torch (%s)" % (nranks, (p2.stdout or p2.stderr).strip()[:120]))
    p3 = subprocess.run([tool, "export", ck, "--safetensors", b16, "--dtype", "f64"],
                        capture_output=True, text=True)
    R.check(p3.returncode == 2 and "--dtype f64: expected f32 or bf16" in p3.stderr,
            "zt-ckpt export --dtype f64: exit 2 and one line")


# ---- 5. ZeRO stages on 2 ranks -----------------------------------------------------------------
def zero(model, data, init):
    for prec in sanitized(("bf16", "fp16"), ("bf16",)):
        base = cfg("z_%s_1.json" % prec, prec)
        one, _, _ = R.train("z_%s_1rank" % prec, 1, ["--ds-config", base, "--model", model,
                                                     "--data", data, "--init-from", init,
                                                     "--steps", "8"])
        losses = {}
        for st in range(4):
            d = dict(BASE2, zero_optimization=zero_section(st))
            d[prec] = {"enabled": True}
            ds = R.write("z_%s_s%d.json" % (prec, st), d)
            log, _, _ = R.train("z_%s_s%d" % (prec, st), 2, ["--ds-config", ds, "--model", model,
                                                            "--data", data, "--init-from", init,
                                                            "--steps", "8"])
            losses[st] = [o["loss"] for o in log]
            e = abs(losses[st][-1] - one[-1]["loss"]) / one[-1]["loss"]
            R.check(e < 1e-2, "%s stage %d on 2 ranks tracks 1 rank (final loss %.6f vs %.6f)"
                    % (prec, st, losses[st][-1], one[-1]["loss"]))
        R.check(losses[0] == losses[1] and losses[2] == losses[3],
                "%s on 2 ranks: stage 1 = stage 0 and stage 3 = stage 2 bit for bit" % prec)


# ---- 6. 16-bit parameters on NVMe ---------------------------------------------------------------
def gather_read_bytes(ztr):
    """bytes the parameter gathers read from the swap file (swap_in tasks at a prefetch
    priority, > 0; the optimizer's reads are below 0), rank 0, step 2"""
    total = 0
    with open(ztr) as f:
        for line in f:
            x = line.split()
            if line.startswith("#") or x[2] != "swap_in" or x[0] != "0" or x[3] != "2":
                continue
            if int(x[16]) > 0:
                total += max(int(x[14]), int(x[15]))
    return total


def nvme_params(model, data, init):
    nv = R.path("nvme")
    os.makedirs(nv, exist_ok=True)
    env = {"ZT_OPT_GROUP_ELEMS": "2048"}
    z3 = zero_section(3)
    off = dict(z3, offload_optimizer={"device": "nvme", "nvme_path": nv, "buffer_count": 3},
               offload_param={"device": "nvme", "nvme_path": nv, "buffer_size": 20000,
                              "max_in_cpu": 20000})
    for prec, n in sanitized((("bf16", 1), ("bf16", 2), ("fp16", 1), ("fp16", 2)),
                             (("bf16", 2), ("fp16", 1))):
        base = BASE if n == 1 else BASE2
        args = ["--model", model, "--data", data, "--init-from", init, "--steps", "6"]
        mem = R.write("nv_mem_%s.json" % prec, dict(base, zero_optimization=z3,
                                                   **{prec: {"enabled": True}}))
        ds = R.write("nv_%s.json" % prec, dict(base, zero_optimization=off,
                                              **{prec: {"enabled": True}}))
        a, aout, _ = R.train("nv_mem_%s_%d" % (prec, n), n, ["--ds-config", mem] + args, env)
        b, bout, _ = R.train("nv_%s_%d" % (prec, n), n, ["--ds-config", ds] + args, env)
        with open(aout, "rb") as f1, open(bout, "rb") as f2:
            same_w = f1.read() == f2.read()
        R.check([r["loss"] for r in a] == [r["loss"] for r in b] and same_w,
                "%s, parameters and optimizer state on NVMe, %d rank(s): bit-identical to "
                "stage 3 in memory" % (prec, n))
    # the gathers' reads: 16-bit against fp32
    got = {}
    for prec in ("fp32", "bf16"):
        d = dict(BASE, zero_optimization=off)
        if prec != "fp32":
            d[prec] = {"enabled": True}
        ds = R.write("nv_trace_%s.json" % prec, d)
        tr = R.path("nv_trace_%s.json.trace" % prec)
        p = R.launch(1, ["--ds-config", ds, "--model", model, "--data", data, "--init-from", init,
                         "--steps", "2", "--trace", tr + ".json", "--quiet"], env)
        got[prec] = gather_read_bytes(tr + ".ztr") if p.returncode == 0 else -1
    R.check(got["fp32"] > 0 and got["bf16"] * 2 == got["fp32"],
            "parameters on NVMe: the gathers read %d bytes in bf16, %d in fp32" % (got["bf16"],
                                                                                got["fp32"]))
    # save (masters read back from file A) and resume
    ds = R.write("nv_resume.json", dict(BASE, zero_optimization=off, bf16={"enabled": True}))
    args = ["--ds-config", ds, "--model", model, "--data", data]
    a, aout, _ = R.train("nv_straight", 1, args + ["--init-from", init, "--steps", "8"], env)
    ck = R.path("ck_nv")
    R.train("nv_first", 1, args + ["--init-from", init, "--steps", "4", "--save-dir", ck], env)
    b, bout, _ = R.train("nv_second", 1, args + ["--steps", "8", "--resume", ck], env)
    with open(aout, "rb") as f1, open(bout, "rb") as f2:
        same_w = f1.read() == f2.read()
    R.check([r["loss"] for r in a][4:] == [r["loss"] for r in b] and same_w,
            "bf16 with parameters on NVMe: 4 + resume 4 = 8 straight (losses, weights)")


# ---- 7. the loss curve on the demo corpus ------------------------------------------------------
def curve():
    data = os.path.join(SRC, "data", "fortunes.bin")
    if not os.path.exists(data):
        sh(["bash", os.path.join(SRC, "scripts", "prepare-demo.sh"),
            os.path.join(os.path.dirname(ZT), "zt-prepare")], "prepare-demo")
    model = os.path.join(SRC, "configs", "demo_model.json")
    with open(os.path.join(SRC, "configs", "demo_ds.json")) as f:
        demo = json.load(f)
    demo["scheduler"]["params"]["total_num_steps"] = 200
    final = {}
    for prec in ("fp32", "bf16", "fp16"):
        d = dict(demo)
        if prec != "fp32":
            d[prec] = {"enabled": True}
        ds = R.write("curve_%s.json" % prec, d)
        log, _, _ = R.train("curve_" + prec, 1, ["--ds-config", ds, "--model", model, "--data",
                                                 data, "--steps", "200"])
        final[prec] = sum(o["loss"] for o in log[-10:]) / 10
    for prec, tol in (("bf16", 0.005), ("fp16", 0.02)):
        e = abs(final[prec] - final["fp32"]) / final["fp32"]
        R.check(e < tol, "200 demo steps: %s final loss %.4f vs fp32 %.4f (%.2f%%, < %g%%)"
                % (prec, final[prec], final["fp32"], 100 * e, 100 * tol))


def main():
    if sys.argv[6:] == ["curve"]:
        curve()
        return R.finish("test_precision curve")
    model, data, init = numerics()
    overflow(model, data, init)
    determinism(model, data, init)
    resume(model, data, init)
    zero(model, data, init)
    nvme_params(model, data, init)
    return R.finish("test_precision")


if __name__ == "__main__":
    sys.exit(main())
