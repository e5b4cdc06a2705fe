#!/usr/bin/env python3
"""tests/graph/test_generate_vs_torch.py: zt-generate against the PyTorch reference of greedy
decoding (tests/ref/gpt2_generate_ref.py), and against itself across batching, schedulers and
worker counts. Demo shape (4 layers, 128 channels, 4 heads, context 64, vocabulary 256).

Weights: "random" (gpt2_generate_ref.random_weights: wide logits, so argmax gaps stand far above
float noise) and "trained" (a short zt-train run on sentences this test writes, --export).
  (a) --logits of every prompt against torch float64: max abs <= 1e-4;
  (b) greedy ids (--temperature 0 --json) of prompts of 1..45 tokens equal torch's KV-cached
      greedy loop; where torch's top-2 logit gap falls below 1e-4 the comparison stops there
      (float noise may pick either), and fails when that leaves fewer than 8 tokens compared;
  (b') KV-cache decode equals full recomputation: the argmax of each row of a prefill of the
      prompt and the generated ids (--logits) is the id the decode step generated there;
  (c) the same prompts in one --prompts file (a blank line, lines with their own
      max_new_tokens) with --max-batch 1, 3 and 8 give the ids of one prompt at a time;
  (d) seeded sampling (temperature 0.8, top-k 20, top-p 0.9, lines with their own seed, top_k,
      top_p, temperature) gives the same ids under STARPU_SCHED lws/eager/dmda x STARPU_NCPU 1/2,
      with --max-batch 1/3/8 and on a second run; a line's temperature 0 is greedy;
  (e) a generation reaching the context stops with "length", prompt + ids <= seq_len, and
      equals torch up to there; a prompt of exactly seq_len tokens: no id, or one error line;
  (f) BF16 and F16 safetensors (and --ds-config "dtype" bf16/fp16 on the F32 file): BF16
      under ZT_GEMM=avx512 or on a CPU without a bf16 engine (the stored values widened to
      fp32, an fp32 cache): logits within 1e-4 of torch float64 on the same rounded weights,
      so only fp32 arithmetic separates the two, as in (a); the reference rounds fp32 to bf16
      to nearest even, as torch and DeepSpeed do. BF16 on a bf16 engine (the bf16 model:
      every product's input and the cached K and V rounded to bf16) and F16 (exact products
      on the stored weights, the cached K and V rounded to fp16, as llama.cpp's f16 cache)
      against the reference that rounds the same: max error 5e-3 (bf16) or 1e-3 (fp16) of the
      largest logit (a value next to a rounding boundary may round the other way in float64),
      median error at most half of the error against the unrounded reference. Greedy ids
      equal torch's, and the logits differ from the F32 run's (the rounding was used);
  (g) text: --prompt with a byte-level tokenizer equals --prompt-ids of its bytes, "text" is
      the decoded ids, --stop cuts the text before the stop string (ids keep the token that
      completed it), <|endoftext|> ends with "eos" (only with --tokenizer), output without
      --json streams the text or ids, the stderr summary and memory plan lines;
  (h) --repetition-penalty 1.3: greedy ids equal torch's with Hugging Face's penalty;
  (i) --checkpoint DIR and DIR/<tag> of the trained run, and of a ZeRO-3 run on 2 ranks
      (mpirun; consolidated on load): logits bit for bit those of --weights with the run's
      --export, the same ids.

Usage: test_generate_vs_torch.py APPS_DIR REF_DIR WORKDIR MPIEXEC
"""
import json
import os
import random
import re
import shutil
import subprocess
import sys

import numpy as np

APPS, REF, WORK, MPIEXEC = sys.argv[1:5]
sys.path.insert(0, REF)
import gpt2_generate_ref as R  # noqa: E402  (the oracle: greedy loops, random weights)
from gpt2_bytes import bytes_to_unicode  # noqa: E402
from gpt2_torch import st_read, st_write, write_tokens  # noqa: E402

ZT_TRAIN, ZT_GEN = os.path.join(APPS, "zt-train"), os.path.join(APPS, "zt-generate")
SHAPE = {"vocab_size": 256, "seq_len": 64, "n_embd": 128, "n_layer": 4, "n_head": 4}
LOGITS_TOL = 1e-4  # max abs, zt-generate (fp32) vs torch float64
BF16_FLIP_REL = 5e-3  # a bf16 model: max abs error over max |logit| (rounding flips' reach)
BF16_CLOSER = 0.5     # ... and its median error at most this share of the unrounded reference's
F16_FLIP_REL = 1e-3   # an fp16 model (its cache's K and V rounded to fp16, 2^-11 relative)
FLIP_REL = {"bf16": BF16_FLIP_REL, "f16": F16_FLIP_REL}
GAP_MIN = 1e-4     # below this top-2 gap, float noise may choose either token
MIN_COMPARED = 8   # a greedy comparison cut before this many tokens proves too little
MAX_NEW = 16
SAMPLING = ["--temperature", "0.8", "--top-k", "20", "--top-p", "0.9", "--seed", "5"]
bad = []


def path(name):
    return os.path.join(WORK, name)


def check(cond, what):
    print("%s %s" % ("ok  " if cond else "FAIL", what), flush=True)
    if not cond:
        bad.append(what.split(":")[0])
    return cond


def ids_arg(ids):
    return ",".join(str(i) for i in ids)


def run_gen(args, env=None, quiet=True, timeout=120):
    """zt-generate ARGS: the CompletedProcess (None after a timeout)"""
    cmd = [ZT_GEN] + args + (["--quiet"] if quiet else [])
    e = dict(os.environ, OMP_NUM_THREADS="1", **(env or {}))
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=e)
    except subprocess.TimeoutExpired:
        return None


def gen_json(label, args, env=None):
    """zt-generate ARGS --json: its records (one JSON object per stdout line: split at "\n"
    only, as a text may hold U+0085 or U+2028), or None after a failure (recorded)"""
    p = run_gen(args + ["--json"], env)
    if p is None:
        check(False, "%s: no answer after 120 s: zt-generate %s" % (label, " ".join(args)))
        return None
    if p.returncode != 0:
        check(False, "%s: exit %d: zt-generate %s\n%s" % (label, p.returncode, " ".join(args),
                                                         p.stderr[-2000:]))
        return None
    try:
        return [json.loads(l) for l in p.stdout.split("\n") if l.strip()]
    except json.JSONDecodeError as e:
        check(False, "%s: stdout is not JSON lines (%s): %r" % (label, e, p.stdout[:300]))
        return None


def one(label, weights, ids, extra=(), max_new=MAX_NEW):
    """one prompt, greedy: its record, or None. weights: a safetensors path, or the arguments
    that name the weights (["--checkpoint", DIR])"""
    wargs = ["--weights", weights] if isinstance(weights, str) else list(weights)
    recs = gen_json(label, ["--model", path("model.json")] + wargs +
                    ["--prompt-ids", ids_arg(ids), "--temperature", "0",
                     "--max-new-tokens", str(max_new)] + list(extra))
    if recs is None:
        return None
    if not check(len(recs) == 1 and recs[0].get("prompt_ids") == list(ids),
                 "%s: one record echoing the prompt ids (got %d records)" % (label, len(recs))):
        return None
    r = recs[0]
    fields = all(isinstance(r.get(k), (int, float)) and not isinstance(r.get(k), bool)
                 for k in ("ms_first_token", "tokens_per_s"))
    check(fields and isinstance(r.get("ids"), list) and
          r.get("finish_reason") in ("length", "stop", "eos"),
          "%s: record has ids, finish_reason, ms_first_token and tokens_per_s (%s)"
          % (label, sorted(r)))
    return r


def write_prompts(name, lines):
    """a prompts file: each item a dict (one JSON line) or "" (a blank line)"""
    with open(path(name), "w") as f:
        for l in lines:
            f.write((json.dumps(l) if l != "" else "") + "\n")
    return path(name)


def compare_greedy(label, rec, ref, gap_min=GAP_MIN):
    """rec's ids against torch's greedy result, up to the first near-tie (a top-2 gap below
    gap_min) of torch's logits"""
    cut = next((i for i, g in enumerate(ref["gaps"]) if g < gap_min), None)
    if cut is None:
        return check(rec["ids"] == ref["ids"] and rec["finish_reason"] == ref["finish_reason"],
                     "%s: ids %s (%s), torch %s (%s)" % (label, rec["ids"], rec["finish_reason"],
                                                       ref["ids"], ref["finish_reason"]))
    enough = check(cut >= min(MIN_COMPARED, len(ref["ids"])),
                   "%s: torch's top-2 gap %.1e < %.1e at step %d: too early to compare"
                   % (label, ref["gaps"][cut], gap_min, cut))
    return enough and check(rec["ids"][:cut] == ref["ids"][:cut],
                            "%s: first %d ids %s, torch %s (near-tie after)"
                            % (label, cut, rec["ids"][:cut], ref["ids"][:cut]))


def set_rounding(kind):
    """the reference rounds as zt-generate's model of `kind` does: "bf16" (the products' inputs
    and the cached K and V), "f16" (the cached K and V), None (nothing)"""
    R.set_bf16_products(kind == "bf16")
    if kind == "f16":
        R.set_kv_round(R.torch.float16)


def compare_logits(label, got_path, P, m, ids, kind=None):
    """the --logits file of prompt ids against torch float64 (kind, a 16-bit model's rounding:
    the reference's cached forward of the whole prompt, which follows set_rounding(kind));
    returns the logits"""
    cached = kind is not None
    if not check(os.path.exists(got_path), "%s: --logits wrote %s" % (label, got_path)):
        return None
    got = st_read(got_path).get("logits")
    want = (R.forward_cached(P, m, ids, R.KVCache(m)) if cached
            else R.logits_recompute(P, m, ids)).numpy()
    if not check(got is not None and list(got.shape) == list(want.shape),
                 "%s: tensor \"logits\" of shape %s (got %s)" % (
                     label, list(want.shape), None if got is None else list(got.shape))):
        return None
    d = np.abs(got.astype(np.float64) - want)
    err = float(d.max())
    if not cached:
        check(err <= LOGITS_TOL, "%s: logits of %d positions, max abs error %.2e vs torch "
              "float64 (limit %.0e)" % (label, len(ids), err, LOGITS_TOL))
        return got
    # a 16-bit model: a value next to a rounding boundary (a product input, a cached K or V)
    # may round one way in fp32 and the other in float64, one step of the type (bf16 2^-8, fp16
    # 2^-11 relative) that moves what comes after it (a cached K or V: every later position),
    # so the logits are held to a bound on the largest error and to agree with this reference
    # several times better than with the unrounded one (the rounding is what separates them)
    set_rounding(None)
    exact = R.forward_cached(P, m, ids, R.KVCache(m)).numpy()
    set_rounding(kind)
    med, med_exact = float(np.median(d)), float(np.median(np.abs(got - exact)))
    lim = FLIP_REL[kind] * float(np.abs(want).max())
    check(med <= BF16_CLOSER * med_exact and err <= lim, "%s: logits of %d positions vs torch "
          "float64 rounding as a %s model does: median abs error %.2e (the unrounded reference's "
          "%.2e: at most %.2fx of it), max %.2e (limit %.2e)" % (
              label, len(ids), kind, med, med_exact, BF16_CLOSER, err, lim))
    return got


# ---------------------------------------------------------------------------------------------
# the two models

SENTENCES = ["the engine schedules every task of the graph.",
             "a model larger than memory streams its weights from disk.",
             "each layer waits for its weights, then runs.",
             "greedy decoding picks the largest logit.",
             "the cache holds the keys and values of every past token.",
             "a prompt is one prefill, then one token per step.",
             "sampling draws the next token from the softmax.",
             "when the context is full, generation stops.",
             "the quick brown fox jumps over the lazy dog."]


def make_models():
    """WORK/model.json, random.safetensors and trained.safetensors (zt-train --export)"""
    with open(path("model.json"), "w") as f:
        json.dump(SHAPE, f)
    st_write(path("random.safetensors"), R.random_weights(SHAPE, 0.3, seed=1))
    rng = random.Random(5)
    text = " ".join(rng.choice(SENTENCES) for _ in range(1500)).encode()
    write_tokens(path("sentences.bin"), list(text))
    with open(path("ds.json"), "w") as f:
        json.dump({"train_batch_size": 8, "gradient_clipping": 1.0, "seed": 7,
                   "optimizer": {"type": "AdamW", "params": {"lr": 3e-3, "weight_decay": 0.0}}},
                  f)
    train(1, path("ds.json"), 200, "trained", path("ckpt"))


def train(ranks, ds, steps, name, save_dir):
    """zt-train on the sentences (ranks > 1: mpirun): WORK/name.safetensors and checkpoints in
    save_dir; a failure ends the test"""
    cmd = [ZT_TRAIN, "--ds-config", ds, "--model", path("model.json"), "--data",
           path("sentences.bin"), "--steps", str(steps), "--quiet", "--export",
           path(name + ".safetensors"), "--save-dir", save_dir]
    if ranks > 1:
        cmd = [MPIEXEC, "--allow-run-as-root", "--oversubscribe", "-np", str(ranks), "-x",
               "STARPU_NCPU=1", "-x", "OMP_NUM_THREADS=1"] + cmd
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, OMP_NUM_THREADS="1"))
    if p.returncode != 0:
        print("FAIL zt-train %s: exit %d\n%s" % (name, p.returncode, p.stderr[-2000:]))
        sys.exit(1)


def prompts_of(name):
    """prompts of 1, 2, 7, 20 and 45 tokens: random ids, or bytes of text for the trained model"""
    if name == "random":
        rng = random.Random(3)
        return [[rng.randrange(256) for _ in range(n)] for n in (1, 2, 7, 20, 45)]
    texts = ["t", "a ", "the cac", "each layer waits for", SENTENCES[1][:45]]
    return [list(t.encode()) for t in texts]


# ---------------------------------------------------------------------------------------------
# (a) logits, (b) greedy one prompt at a time

def single_prompts(name, weights, P, m):
    """(a) and (b) for every prompt of the model; returns the records (None where a run failed)"""
    recs = []
    for k, ids in enumerate(prompts_of(name)):
        label = "%s prompt %d (%d tokens)" % (name, k, len(ids))
        out = path("%s_logits_%d.safetensors" % (name, k))
        rec = one(label, weights, ids, ["--logits", out])
        recs.append(rec)
        if rec is None:
            continue
        compare_logits("(a) " + label, out, P, m, ids)
        ref = R.greedy(P, m, ids, MAX_NEW, "cached")
        compare_greedy("(b) " + label, rec, ref)
        decode_vs_prefill(label, weights, ids, rec["ids"], ref["gaps"], k)
    return recs


def decode_vs_prefill(label, weights, prompt, gen, gaps, k):
    """(b') the KV-cached decode steps chose what a prefill of the whole sequence chooses: the
    argmax of each row of --logits of prompt + generated ids (but the last) is the id generated
    there (rows where torch's top-2 gap is below 1e-4 are skipped: either id may win)"""
    if len(gen) < 2:
        return
    out = path("%s_prefill_%d.safetensors" % (label.split()[0], k))
    rec = one("(b') %s, prefill of prompt + generated" % label, weights,
              list(prompt) + gen[:-1], ["--logits", out], max_new=1)
    if rec is None or not os.path.exists(out):
        return
    rows = st_read(out)["logits"][len(prompt) - 1:]
    picked = [int(np.argmax(r)) for r in rows]
    diff = [j for j in range(len(gen)) if picked[j] != gen[j] and gaps[j] >= GAP_MIN]
    check(not diff, "(b') %s: the prefill's argmax at every generated position is the id the "
          "decode step generated (differ at %s)" % (label, diff))


# ---------------------------------------------------------------------------------------------
# (c) batched and continuous-batched greedy

def batched(name, weights, singles):
    prompts = prompts_of(name)
    lines = [{"prompt_ids": p} for p in prompts[:3]] + [""]
    lines += [{"prompt_ids": p} for p in prompts[3:]]
    lines += [{"prompt_ids": prompts[1], "max_new_tokens": 3},
              {"prompt_ids": prompts[3], "max_new_tokens": 9}]
    want = [(r["ids"], r["finish_reason"]) if r else None for r in singles]
    want += [(singles[1]["ids"][:3], "length") if singles[1] else None,
             (singles[3]["ids"][:9], "length") if singles[3] else None]
    f = write_prompts("%s_greedy.jsonl" % name, lines)
    for mb in ("1", "3", "8"):
        label = "(c) %s --prompts, %d prompts, --max-batch %s" % (name, len(want), mb)
        recs = gen_json(label, ["--model", path("model.json"), "--weights", weights,
                                "--prompts", f, "--temperature", "0", "--max-new-tokens",
                                str(MAX_NEW), "--max-batch", mb])
        if recs is None or not check(len(recs) == len(want), "%s: %d records, expected %d"
                                     % (label, len(recs), len(want))):
            continue
        got = [(r["ids"], r["finish_reason"]) for r in recs]
        order = [r["prompt_ids"] for r in recs] == [l["prompt_ids"] for l in lines if l != ""]
        diff = [i for i, (g, w) in enumerate(zip(got, want)) if w is not None and g != w]
        check(order and not diff, "%s: in input order %s, same ids as one prompt at a time "
              "(differ at records %s)" % (label, order, diff))


# ---------------------------------------------------------------------------------------------
# (d) seeded sampling

def in_support(k, line, ids, P, m):
    """every sampled id is one top-k and top-p allow: fewer than top_k ids have a larger logit,
    and the ids more likely than it hold less than top_p of the probability at the temperature
    (softmax over all ids: the loosest reading of top-p after top-k); 1e-4 of slack in the
    logits for float noise"""
    temp = line.get("temperature", 0.8)
    top_k, top_p = line.get("top_k", 20), line.get("top_p", 0.9)
    if temp == 0:
        return
    seq, worst = list(line["prompt_ids"]), []
    for j, t in enumerate(ids):
        row = R.logits_recompute(P, m, seq)[-1]
        above = row > row[t] + 1e-4
        mass = float((row / temp).softmax(0)[above].sum())
        if int(above.sum()) >= top_k or mass >= top_p + 1e-6:
            worst.append((j, t, int(above.sum()), round(mass, 4)))
        seq.append(t)
    check(not worst, "(d) sampling line %d: every id within top_k %d and top_p %g at temperature "
          "%g (outside: (step, id, ids above, mass above) %s)" % (k + 1, top_k, top_p, temp, worst))


def sampling(weights, singles, P, m):
    A, B, C = prompts_of("random")[2], prompts_of("random")[3], prompts_of("random")[0]
    lines = [{"prompt_ids": A}, {"prompt_ids": A, "seed": 11},
             {"prompt_ids": B, "seed": 12, "top_k": 5}, {"prompt_ids": C, "temperature": 0},
             {"prompt_ids": A, "seed": 11}, {"prompt_ids": B, "top_p": 0.5, "seed": 13},
             {"prompt_ids": C, "top_k": 1, "seed": 3}, {"prompt_ids": C, "top_p": 0.01},
             {"prompt_ids": C, "temperature": 0.001, "seed": 4}]
    f = write_prompts("sampling.jsonl", lines)
    args = ["--model", path("model.json"), "--weights", weights, "--prompts", f,
            "--max-new-tokens", str(MAX_NEW)] + SAMPLING

    def ids_of(label, extra=(), env=None):
        recs = gen_json(label, args + list(extra), env)
        ok = recs is not None and check(len(recs) == len(lines), "%s: %d records"
                                        % (label, len(lines)))
        return [r["ids"] for r in recs] if ok else None

    base = ids_of("(d) sampling, --max-batch 3", ["--max-batch", "3"])
    if base is None:
        return
    greedy_C = singles[0]["ids"] if singles[0] else None
    check(base[0] != base[1], "(d) sampling: seeds 5 and 11 give different ids (%s, %s)"
          % (base[0], base[1]))
    check(base[1] == base[4], "(d) sampling: the same prompt and seed in two lines give the same "
          "ids (%s, %s)" % (base[1], base[4]))
    check(all(base[k] == greedy_C for k in (3, 6, 7, 8)),
          "(d) sampling: a line's temperature 0, top_k 1, top_p 0.01 and temperature 0.001 are "
          "greedy (%s; greedy %s)" % ([base[k] for k in (3, 6, 7, 8)], greedy_C))
    for k, line in enumerate(lines):
        in_support(k, line, base[k], P, m)
    check(base[0] != (singles[2]["ids"] if singles[2] else None),
          "(d) sampling: temperature 0.8 does not give the greedy ids (%s)" % base[0])
    runs = [("again", ["--max-batch", "3"], None), ("--max-batch 1", ["--max-batch", "1"], None),
            ("--max-batch 8", ["--max-batch", "8"], None)]
    for sched in ("lws", "eager", "dmda"):
        for ncpu in ("1", "2"):
            runs.append(("STARPU_SCHED=%s STARPU_NCPU=%s" % (sched, ncpu), ["--max-batch", "3"],
                         {"STARPU_SCHED": sched, "STARPU_NCPU": ncpu}))
    for what, extra, env in runs:
        got = ids_of("(d) sampling, " + what, extra, env)
        if got is not None:
            diff = [i for i in range(len(lines)) if got[i] != base[i]]
            check(not diff, "(d) sampling, %s: the ids of the first run (differ at %s)"
                  % (what, diff))


def penalty(weights, P, m):
    """(h) greedy with --repetition-penalty 1.3 against torch with Hugging Face's penalty"""
    changed = 0
    for k in (2, 3):
        ids = prompts_of("random")[k]
        label = "(h) --repetition-penalty 1.3, prompt %d" % k
        rec = one(label, weights, ids, ["--repetition-penalty", "1.3"])
        ref = R.greedy(P, m, ids, MAX_NEW, "cached", penalty=1.3)
        changed += ref["ids"] != R.greedy(P, m, ids, MAX_NEW, "cached")["ids"]
        if rec is not None:
            compare_greedy(label, rec, ref)
    check(changed == 2, "(h) the penalty changes torch's greedy ids of both prompts")


# ---------------------------------------------------------------------------------------------
# (e) the context

def context(weights, P, m):
    T = m["seq_len"]
    rng = random.Random(9)
    for n in (T - 4, T - 1):
        ids = [rng.randrange(256) for _ in range(n)]
        label = "(e) prompt of %d tokens, context %d, --max-new-tokens 32" % (n, T)
        rec = one(label, weights, ids, max_new=32)
        if rec is None:
            continue
        check(rec["finish_reason"] == "length" and len(rec["ids"]) == T - n,
              "%s: %d ids (%s), expected %d (length)" % (label, len(rec["ids"]),
                                                          rec["finish_reason"], T - n))
        compare_greedy(label, rec, R.greedy(P, m, ids, 32, "cached"))
    full_prompt(weights, [rng.randrange(256) for _ in range(T)])
    lines = [{"prompt_ids": [rng.randrange(256) for _ in range(n)]} for n in (T - 4, 10, T - 1, 30)]
    f = write_prompts("context.jsonl", lines)
    label = "(e) sampling a prompts file into the context, --max-batch 2"
    recs = gen_json(label, ["--model", path("model.json"), "--weights", weights, "--prompts", f,
                            "--max-new-tokens", "32", "--max-batch", "2"] + SAMPLING)
    if recs is not None and check(len(recs) == len(lines), "%s: %d records" % (label, len(lines))):
        want = [min(32, T - len(l["prompt_ids"])) for l in lines]
        got = [len(r["ids"]) for r in recs]
        check(got == want and all(r["finish_reason"] == "length" for r in recs),
              "%s: %s new ids, expected %s, all \"length\"" % (label, got, want))


def full_prompt(weights, ids):
    """a prompt that fills the context: no new id ("length"), or refused in one line, exit 2"""
    p = run_gen(["--model", path("model.json"), "--weights", weights, "--prompt-ids",
                 ids_arg(ids), "--temperature", "0", "--json"])
    if p is None:
        check(False, "(e) prompt of exactly seq_len tokens: no answer after 120 s")
        return
    errs = [l for l in p.stderr.splitlines() if l.strip()]
    out = [l for l in p.stdout.split("\n") if l.strip()]
    empty = p.returncode == 0 and len(out) == 1 and json.loads(out[0])["ids"] == [] and \
        json.loads(out[0])["finish_reason"] == "length"
    refused = p.returncode == 2 and len(errs) == 1 and errs[0].startswith("zerotask: error: ")
    check(empty or refused, "(e) prompt of exactly %d tokens: no id (length) or one error line, "
          "exit 2 (got exit %d, %r)" % (len(ids), p.returncode, (out or errs)[:1]))


# ---------------------------------------------------------------------------------------------
# (f) 16-bit weights

def round_to(a, dtype):
    """float32 array a rounded to BF16 (to nearest, ties to even) or F16: the raw 16-bit words"""
    a = np.ascontiguousarray(a, dtype="<f4")
    if dtype == "F16":
        return a.astype("<f2").view("<u2")
    u = a.view("<u4").astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype("<u2")


def write_16bit(src, dst, dtype):
    """src (F32 safetensors) with every tensor stored as dtype (BF16 or F16)"""
    header, blobs, off = {}, [], 0
    for name, a in st_read(src).items():
        b = round_to(a, dtype).tobytes()
        header[name] = {"dtype": dtype, "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(dst, "wb") as f:
        f.write(len(h).to_bytes(8, "little") + h + b"".join(blobs))


def native_bf16():
    """this CPU has a bf16 engine (AMX or AVX512-BF16: kernels/cpu/gemm_bf16.c)"""
    with open("/proc/cpuinfo") as f:
        flags = f.read()
    return "avx512_bf16" in flags or "amx_bf16" in flags


def sixteen_bit(weights, fp32_logits):
    prompts = prompts_of("random")[3:]
    f = write_prompts("dtype.jsonl", [{"prompt_ids": p} for p in prompts])
    for dtype, ds_name in (("BF16", "bf16"), ("F16", "fp16")):
        stored = path("random_%s.safetensors" % dtype)
        write_16bit(weights, stored, dtype)
        m, P = R.load(path("model.json"), stored)
        with open(path("ds_%s.json" % ds_name), "w") as fh:
            json.dump({"dtype": ds_name}, fh)
        # bf16 on a bf16 engine: the bf16 model's products (inputs rounded) and cache;
        # ZT_GEMM=avx512 widens the weights for exact fp32 products and an fp32 cache; F16 has
        # exact products on the stored weights and an fp16 cache
        modes = [("", None, "f16" if dtype == "F16" else None)]
        if dtype == "BF16" and native_bf16():
            modes = [(" on the bf16 engine", {"ZT_GEMM": "auto"}, "bf16"),
                     (" with ZT_GEMM=avx512", {"ZT_GEMM": "avx512"}, None)]
        for tag, env, rounded in modes:
            set_rounding(rounded)
            refs = [R.greedy(P, m, p, MAX_NEW, "cached") for p in prompts]
            for how, wargs in (("%s stored" % dtype, ["--weights", stored]),
                               ("F32 + --ds-config dtype %s" % ds_name,
                                ["--weights", weights, "--ds-config",
                                 path("ds_%s.json" % ds_name)])):
                label = "(f) %s%s" % (how, tag)
                out = path("logits_%s_%s%s.safetensors" % (dtype, "ds" if "ds" in how else "file",
                                                           rounded or "exact"))
                recs = gen_json(label, ["--model", path("model.json"), "--prompts", f,
                                        "--temperature", "0", "--max-new-tokens", str(MAX_NEW),
                                        "--logits", out] + wargs, env)
                if recs is None or not check(len(recs) == len(prompts), "%s: %d records, "
                                             "expected %d" % (label, len(recs), len(prompts))):
                    continue
                got = compare_logits(label, out, P, m, prompts[0], kind=rounded)
                if got is not None and fp32_logits is not None:
                    moved = float(np.abs(got - fp32_logits).max())
                    check(moved > 10 * LOGITS_TOL, "%s: logits differ from the F32 weights' by "
                          "%.2e (the rounded weights were used)" % (label, moved))
                for k, (rec, ref) in enumerate(zip(recs, refs)):
                    # a 16-bit model: a near-tie is within a rounding flip's reach of the logits
                    gap = GAP_MIN if not rounded else max(GAP_MIN, FLIP_REL[rounded] * max(
                        float(row.abs().max()) for row in ref["logits"]))
                    compare_greedy("%s prompt %d" % (label, k), rec, ref, gap)
        set_rounding(None)


# ---------------------------------------------------------------------------------------------
# (g) text, stops, streaming, the stderr lines

def byte_tokenizer(name, eos_id=None):
    """a tokenizer.json in WORK/name whose ids are the bytes (no merges), with <|endoftext|> as
    eos_id if given"""
    b2u = bytes_to_unicode()
    vocab = {b2u[b]: b for b in range(256)}
    added = []
    if eos_id is not None:
        vocab["<|endoftext|>"] = eos_id
        added = [{"id": eos_id, "content": "<|endoftext|>", "single_word": False,
                  "lstrip": False, "rstrip": False, "normalized": False, "special": True}]
    level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
             "use_regex": True}
    tok = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
           "normalizer": None, "pre_tokenizer": level, "post_processor": None,
           "decoder": dict(level, add_prefix_space=True),
           "model": {"type": "BPE", "dropout": None, "unk_token": None,
                     "continuing_subword_prefix": None, "end_of_word_suffix": None,
                     "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                     "vocab": vocab, "merges": []}}
    os.makedirs(path(name), exist_ok=True)
    with open(os.path.join(path(name), "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tok, f, ensure_ascii=False)
    return path(name)


def text_and_stops(weights, singles):
    tok = byte_tokenizer("bytes")
    prompt = "the cac"
    ref = singles[2]
    base = ["--model", path("model.json"), "--weights", weights, "--tokenizer", tok,
            "--temperature", "0", "--max-new-tokens", str(MAX_NEW)]
    recs = gen_json("(g) --prompt TEXT", base + ["--prompt", prompt])
    if recs and ref:
        r = recs[0]
        text = bytes(ref["ids"]).decode("utf-8", "replace")
        check(r["prompt_ids"] == list(prompt.encode()) and r["ids"] == ref["ids"] and
              r.get("text") == text, "(g) --prompt %r: prompt_ids are its bytes, ids those of "
              "--prompt-ids, text %r (got %r)" % (prompt, text, r.get("text")))
        stop_at(base + ["--prompt", prompt], ref["ids"])
        f = write_prompts("text.jsonl", [{"prompt": prompt}, {"prompt_ids": list(b"a ")},
                                         {"prompt": "a "}])
        recs = gen_json("(g) text in a prompts file", base + ["--prompts", f])
        a_ids = singles[1]["ids"] if singles[1] else None
        got = [r["ids"] for r in recs] if recs else None
        check(got == [ref["ids"], a_ids, a_ids], "(g) a prompts file's \"prompt\" lines give "
              "the ids of their bytes as prompt_ids (%s)" % got)
    p = run_gen(base + ["--prompt", prompt])
    if ref and p is not None:
        text = bytes(ref["ids"]).decode("utf-8", "replace")
        check(p.returncode == 0 and p.stdout == text + "\n",
              "(g) without --json: stdout is the text and a newline (got %r)" % p.stdout[:200])
    p = run_gen(["--model", path("model.json"), "--weights", weights, "--temperature", "0",
                 "--prompt-ids", ids_arg(prompts_of("trained")[2]), "--max-new-tokens",
                 str(MAX_NEW)], quiet=False)
    if ref and p is not None:
        want = " ".join(str(i) for i in ref["ids"]) + "\n"
        lines = [l for l in p.stderr.splitlines() if l.strip()]
        summary = re.match(r"zt-generate: 1 prompt\(s\), (\d+) new tokens in [\d.]+ ms "
                           r"\([\d.]+ tokens/s\), first token after [\d.]+ ms$",
                           lines[-1] if lines else "")
        check(p.returncode == 0 and p.stdout == want, "(g) without --json or tokenizer: "
              "stdout is the ids, space separated, and a newline (got %r)" % p.stdout[:200])
        check(summary is not None and int(summary.group(1)) == len(ref["ids"]) and
              any(l.startswith("memory (inference):") for l in lines[:-1]),
              "(g) stderr: a \"memory (inference):\" line, then the summary line last (%r)"
              % lines[-2:])


def stop_at(args, ids):
    """--stop with the text of two generated tokens (the first pair, from the third on, that
    does not occur earlier): the text cut before it, the ids up to the token completing it"""
    text = bytes(ids).decode("utf-8", "replace")
    cut = next((k for k in range(2, len(ids) - 1) if ids[k] < 128 and ids[k + 1] < 128 and
                text.find(text[k:k + 2]) == k), 2)
    stop = text[cut:cut + 2]
    done = next(j for j in range(len(ids) + 1)
                if stop in bytes(ids[:j]).decode("utf-8", "replace"))
    recs = gen_json("(g) --stop", args + ["--stop", stop])
    if recs:
        r = recs[0]
        check(r["finish_reason"] == "stop" and r.get("text") == text[:cut] and
              r["ids"] == ids[:done], "(g) --stop %r: text %r, ids %s (stop); got %r, %s (%s)"
              % (stop, text[:cut], ids[:done], r.get("text"), r["ids"], r["finish_reason"]))


def eos():
    """a 257-token model whose greedy run produces <|endoftext|> (id 256) after a few ids"""
    m = dict(SHAPE, vocab_size=257)
    mp = path("model257.json")
    with open(mp, "w") as f:
        json.dump(m, f)
    w = dict(R.random_weights(m, 0.3, seed=2))
    prompt = prompts_of("random")[2]
    P = {n: t.double() for n, t in w.items()}
    first = R.greedy(P, m, prompt, MAX_NEW, "cached")["ids"]
    w["transformer.wte.weight"][256] = 1.05 * w["transformer.wte.weight"][first[3]]
    st_write(path("eos.safetensors"), list(w.items()))
    _, P = R.load(mp, path("eos.safetensors"))
    ref = R.greedy(P, m, prompt, MAX_NEW, "cached", eos=256)
    if not check(ref["finish_reason"] == "eos" and len(ref["ids"]) >= 2,
                 "(g) eos setup: torch's greedy run meets id 256 after %d ids" % len(ref["ids"])):
        return
    tok = byte_tokenizer("bytes_eos", eos_id=256)
    args = ["--model", mp, "--weights", path("eos.safetensors"), "--prompt-ids", ids_arg(prompt),
            "--temperature", "0", "--max-new-tokens", str(MAX_NEW)]
    recs = gen_json("(g) eos", args + ["--tokenizer", tok])
    if recs:
        compare_greedy("(g) <|endoftext|> with --tokenizer", recs[0], ref)
        text = bytes(recs[0]["ids"]).decode("utf-8", "replace")
        check(recs[0].get("text") == text, "(g) eos: text %r, the ids' bytes decoded as Hugging "
              "Face's byte-level decoder does (invalid UTF-8 replaced; got %r)"
              % (text, recs[0].get("text")))
    recs = gen_json("(g) no eos without a tokenizer", args)
    if recs:
        n = len(ref["ids"])
        check(recs[0]["finish_reason"] == "length" and recs[0]["ids"][:n + 1] ==
              ref["ids"] + [256], "(g) without --tokenizer id 256 is an ordinary id: %s (%s)"
              % (recs[0]["ids"], recs[0]["finish_reason"]))


def checkpoints(singles):
    """(i) --checkpoint gives the bits of --weights of the same run's export"""
    ids = prompts_of("trained")[3]
    ds3 = path("ds_zero3.json")
    with open(path("ds.json")) as f:
        ds = json.load(f)
    with open(ds3, "w") as f:
        json.dump(dict(ds, zero_optimization={"stage": 3, "reduce_bucket_size": 5000,
                                              "stage3_param_persistence_threshold": 300}), f)
    train(2, ds3, 5, "zero3", path("ckpt_zero3"))
    ref3 = one("(i) --weights of the ZeRO-3 export", path("zero3.safetensors"), ids,
               ["--logits", path("zero3_weights_logits.safetensors")])
    for label, wargs, rec, logits in (
            ("--checkpoint DIR", ["--checkpoint", path("ckpt")], singles[3],
             path("trained_logits_3.safetensors")),
            ("--checkpoint DIR/step200", ["--checkpoint", os.path.join(path("ckpt"), "step200")],
             singles[3], path("trained_logits_3.safetensors")),
            ("--checkpoint of ZeRO-3 on 2 ranks", ["--checkpoint", path("ckpt_zero3")], ref3,
             path("zero3_weights_logits.safetensors"))):
        out = path("ckpt_logits_%d.safetensors" % len(label))
        got = one("(i) " + label, wargs, ids, ["--logits", out])
        if got is None or rec is None or not os.path.exists(out) or not os.path.exists(logits):
            check(False, "(i) %s: a record and --logits of both runs" % label)
            continue
        same = np.array_equal(st_read(out)["logits"], st_read(logits)["logits"])
        check(same and got["ids"] == rec["ids"], "(i) %s: logits bit for bit and ids (%s) those "
              "of --weights of the run's export (%s)" % (label, got["ids"], rec["ids"]))


def main():
    shutil.rmtree(WORK, ignore_errors=True)
    os.makedirs(WORK)
    if R.self_check() != 0:
        check(False, "reference self-check")
        return 1
    if not check(os.access(ZT_GEN, os.X_OK), "zt-generate: %s is a program" % ZT_GEN):
        return 1
    make_models()
    fp32_logits = None
    for name in ("random", "trained"):
        weights = path(name + ".safetensors")
        m, P = R.load(path("model.json"), weights)
        singles = single_prompts(name, weights, P, m)
        batched(name, weights, singles)
        if name == "random":
            if os.path.exists(path("random_logits_3.safetensors")):
                fp32_logits = st_read(path("random_logits_3.safetensors"))["logits"]
            sampling(weights, singles, P, m)
            penalty(weights, P, m)
            context(weights, P, m)
            sixteen_bit(weights, fp32_logits)
            eos()
        else:
            text_and_stops(weights, singles)
            checkpoints(singles)
    if bad:
        print("test_generate_vs_torch: %d check(s) failed: %s" % (len(bad), ", ".join(bad)))
        return 1
    print("test_generate_vs_torch: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
