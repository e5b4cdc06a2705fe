#!/usr/bin/env python3
"""tests/ref/gpt2_generate_ref.py: independent PyTorch reference of zt-generate (greedy decoding).

The numerics oracle of the generation tests (tests/graph/test_generate_vs_torch.py), beside
gpt2_torch.py, whose model (HF GPT-2 layout: Conv1D weights [C, OC], tied head, GELU tanh,
LayerNorm eps 1e-5) and safetensors reader it reuses. Two ways to the next token:
  - recompute: the logits of the whole sequence again at every step, by gpt2_torch.gpt2_logits
    (the training oracle's forward, itself checked against zt-train by test_vs_torch);
  - cached: a KV cache of its own (per layer, past keys and values [n_head, t, head_size]):
    the prompt is one prefill, then each step feeds one token against the cached keys/values.
Greedy = argmax, the lowest id winning a tie (torch.argmax returns the first maximum), after
Hugging Face's repetition penalty when one is given.
Stops as zt-generate's contract: "length" when max_new_tokens ids are generated or the
sequence fills the context (prompt + generated = seq_len), "eos" when the eos id is generated
(not included in the ids). Each step records the gap between the two largest logits, so a
caller can tell where float noise could decide the argmax.

Usage (Debian's /usr/bin/python3 with torch; the tests import the functions instead):
  gpt2_generate_ref.py --model M.json --weights W.safetensors --prompt-ids 1,2,3
                       [--max-new-tokens N] [--dtype float64|float32] [--mode cached|recompute]
                       [--eos ID] [--repetition-penalty R] [--logits-out F.safetensors]
      prints {"prompt_ids", "ids", "finish_reason", "gaps"} as one JSON line; --logits-out
      writes the prompt's logits (F32 "logits" [prompt_len, vocab_size])
  gpt2_generate_ref.py --write-random W.safetensors --model M.json [--std S] [--seed N]
      random weights whose greedy argmax gaps stand well above float noise
  gpt2_generate_ref.py --self-check
      cached and recomputed greedy ids equal, logits within 1e-5 (exit 0 when they do)
Exit status: 0 ok, 2 bad command line, 1 anything else; errors are one line.
"""
import argparse
import json
import math
import os
import sys
import tempfile

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpt2_torch import (UsageError, gpt2_logits, load_model_shape, load_weights,  # noqa: E402
                        param_specs, run_main, st_write)

CACHE_TOL = 1e-5  # cached vs recomputed logits (max abs), float64 and float32 alike

# bf16 products (zt-generate with bf16 weights on a CPU with a bf16 engine): the input of every
# product (the four of each layer and the head) rounded to bf16, to nearest even, as autocast
# and llama.cpp round a bf16 model's activations, and the KV cache holding K and V rounded to
# bf16; set_bf16_products turns it on for the cached forward. An fp16 model's KV cache holds K
# and V rounded to fp16 (its products exact on the stored weights): set_kv_round(torch.float16)
_BF16_PRODUCTS = [False]
_KV_ROUND = [None]


def set_bf16_products(on):
    _BF16_PRODUCTS[0] = bool(on)
    _KV_ROUND[0] = torch.bfloat16 if on else None


def set_kv_round(dtype):
    """the type the cached forward rounds K and V to (None: kept as computed)"""
    _KV_ROUND[0] = dtype


def mm(h, w):
    """h @ w, h rounded to bf16 first in the bf16-products mode"""
    if _BF16_PRODUCTS[0]:
        h = h.to(torch.bfloat16).to(h.dtype)
    return h @ w


def load(model_path, weights_path, dtype=torch.float64):
    """(model shape, {name: tensor in dtype}) from a model JSON and a safetensors file; F16 and
    BF16 tensors are widened exactly (the reference computes on the rounded values)"""
    m = load_model_shape(model_path)
    return m, {n: t.to(dtype) for n, t in load_weights(weights_path, m)}


def random_weights(m, std=0.3, seed=1, gain=2.0):
    """[(name, float32 tensor)]: wte and wpe N(0, std), the other matrices N(0, gain^2/fan_in),
    biases N(0, 0.1), LayerNorm weights 1 + N(0, 0.1) and biases N(0, 0.1). Nothing is zero or
    one that a missing term could hide behind; the logits spread (std ~3.5 at the demo shape)
    so greedy argmax gaps stand far above float rounding, the generated ids vary, and the
    residual stream stays small enough that float32 logits keep within ~4e-5 of float64"""
    g = torch.Generator().manual_seed(seed)
    out = []
    for name, shape in param_specs(m):
        r = torch.randn(shape, generator=g, dtype=torch.float64)
        if ".ln_" in name or "ln_f" in name:
            t = (1.0 + 0.1 * r) if name.endswith("weight") else 0.1 * r
        elif name.endswith(".bias"):
            t = 0.1 * r
        elif "wte" in name or "wpe" in name:
            t = std * r
        else:
            t = (gain / math.sqrt(shape[0])) * r
        out.append((name, t.to(torch.float32)))
    return out


def logits_recompute(P, m, ids):
    """logits [len(ids), V] of every position, the whole sequence at once"""
    T = len(ids)
    if not 1 <= T <= m["seq_len"]:
        raise ValueError("sequence of %d tokens: expected 1..seq_len %d" % (T, m["seq_len"]))
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    idx = torch.tensor([ids], dtype=torch.long)
    with torch.no_grad():
        return gpt2_logits(P, m, idx, mask)[0]


class KVCache:
    """past keys and values of one sequence: per layer [n_head, t, head_size]"""

    def __init__(self, m):
        self.m, self.length = m, 0
        self.k = [None] * m["n_layer"]
        self.v = [None] * m["n_layer"]

    def extend(self, layer, k, v):
        """append this step's keys/values of one layer; returns all keys and values so far"""
        if self.k[layer] is not None:
            k = torch.cat([self.k[layer], k], dim=1)
            v = torch.cat([self.v[layer], v], dim=1)
        self.k[layer], self.v[layer] = k, v
        return k, v


def attend_cached(P, p, h, cache, layer, NH, hs):
    """one layer's attention of the new rows h [n, C] against the cache plus themselves"""
    n, C = h.shape
    qkv = mm(h, P[p + "attn.c_attn.weight"]) + P[p + "attn.c_attn.bias"]
    q, k, v = (t.reshape(n, NH, hs).transpose(0, 1) for t in qkv.split(C, dim=1))
    if _KV_ROUND[0] is not None:  # a 16-bit model's cache holds K and V rounded to its type
        k, v = (t.to(_KV_ROUND[0]).to(t.dtype) for t in (k, v))
    K, V = cache.extend(layer, k, v)                                   # [NH, past + n, hs]
    scores = (q @ K.transpose(1, 2)) / math.sqrt(hs)                    # [NH, n, past + n]
    past = K.shape[1] - n
    key_pos = torch.arange(past + n)[None, :]
    query_pos = past + torch.arange(n)[:, None]
    scores = scores.masked_fill(key_pos > query_pos, float("-inf"))
    y = scores.softmax(dim=-1) @ V                                      # [NH, n, hs]
    y = y.transpose(0, 1).reshape(n, C)
    return mm(y, P[p + "attn.c_proj.weight"]) + P[p + "attn.c_proj.bias"]


def forward_cached(P, m, new_ids, cache):
    """logits [n, V] of new_ids placed after the cache's tokens; the cache grows by n"""
    n, pos0 = len(new_ids), cache.length
    C, NH = m["n_embd"], m["n_head"]
    hs = C // NH
    if n < 1 or pos0 + n > m["seq_len"]:
        raise ValueError("positions %d..%d: expected within the context %d"
                         % (pos0, pos0 + n - 1, m["seq_len"]))
    wte = P["transformer.wte.weight"]
    x = wte[torch.tensor(new_ids, dtype=torch.long)] + P["transformer.wpe.weight"][pos0:pos0 + n]
    with torch.no_grad():
        for i in range(m["n_layer"]):
            p = "transformer.h.%d." % i
            h = F.layer_norm(x, (C,), P[p + "ln_1.weight"], P[p + "ln_1.bias"], 1e-5)
            x = x + attend_cached(P, p, h, cache, i, NH, hs)
            h = F.layer_norm(x, (C,), P[p + "ln_2.weight"], P[p + "ln_2.bias"], 1e-5)
            h = F.gelu(mm(h, P[p + "mlp.c_fc.weight"]) + P[p + "mlp.c_fc.bias"],
                       approximate="tanh")
            x = x + (mm(h, P[p + "mlp.c_proj.weight"]) + P[p + "mlp.c_proj.bias"])
        x = F.layer_norm(x, (C,), P["transformer.ln_f.weight"], P["transformer.ln_f.bias"], 1e-5)
        cache.length += n
        return mm(x, wte.t())


def top2_gap(row):
    top = torch.topk(row, 2).values
    return float(top[0] - top[1])


def penalise(row, seen, penalty):
    """Hugging Face's repetition penalty: the logit of every id seen so far (prompt and
    generated) divided by penalty where positive, multiplied where negative"""
    if penalty == 1.0 or not seen:
        return row
    row = row.clone()
    idx = torch.tensor(sorted(set(seen)), dtype=torch.long)
    s = row[idx]
    row[idx] = torch.where(s < 0, s * penalty, s / penalty)
    return row


def greedy(P, m, prompt, max_new, mode="cached", eos=None, penalty=1.0):
    """greedy decoding of prompt (ids): {"ids", "finish_reason", "gaps", "logits"}; logits[i]
    is the row [V] that chose generated token i (the eos row included; after the repetition
    penalty, if any)"""
    if not prompt or len(prompt) > m["seq_len"]:
        raise ValueError("prompt of %d ids: expected 1..seq_len %d" % (len(prompt), m["seq_len"]))
    seq, out, gaps, rows = list(prompt), [], [], []
    cache = KVCache(m) if mode == "cached" else None
    row = forward_cached(P, m, seq, cache)[-1] if cache else logits_recompute(P, m, seq)[-1]
    while True:
        if len(out) >= max_new or len(seq) >= m["seq_len"]:
            return {"ids": out, "finish_reason": "length", "gaps": gaps, "logits": rows}
        row = penalise(row, seq, penalty)
        tok = int(torch.argmax(row))
        gaps.append(top2_gap(row))
        rows.append(row)
        if eos is not None and tok == eos:
            return {"ids": out, "finish_reason": "eos", "gaps": gaps, "logits": rows}
        out.append(tok)
        seq.append(tok)
        if len(out) >= max_new or len(seq) >= m["seq_len"]:
            continue  # no logits past the last token generated
        row = forward_cached(P, m, [tok], cache)[-1] if cache else logits_recompute(P, m, seq)[-1]


def check_eos(P, m, prompt, ids, dtype):
    """with eos = the last id generated, both loops stop there with "eos" (id not kept)"""
    if not ids:
        return []
    cut = ids.index(ids[-1])
    bad = []
    for mode in ("cached", "recompute"):
        r = greedy(P, m, prompt, 16, mode, eos=ids[-1])
        if r["ids"] != ids[:cut] or r["finish_reason"] != "eos":
            bad.append("%s %s prompt %s, eos %d: %s (%s), expected %s (eos)"
                       % (dtype, mode, prompt, ids[-1], r["ids"], r["finish_reason"], ids[:cut]))
    return bad


def self_check():
    """cached and recomputed greedy agree on a random model (float64 and float32)"""
    m = {"vocab_size": 96, "seq_len": 24, "n_embd": 32, "n_layer": 3, "n_head": 4}
    prompts = [[5], [1, 2, 3], [7, 7, 7, 7, 7, 7, 7], list(range(20)), list(range(23, 0, -1))]
    with tempfile.TemporaryDirectory() as d:
        mp, wp = os.path.join(d, "model.json"), os.path.join(d, "w.safetensors")
        with open(mp, "w") as f:
            json.dump(m, f)
        st_write(wp, random_weights(m, seed=7))
        bad = []
        for dtype in (torch.float64, torch.float32):
            _, P = load(mp, wp, dtype)
            worst, min_gap, changed = 0.0, math.inf, 0
            for pr in prompts:
                a = greedy(P, m, pr, 16, "cached")
                b = greedy(P, m, pr, 16, "recompute")
                full = logits_recompute(P, m, pr + a["ids"][:-1] if a["ids"] else pr)
                prefill = forward_cached(P, m, pr, KVCache(m))
                diffs = [float((prefill - full[:len(pr)]).abs().max())]
                diffs += [float((r - full[len(pr) - 1 + i]).abs().max())
                          for i, r in enumerate(a["logits"])]
                worst = max([worst] + diffs)
                min_gap = min([min_gap] + a["gaps"])
                if a["ids"] != b["ids"] or a["finish_reason"] != b["finish_reason"]:
                    bad.append("%s prompt %s: cached %s != recomputed %s"
                               % (dtype, pr, a["ids"], b["ids"]))
                want = min(16, m["seq_len"] - len(pr))
                if len(a["ids"]) != want or a["finish_reason"] != "length":
                    bad.append("%s prompt %s: %d ids (%s), expected %d (length)"
                               % (dtype, pr, len(a["ids"]), a["finish_reason"], want))
                bad += check_eos(P, m, pr, a["ids"], dtype)
                pa = greedy(P, m, pr, 16, "cached", penalty=1.5)
                pb = greedy(P, m, pr, 16, "recompute", penalty=1.5)
                if pa["ids"] != pb["ids"]:
                    bad.append("%s prompt %s, penalty 1.5: cached %s != recomputed %s"
                               % (dtype, pr, pa["ids"], pb["ids"]))
                changed += pa["ids"] != a["ids"]
            print("self-check %s: cached vs recomputed logits max abs %.2e (limit %.0e), "
                  "smallest top-2 gap %.3f" % (dtype, worst, CACHE_TOL, min_gap))
            if not changed:
                bad.append("%s: the repetition penalty changed no greedy run" % dtype)
            if not worst <= CACHE_TOL:
                bad.append("%s: cached logits differ from recomputed by %.2e" % (dtype, worst))
    for b in bad:
        print("FAIL " + b)
    print("self-check: %s" % ("FAILED" if bad else "passed"))
    return 1 if bad else 0


def parse_ids(text):
    try:
        ids = [int(x) for x in text.split(",")]
    except ValueError:
        raise UsageError("--prompt-ids %r: expected comma-separated integers" % text)
    if not ids or min(ids) < 0:
        raise UsageError("--prompt-ids %r: expected non-negative ids" % text)
    return ids


def main(argv):
    ap = argparse.ArgumentParser(prog="gpt2_generate_ref.py",
                                 description="PyTorch reference of zt-generate's greedy decoding")
    ap.add_argument("--model")
    ap.add_argument("--weights")
    ap.add_argument("--prompt-ids")
    ap.add_argument("--max-new-tokens", type=int, default=32)
    ap.add_argument("--dtype", choices=("float64", "float32"), default="float64")
    ap.add_argument("--mode", choices=("cached", "recompute"), default="cached")
    ap.add_argument("--eos", type=int)
    ap.add_argument("--repetition-penalty", type=float, default=1.0)
    ap.add_argument("--logits-out")
    ap.add_argument("--write-random", metavar="OUT")
    ap.add_argument("--std", type=float, default=0.3)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--self-check", action="store_true")
    a = ap.parse_args(argv)
    if a.self_check:
        return self_check()
    if not a.model:
        raise UsageError("missing --model")
    if a.write_random:
        st_write(a.write_random, random_weights(load_model_shape(a.model), a.std, a.seed))
        return 0
    if not a.weights or not a.prompt_ids:
        raise UsageError("missing --weights or --prompt-ids")
    if a.max_new_tokens < 1:
        raise UsageError("--max-new-tokens %d: expected >= 1" % a.max_new_tokens)
    dtype = torch.float64 if a.dtype == "float64" else torch.float32
    m, P = load(a.model, a.weights, dtype)
    ids = parse_ids(a.prompt_ids)
    if max(ids) >= m["vocab_size"]:
        raise UsageError("prompt id %d: expected < vocab_size %d" % (max(ids), m["vocab_size"]))
    r = greedy(P, m, ids, a.max_new_tokens, a.mode, a.eos, a.repetition_penalty)
    if a.logits_out:
        st_write(a.logits_out, [("logits", logits_recompute(P, m, ids))])
    print(json.dumps({"prompt_ids": ids, "ids": r["ids"], "finish_reason": r["finish_reason"],
                      "gaps": r["gaps"]}))
    return 0


if __name__ == "__main__":
    run_main(main, "gpt2_generate_ref")
