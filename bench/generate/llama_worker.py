"""bench/generate/llama_worker.py: the llama.cpp side of bench/generate_vs_peers, run by the
llama-cpp-python virtualenv's Python (/work/venv/llamacpp). One process per measurement round:
loads a GGUF model, then times greedy decoding through llama.cpp's own batch API (llama_decode
on llama_batch, argmax of the returned logits) and prints one JSON line of figures.

  batch-1  one sequence: the plan's prompt in one llama_decode (logits of its last token only),
           then one token per llama_decode, N new tokens: ms_first_token = prefill + first
           argmax, decode tokens/s = (N - 1) over the time from the first to the last token
  batched  the plan's prompts as sequences 0..P-1 of one context (unified KV cache): their
           tokens go through llama_decode in chunks of n_batch (logits of each prompt's last
           token), then each step decodes one token of every sequence in one batch (as
           llama.cpp's batched example and server do); tokens/s = P x N over the wall time
Both use n_threads = n_threads_batch = --threads and llama.cpp's defaults otherwise (f16 KV
cache, flash attention "auto").
Usage: PYTHON bench/generate/llama_worker.py --gguf FILE --plan PLAN.json [--threads 2]
           [--skip-batched]"""
import argparse
import json
import time

import llama_cpp as L
import numpy as np


# llama.cpp's log callback that drops every line (kept here so that ctypes keeps it alive)
QUIET = L.llama_log_callback(lambda level, text, data: None)


class Context:
    """a llama.cpp context over the model for n_seq sequences of up to n_ctx tokens in all"""

    def __init__(self, model, n_ctx, n_seq, threads, n_batch=2048):
        p = L.llama_context_default_params()
        p.n_ctx, p.n_batch, p.n_ubatch = n_ctx, n_batch, min(n_batch, 512)
        p.n_seq_max, p.n_threads, p.n_threads_batch = n_seq, threads, threads
        p.kv_unified = True
        p.no_perf = True
        self.ctx = L.llama_init_from_model(model, p)
        if not self.ctx:
            raise SystemExit("llama_worker: llama_init_from_model failed (n_ctx %d)" % n_ctx)
        self.n_batch = n_batch
        self.batch = L.llama_batch_init(n_batch, 0, 1)
        self.n_vocab = L.llama_vocab_n_tokens(L.llama_model_get_vocab(model))

    def close(self):
        L.llama_batch_free(self.batch)
        L.llama_free(self.ctx)

    def decode(self, items):
        """items: [(token, pos, seq, wants_logits)] (at most n_batch); the logits of those that
        want them, as an [outputs, n_vocab] array, in order"""
        b = self.batch
        for i, (tok, pos, seq, out) in enumerate(items):
            b.token[i], b.pos[i], b.n_seq_id[i] = tok, pos, 1
            b.seq_id[i][0], b.logits[i] = seq, 1 if out else 0
        b.n_tokens = len(items)
        rc = L.llama_decode(self.ctx, b)
        if rc != 0:
            raise SystemExit("llama_worker: llama_decode returned %d" % rc)
        n_out = sum(1 for it in items if it[3])
        ptr = L.llama_get_logits(self.ctx)
        return np.ctypeslib.as_array(ptr, shape=(n_out, self.n_vocab))


def batch1(model, prompt, n, threads):
    c = Context(model, len(prompt) + n + 8, 1, threads)
    try:
        t0 = time.perf_counter()
        logits = c.decode([(t, i, 0, i == len(prompt) - 1) for i, t in enumerate(prompt)])
        ids = [int(np.argmax(logits[0]))]
        t1 = time.perf_counter()
        while len(ids) < n:
            logits = c.decode([(ids[-1], len(prompt) + len(ids) - 1, 0, True)])
            ids.append(int(np.argmax(logits[0])))
        t2 = time.perf_counter()
    finally:
        c.close()
    return {"ms_first_token": 1e3 * (t1 - t0), "decode_tokens_per_s": (n - 1) / (t2 - t1),
            "ids": ids}


def prefill_all(c, prompts):
    """every prompt's tokens through llama_decode, n_batch at a time; the first new id of each"""
    items = [(t, i, s, i == len(p) - 1) for s, p in enumerate(prompts) for i, t in enumerate(p)]
    first = []
    for k in range(0, len(items), c.n_batch):
        chunk = items[k:k + c.n_batch]
        logits = c.decode(chunk)
        first += [int(x) for x in np.argmax(logits, axis=1)]
    return first


def batched(model, prompts, n, threads):
    n_ctx = sum(len(p) for p in prompts) + len(prompts) * n + 256
    c = Context(model, n_ctx, len(prompts), threads)
    try:
        t0 = time.perf_counter()
        gen = [[x] for x in prefill_all(c, prompts)]
        for step in range(1, n):
            items = [(g[-1], len(p) + step - 1, s, True)
                     for s, (p, g) in enumerate(zip(prompts, gen))]
            nxt = np.argmax(c.decode(items), axis=1)
            for g, x in zip(gen, nxt):
                g.append(int(x))
        wall = time.perf_counter() - t0
    finally:
        c.close()
    return {"batched_tokens_per_s": len(prompts) * n / wall, "batched_s": wall,
            "batched_first_ids": [g[:8] for g in gen]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gguf", required=True)
    ap.add_argument("--plan", required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--skip-batched", action="store_true")
    a = ap.parse_args()
    with open(a.plan) as f:
        plan = json.load(f)
    L.llama_backend_init()
    L.llama_log_set(QUIET, None)
    t0 = time.perf_counter()
    mp = L.llama_model_default_params()
    model = L.llama_model_load_from_file(a.gguf.encode(), mp)
    if not model:
        raise SystemExit("llama_worker: cannot load %s" % a.gguf)
    res = {"load_s": time.perf_counter() - t0, "llama_cpp_python": L.__version__,
           "threads": a.threads}
    batch1(model, plan["prompt"], 2, a.threads)  # warm-up: the same shapes
    res.update(batch1(model, plan["prompt"], plan["new"], a.threads))
    if not a.skip_batched:
        res.update(batched(model, plan["batch"], plan["batch_new"], a.threads))
    L.llama_model_free(model)
    print(json.dumps(res))


if __name__ == "__main__":
    main()
