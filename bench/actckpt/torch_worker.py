"""bench/actckpt/torch_worker.py: the PyTorch side of bench/actckpt/run.py, run by the peer's
Python (torch >= 2: F.scaled_dot_product_attention, torch.utils.checkpoint's use_reentrant=False).
One process per run, so that its peak resident memory (resource.getrusage ru_maxrss) is that
mode's alone.

The model, initialisation, data rule and optimizer are tests/ref/gpt2_torch.py's (imported:
load_model_shape, load_ds_config, load_tokens, step_batch, init_weights, lr_for_step), in fp32;
the forward is gpt2_logits's math split into one function per transformer block:
  x = x + c_proj(sdpa_causal(split_heads(c_attn(layer_norm_1(x)))))
  x = x + mlp.c_proj(gelu_tanh(mlp.c_fc(layer_norm_2(x))))
with F.scaled_dot_product_attention(is_causal=True) in both modes (as gpt2_torch.py --bench).
  --mode none  every block called directly (autograd keeps all of its activations)
  --mode full  every block under torch.utils.checkpoint.checkpoint(block, x,
               use_reentrant=False): only the block's input is kept, the rest is recomputed
               during the backward
The parameters are init_weights's tensors themselves (no copy: nothing but the training state
is resident), AdamW as gpt2_torch.py's Trainer at --bench (foreach=None: torch's multi-tensor
path), the ds config's lr schedule, gradient clipping by the global norm, the micro-batches of
gradient_accumulation_steps. torch.set_num_threads(--threads).

Prints one JSON line: the mode, each step's ms and loss, the median ms of the steps after
--warmup, ru_maxrss in MiB (the process's peak, from its start: the interpreter and torch
included), VmRSS in MiB after the set-up (before step 1), torch's version and threads.

Usage: PYTHON bench/actckpt/torch_worker.py --model M.json --ds-config DS.json --data T.bin
           --mode none|full [--steps 6] [--warmup 2] [--threads 2]"""
import argparse
import functools
import json
import os
import resource
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "ref"))
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import torch.utils.checkpoint  # noqa: E402
import gpt2_torch as G  # noqa: E402  the oracle: shapes, init, data rule, ds config


def vm_rss_mib():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    return None


def loss_fn(P, m, idx, tgt, ckpt):
    """mean cross-entropy over idx/tgt [B, T]; ckpt: every block under checkpoint()"""
    B, T = idx.shape
    C = m["n_embd"]
    wte = P["transformer.wte.weight"]
    x = wte[idx] + P["transformer.wpe.weight"][:T]
    for i in range(m["n_layer"]):
        f = functools.partial(G.gpt2_block, P, m, i, mask=None, fast=True)
        x = torch.utils.checkpoint.checkpoint(f, x, use_reentrant=False) if ckpt else f(x)
    x = F.layer_norm(x, (C,), P["transformer.ln_f.weight"], P["transformer.ln_f.bias"], 1e-5)
    logits = x @ wte.t()
    return F.cross_entropy(logits.reshape(B * T, -1), tgt.reshape(B * T))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--ds-config", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--mode", choices=("none", "full"), required=True)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    if not hasattr(F, "scaled_dot_product_attention"):
        sys.exit("torch_worker: torch %s has no scaled_dot_product_attention (needs torch >= 2)"
                 % torch.__version__)
    if a.steps <= a.warmup:
        sys.exit("torch_worker: --steps must exceed --warmup")
    torch.set_num_threads(a.threads)
    m = G.load_model_shape(a.model)
    cfg = G.load_ds_config(a.ds_config)
    tok = G.load_tokens(a.data, m["vocab_size"])
    B, T, mb, accum = cfg["train_batch_size"], m["seq_len"], cfg["micro"], cfg["accum"]
    names, params = [], []
    for name, t in G.init_weights(m, cfg["seed"]):
        names.append(name)
        params.append(t.requires_grad_(True))
    P = dict(zip(names, params))
    kw = dict(lr=cfg["lr"], betas=cfg["betas"], eps=cfg["eps"],
              weight_decay=cfg["weight_decay"], foreach=None)
    opt = (torch.optim.AdamW if cfg["adam_w_mode"] else torch.optim.Adam)(params, **kw)
    batches = [G.step_batch(tok, s, B, T) for s in range(1, a.steps + 1)]  # outside timing
    del tok
    ckpt = a.mode == "full"
    rss_setup = vm_rss_mib()

    ms, losses = [], []
    for s in range(1, a.steps + 1):
        idx, tgt = batches[s - 1]
        t0 = time.perf_counter()
        lr = G.lr_for_step(cfg, s, "deepspeed")
        for g in opt.param_groups:
            g["lr"] = lr
        for p in params:
            p.grad = None
        loss = 0.0
        for j in range(accum):
            rows = slice(j * mb, (j + 1) * mb)
            l = loss_fn(P, m, idx[rows], tgt[rows], ckpt)
            (l / accum).backward()
            loss += l.item() / accum
        if cfg["gradient_clipping"] > 0:
            torch.nn.utils.clip_grad_norm_(params, cfg["gradient_clipping"])
        opt.step()
        ms.append((time.perf_counter() - t0) * 1e3)
        losses.append(loss)
    print(json.dumps({
        "mode": a.mode, "ms": ms, "losses": losses,
        "median_ms": statistics.median(ms[a.warmup:]),
        "maxrss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
        "rss_setup_mib": rss_setup, "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "parameters": sum(p.numel() for p in params)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
