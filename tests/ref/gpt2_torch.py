#!/usr/bin/env python3
"""tests/ref/gpt2_torch.py: independent PyTorch reference of zerotask's GPT-2 trainer.

The numerics oracle of the end-to-end tests and the peer of the benchmark. Runs with Debian's
torch 1.13 (/usr/bin/python3); uses only the standard library, torch and numpy (safetensors is
read and written by hand). See tests/ref/README.md for the command lines.

Model: GPT-2 with Hugging Face names and layouts. Conv1D weights are [in, out] (y = x @ W + b);
LayerNorm eps 1e-5; GELU with the tanh approximation; causal attention scaled by 1/sqrt(hs);
c_attn columns [0:C) are q, [C:2C) k, [2C:3C) v, head h owns columns h*hs..(h+1)*hs of each; LM
head tied to wte (logits = x @ wte^T, no bias); no dropout. Written with explicit tensor ops.

Data rule (llm.c token file, global batch B = train_batch_size, T = seq_len): step i (from 1)
row k has inputs tokens[((i-1)*B*T + k*T + t) mod count] and targets the token one index later
(mod count). Micro-batch j takes rows j*micro .. (j+1)*micro-1. The step loss is the mean
cross-entropy over all B*T positions, before the update; the gradient is the gradient of that
mean (each micro-batch's mean loss / accum, accumulated in order).

Optimizer (DeepSpeed semantics): "Adam" and "AdamW" both decouple weight decay
(torch.optim.AdamW) unless params.adam_w_mode is false (then torch.optim.Adam with L2
weight_decay); decay applies to every parameter; foreach=False (1.13's single-tensor path).
Defaults follow io/zt_config.h: lr 1e-3, betas [0.9, 0.999], eps 1e-8, weight_decay 0.01 for
AdamW and 0 for Adam. gradient_clipping > 0 clips by the global L2 norm
(torch.nn.utils.clip_grad_norm_); grad_norms reports the norm before clipping.

Learning-rate convention (DeepSpeed deepspeed/runtime/lr_schedules.py + runtime/engine.py):
  * the engine builds the scheduler with last_batch_iteration=-1 and does NOT step it then;
    the constructors of WarmupLR/WarmupDecayLR/WarmupCosineLR write get_lr() at iteration -1
    into the optimizer ("# Initialize lr in optimizer / if last_batch_iteration == -1:
    self._last_lr = update_lr(self.optimizer.param_groups, self.get_lr())"), where get_lr() at
    a negative iteration returns self.min_lrs (WarmupLR, WarmupDecayLR) or 0.0
    (WarmupCosineLR);
  * engine._take_model_step() calls self.lr_scheduler.step() after self.optimizer.step();
    step() sets last_batch_iteration += 1 and writes get_lr() into the optimizer.
  So training step 1 uses the iteration -1 value (warmup_min_lr, or 0 for WarmupCosineLR) and
  step s >= 2 uses the schedule at last_batch_iteration = s - 2. With --lr-convention shifted
  step s uses last_batch_iteration = s - 1 instead (no iteration -1 value). Without a
  "scheduler" section the lr is optimizer.params.lr throughout. Defaults are DeepSpeed's:
  WarmupLR warmup_max_lr = optimizer lr (upstream's None default), WarmupDecayLR 0.001,
  warmup_num_steps 1000 (clamped to >= 2), warmup_type "log", WarmupCosineLR warmup_min_ratio 0,
  cos_min_ratio 1e-4; total_num_steps is required by WarmupDecayLR and WarmupCosineLR.
"""
import argparse
import contextlib
import json
import math
import os
import struct
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

TOKENS_MAGIC, TOKENS_VERSION, HEADER_INTS = 20240520, 1, 256


class UsageError(Exception):
    """Bad command line or config: exit status 2."""


# ---------------------------------------------------------------------------------------------
# safetensors (by hand): 8-byte LE header length, JSON header, data section.

def st_read(path):
    """Return {name: np.ndarray} (F32/F64 as is, F16/BF16 converted to float32), in file order."""
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 8:
        raise ValueError("safetensors %s: shorter than the 8-byte header length" % path)
    (n,) = struct.unpack("<Q", raw[:8])
    if 8 + n > len(raw):
        raise ValueError("safetensors %s: header length %d beyond end of file" % (path, n))
    try:
        hdr = json.loads(raw[8:8 + n].decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError("safetensors %s: header is not JSON (%s)" % (path, e))
    data = memoryview(raw)[8 + n:]
    out = {}
    for name, info in hdr.items():
        if name == "__metadata__":
            continue
        dt, shape, (b, e) = info["dtype"], list(info["shape"]), info["data_offsets"]
        width = {"F32": 4, "F16": 2, "BF16": 2, "F64": 8}.get(dt)
        if width is None:
            raise ValueError("safetensors %s: tensor %s has unsupported dtype %s" % (path, name, dt))
        numel = int(np.prod(shape)) if shape else 1
        if not (0 <= b <= e <= len(data)) or e - b != numel * width:
            raise ValueError("safetensors %s: tensor %s: offsets [%d, %d) do not hold %s %s"
                             % (path, name, b, e, dt, shape))
        buf = data[b:e]
        if dt == "F32":
            a = np.frombuffer(buf, "<f4")
        elif dt == "F64":
            a = np.frombuffer(buf, "<f8")
        elif dt == "F16":
            a = np.frombuffer(buf, "<f2").astype(np.float32)
        else:  # BF16: the top 16 bits of an fp32
            a = (np.frombuffer(buf, "<u2").astype(np.uint32) << 16).view(np.float32)
        out[name] = a.reshape(shape).copy()
    return out


def st_write(path, tensors, metadata=None):
    """Write [(name, array-like)] as F32, atomically (tmp file + rename)."""
    header, blobs, off = {}, [], 0
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    for name, a in tensors:
        if isinstance(a, torch.Tensor):
            a = a.detach().cpu().to(torch.float32).numpy()
        a = np.ascontiguousarray(a, dtype="<f4")
        b = a.tobytes()
        header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode("utf-8")
    h += b" " * ((8 - len(h) % 8) % 8)
    tmp = path + ".tmp%d" % os.getpid()
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)
    os.replace(tmp, path)


# ---------------------------------------------------------------------------------------------
# configs

def load_json(path, what):
    try:
        with open(path) as f:
            obj = json.load(f)
    except OSError as e:
        raise UsageError("%s %s: cannot read (%s)" % (what, path, e.strerror))
    except json.JSONDecodeError as e:
        raise UsageError("%s %s: not valid JSON (%s)" % (what, path, e))
    if not isinstance(obj, dict):
        raise UsageError("%s %s: expected a JSON object" % (what, path))
    return obj


def load_model_shape(path):
    m = load_json(path, "model")
    out = {}
    for k in ("vocab_size", "seq_len", "n_embd", "n_layer", "n_head"):
        v = m.get(k)
        if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
            raise UsageError("model %s: \"%s\" must be a positive integer, got %r" % (path, k, v))
        out[k] = v
    if out["n_embd"] % out["n_head"]:
        raise UsageError("model %s: n_embd %d is not divisible by n_head %d"
                         % (path, out["n_embd"], out["n_head"]))
    return out


def resolve_batch(ds, path):
    """DeepSpeed's rule train_batch_size = micro * accum * world (world = 1)."""
    tbs = ds.get("train_batch_size")
    mb = ds.get("train_micro_batch_size_per_gpu")
    ga = ds.get("gradient_accumulation_steps")
    for k, v in (("train_batch_size", tbs), ("train_micro_batch_size_per_gpu", mb),
                 ("gradient_accumulation_steps", ga)):
        if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v <= 0):
            raise UsageError("ds-config %s: %s must be a positive integer, got %r" % (path, k, v))
    if tbs is not None and mb is not None and ga is not None:
        if tbs != mb * ga:
            raise UsageError("ds-config %s: train_batch_size %d != micro %d x accumulation %d x "
                             "world 1" % (path, tbs, mb, ga))
    elif tbs is not None and mb is not None:
        if tbs % mb:
            raise UsageError("ds-config %s: train_batch_size %d not divisible by "
                             "train_micro_batch_size_per_gpu %d" % (path, tbs, mb))
        ga = tbs // mb
    elif tbs is not None and ga is not None:
        if tbs % ga:
            raise UsageError("ds-config %s: train_batch_size %d not divisible by "
                             "gradient_accumulation_steps %d" % (path, tbs, ga))
        mb = tbs // ga
    elif mb is not None and ga is not None:
        tbs = mb * ga
    elif tbs is not None:
        mb, ga = tbs, 1
    elif mb is not None:
        tbs, ga = mb, 1
    else:
        raise UsageError("ds-config %s: needs train_batch_size or "
                         "train_micro_batch_size_per_gpu" % path)
    return tbs, mb, ga


def load_ds_config(path):
    ds = load_json(path, "ds-config")
    cfg = {}
    cfg["train_batch_size"], cfg["micro"], cfg["accum"] = resolve_batch(ds, path)
    opt = ds.get("optimizer") or {"type": "AdamW", "params": {}}
    typ = str(opt.get("type", "AdamW"))
    if typ.lower() not in ("adam", "adamw"):
        raise UsageError("ds-config %s: optimizer.type must be Adam or AdamW, got %r" % (path, typ))
    p = opt.get("params") or {}
    adamw = typ.lower() == "adamw"
    cfg["lr"] = float(p.get("lr", 1e-3))
    betas = p.get("betas", [0.9, 0.999])
    cfg["betas"] = (float(betas[0]), float(betas[1]))
    cfg["eps"] = float(p.get("eps", 1e-8))
    cfg["weight_decay"] = float(p.get("weight_decay", 0.01 if adamw else 0.0))
    cfg["adam_w_mode"] = True if adamw else bool(p.get("adam_w_mode", True))
    cfg["optimizer"] = "AdamW" if adamw else "Adam"
    cfg["scheduler"] = parse_scheduler(ds.get("scheduler"), cfg["lr"], path)
    cfg["gradient_clipping"] = float(ds.get("gradient_clipping", 0.0) or 0.0)
    cfg["steps_per_print"] = int(ds.get("steps_per_print", 10) or 10)
    cfg["seed"] = int(ds.get("seed", 1234))
    return cfg


# ---------------------------------------------------------------------------------------------
# DeepSpeed LR schedules (deepspeed/runtime/lr_schedules.py), as functions of
# last_batch_iteration; -1 is the value the constructor writes into the optimizer.

def parse_scheduler(s, opt_lr, path):
    if not s:
        return None
    typ = s.get("type")
    p = dict(s.get("params") or {})
    if typ not in ("WarmupLR", "WarmupDecayLR", "WarmupCosineLR"):
        raise UsageError("ds-config %s: scheduler.type must be WarmupLR, WarmupDecayLR or "
                         "WarmupCosineLR, got %r" % (path, typ))
    n = p.get("warmup_num_steps", 1000)
    if not isinstance(n, int) or n <= 0:
        raise UsageError("ds-config %s: scheduler.params.warmup_num_steps must be a positive "
                         "integer, got %r" % (path, n))
    wt = p.get("warmup_type", "log")
    if wt not in ("log", "linear"):
        wt = "log"  # DeepSpeed warns and falls back to log
    sch = {"type": typ, "warmup_num_steps": max(2, n), "warmup_type": wt, "opt_lr": opt_lr}
    if typ in ("WarmupDecayLR", "WarmupCosineLR"):
        if "total_num_steps" not in p:
            raise UsageError("ds-config %s: scheduler %s needs params.total_num_steps" % (path, typ))
        sch["total_num_steps"] = int(p["total_num_steps"])
    if typ == "WarmupCosineLR":
        sch["warmup_min_ratio"] = float(p.get("warmup_min_ratio", 0.0))
        sch["cos_min_ratio"] = float(p.get("cos_min_ratio", 0.0001))
    else:
        sch["min_lr"] = float(p.get("warmup_min_lr", 0.0))
        default_max = opt_lr if typ == "WarmupLR" else 0.001
        mx = p.get("warmup_max_lr")
        sch["max_lr"] = float(default_max if mx is None else mx)
    return sch


def ds_schedule_lr(sch, it):
    """The lr a DeepSpeed scheduler writes at last_batch_iteration = it (it >= -1)."""
    n, wt = sch["warmup_num_steps"], sch["warmup_type"]
    inv_log = 1.0 / math.log(n)
    if sch["type"] == "WarmupCosineLR":
        if it < 0:
            return 0.0
        if it < n:
            r = inv_log * math.log(it + 1) if wt == "log" else it / n
            ratio = sch["warmup_min_ratio"] + r * (1.0 - sch["warmup_min_ratio"])
        else:
            real_last = it - n + 1
            real_total = max(1, sch["total_num_steps"] - n)
            prog = min(1.0, real_last / real_total)
            ratio = (1 + math.cos(math.pi * prog)) / 2
            ratio = max(0.0, sch["cos_min_ratio"] + (1.0 - sch["cos_min_ratio"]) * ratio)
        return sch["opt_lr"] * ratio
    mn, delta = sch["min_lr"], sch["max_lr"] - sch["min_lr"]
    if it < 0:
        return mn
    if it < n:
        gamma = inv_log * math.log(it + 1) if wt == "log" else it / n
    elif sch["type"] == "WarmupLR":
        gamma = 1.0
    else:  # WarmupDecayLR
        tot = sch["total_num_steps"]
        gamma = max(0.0, float(tot - it) / float(max(1.0, tot - n)))
    return mn + delta * gamma


def lr_for_step(cfg, step, convention):
    """Learning rate the optimizer uses in 1-based training step `step`."""
    sch = cfg["scheduler"]
    if sch is None:
        return cfg["lr"]
    it = step - 2 if convention == "deepspeed" else step - 1
    return ds_schedule_lr(sch, it)


# ---------------------------------------------------------------------------------------------
# tokens and batches

def write_tokens(path, toks):
    """a token file in llm.c's format (the one load_tokens and zerotask read)"""
    with open(path, "wb") as f:
        f.write(struct.pack("<%di" % HEADER_INTS, TOKENS_MAGIC, TOKENS_VERSION, len(toks),
                            *([0] * (HEADER_INTS - 3))))
        f.write(struct.pack("<%dH" % len(toks), *toks))


def load_tokens(path, vocab_size):
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise RuntimeError("data %s: cannot read (%s)" % (path, e.strerror))
    if len(raw) < 4 * HEADER_INTS:
        raise RuntimeError("data %s: truncated header (%d bytes)" % (path, len(raw)))
    hdr = np.frombuffer(raw[:4 * HEADER_INTS], "<i4")
    if hdr[0] != TOKENS_MAGIC or hdr[1] != TOKENS_VERSION:
        raise RuntimeError("data %s: bad magic/version %d/%d" % (path, hdr[0], hdr[1]))
    count = int(hdr[2])
    if len(raw) != 4 * HEADER_INTS + 2 * count or count < 2:
        raise RuntimeError("data %s: %d tokens declared, file has %d bytes"
                           % (path, count, len(raw)))
    tok = np.frombuffer(raw[4 * HEADER_INTS:], "<u2").astype(np.int64)
    bad = np.nonzero(tok >= vocab_size)[0]
    if len(bad):
        raise RuntimeError("data %s: token %d at index %d >= vocab_size %d"
                           % (path, tok[bad[0]], bad[0], vocab_size))
    return tok


def step_batch(tok, step, B, T):
    """(inputs, targets) of 1-based step `step`: int64 [B, T] torch tensors."""
    count = len(tok)
    pos = (step - 1) * B * T + np.arange(B, dtype=np.int64)[:, None] * T + np.arange(T)[None, :]
    return (torch.from_numpy(tok[pos % count]), torch.from_numpy(tok[(pos + 1) % count]))


# ---------------------------------------------------------------------------------------------
# model

def param_specs(m):
    V, T, C, L = m["vocab_size"], m["seq_len"], m["n_embd"], m["n_layer"]
    specs = [("transformer.wte.weight", [V, C]), ("transformer.wpe.weight", [T, C])]
    for i in range(L):
        p = "transformer.h.%d." % i
        specs += [(p + "ln_1.weight", [C]), (p + "ln_1.bias", [C]),
                  (p + "attn.c_attn.weight", [C, 3 * C]), (p + "attn.c_attn.bias", [3 * C]),
                  (p + "attn.c_proj.weight", [C, C]), (p + "attn.c_proj.bias", [C]),
                  (p + "ln_2.weight", [C]), (p + "ln_2.bias", [C]),
                  (p + "mlp.c_fc.weight", [C, 4 * C]), (p + "mlp.c_fc.bias", [4 * C]),
                  (p + "mlp.c_proj.weight", [4 * C, C]), (p + "mlp.c_proj.bias", [C])]
    specs += [("transformer.ln_f.weight", [C]), ("transformer.ln_f.bias", [C])]
    return specs


def init_weights(m, seed):
    """GPT-2 init: N(0, 0.02) weights/embeddings, c_proj weights N(0, 0.02/sqrt(2L)),
    biases 0, LayerNorm weight 1 / bias 0. Deterministic for a seed (float32)."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for name, shape in param_specs(m):
        leaf = name.rsplit(".", 2)
        if name.endswith(".bias"):
            t = torch.zeros(shape)
        elif leaf[-2].startswith("ln_"):
            t = torch.ones(shape)
        else:
            std = 0.02 / math.sqrt(2 * m["n_layer"]) if name.endswith("c_proj.weight") else 0.02
            t = torch.randn(shape, generator=g, dtype=torch.float32) * std
        out.append((name, t))
    return out


def load_weights(path, m):
    try:
        st = st_read(path)
    except OSError as e:
        raise RuntimeError("init %s: cannot read (%s)" % (path, e.strerror))
    out = []
    for name, shape in param_specs(m):
        if name not in st:
            raise RuntimeError("init %s: tensor %s missing" % (path, name))
        if list(st[name].shape) != shape:
            raise RuntimeError("init %s: tensor %s has shape %s, expected %s"
                               % (path, name, list(st[name].shape), shape))
        out.append((name, torch.from_numpy(st[name])))
    extra = sorted(set(st) - {n for n, _ in out})
    if extra:
        print("gpt2_torch: note: %s: ignoring %d extra tensors (%s ...)"
              % (path, len(extra), extra[0]), file=sys.stderr)
    return out


def gpt2_loss(P, m, idx, tgt, mask, fast=False):
    """Mean cross-entropy of GPT-2 over the [B, T] positions of (idx, tgt). P: name -> tensor.
    fast (benchmark only): the fused attention of torch >= 2.0 where it exists."""
    B, T = idx.shape
    logits = gpt2_logits(P, m, idx, mask, fast)
    return F.cross_entropy(logits.reshape(B * T, -1), tgt.reshape(B * T))


def gpt2_block(P, m, i, x, mask, fast=False):
    """transformer block i of GPT-2 on x [B, T, C] (causal, from position 0)"""
    B, T, _ = x.shape
    C, NH = m["n_embd"], m["n_head"]
    hs = C // NH
    p = "transformer.h.%d." % i
    h = F.layer_norm(x, (C,), P[p + "ln_1.weight"], P[p + "ln_1.bias"], 1e-5)
    qkv = h @ P[p + "attn.c_attn.weight"] + P[p + "attn.c_attn.bias"]      # [B, T, 3C]
    q, k, v = qkv.split(C, dim=2)
    q = q.view(B, T, NH, hs).transpose(1, 2)                                # [B, NH, T, hs]
    k = k.view(B, T, NH, hs).transpose(1, 2)
    v = v.view(B, T, NH, hs).transpose(1, 2)
    if fast and hasattr(F, "scaled_dot_product_attention"):  # torch >= 2.0: fused kernel
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    else:
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))             # [B, NH, T, T]
        att = att.masked_fill(~mask[:T, :T], float("-inf")).softmax(dim=-1)
        y = att @ v
    y = y.transpose(1, 2).reshape(B, T, C)
    x = x + (y @ P[p + "attn.c_proj.weight"] + P[p + "attn.c_proj.bias"])
    h = F.layer_norm(x, (C,), P[p + "ln_2.weight"], P[p + "ln_2.bias"], 1e-5)
    h = F.gelu(h @ P[p + "mlp.c_fc.weight"] + P[p + "mlp.c_fc.bias"], approximate="tanh")
    return x + (h @ P[p + "mlp.c_proj.weight"] + P[p + "mlp.c_proj.bias"])


def gpt2_logits(P, m, idx, mask, fast=False):
    """GPT-2's logits [B, T, V] at every position of idx [B, T] (causal, from position 0)."""
    B, T = idx.shape
    C = m["n_embd"]
    wte = P["transformer.wte.weight"]
    x = wte[idx] + P["transformer.wpe.weight"][:T]                        # [B, T, C]
    for i in range(m["n_layer"]):
        x = gpt2_block(P, m, i, x, mask, fast)
    x = F.layer_norm(x, (C,), P["transformer.ln_f.weight"], P["transformer.ln_f.bias"], 1e-5)
    return x @ wte.t()                                                      # [B, T, V]


# ---------------------------------------------------------------------------------------------
# trainer

class Trainer:
    def __init__(self, m, cfg, weights, dtype, lr_convention, fast=False, device="cpu",
                 autocast=None):
        """autocast (benchmark only): a torch dtype (torch.bfloat16) the forward and the loss
        run under torch.autocast in (mixed precision: fp32 parameters, gradients and optimizer,
        matmuls in that dtype); None: no autocast (the oracle's exact path)"""
        self.m, self.cfg, self.conv, self.fast = m, cfg, lr_convention, fast
        self.autocast = autocast
        self.names = [n for n, _ in weights]
        self.params = [t.detach().to(device=device, dtype=dtype).clone().requires_grad_(True)
                       for _, t in weights]
        self.P = dict(zip(self.names, self.params))
        self.mask = torch.ones(m["seq_len"], m["seq_len"], dtype=torch.bool,
                               device=device).tril()
        self.device_type = torch.device(device).type
        kw = dict(lr=cfg["lr"], betas=cfg["betas"], eps=cfg["eps"],
                  weight_decay=cfg["weight_decay"], foreach=None if fast else False)
        if fast and self.device_type == "cuda":  # PyTorch at its best on a GPU: fused AdamW
            kw.update(foreach=None, fused=True)
        if cfg["adam_w_mode"]:
            self.opt = torch.optim.AdamW(self.params, **kw)
        else:
            self.opt = torch.optim.Adam(self.params, **kw)

    def forward_backward(self, idx, tgt, backward=True):
        """Step loss (mean over the whole global batch) and, if backward, the accumulated
        gradient of it in p.grad (micro-batch j: rows j*micro..(j+1)*micro-1)."""
        mb, accum = self.cfg["micro"], self.cfg["accum"]
        for p in self.params:
            p.grad = None
        loss = 0.0
        for j in range(accum):
            rows = slice(j * mb, (j + 1) * mb)
            if backward:
                with self.amp():
                    l = gpt2_loss(self.P, self.m, idx[rows], tgt[rows], self.mask, self.fast)
                (l / accum).backward()  # outside autocast, as torch's AMP recipe has it
            else:
                with torch.no_grad(), self.amp():
                    l = gpt2_loss(self.P, self.m, idx[rows], tgt[rows], self.mask)
            loss += l.item() / accum
        return loss

    def amp(self):
        """the autocast context of the forward (a no-op one without autocast)"""
        if self.autocast is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device_type, dtype=self.autocast)

    def grad_norm_and_clip(self):
        clip = self.cfg["gradient_clipping"]
        if clip > 0:
            return float(torch.nn.utils.clip_grad_norm_(self.params, clip))
        return float(torch.norm(torch.stack([torch.norm(p.grad.detach(), 2.0)
                                             for p in self.params]), 2.0))

    def step(self, step, idx, tgt, on_grads=None):
        """One training step; returns (loss, lr, grad_norm before clipping)."""
        lr = lr_for_step(self.cfg, step, self.conv)
        for g in self.opt.param_groups:
            g["lr"] = lr
        loss = self.forward_backward(idx, tgt)
        if on_grads is not None:
            on_grads()
        gn = self.grad_norm_and_clip()
        self.opt.step()
        return loss, lr, gn

    def grads(self):
        return [(n, p.grad.detach().clone()) for n, p in zip(self.names, self.params)]

    def weights(self):
        return [(n, p.detach().clone()) for n, p in zip(self.names, self.params)]


def main(argv):
    ap = argparse.ArgumentParser(
        prog="gpt2_torch.py",
        description="PyTorch reference of zerotask's GPT-2 trainer (numerics oracle and "
                    "benchmark peer). See the module docstring for every convention.")
    ap.add_argument("--model", required=True, help="model shape JSON")
    ap.add_argument("--ds-config", help="DeepSpeed JSON (batch, optimizer, scheduler, clipping)")
    ap.add_argument("--data", help="llm.c token file")
    ap.add_argument("--init", help="initial weights (safetensors, HF names; F32/BF16/F16)")
    ap.add_argument("--steps", type=int, default=1, help="training steps (default 1)")
    ap.add_argument("--dtype", choices=("float32", "float64"), default="float32")
    ap.add_argument("--threads", type=int, help="torch.set_num_threads (default: torch's)")
    ap.add_argument("--out-json", help="write {losses, lrs, grad_norms} per step")
    ap.add_argument("--grads-out", help="write step 1's gradients (before clipping, F32)")
    ap.add_argument("--params-out", help="write the parameters after the last step (F32)")
    ap.add_argument("--eval-only", action="store_true",
                    help="loss of step 1's batch, no update")
    ap.add_argument("--write-init", metavar="OUT", help="write a GPT-2 init (F32) and exit")
    ap.add_argument("--seed", type=int, help="seed of --write-init (default: config seed "
                    "or 1234)")
    ap.add_argument("--bench", action="store_true",
                    help="time each step; print the median ms/step of the steps after 2 warm-up "
                         "(PyTorch at its best: foreach AdamW, fused attention in torch >= 2)")
    ap.add_argument("--autocast", choices=("bf16",),
                    help="run forward and loss under torch.autocast(device, bfloat16): "
                         "mixed precision with fp32 parameters and optimizer (benchmark peer "
                         "of zt-train's bf16; needs --dtype float32; default: off)")
    ap.add_argument("--lr-convention", choices=("deepspeed", "shifted"), default="deepspeed",
                    help="deepspeed: step s uses last_batch_iteration s-2 (step 1: the "
                         "constructor's value); shifted: s-1")
    ap.add_argument("--quiet", action="store_true", help="no per-step lines")
    ap.add_argument("--device", default="cpu",
                    help="torch device of the run, e.g. cuda (bench/gpu_step.py; default cpu)")
    a = ap.parse_args(argv)

    if a.threads:
        torch.set_num_threads(a.threads)
    m = load_model_shape(a.model)

    if a.write_init:
        seed = a.seed
        if seed is None:
            seed = load_ds_config(a.ds_config)["seed"] if a.ds_config else 1234
        w = init_weights(m, seed)
        st_write(a.write_init, w, {"format": "pt", "seed": seed, "producer": "gpt2_torch.py"})
        print("wrote %s: %d tensors, %d parameters, seed %d"
              % (a.write_init, len(w), sum(t.numel() for _, t in w), seed))
        return 0

    for opt in ("ds_config", "data", "init"):
        if getattr(a, opt) is None:
            raise UsageError("missing --%s" % opt.replace("_", "-"))
    if a.steps < 1:
        raise UsageError("--steps must be >= 1, got %d" % a.steps)
    if a.bench and a.steps < 3:
        raise UsageError("--bench needs --steps >= 3 (2 warm-up steps are not counted)")
    cfg = load_ds_config(a.ds_config)
    tok = load_tokens(a.data, m["vocab_size"])
    dtype = torch.float32 if a.dtype == "float32" else torch.float64
    amp = None
    if a.autocast:
        if a.dtype != "float32":
            raise UsageError("--autocast %s needs --dtype float32 (autocast casts down from "
                             "float32)" % a.autocast)
        if not hasattr(torch, "autocast"):
            raise UsageError("--autocast: torch %s has no torch.autocast" % torch.__version__)
        amp = torch.bfloat16
    # --bench: PyTorch at its best (multi-tensor AdamW, fused attention where torch has it)
    dev = torch.device(a.device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise UsageError("--device %s: torch.cuda.is_available() is False" % a.device)
    tr = Trainer(m, cfg, load_weights(a.init, m), dtype, a.lr_convention, fast=a.bench,
                 device=dev, autocast=amp)
    B, T = cfg["train_batch_size"], m["seq_len"]

    out = {"losses": [], "lrs": [], "grad_norms": []}
    if a.eval_only:
        idx, tgt = step_batch(tok, 1, B, T)
        loss = tr.forward_backward(idx, tgt, backward=bool(a.grads_out))
        if a.grads_out:
            st_write(a.grads_out, tr.grads(), {"step": 1, "dtype": a.dtype})
        out["losses"].append(loss)
        print("eval loss %.6f" % loss)
    else:
        batches = [tuple(x.to(dev) for x in step_batch(tok, s, B, T))
                   for s in range(1, a.steps + 1)]  # outside timing
        every = max(1, cfg["steps_per_print"])
        times = []
        for s in range(1, a.steps + 1):
            hook = None
            if s == 1 and a.grads_out:
                hook = lambda: st_write(a.grads_out, tr.grads(), {"step": 1, "dtype": a.dtype})
            t0 = time.perf_counter()
            loss, lr, gn = tr.step(s, *batches[s - 1], on_grads=None if a.bench else hook)
            if dev.type == "cuda":
                torch.cuda.synchronize(dev)  # the optimizer's kernels are asynchronous
            ms = (time.perf_counter() - t0) * 1e3
            if a.bench and hook:
                print("gpt2_torch: note: --grads-out ignored with --bench", file=sys.stderr)
            times.append(ms)
            out["losses"].append(loss)
            out["lrs"].append(lr)
            out["grad_norms"].append(gn)
            if a.bench:
                print("step %d ms/step %.3f" % (s, ms))
            elif not a.quiet and (s == 1 or s == a.steps or s % every == 0):
                print("step %d/%d | loss %.6f | lr %.4e | grad_norm %.4f | %.1f ms"
                      % (s, a.steps, loss, lr, gn, ms))
            if not math.isfinite(loss):
                raise RuntimeError("step %d: loss is %r" % (s, loss))
        if a.bench:
            med = float(np.median(times[2:]))
            print("ms/step %.3f (median of %d steps after 2 warm-up; %.0f tokens/s; torch %s; "
                  "%d threads; %s; %s)" % (med, len(times) - 2, B * T / (med / 1e3),
                                           torch.__version__, torch.get_num_threads(),
                                           a.dtype + (" autocast " + a.autocast
                                                      if a.autocast else ""), dev))
    if a.params_out:
        st_write(a.params_out, tr.weights(), {"steps": 0 if a.eval_only else a.steps,
                                              "dtype": a.dtype})
    if a.out_json:
        with open(a.out_json, "w") as f:
            json.dump(out, f)
            f.write("\n")
    return 0


def run_main(main, prog):
    """main(argv) as a command: one error line, exit 2 for a bad command line, 1 otherwise"""
    try:
        sys.exit(main(sys.argv[1:]))
    except UsageError as e:
        print("%s: error: %s" % (prog, e), file=sys.stderr)
        sys.exit(2)
    except (RuntimeError, ValueError, OSError, KeyError) as e:
        print("%s: error: %s" % (prog, e), file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    run_main(main, "gpt2_torch")
