#!/usr/bin/env python3
"""tests/ref/kernels_ref.py: PyTorch oracle for the CPU kernel tests (tests/kernels/).

Run once by the CTest fixture `ref_kernels` with the Python that has torch (ZT_TORCH_PYTHON,
Debian's /usr/bin/python3 with torch 1.13). For every kernel case it draws inputs in float32,
computes the forward outputs and the backward gradients in float64 (autograd), and writes them
to OUTDIR in a trivial raw format the C tests read without any zerotask library:

  OUTDIR/<case>.meta          text, one "key integer" per line (shapes, offsets, steps)
  OUTDIR/<case>.<name>.f64    raw little-endian float64, row-major
  OUTDIR/<case>.<name>.i32    raw little-endian int32

Inputs are float32 values stored as float64 (exact), so C reads them back bit-exactly.
AdamW/Adam references are run in float32 with torch.optim (foreach=False: the single-tensor
path the kernel mirrors). Any failure (no torch, bad output dir) exits non-zero, which fails the
fixture and with it every numerics test that requires it.
"""
import math
import os
import sys

import torch
import torch.nn.functional as F

OUT = None


def put(case, name, t):
    t = t.detach()
    if t.dtype in (torch.int32, torch.int64):
        path = os.path.join(OUT, f"{case}.{name}.i32")
        t.to(torch.int32).contiguous().numpy().astype("<i4").tofile(path)
    else:
        path = os.path.join(OUT, f"{case}.{name}.f64")
        t.to(torch.float64).contiguous().numpy().astype("<f8").tofile(path)


def meta(case, **kv):
    with open(os.path.join(OUT, f"{case}.meta"), "w") as f:
        for k, v in kv.items():
            f.write(f"{k} {int(v)}\n")


def randf(g, *shape, scale=1.0, shift=0.0):
    """float32 draws promoted to float64 exactly"""
    return (torch.randn(*shape, generator=g, dtype=torch.float32) * scale + shift).to(torch.float64)


# ------------------------------------------------------------------------------------------------
def encoder(g):
    B, T, C, V = 2, 5, 8, 11
    tokens = torch.randint(0, V, (B * T,), generator=g, dtype=torch.int64)
    tokens[7] = tokens[2]  # a repeated token: dwte rows must accumulate
    tokens[9] = tokens[2]
    wte = randf(g, V, C).requires_grad_()
    wpe = randf(g, T, C).requires_grad_()
    pos = torch.arange(B * T) % T
    out = wte[tokens] + wpe[pos]
    dout = randf(g, B * T, C)
    out.backward(dout)
    meta("encoder", B=B, T=T, C=C, V=V)
    put("encoder", "tokens", tokens)
    put("encoder", "wte", wte)
    put("encoder", "wpe", wpe)
    put("encoder", "out", out)
    put("encoder", "dout", dout)
    put("encoder", "dwte", wte.grad)
    put("encoder", "dwpe", wpe.grad)
    put("encoder", "dwte_init", randf(g, V, C))
    put("encoder", "dwpe_init", randf(g, T, C))


def layernorm(g, case, N, C):
    inp = randf(g, N, C, scale=2.0, shift=0.7).requires_grad_()
    w = randf(g, C, scale=0.5, shift=1.0).requires_grad_()
    b = randf(g, C).requires_grad_()
    out = F.layer_norm(inp, (C,), w, b, eps=1e-5)
    mean = inp.mean(-1)
    rstd = 1.0 / torch.sqrt(inp.var(-1, unbiased=False) + 1e-5)
    dout = randf(g, N, C)
    out.backward(dout)
    meta(case, N=N, C=C)
    for k, t in dict(inp=inp, w=w, b=b, out=out, mean=mean, rstd=rstd, dout=dout, dinp=inp.grad,
                     dw=w.grad, db=b.grad, dinp_init=randf(g, N, C), dw_init=randf(g, C),
                     db_init=randf(g, C)).items():
        put(case, k, t)


def matmul(g):
    N, C, OC, V = 10, 8, 12, 11
    inp = randf(g, N, C).requires_grad_()
    w = randf(g, C, OC, scale=0.5).requires_grad_()
    bias = randf(g, OC).requires_grad_()
    out = inp @ w + bias
    dout = randf(g, N, OC)
    out.backward(dout)
    meta("matmul", N=N, C=C, OC=OC, V=V)
    for k, t in dict(inp=inp, w=w, bias=bias, out=out, out_nobias=(inp @ w), dout=dout,
                     dinp=inp.grad, dw=w.grad, dbias=bias.grad, dinp_init=randf(g, N, C),
                     dw_init=randf(g, C, OC), dbias_init=randf(g, OC)).items():
        put("matmul", k, t)
    # tied head: out[N,V] = inp @ wte^T
    inp2 = randf(g, N, C).requires_grad_()
    wte = randf(g, V, C, scale=0.5).requires_grad_()
    out2 = inp2 @ wte.t()
    dout2 = randf(g, N, V)
    out2.backward(dout2)
    for k, t in dict(t_inp=inp2, t_w=wte, t_out=out2, t_dout=dout2, t_dinp=inp2.grad,
                     t_dw=wte.grad, t_dinp_init=randf(g, N, C), t_dw_init=randf(g, V, C)).items():
        put("matmul", k, t)


def attention(g, case, B, T, C, NH):
    hs = C // NH
    qkv = randf(g, B, T, 3 * C).requires_grad_()
    q, k, v = qkv.split(C, dim=2)
    q = q.view(B, T, NH, hs).transpose(1, 2)
    k = k.view(B, T, NH, hs).transpose(1, 2)
    v = v.view(B, T, NH, hs).transpose(1, 2)
    att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
    att = att.masked_fill(~mask, float("-inf"))
    att = F.softmax(att, dim=-1)
    y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
    dout = randf(g, B, T, C)
    y.backward(dout)
    meta(case, B=B, T=T, C=C, NH=NH)
    for key, t in dict(qkv=qkv, out=y, att=att, dout=dout, dqkv=qkv.grad).items():
        put(case, key, t)


def gelu(g):
    n = 45
    x = randf(g, n, scale=2.5)
    x[0], x[1], x[2], x[3], x[4], x[5] = 0.0, 1e-3, -1e-3, 30.0, -30.0, -9.0
    x = x.requires_grad_()
    out = F.gelu(x, approximate="tanh")
    dout = randf(g, n)
    out.backward(dout)
    meta("gelu", n=n)
    for k, t in dict(inp=x, out=out, dout=dout, dinp=x.grad).items():
        put("gelu", k, t)


def residual(g):
    n = 45
    a = randf(g, n)
    b = randf(g, n)
    meta("residual", n=n)
    for k, t in dict(a=a, b=b, out=a + b, dout=randf(g, n), da_init=randf(g, n),
                     db_init=randf(g, n)).items():
        put("residual", k, t)


def crossentropy(g, case, N, V):
    logits = randf(g, N, V, scale=3.0)
    logits[1] += 1000.0  # a row far from 0: only a max-subtracting softmax survives this in fp32
    logits[2, 3] = 60.0  # one dominant class
    logits = logits.requires_grad_()
    targets = torch.randint(0, V, (N,), generator=g, dtype=torch.int64)
    targets[2] = 3
    losses = F.cross_entropy(logits, targets, reduction="none")
    dscale = 1.0 / N
    (losses.sum() * dscale).backward()
    meta(case, N=N, V=V)
    for k, t in dict(logits=logits, targets=targets, losses=losses, dlogits=logits.grad).items():
        put(case, k, t)


def adam(g, case, decoupled, grad_scale, n=45, steps=5):
    # hyper-parameters that are exact float32 values, so Python's doubles equal the C floats
    f32 = lambda x: float(torch.tensor(x, dtype=torch.float32))
    lr, b1, b2, eps, wd = f32(1e-2), f32(0.9), f32(0.999), f32(1e-8), f32(0.1)
    p0 = randf(g, n).to(torch.float32)
    grads = [randf(g, n).to(torch.float32) for _ in range(steps)]
    p = p0.clone().requires_grad_()
    cls = torch.optim.AdamW if decoupled else torch.optim.Adam
    opt = cls([p], lr=lr, betas=(b1, b2), eps=eps, weight_decay=wd, foreach=False)
    for s in range(steps):
        p.grad = grads[s] * grad_scale  # PyTorch-side loss scaling: scale the grads first
        opt.step()
    st = opt.state[p]
    meta(case, n=n, steps=steps, decoupled=decoupled)
    put(case, "hyper", torch.tensor([lr, b1, b2, eps, wd, grad_scale], dtype=torch.float64))
    put(case, "p0", p0)
    put(case, "grads", torch.stack(grads))
    put(case, "p", p)
    put(case, "m", st["exp_avg"])
    put(case, "v", st["exp_avg_sq"])


def sumsq(g):
    n = 1037
    x = randf(g, n, scale=3.0)
    meta("sumsq", n=n)
    put("sumsq", "x", x)
    put("sumsq", "sumsq", (x * x).sum().reshape(1))


def convert():
    """fp32 -> bf16/fp16 (round to nearest even) and back, against torch's own conversions:
    specials, exact ties of both formats, subnormals, overflow, random values at many scales
    and random bit patterns; and every 16-bit pattern widened"""
    g = torch.Generator().manual_seed(77)
    sp = [0.0, -0.0, float("inf"), -float("inf"), float("nan"), 3.4028234663852886e38,
          1.1754943508222875e-38, 1.401298464324817e-45, 65504.0, 65519.99, 65520.0, -65520.0,
          65536.0, 2.0 ** -14, 2.0 ** -24, 2.0 ** -25, -(2.0 ** -25), 2.0 ** -25 * 1.0001,
          3 * 2.0 ** -26, 2.0 ** -14 - 2.0 ** -25, 2.0 ** -14 - 2.0 ** -26, 1.0, -1.0,
          1.0 + 2.0 ** -8, 1.0 + 3 * 2.0 ** -8, 1.0 + 2.0 ** -11, 1.0 + 3 * 2.0 ** -11]
    xs = [torch.tensor(sp, dtype=torch.float32)]
    # exact ties: the midpoint of two neighbours of each format (even and odd low bits)
    b = torch.randint(0, 0x7F80, (4000,), generator=g, dtype=torch.int32)
    xs.append(((b << 16) | 0x8000).view(torch.float32))
    h = torch.randint(0, 0x7BFF, (4000,), generator=g, dtype=torch.int16)
    lo = h.view(torch.float16).to(torch.float32)
    hi = (h + 1).view(torch.float16).to(torch.float32)
    xs.append((lo + hi) / 2)  # exact in fp32 (one more bit than the half's mantissa)
    for scale in (1e-9, 1e-7, 1e-5, 1e-3, 1.0, 1e3, 3e4, 1e5, 1e30):
        xs.append(torch.randn(2000, generator=g, dtype=torch.float32) * scale)
    bits = torch.randint(-2 ** 31, 2 ** 31 - 1, (20000,), generator=g, dtype=torch.int64)
    xs.append(bits.to(torch.int32).view(torch.float32))
    x = torch.cat(xs)
    x = torch.cat([x, -x])
    meta("convert", n=x.numel())
    put("convert", "x", x.to(torch.float64))
    put("convert", "bf16", x.to(torch.bfloat16).view(torch.int16).to(torch.int32) & 0xFFFF)
    put("convert", "f16", x.to(torch.float16).view(torch.int16).to(torch.int32) & 0xFFFF)
    every = torch.arange(0, 65536, dtype=torch.int32).to(torch.int16)
    put("convert", "bf16_wide", every.view(torch.bfloat16).to(torch.float64))
    put("convert", "f16_wide", every.view(torch.float16).to(torch.float64))


def main():
    global OUT
    if len(sys.argv) != 2:
        sys.exit("usage: kernels_ref.py OUTDIR")
    OUT = sys.argv[1]
    os.makedirs(OUT, exist_ok=True)
    done = os.path.join(OUT, "DONE")
    if os.path.exists(done):
        os.remove(done)  # written again only after every reference succeeded
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(1234)
    encoder(g)
    layernorm(g, "layernorm", 10, 8)
    layernorm(g, "layernorm_c37", 3, 37)
    matmul(g)
    attention(g, "attention", 2, 5, 8, 2)
    attention(g, "attention_t130", 1, 130, 8, 2)  # three causal row blocks of 64
    gelu(g)
    residual(g)
    crossentropy(g, "crossentropy", 10, 11)
    crossentropy(g, "crossentropy_v50", 4, 50)
    adam(g, "adamw", 1, 1.0)
    adam(g, "adamw_scaled", 1, 0.3)
    adam(g, "adam_l2", 0, 1.0)
    adam(g, "adam_l2_scaled", 0, 0.5)
    sumsq(g)
    convert()
    with open(os.path.join(OUT, "DONE"), "w") as f:
        f.write(f"torch {torch.__version__}\n")
    print(f"kernels_ref: wrote references to {OUT} (torch {torch.__version__})")


if __name__ == "__main__":
    main()
