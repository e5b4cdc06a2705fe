#!/usr/bin/env python3
"""tests/faults/test_loading.py: --init-from loads strictly (DeepSpeed's load_module_strict).

Cases:
  - a full weights file loads, and so does one holding what Hugging Face GPT-2 files hold besides
    the parameters (each layer's attn.bias / attn.masked_bias buffers, lm_head.weight equal to
    transformer.wte.weight): exit 0, nothing on stderr;
  - a NaN or Inf weight (F32, BF16 and F16 tensors) is an error naming the tensor and the index
    of the first one; so it is for zt-ckpt import;
  - tensors of a layer the model does not have, an unknown tensor name, and an lm_head.weight
    that differs from wte (the model ties them) are an error naming how many and the first;
  - --init-from-relaxed loads such a file (exit 0) with one warning line listing what it
    ignored; a NaN weight stays an error; --init-from-relaxed without --init-from is a usage
    error (exit 2);
  - a file of 200,000 tensors (a name lookup in quadratic time would take hours) is refused in
    strict mode and loaded in relaxed mode, each within the timeout (3 minutes: enough for a
    linear lookup on a loaded machine, far too short for a quadratic one); under the
    sanitizers (ZT_TEST_SANITIZED=1) 20,000, which check the same code's memory.

Usage: test_loading.py APPS_DIR MPIEXEC WORKDIR
"""
import json
import struct

import faultlib as F

F.setup()
ZT = F.prog("zt-train")
base = F.tiny_run()  # V 64, T 8, C 16, 1 layer
V, T, C = 64, 8, 16
LAYER = [("ln_1.weight", [C]), ("ln_1.bias", [C]), ("attn.c_attn.weight", [C, 3 * C]),
         ("attn.c_attn.bias", [3 * C]), ("attn.c_proj.weight", [C, C]), ("attn.c_proj.bias", [C]),
         ("ln_2.weight", [C]), ("ln_2.bias", [C]), ("mlp.c_fc.weight", [C, 4 * C]),
         ("mlp.c_fc.bias", [4 * C]), ("mlp.c_proj.weight", [4 * C, C]), ("mlp.c_proj.bias", [C])]


def numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def model_tensors(layers=1):
    """name -> (shape, values) of a GPT-2 with `layers` layers (small finite values)"""
    shapes = [("transformer.wte.weight", [V, C]), ("transformer.wpe.weight", [T, C])]
    shapes += [("transformer.h.%d.%s" % (l, s), shp) for l in range(layers) for s, shp in LAYER]
    shapes += [("transformer.ln_f.weight", [C]), ("transformer.ln_f.bias", [C])]
    return {n: (shp, [((i * 7 + k) % 13 - 6) * 0.01 for i in range(numel(shp))])
            for k, (n, shp) in enumerate(shapes)}


def f16_bits(x):
    return struct.unpack("<H", struct.pack("<e", x))[0]


def bf16_bits(x):
    return struct.unpack("<I", struct.pack("<f", x))[0] >> 16  # inf/nan/small values: exact


def encode(dtype, values):
    if dtype == "F32":
        return struct.pack("<%df" % len(values), *values)
    bits = [f16_bits(v) if dtype == "F16" else bf16_bits(v) for v in values]
    return struct.pack("<%dH" % len(bits), *bits)


def write_st(name, tensors, dtypes=None):
    """a safetensors file of name -> (shape, values); dtypes: name -> F32 (default)/BF16/F16"""
    header, blobs, at = {}, [], 0
    for n, (shp, vals) in tensors.items():
        dt = (dtypes or {}).get(n, "F32")
        b = encode(dt, vals)
        header[n] = {"dtype": dt, "shape": shp, "data_offsets": [at, at + len(b)]}
        blobs.append(b)
        at += len(b)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(F.path(name), "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
    return F.path(name)


def with_value(tensors, name, index, value):
    t = dict(tensors)
    shp, vals = t[name]
    vals = list(vals)
    vals[index] = value
    t[name] = (shp, vals)
    return t


def init(path, relaxed=False):
    return base + ["--init-from", path] + (["--init-from-relaxed"] if relaxed else [])


good = model_tensors()
p = F.run([ZT] + init(write_st("good.safetensors", good)))
F.check("full weights load", p is not None and p.returncode == 0 and p.stderr.strip() == "",
        "exit %s, stderr %r" % ((p.returncode, p.stderr[-300:]) if p else ("hang", "")))

# what Hugging Face GPT-2 files hold besides the parameters is accepted in strict mode
hf = dict(good)
hf["transformer.h.0.attn.bias"] = ([1, 1, T, T], [float(c <= r) for r in range(T)
                                                  for c in range(T)])
hf["transformer.h.0.attn.masked_bias"] = ([], [-1e4])
hf["lm_head.weight"] = good["transformer.wte.weight"]
p = F.run([ZT] + init(write_st("hf.safetensors", hf)))
F.check("HF extras (attn.bias, attn.masked_bias, tied lm_head) accepted",
        p is not None and p.returncode == 0 and p.stderr.strip() == "",
        "exit %s, stderr %r" % ((p.returncode, p.stderr[-300:]) if p else ("hang", "")))

# non-finite weights, in each source dtype
fc = "transformer.h.0.mlp.c_fc.weight"
nan = float("nan")
for dt, value, what, at in (("F32", nan, "NaN", 1000), ("F32", float("inf"), "Inf", 3),
                            ("BF16", nan, "NaN", 17), ("BF16", float("-inf"), "-Inf", 0),
                            ("F16", nan, "NaN", 1023), ("F16", float("inf"), "Inf", 512)):
    f = write_st("nonfinite_%s_%d.safetensors" % (dt, at), with_value(good, fc, at, value),
                 {fc: dt})
    F.expect("%s %s weight" % (dt, what), [ZT] + init(f), 1,
             ["safetensors", f, "'%s' has %s at index %d" % (fc, what, at)])
wte_nan = write_st("wte_nan.safetensors", with_value(good, "transformer.wte.weight", 5, nan))
F.expect("NaN in wte", [ZT] + init(wte_nan), 1, ["'transformer.wte.weight' has NaN at index 5"])
F.expect("NaN weight under --init-from-relaxed", [ZT] + init(wte_nan, relaxed=True), 1,
         ["'transformer.wte.weight' has NaN at index 5"])
F.expect("zt-ckpt import of a NaN weight",
         [F.prog("zt-ckpt"), "import", "--safetensors", wte_nan, "--out", F.path("imported")], 1,
         ["'transformer.wte.weight' has NaN at index 5"], prefix="zt-ckpt: error: ")

# tensors the model does not have
two = model_tensors(layers=6)
extra = {n: v for n, v in two.items() if not n.startswith("transformer.h.") or
         n.startswith("transformer.h.0.") or n.startswith("transformer.h.5.")}
f = write_st("layer5.safetensors", extra)
F.expect("tensors of a layer the model does not have", [ZT] + init(f), 1,
         [f, "12 tensor(s) the model does not have", "first 'transformer.h.5.ln_1.weight'",
          "(n_layer is 1)", "--init-from-relaxed"])
p = F.expect("--init-from-relaxed loads it, warning", [ZT] + init(f, relaxed=True), 0,
             [f, "ignored 12 tensor(s)", "'transformer.h.5.ln_1.weight'"],
             prefix="zerotask: warning: ")
f = write_st("unknown.safetensors", dict(good, **{"decoder.extra": ([4], [0.0] * 4)}))
F.expect("an unknown tensor name", [ZT] + init(f), 1,
         [f, "1 tensor(s) the model does not have, first 'decoder.extra'"])
f = write_st("hf_layer3.safetensors", dict(hf, **{"transformer.h.3.attn.bias": ([1], [1.0])}))
F.expect("a mask buffer of a layer the model does not have", [ZT] + init(f), 1,
         ["first 'transformer.h.3.attn.bias' (n_layer is 1)"])
f = write_st("untied.safetensors", with_value(hf, "lm_head.weight", 0, 0.5))
F.expect("lm_head.weight differing from wte", [ZT] + init(f), 1,
         ["first 'lm_head.weight'", "ties it to transformer.wte.weight"])
MANY = 20000 if F.SANITIZED else 200000
many = dict(good, **{"junk.%06d" % i: ([1], [0.0]) for i in range(MANY)})
f = write_st("many.safetensors", many)
F.expect("%d tensors, strict" % MANY, [ZT] + init(f), 1,
         [f, "%d tensor(s) the model does not have" % MANY, "first 'junk.000000'"], timeout=180)
F.expect("%d tensors, relaxed" % MANY, [ZT] + init(f, relaxed=True), 0,
         [f, "ignored %d tensor(s)" % MANY], prefix="zerotask: warning: ", timeout=180)
F.expect("--init-from-relaxed without --init-from", [ZT] + base + ["--init-from-relaxed"], 2,
         ["--init-from-relaxed", "needs --init-from"])
F.finish()
