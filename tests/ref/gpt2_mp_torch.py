#!/usr/bin/env python3
"""tests/ref/gpt2_mp_torch.py: PyTorch reference of zerotask's mixed-precision (bf16 / fp16)
GPT-2 training, autocast-free, rounding where zerotask stores 16-bit values.

Independent of zerotask's code: an explicit forward and backward (llm.c's formulas) in float64
(or float32, --compute), with every tensor zerotask keeps in 16 bits rounded to bf16/fp16 by
torch's own .to() (round to nearest even) at the point zerotask stores it:
  - parameters: the model reads R(master), the fp32 master weights rounded;
  - activations: encoded, ln1/ln2/lnf outputs, qkv, the attention probabilities att and output,
    the projections, residuals, fch and gelu(fch), logits; layernorm mean/rstd and the
    per-position losses stay fp32. Each task computes from the stored (rounded) inputs, so e.g.
    the attention output uses the unrounded probabilities of the same task while the backward
    reads the rounded ones (with --bf16-products, as on zerotask's bf16 engines, every product
    has 16-bit operands: att @ v reads the rounded probabilities, and the scaled softmax
    gradient is rounded before the dq and dk products);
  - activation gradients: dlogits (loss gradient times the loss scale), each matmul input
    gradient, the gelu gradient, the attention gradient, and the residual-stream gradient dres,
    which every layernorm backward adds into: dres = R(dres + dinp);
  - parameter gradients: 16-bit accumulators, zeroed per step; each producing task adds its
    whole contribution and rounds once: dW = R(dW + inp^T @ dout) per micro-batch (the tied
    wte twice: head, then embedding), layernorm weights from fp32 partial sums.
The optimizer works on fp32 master weights: global norm = sqrt(sum g^2) / loss_scale (double),
clip coefficient min(1, max/(norm + 1e-6)) in float32 as torch.nn.utils.clip_grad_norm_, the
gradient multiplied by coefficient / loss_scale, torch.optim.AdamW/Adam (foreach=False) on the
master. fp16: a step whose gradients hold an inf or NaN is skipped (no update, no optimizer or
LR-schedule step), and the scale follows DeepSpeed's DynamicLossScaler (scale_factor 2).

Usage: gpt2_mp_torch.py --model M --ds-config D --data T --init W --steps N --precision bf16|fp16
       [--out-json J] [--params-out P] [--grads-out G] [--compute float64|float32]
       [--bf16-products]
out-json: {losses, lrs, grad_norms, loss_scales, skipped}; params-out: fp32 master weights
after the last step; grads-out: step 1's 16-bit gradients (widened, before clipping/unscaling).
One rank, ZeRO stage 0 semantics (the other stages differ only in where gradients are summed).
"""
import argparse
import json
import math
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpt2_torch import (load_ds_config, load_model_shape, load_tokens, load_weights,  # noqa: E402
                        lr_for_step, run_main, st_write, step_batch)

GELU_K = math.sqrt(2.0 / math.pi)


class MP:
    def __init__(self, m, cfg, weights, half, compute, fp16cfg, products16=False):
        self.m, self.cfg, self.half, self.dt = m, cfg, half, compute
        self.products16 = products16
        self.names = [n for n, _ in weights]
        self.master = {n: t.to(torch.float32).clone().requires_grad_(False) for n, t in weights}
        self.leaves = [torch.nn.Parameter(self.master[n]) for n in self.names]
        for n, p in zip(self.names, self.leaves):
            self.master[n] = p
        kw = dict(lr=cfg["lr"], betas=cfg["betas"], eps=cfg["eps"],
                  weight_decay=cfg["weight_decay"], foreach=False)
        self.opt = (torch.optim.AdamW if cfg["adam_w_mode"] else torch.optim.Adam)(self.leaves, **kw)
        self.fp16 = half == torch.float16
        f = fp16cfg
        self.scale = (f["loss_scale"] if f["loss_scale"] > 0 else 2.0 ** f["initial_scale_power"]) \
            if self.fp16 else 1.0
        self.static = self.fp16 and f["loss_scale"] > 0
        self.window, self.hyst0, self.min_scale = (f["loss_scale_window"], f["hysteresis"],
                                                   f["min_loss_scale"])
        self.consecutive = f["consecutive_hysteresis"]
        self.cur_iter, self.last_overflow, self.hyst = 0, -1, self.hyst0
        self.applied = 0

    # rounding to the storage type (values come back in the compute dtype, exactly)
    def R(self, x):
        return x.to(torch.float32).to(self.half).to(self.dt)

    def W(self, name):
        return self.R(self.master[name].detach())

    # ---- layers (explicit formulas, llm.c) ----
    @staticmethod
    def ln_fwd(x, w, b):
        mean = x.mean(-1, keepdim=True)
        var = ((x - mean) ** 2).mean(-1, keepdim=True)
        rstd = 1.0 / torch.sqrt(var + 1e-5)
        return (x - mean) * rstd * w + b, mean, rstd

    @staticmethod
    def ln_bwd(dout, x, w, mean, rstd):
        norm = (x - mean) * rstd
        dnorm = dout * w
        dinp = (dnorm - dnorm.mean(-1, keepdim=True)
                - norm * (dnorm * norm).mean(-1, keepdim=True)) * rstd
        return dinp, (dout * norm).sum(0), dout.sum(0)

    def attn_fwd(self, qkv, B, T):
        C, NH = self.m["n_embd"], self.m["n_head"]
        hs = C // NH
        q, k, v = (qkv[:, i * C:(i + 1) * C].reshape(B, T, NH, hs).transpose(1, 2)
                   for i in range(3))
        s = (q @ k.transpose(-2, -1)) / math.sqrt(hs)
        mask = torch.ones(T, T, dtype=torch.bool).tril()
        att = s.masked_fill(~mask, float("-inf")).softmax(-1)
        p = self.R(att) if self.products16 else att
        y = (p @ v).transpose(1, 2).reshape(B * T, C)
        return y, att

    def attn_bwd(self, dout, qkv, att, B, T):
        C, NH = self.m["n_embd"], self.m["n_head"]
        hs = C // NH
        q, k, v = (qkv[:, i * C:(i + 1) * C].reshape(B, T, NH, hs).transpose(1, 2)
                   for i in range(3))
        dy = dout.reshape(B, T, NH, hs).transpose(1, 2)
        datt = dy @ v.transpose(-2, -1)
        dv = att.transpose(-2, -1) @ dy
        dpre = att * (datt - (att * datt).sum(-1, keepdim=True))
        if self.products16:  # the scaled softmax gradient rounded for its two products
            ds = self.R(dpre / math.sqrt(hs))
            dq, dk = ds @ k, ds.transpose(-2, -1) @ q
        else:
            dq = dpre @ k / math.sqrt(hs)
            dk = dpre.transpose(-2, -1) @ q / math.sqrt(hs)
        return torch.cat([t.transpose(1, 2).reshape(B * T, C) for t in (dq, dk, dv)], 1)

    @staticmethod
    def gelu(x):
        return 0.5 * x * (1.0 + torch.tanh(GELU_K * (x + 0.044715 * x ** 3)))

    @staticmethod
    def gelu_grad(x):
        u = GELU_K * (x + 0.044715 * x ** 3)
        t = torch.tanh(u)
        return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * GELU_K * (1.0 + 3 * 0.044715 * x * x)

    # ---- one micro-batch: accumulates into self.G (16-bit values); returns the fp32 losses ----
    def micro_batch(self, idx, tgt, dscale):
        m, R = self.m, self.R
        B, T = idx.shape
        C, L = m["n_embd"], m["n_layer"]
        N = B * T
        G = self.G
        P = lambda n: self.W(n)  # noqa: E731
        h = lambda l, n: "transformer.h.%d.%s" % (l, n)  # noqa: E731
        wte = P("transformer.wte.weight")
        flat = idx.reshape(N)
        pos = torch.arange(T).repeat(B)
        enc = R(wte[flat] + P("transformer.wpe.weight")[pos])
        res, acts = enc, []
        for l in range(L):
            a = {"res_in": res}
            y, a["mean1"], a["rstd1"] = self.ln_fwd(res, P(h(l, "ln_1.weight")), P(h(l, "ln_1.bias")))
            a["ln1"] = R(y)
            a["qkv"] = R(a["ln1"] @ P(h(l, "attn.c_attn.weight")) + P(h(l, "attn.c_attn.bias")))
            y, att = self.attn_fwd(a["qkv"], B, T)
            a["atty"], a["att"] = R(y), R(att)
            proj = R(a["atty"] @ P(h(l, "attn.c_proj.weight")) + P(h(l, "attn.c_proj.bias")))
            a["res2"] = R(res + proj)
            y, a["mean2"], a["rstd2"] = self.ln_fwd(a["res2"], P(h(l, "ln_2.weight")),
                                                    P(h(l, "ln_2.bias")))
            a["ln2"] = R(y)
            a["fch"] = R(a["ln2"] @ P(h(l, "mlp.c_fc.weight")) + P(h(l, "mlp.c_fc.bias")))
            a["fchg"] = R(self.gelu(a["fch"]))
            proj = R(a["fchg"] @ P(h(l, "mlp.c_proj.weight")) + P(h(l, "mlp.c_proj.bias")))
            res = R(a["res2"] + proj)
            acts.append(a)
        y, meanf, rstdf = self.ln_fwd(res, P("transformer.ln_f.weight"), P("transformer.ln_f.bias"))
        lnf = R(y)
        logits = R(lnf @ wte.t())
        lsm = logits.log_softmax(-1)
        losses = -lsm.gather(1, tgt.reshape(N, 1)).reshape(N)
        onehot = torch.zeros_like(logits).scatter_(1, tgt.reshape(N, 1), 1.0)
        dlogits = R(dscale * (lsm.exp() - onehot))

        def acc(name, contrib):  # a 16-bit gradient accumulator, rounded once per task
            G[name] = R(G[name] + contrib)

        def linear_bwd(dout, inp, wname, bname):
            acc(wname, inp.t() @ dout)
            acc(bname, dout.sum(0))
            return R(dout @ P(wname).t())

        dC = R(dlogits @ wte)
        acc("transformer.wte.weight", dlogits.t() @ lnf)
        dres = torch.zeros_like(dC)
        dinp, dw, db = self.ln_bwd(dC, res, P("transformer.ln_f.weight"), meanf, rstdf)
        dres = R(dres + dinp)
        acc("transformer.ln_f.weight", dw)
        acc("transformer.ln_f.bias", db)
        for l in reversed(range(L)):
            a = acts[l]
            d4 = linear_bwd(dres, a["fchg"], h(l, "mlp.c_proj.weight"), h(l, "mlp.c_proj.bias"))
            d4 = R(self.gelu_grad(a["fch"]) * d4)
            dC = linear_bwd(d4, a["ln2"], h(l, "mlp.c_fc.weight"), h(l, "mlp.c_fc.bias"))
            dinp, dw, db = self.ln_bwd(dC, a["res2"], P(h(l, "ln_2.weight")), a["mean2"], a["rstd2"])
            dres = R(dres + dinp)
            acc(h(l, "ln_2.weight"), dw)
            acc(h(l, "ln_2.bias"), db)
            dC = linear_bwd(dres, a["atty"], h(l, "attn.c_proj.weight"), h(l, "attn.c_proj.bias"))
            d3 = R(self.attn_bwd(dC, a["qkv"], a["att"], B, T))
            dC = linear_bwd(d3, a["ln1"], h(l, "attn.c_attn.weight"), h(l, "attn.c_attn.bias"))
            dinp, dw, db = self.ln_bwd(dC, a["res_in"], P(h(l, "ln_1.weight")), a["mean1"],
                                       a["rstd1"])
            dres = R(dres + dinp)
            acc(h(l, "ln_1.weight"), dw)
            acc(h(l, "ln_1.bias"), db)
        dwte = torch.zeros_like(G["transformer.wte.weight"]).index_add_(0, flat, dres)
        dwpe = torch.zeros_like(G["transformer.wpe.weight"]).index_add_(0, pos, dres)
        acc("transformer.wte.weight", dwte)
        acc("transformer.wpe.weight", dwpe)
        return losses

    def scaler_update(self, overflow):
        """DeepSpeed's DynamicLossScaler.update_scale (scale_factor 2)"""
        if self.static:
            return
        if overflow:
            if self.hyst0 == 1 or self.hyst == 1:
                if self.scale == self.min_scale:
                    raise RuntimeError("overflow at the minimum loss scale")
                self.scale = max(self.scale / 2, self.min_scale)
            else:
                self.hyst -= 1
            self.last_overflow = self.cur_iter
        else:
            if self.consecutive:
                self.hyst = self.hyst0
            if (self.cur_iter - self.last_overflow) % self.window == 0:
                if not self.consecutive:
                    self.hyst = self.hyst0
                self.scale *= 2
        self.cur_iter += 1

    def step(self, idx, tgt, step_no, lr_conv):
        cfg = self.cfg
        mb, accum = cfg["micro"], cfg["accum"]
        B, T = idx.shape
        self.G = {n: torch.zeros(self.master[n].shape, dtype=self.dt) for n in self.names}
        dscale = np.float32(1.0) / (np.float32(B) * np.float32(T))
        if self.scale != 1.0:
            dscale = np.float32(dscale * np.float32(self.scale))
        loss, n = 0.0, 0
        for j in range(accum):
            rows = slice(j * mb, (j + 1) * mb)
            ls = self.micro_batch(idx[rows], tgt[rows], float(dscale))
            loss += float(ls.to(torch.float32).to(torch.float64).sum())
            n += ls.numel()
        loss /= n
        grads = {k: v.clone() for k, v in self.G.items()}
        s = sum(float((g.to(torch.float64) ** 2).sum()) for g in self.G.values())
        overflow = not math.isfinite(s)
        norm = math.sqrt(s) / self.scale if not overflow else float("inf")
        used_scale = self.scale
        lr = lr_for_step(cfg, self.applied + 1, lr_conv)
        if not (overflow and self.fp16):
            coef = np.float32(1.0)
            if cfg["gradient_clipping"] > 0:
                c = np.float32(cfg["gradient_clipping"] / (np.float32(norm) + np.float32(1e-6)))
                coef = min(np.float32(1.0), c)
            coef = np.float32(coef / np.float32(self.scale))
            for g_ in self.opt.param_groups:
                g_["lr"] = lr
            for name, p in zip(self.names, self.leaves):
                p.grad = (self.G[name].to(torch.float32) * coef).to(torch.float32)
            self.opt.step()
            self.applied += 1
        if self.fp16:
            self.scaler_update(overflow)
        return loss, lr, norm, used_scale, int(overflow and self.fp16), grads


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--ds-config", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--init", required=True)
    ap.add_argument("--steps", type=int, default=1)
    ap.add_argument("--precision", choices=("bf16", "fp16"), required=True)
    ap.add_argument("--compute", choices=("float64", "float32"), default="float64")
    ap.add_argument("--bf16-products", action="store_true",
                    help="the attention's products on 16-bit operands too, as zerotask's bf16 "
                         "engines compute them: the probabilities rounded before att @ v, the "
                         "scaled softmax gradient before dq and dk")
    ap.add_argument("--out-json")
    ap.add_argument("--params-out")
    ap.add_argument("--grads-out")
    ap.add_argument("--lr-convention", choices=("deepspeed", "shifted"), default="deepspeed")
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    m = load_model_shape(a.model)
    cfg = load_ds_config(a.ds_config)
    with open(a.ds_config) as f:
        ds = json.load(f)
    f16 = ds.get("fp16") or {}
    fp16cfg = {"loss_scale": float(f16.get("loss_scale", 0)),
               "initial_scale_power": int(f16.get("initial_scale_power", 16)),
               "loss_scale_window": int(f16.get("loss_scale_window", 1000)),
               "hysteresis": int(f16.get("hysteresis", 2)),
               "consecutive_hysteresis": bool(f16.get("consecutive_hysteresis", False)),
               "min_loss_scale": float(f16.get("min_loss_scale", 1))}
    tok = load_tokens(a.data, m["vocab_size"])
    half = torch.bfloat16 if a.precision == "bf16" else torch.float16
    dt = torch.float64 if a.compute == "float64" else torch.float32
    tr = MP(m, cfg, load_weights(a.init, m), half, dt, fp16cfg, a.bf16_products)
    B, T = cfg["train_batch_size"], m["seq_len"]
    out = {"losses": [], "lrs": [], "grad_norms": [], "loss_scales": [], "skipped": []}
    for s in range(1, a.steps + 1):
        idx, tgt = step_batch(tok, s, B, T)
        loss, lr, gn, sc, sk, grads = tr.step(idx, tgt, s, a.lr_convention)
        if s == 1 and a.grads_out:
            st_write(a.grads_out, [(n, grads[n].to(torch.float32)) for n in tr.names],
                     {"step": 1, "precision": a.precision})
        for k, v in (("losses", loss), ("lrs", lr), ("grad_norms", gn), ("loss_scales", sc),
                     ("skipped", sk)):
            out[k].append(v if math.isfinite(v) else None)
    if a.params_out:
        st_write(a.params_out, [(n, tr.master[n].detach().clone()) for n in tr.names],
                 {"steps": a.steps, "precision": a.precision})
    if a.out_json:
        with open(a.out_json, "w") as f:
            json.dump(out, f)
            f.write("\n")
    return 0


if __name__ == "__main__":
    run_main(main, "gpt2_mp_torch")
