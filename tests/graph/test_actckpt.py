#!/usr/bin/env python3
"""tests/graph/test_actckpt.py: activation checkpointing (the config's activation_checkpointing
section) recomputes the checkpointed layers' activations during the backward and trains the
same bits as storing everything.

- Bit-identical losses and exported weights with and without checkpointing: ZeRO stages 0-3 on
  1 rank and stages 1 and 3 on 2 ranks, gradient accumulation 1 and 2, bf16 and fp16, every layer
  or the first number_checkpoints, a recompute window of 1 and 2 (ZT_RECOMPUTE_WINDOW), recompute
  full, mlp and attention, and with the parameters on NVMe at stage 3.
- Memory: with every layer checkpointed and a window of 1, the activations of the memory plan
  fall by (L-1)/L of the layers' recomputable activations (each layer keeps its output, the next
  layer's input); the measured peak resident memory falls by most of it; a batch whose plan is
  over ZT_HOST_MEM_LIMIT without checkpointing fits with it.
- Bad input: partition_activations, profile true, number_checkpoints above n_layer: one line,
  exit 2.
Under the sanitizers (ZT_TEST_SANITIZED=1) 8 of the 15 bit-identity cases (each stage, 2 ranks,
bf16, fp16, NVMe parameters and each recompute mode once).

Usage: test_actckpt.py ZT_TRAIN MPIEXEC WORKDIR
"""
import json
import os
import re
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from trainlib import Runner, sanitized  # noqa: E402

R = Runner(sys.argv[1], sys.argv[2], sys.argv[3], {"STARPU_SILENT": "1"})
V, T, C, L, NH = 64, 16, 32, 3, 2
model = R.write("model.json", {"vocab_size": V, "seq_len": T, "n_embd": C, "n_layer": L,
                               "n_head": NH})
data = R.tokens("tokens.bin", [(i * 7 + i // 13) % V for i in range(5000)])
NVME = R.path("nvme")
os.makedirs(NVME, exist_ok=True)


config = R.ckpt_config


def run(label, n, cfg, steps=4, env=None):
    recs, out, p = R.train(label, n, ["--ds-config", cfg, "--model", model, "--data", data,
                                      "--steps", str(steps)], env)
    with open(out, "rb") as f:
        return [r["loss"] for r in recs], f.read(), p


# ---- the same bits ---------------------------------------------------------------------------
# (a checkpointed layer is recomputed when later checkpointed layers have taken its window slot
# since its forward: every case below recomputes at least layer 0; the trace check proves it)
CASES = [  # label, stage, ranks, accum, precision, checkpoint section, window, param offload
    ("s0", 0, 1, 1, None, {}, "2", None),
    ("s1a2", 1, 1, 2, None, {}, "1", None),
    ("s2", 2, 1, 1, None, {"number_checkpoints": 2}, "1", None),
    ("s3", 3, 1, 2, None, {"cpu_checkpointing": True}, "2", None),
    ("s1n2", 1, 2, 1, None, {}, "1", None),
    ("s3n2", 3, 2, 2, None, {}, "2", None),
    ("bf16", 2, 1, 2, "bf16", {}, "2", None),
    ("fp16", 0, 1, 1, "fp16", {"number_checkpoints": 2}, "1", None),
    ("s3nvme", 3, 1, 1, None, {}, "2", {"device": "nvme", "nvme_path": NVME}),
    ("mlp_s0", 0, 1, 2, None, {"recompute": "mlp"}, "1", None),
    ("mlp_s3n2", 3, 2, 1, None, {"recompute": "mlp"}, "2", None),
    ("mlp_bf16", 1, 1, 1, "bf16", {"recompute": "mlp"}, "1", None),
    ("att_s0a2", 0, 1, 2, None, {"recompute": "attention"}, "1", None),
    ("att_s3n2", 3, 2, 1, None, {"recompute": "attention"}, "2", None),
    ("att_fp16", 2, 1, 1, "fp16", {"recompute": "attention"}, "1", None),
]
# under the sanitizers (ZT_TEST_SANITIZED=1) each stage, 2 ranks, 16-bit, NVMe and recompute
# mode once
CASES = sanitized(CASES, [c for c in CASES if c[0] in ("s0", "s1a2", "s3n2", "bf16", "fp16",
                                                       "s3nvme", "mlp_s3n2", "att_fp16")])
for label, stage, n, accum, prec, ckpt, window, par in CASES:
    base = run(label + "_plain", n, config(label + "_plain", stage, n, accum, None, prec, par))
    got = run(label + "_ckpt", n, config(label + "_ckpt", stage, n, accum, ckpt, prec, par),
              env={"ZT_RECOMPUTE_WINDOW": window})
    R.check(got[0] == base[0] and got[1] == base[1],
            "%s (stage %d, %d rank(s), accumulation %d, %s, %s, window %s): losses and weights "
            "bit-identical with checkpointing" % (label, stage, n, accum, prec or "fp32", ckpt,
                                                   window))

# the recompute in the trace: layer 0's forward kinds run again, at the backward's priority
def forward_tasks(label, cfg, env):
    trace = R.path(label + ".json")
    p = R.launch(1, ["--ds-config", cfg, "--model", model, "--data", data, "--steps", "1",
                     "--trace", trace, "--quiet"], env)
    if p.returncode != 0:
        return -1
    with open(trace) as f:
        events = json.load(f)["traceEvents"]
    # by args.kind: a recompute's events are named "layernorm_forward (recompute)", and marked
    ln = [e for e in events if e.get("args", {}).get("kind") == "layernorm_forward"]
    marked = [e for e in ln if e["args"].get("recompute") == 1 and
              e["name"] == "layernorm_forward (recompute)"]
    summary = subprocess.run([ZT_TRACE, "summary", "--json", trace], capture_output=True,
                             text=True, timeout=120)
    recomp_ms = sum(r["recompute_ms"] for r in json.loads(summary.stdout)["steps"])
    return len(ln), len(marked), recomp_ms


ZT_TRACE = os.path.join(os.path.dirname(os.path.abspath(sys.argv[1])), "zt-trace")
plain_n, plain_marked, plain_ms = forward_tasks("trace_plain", config("tr_plain", 0, 1, 1), None)
R.check(plain_n > 0 and plain_marked == 0 and plain_ms == 0,
        "without checkpointing no task is marked recompute (zt-trace summary: %.3f ms)" % plain_ms)
for window, layers, mode in (("1", 2, "full"), ("2", 1, "full"), ("1", 2, "mlp"),
                             ("1", 2, "attention")):
    ckpt_n, marked, ms = forward_tasks("trace_ckpt" + window + mode,
                                       config("tr_ckpt", 0, 1, 1, {"recompute": mode}),
                                       {"ZT_RECOMPUTE_WINDOW": window})
    nblk = plain_n // (2 * L + 1)  # two layer norms per layer and ln_f, per row block
    norms = 2 if mode == "full" else 1  # "mlp": ln_2 on, "attention": ln_1 to the attention
    R.check(ckpt_n == plain_n + layers * norms * nblk and marked == layers * norms * nblk and
            ms > 0, "window %s, recompute %s: %d layer(s) recomputed (layernorm_forward tasks "
            "%d -> %d, %d marked recompute in the trace; zt-trace summary recomp %.3f ms)" %
            (window, mode, layers, plain_n, ckpt_n, marked, ms))

# ---- memory ----------------------------------------------------------------------------------
MEM = re.compile(r"activations ([0-9.]+) MiB \| total ([0-9.]+) MiB")
PEAK = re.compile(r"peak memory \(rank 0 of 1\): ([0-9.]+) MiB resident")
big_model = R.write("big_model.json", {"vocab_size": V, "seq_len": 128, "n_embd": 64,
                                       "n_layer": 6, "n_head": 4})
big_data = R.tokens("big.bin", [(i * 5) % V for i in range(40000)])


def plan(label, ckpt, env=None, expect_ok=True):
    cfg = config("mem_" + label, 0, 1, 1, ckpt)
    cfg_json = R.path("ds_mem_%s.json" % label)
    # batch 8 of 128 tokens: the activations dominate
    with open(cfg_json) as f:
        txt = f.read().replace('"train_batch_size": 4', '"train_batch_size": 8').replace(
            '"train_micro_batch_size_per_gpu": 4', '"train_micro_batch_size_per_gpu": 8')
    with open(cfg_json, "w") as f:
        f.write(txt)
    p = R.launch(1, ["--ds-config", cfg, "--model", big_model, "--data", big_data, "--steps",
                     "2"], dict({"ZT_RECOMPUTE_WINDOW": "1"}, **(env or {})))
    m, k = MEM.search(p.stdout), PEAK.search(p.stdout)
    if expect_ok and (p.returncode != 0 or not m or not k):
        print("FAIL %s: exit %d\n%s%s" % (label, p.returncode, p.stdout[-1500:], p.stderr[-1500:]))
        sys.exit(1)
    return (float(m.group(1)), float(m.group(2)), float(k.group(1))) if m and k else None, p


(acts0, total0, rss0), _ = plan("plain", None)
(acts1, total1, rss1), _ = plan("ckpt", {})
Bm, TT, CC, LL, NHH = 8, 128, 64, 6, 4
per_pos = 15 * CC + NHH * TT  # ln1, qkv, atty, att, res2, ln2, fch, fch_gelu (X values)
recomputable = Bm * TT * (per_pos * 4 + 4 * 4) / 2**20  # + 4 fp32 layernorm statistics
want = (LL - 1) * recomputable
R.check(acts0 - acts1 >= want * 0.999,
        "memory plan: activations %.2f -> %.2f MiB, down %.2f MiB >= (L-1)/L of the layers' "
        "recomputable %.2f MiB" % (acts0, acts1, acts0 - acts1, LL * recomputable))
R.check(rss0 - rss1 >= 0.7 * want,
        "measured peak RSS %.1f -> %.1f MiB, down %.1f MiB (>= 70%% of the plan's %.1f)" %
        (rss0, rss1, rss0 - rss1, want))
(acts2, _, _), _ = plan("ckpt_mlp", {"recompute": "mlp"})
mlp_part = Bm * TT * ((9 * CC) * 4 + 2 * 4) / 2**20  # ln2, fch, fch_gelu; ln_2's statistics
R.check(acts0 - acts2 >= (LL - 1) * mlp_part * 0.999 and acts2 > acts1,
        "recompute mlp: activations %.2f -> %.2f MiB, down (L-1)/L of the MLPs' %.2f MiB and "
        "more than full's %.2f" % (acts0, acts2, LL * mlp_part, acts1))
(acts3, _, _), _ = plan("ckpt_attention", {"recompute": "attention"})
att_part = Bm * TT * ((5 * CC + NHH * TT) * 4 + 2 * 4) / 2**20  # ln1, qkv, atty, att; stats
R.check(acts0 - acts3 >= (LL - 1) * att_part * 0.999 and acts3 > acts1,
        "recompute attention: activations %.2f -> %.2f MiB, down (L-1)/L of the attentions' "
        "%.2f MiB and more than full's %.2f" % (acts0, acts3, LL * att_part, acts1))
limit = "%dM" % int((total0 + total1) / 2)
_, p0 = plan("plain_limit", None, {"ZT_HOST_MEM_LIMIT": limit}, expect_ok=False)
R.check(p0.returncode == 1 and "ZT_HOST_MEM_LIMIT" in p0.stderr,
        "without checkpointing the batch is over ZT_HOST_MEM_LIMIT=%s (exit %d)" %
        (limit, p0.returncode))
r, p1 = plan("ckpt_limit", {}, {"ZT_HOST_MEM_LIMIT": limit}, expect_ok=False)
R.check(p1.returncode == 0, "with checkpointing it fits under ZT_HOST_MEM_LIMIT=%s (exit %d)" %
        (limit, p1.returncode))

# ---- bad input -------------------------------------------------------------------------------
for ckpt, text in (({"partition_activations": True}, "partition_activations"),
                   ({"profile": True}, "profile"),
                   ({"number_checkpoints": 9}, "exceeds the model's n_layer 3"),
                   ({"recompute": "attn"}, "activation_checkpointing.recompute")):
    cfg = config("bad", 0, 1, 1, ckpt)
    q = subprocess.run([R.zt, "--ds-config", cfg, "--model", model, "--data", data],
                       capture_output=True, text=True, env=dict(os.environ, STARPU_SILENT="1"))
    R.check(q.returncode == 2 and text in q.stderr and q.stderr.count("\n") == 1,
            "%s: exit 2, one line (%s)" % (ckpt, q.stderr.strip()[:200]))

shutil.rmtree(NVME, ignore_errors=True)
sys.exit(R.finish("test_actckpt"))
