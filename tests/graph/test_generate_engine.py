#!/usr/bin/env python3
"""tests/graph/test_generate_engine.py: the inference engine against itself, bit for bit.

A small GPT-2 (4 layers, 64 wide, context 48, vocabulary 96) trained a few steps; prompts of
1..40 tokens. Checks:
  - prompts fed in chunks (steps that end no prompt, prompts ending while others prefill) give
    the ids of prompts fed whole;
  - KV-cache decode equals full recomputation: the prompt logits (--logits) computed one
    position per step through the cache (--prefill-chunk 1), in chunks of 7, and in one batch
    have the same bytes; so do bf16 and fp16 weights (bf16 on the bf16 engine, packed once,
    and widened under ZT_GEMM=avx512; bf16 also 7 positions per step), one worker's row blocks
    equal two workers' column parts (bf16 and f32), bf16 weights streamed from NVMe give the
    resident ones' bytes (also at n_embd 48, whose packed weights are padded) and, batched
    (--max-batch 3), the ids of one prompt at a time;
  - ZeRO-Inference: with the layers streamed from NVMe (offload_param nvme, buffer_count 2 and
    3) the logits and the greedy and sampled ids are those of the resident weights, the memory
    plan says so, and a ZT_HOST_MEM_LIMIT that the resident weights exceed stops the run (exit 1,
    one line naming the knob) while the streamed run fits under it; loading's conversion
    buffers count in the peak (a limit between the steady state and the load peak stops a
    model whose embedding outweighs its cache);
  - peak resident memory (VmHWM) of a model whose layers dwarf the rest: streaming them saves
    most of the bytes outside the window; with buffer_count "auto" the window is as large as
    ZT_HOST_MEM_LIMIT leaves room for (every layer under 1G, 3 to 7 of 8 under 40M, 2 without a
    limit), the plan within the limit, the ids unchanged;
  - --checkpoint: a checkpoint written by 2 ranks at ZeRO stage 3 (and by 1 rank) gives the
    logits of the weights that run exported (consolidated from the shards);
  - the step loop under several schedulers and worker counts gives the same ids as above, and
    so does one decode step at a time (ZT_DECODE_AHEAD=0), with and without a repetition
    penalty.
Under the sanitizers (ZT_TEST_SANITIZED=1) one case of each path: chunk 7 only, one chunked
batch, bf16 alone on one worker, buffer_count 2, the 40M limit, two scheduler settings.

Usage: test_generate_engine.py APPS_DIR MPIEXEC WORKDIR
"""
import json
import os
import re
import struct
import subprocess
import sys

from trainlib import Runner, sanitized

APPS, MPIEXEC, WORK = sys.argv[1:4]
GEN = os.path.join(APPS, "zt-generate")
R = Runner(os.path.join(APPS, "zt-train"), MPIEXEC, WORK)


def generate(label, args, env=None, code=0):
    """zt-generate ARGS --json; the records (None when the exit code is not `code`)"""
    p = subprocess.run([GEN] + args + ["--json"], capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, **(env or {})))
    if not R.check(p.returncode == code, "%s: exit %d (expected %d)%s" % (
            label, p.returncode, code, "" if p.returncode == code else "\n" + p.stderr[-1500:])):
        return None, p
    return [json.loads(l) for l in p.stdout.splitlines() if l.strip()], p


def logits_bytes(path):
    """the data bytes of the single tensor of a safetensors file"""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        f.read(n)
        return f.read()


model = R.write("model.json", {"vocab_size": 96, "seq_len": 48, "n_embd": 64, "n_layer": 4,
                               "n_head": 4})
data = R.tokens("tokens.bin", [(i * 7 + i // 5) % 96 for i in range(6000)])
ds = R.write("ds.json", {"train_batch_size": 4, "train_micro_batch_size_per_gpu": 4,
                         "optimizer": {"type": "AdamW", "params": {"lr": 3e-3}}})
ds3 = R.write("ds3.json", {"train_batch_size": 4, "train_micro_batch_size_per_gpu": 2,
                           "optimizer": {"type": "AdamW", "params": {"lr": 3e-3}},
                           "zero_optimization": {"stage": 3}})
base = ["--model", model, "--data", data, "--steps", "6"]
_, weights, _ = R.train("w1", 1, ["--ds-config", ds, "--save-dir", R.path("ck1")] + base)
_, weights3, _ = R.train("w3", 2, ["--ds-config", ds3, "--save-dir", R.path("ck3")] + base)

prompts = R.path("prompts.jsonl")
with open(prompts, "w") as f:
    for n in (1, 5, 17, 40, 3):
        f.write(json.dumps({"prompt_ids": [(i * 11 + n) % 96 for i in range(n)]}) + "\n")
    f.write(json.dumps({"prompt_ids": [4, 5, 6], "temperature": 0.9, "top_k": 30,
                        "seed": 7}) + "\n")
long_prompt = ",".join(str((i * 5) % 96) for i in range(40))
gen = ["--model", model, "--max-new-tokens", "12", "--temperature", "0"]


def logits(label, extra, env=None, code=0):
    out = R.path(label + ".safetensors")
    recs, p = generate(label, gen + ["--prompt-ids", long_prompt, "--logits", out] + extra, env,
                       code)
    return (logits_bytes(out) if recs is not None and code == 0 else None), p


# KV-cache decode = full recomputation
whole, _ = logits("whole", ["--weights", weights])
for chunk in sanitized(("1", "7"), ("7",)):
    got, _ = logits("chunk" + chunk, ["--weights", weights, "--prefill-chunk", chunk])
    R.check(got is not None and got == whole and len(whole) == 40 * 96 * 4,
            "logits of 40 positions through the cache, %s per step, have the bytes of one "
            "batch" % chunk)

# prompts longer than the chunk, without prompt logits: steps of prompt chunks alone (no logits
# row), and requests ending while others still prefill
ref_ids, _ = generate("resident", gen + ["--weights", weights, "--prompts", prompts])
for chunk, batch in sanitized((("5", "1"), ("5", "2"), ("3", "6")), (("3", "6"),)):
    ids, _ = generate("chunks", gen + ["--weights", weights, "--prompts", prompts,
                                       "--prefill-chunk", chunk, "--max-batch", batch])
    R.check(ids is not None and [r["ids"] for r in ids] == [r["ids"] for r in ref_ids],
            "--prefill-chunk %s --max-batch %s: the ids of whole prompts" % (chunk, batch))

# 16-bit weights: decode rows and prefill rows give the same bits (bf16 on a bf16 engine: the
# bf16 model's products on weights packed once, both ways; fp16, and bf16 under
# ZT_GEMM=avx512: decode rows read them as stored, prefill rows widen them)
bf16w = R.path("w1_bf16.safetensors")
p = subprocess.run([os.path.join(APPS, "zt-ckpt"), "export", R.path("ck1"), "--safetensors",
                    bf16w, "--dtype", "bf16"], capture_output=True, text=True)
R.check(p.returncode == 0, "zt-ckpt export --dtype bf16: exit %d %s" % (p.returncode, p.stderr))
f16cfg = R.write("f16.json", {"dtype": "fp16"})
for label, extra in (("bf16", ["--weights", bf16w]),
                     ("fp16", ["--weights", weights, "--ds-config", f16cfg])):
    whole16, _ = logits(label + " whole", extra)
    got, _ = logits(label + " chunk1", extra + ["--prefill-chunk", "1"])
    R.check(got is not None and got == whole16 and whole16 != whole,
            "%s weights: logits through the cache one position per step have the bytes of one "
            "batch" % label)
widened, _ = logits("bf16 widened", ["--weights", bf16w], {"ZT_GEMM": "avx512"})
got, _ = logits("bf16 widened chunk1", ["--weights", bf16w, "--prefill-chunk", "1"],
                {"ZT_GEMM": "avx512"})
R.check(got is not None and got == widened, "bf16 weights under ZT_GEMM=avx512 (widened): one "
        "position per step has the bytes of one batch")
bf16_whole, _ = logits("bf16 resident", ["--weights", bf16w])
nvme16 = R.path("nvme16")
os.makedirs(nvme16, exist_ok=True)
cfg16 = R.write("nvme16.json", {"zero_optimization": {"stage": 3, "offload_param": {
    "device": "nvme", "nvme_path": nvme16, "buffer_count": 2}}})
got, _ = logits("bf16 nvme", ["--weights", bf16w, "--ds-config", cfg16])
R.check(got is not None and got == bf16_whole, "bf16 weights streamed from NVMe (packed as "
        "they are written): the logits' bytes of the resident ones")
got, _ = logits("bf16 chunk7", ["--weights", bf16w, "--prefill-chunk", "7"])
R.check(got is not None and got == bf16_whole, "bf16 weights: 7 positions per step (a few rows "
        "of the bf16 cache's attention) have the bytes of one batch")
# one worker: no step splits its products by columns, every product is a row block's
for label, w16, ref in sanitized((("bf16", bf16w, bf16_whole), ("f32", weights, whole)),
                                  (("bf16", bf16w, bf16_whole),)):
    got, _ = logits(label + " one worker", ["--weights", w16], {"STARPU_NCPU": "1"})
    R.check(got is not None and got == ref, "%s weights on one worker (row blocks, no column "
            "parts): the bytes of two workers' column parts" % label)
# a width that is not a multiple of 32: the packed weights are padded, resident and streamed
odd = R.write("odd.json", {"vocab_size": 96, "seq_len": 48, "n_embd": 48, "n_layer": 2,
                           "n_head": 4})
_, oddw, _ = R.train("odd", 1, ["--ds-config", ds, "--model", odd, "--data", data, "--steps",
                                "1"])
odd16 = R.write("odd16.json", {"dtype": "bf16"})
odd16s = R.write("odd16s.json", {"dtype": "bf16", "zero_optimization": {
    "stage": 3, "offload_param": {"device": "nvme", "nvme_path": nvme16, "buffer_count": 2}}})
odd_bytes = {}
for label, cfg in (("resident", odd16), ("streamed", odd16s)):
    out = R.path("odd_%s.safetensors" % label)
    recs, _ = generate("odd " + label, ["--model", odd, "--max-new-tokens", "4", "--temperature",
                                        "0", "--prompt-ids", long_prompt, "--logits", out,
                                        "--weights", oddw, "--ds-config", cfg])
    odd_bytes[label] = logits_bytes(out) if recs is not None else None
R.check(odd_bytes["resident"] is not None and odd_bytes["resident"] == odd_bytes["streamed"],
        "n_embd 48, bf16: the layers streamed from NVMe give the resident logits' bytes")
bf16_ids = {}
for batch in ("1", "3"):
    bf16_ids[batch], _ = generate("bf16 batch " + batch, gen + ["--weights", bf16w, "--prompts",
                                                                prompts, "--max-batch", batch])
R.check(bf16_ids["1"] is not None and bf16_ids["3"] is not None and
        [r["ids"] for r in bf16_ids["1"]] == [r["ids"] for r in bf16_ids["3"]],
        "bf16 weights: --max-batch 3 gives the ids of one prompt at a time")

# ZeRO-Inference from NVMe
nvme = R.path("nvme")
os.makedirs(nvme, exist_ok=True)
for count in sanitized((2, 3), (2,)):
    cfg = R.write("nvme%d.json" % count, {"zero_optimization": {"stage": 3, "offload_param": {
        "device": "nvme", "nvme_path": nvme, "buffer_count": count}}})
    got, p = logits("nvme%d" % count, ["--weights", weights, "--ds-config", cfg])
    R.check(got == whole, "streamed from NVMe (buffer_count %d): the logits' bytes" % count)
    R.check("streamed from NVMe through a window of %d layers" % min(count, 4) in p.stderr,
            "streamed (buffer_count %d): the memory plan says so" % count)
    ids, _ = generate("nvme ids", gen + ["--weights", weights, "--prompts", prompts,
                                         "--ds-config", cfg])
    R.check(ids is not None and [r["ids"] for r in ids] == [r["ids"] for r in ref_ids],
            "streamed (buffer_count %d): the greedy and sampled ids of the resident weights"
            % count)
    R.check(os.listdir(nvme) == [], "streamed: the swap directory is removed at the end")
# the swap through the thread engine (ZT_AIO_ENGINE, as the training swaps take it)
got, p = logits("nvme threads", ["--weights", weights, "--ds-config", cfg],
                env={"ZT_AIO_ENGINE": "threads"})
R.check(got == whole and "swap engine threads)" in p.stderr,
        "streamed through ZT_AIO_ENGINE=threads: the logits' bytes, and the plan names the "
        "engine")
limit = {"ZT_HOST_MEM_LIMIT": "700K"}  # resident ~1 MiB, streamed ~0.6 MiB at batch 1
small = ["--max-batch", "1", "--prefill-chunk", "8"]
_, p = logits("budget resident", ["--weights", weights] + small, limit, code=1)
lines = [l for l in p.stderr.splitlines() if "error:" in l]
R.check(len(lines) == 1 and "ZT_HOST_MEM_LIMIT" in lines[0],
        "resident weights over ZT_HOST_MEM_LIMIT: one error line naming it: %r" % lines)
got, _ = logits("budget streamed", ["--weights", weights, "--ds-config",
                                    R.path("nvme2.json")] + small, limit)
R.check(got == whole, "streamed under the same ZT_HOST_MEM_LIMIT: it runs, same logits")

# loading's conversion buffers (the largest parameter in fp32, and in bf16 to pack it for the
# bf16 engine) count in the peak: a vocabulary of 4096 makes them outweigh the cache and the
# activations, and a limit between the two totals stops the run in one line naming them
wide = R.write("wide.json", {"vocab_size": 4096, "seq_len": 16, "n_embd": 64, "n_layer": 1,
                             "n_head": 4})
_, widew, _ = R.train("wide", 1, ["--ds-config", ds, "--model", wide, "--data", data, "--steps",
                                  "1"])
wide_run = ["--model", wide, "--weights", widew, "--ds-config", R.write("wide16.json", {
    "dtype": "bf16"}), "--prompt-ids", "1,2,3", "--max-new-tokens", "2", "--max-batch", "1"]
_, p = generate("wide plan", wide_run)
plan = re.search(r"embeddings\+ln_f ([0-9.]+) MiB resident, layers ([0-9.]+) MiB resident \| "
                 r"KV cache (\w+) ([0-9.]+) MiB .* activations ([0-9.]+) MiB \| load buffers "
                 r"([0-9.]+) MiB \| host total ([0-9.]+) MiB", p.stderr)
if R.check(plan is not None, "the plan line names the load buffers: %s" % p.stderr[-600:]):
    outer, layers, kvt, kv, acts, load, total = plan.groups()
    want = 4096 * 64 * (6 if kvt == "bf16" else 4) / 1048576.0  # bf16 cache: weights packed
    steady = float(outer) + float(layers) + float(kv) + float(acts)
    R.check(abs(float(load) - want) < 0.05 and
            abs(float(total) - (float(outer) + float(layers) + float(load))) < 0.05 and
            steady < float(total) - 0.3,
            "load buffers %s MiB (wte 4096 x 64 at %d bytes) above the cache and activations: "
            "host total %s MiB, the steady state %.1f" % (load, 6 if kvt == "bf16" else 4, total,
                                                         steady))
    cap = "%dK" % int((float(total) - 0.15) * 1024)
    _, p = generate("wide over", wide_run, {"ZT_HOST_MEM_LIMIT": cap}, code=1)
    lines = [l for l in p.stderr.splitlines() if "error:" in l]
    R.check(len(lines) == 1 and "ZT_HOST_MEM_LIMIT" in lines[0] and
            "conversion buffers" in lines[0], "ZT_HOST_MEM_LIMIT=%s, below the load peak but "
            "above the steady state: one error line naming the buffers: %r" % (cap, lines))
    generate("wide under", wide_run, {"ZT_HOST_MEM_LIMIT": "%dK" % int((float(total) + 0.15) *
                                                                      1024)})

# peak resident memory: a model whose layers (56 MiB) dwarf the rest, resident and streamed
big = R.write("big.json", {"vocab_size": 96, "seq_len": 32, "n_embd": 384, "n_layer": 8,
                           "n_head": 6})
_, bigw, _ = R.train("big", 1, ["--ds-config", ds, "--model", big, "--data", data, "--steps",
                                "1"])
peak = {}
for mode, extra in (("resident", []), ("streamed", ["--ds-config", R.path("nvme2.json")])):
    recs, p = generate("big " + mode, ["--model", big, "--weights", bigw, "--prompt-ids",
                                       "1,2,3", "--max-new-tokens", "4", "--max-batch", "1"]
                       + extra)
    m = re.search(r"peak memory: ([0-9.]+) MiB resident", p.stderr)
    peak[mode] = float(m.group(1)) if m else 0.0
    peak[mode + " ids"] = recs and recs[0]["ids"]
layers = 8 * (12 * 384 * 384 + 13 * 384) * 4 / 1048576.0
R.check(peak["resident"] - peak["streamed"] >= 0.7 * (layers - 2 * layers / 8) and
        peak["resident ids"] == peak["streamed ids"],
        "peak RSS resident %.1f MiB, streamed %.1f MiB: streaming saves at least 0.7 x the %.1f "
        "MiB of layers outside the window, same ids" % (peak["resident"], peak["streamed"],
                                                       layers - 2 * layers / 8))

# buffer_count "auto": the window as large as ZT_HOST_MEM_LIMIT leaves room for (all 8 layers
# under a large limit, some under a smaller one, 2 without one), the plan within the limit
auto = R.write("nvme_auto.json", {"zero_optimization": {"stage": 3, "offload_param": {
    "device": "nvme", "nvme_path": nvme, "buffer_count": "auto"}}})
for lim, lo, hi in sanitized((("1G", 8, 8), ("40M", 3, 7), (None, 2, 2)),
                             (("40M", 3, 7),)):
    recs, p = generate("auto " + str(lim), ["--model", big, "--weights", bigw, "--prompt-ids",
                                            "1,2,3", "--max-new-tokens", "4", "--max-batch", "1",
                                            "--ds-config", auto],
                       {"ZT_HOST_MEM_LIMIT": lim} if lim else None)
    win = re.search(r"through a window of (\d+) layers", p.stderr)
    tot = re.search(r"host total ([0-9.]+) MiB", p.stderr)
    cap = {"1G": 1024.0, "40M": 40.0}.get(lim, float("inf"))
    R.check(win is not None and lo <= int(win.group(1)) <= hi and tot is not None and
            float(tot.group(1)) <= cap and recs and recs[0]["ids"] == peak["resident ids"],
            "buffer_count auto, ZT_HOST_MEM_LIMIT=%s: a window of %s layers (expected %d to %d), "
            "plan %s MiB, the resident ids" % (lim, win and win.group(1), lo, hi,
                                               tot and tot.group(1)))

# checkpoints of 1 and 2 ranks (stage 3) give their exported weights' logits
for ck, w in (("ck1", weights), ("ck3", weights3)):
    ref, _ = logits(ck + " weights", ["--weights", w])
    got, _ = logits(ck, ["--checkpoint", R.path(ck)])
    R.check(got is not None and got == ref, "--checkpoint %s: the logits of its export" % ck)

# schedulers and worker counts
for sched, ncpu in sanitized([(s, n) for s in ("lws", "eager", "dmda") for n in ("1", "2")],
                             [("lws", "1"), ("dmda", "2")]):
    ids, _ = generate("sched", gen + ["--weights", weights, "--prompts", prompts, "--max-batch",
                                      "2"], {"STARPU_SCHED": sched, "STARPU_NCPU": ncpu})
    R.check(ids is not None and [r["ids"] for r in ids] == [r["ids"] for r in ref_ids],
            "STARPU_SCHED=%s STARPU_NCPU=%s --max-batch 2: the same ids" % (sched, ncpu))

# one step at a time (no decode step submitted ahead), plain and with a repetition penalty
# (which keeps steps from going ahead): the ids of steps ahead
for extra in ([], ["--repetition-penalty", "1.3"]):
    runs = [generate("ahead=%s" % a, gen + ["--weights", weights, "--prompts", prompts,
                                            "--max-batch", "3"] + extra, {"ZT_DECODE_AHEAD": a})[0]
            for a in ("0", "1")]
    R.check(None not in runs and [r["ids"] for r in runs[0]] == [r["ids"] for r in runs[1]] and
            (extra or [r["ids"] for r in runs[0]] == [r["ids"] for r in ref_ids]),
            "ZT_DECODE_AHEAD=0 and 1 %s: the same ids" % " ".join(extra))

sys.exit(R.finish("test_generate_engine"))
