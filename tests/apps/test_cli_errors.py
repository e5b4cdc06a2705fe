#!/usr/bin/env python3
"""tests/apps/test_cli_errors.py: every bad input to zt-train gives exactly one clear error line
naming the thing and what was expected, the documented exit code, no crash, and no output file
left behind.

Usage: test_cli_errors.py ZT_TRAIN_BINARY WORKDIR
"""
import json
import os
import re
import struct
import subprocess
import sys

ZT, WORK = sys.argv[1], sys.argv[2]
os.makedirs(WORK, exist_ok=True)
failures = []


def path(name):
    return os.path.join(WORK, name)


def write(name, text):
    with open(path(name), "w") as f:
        f.write(text)
    return path(name)


def tokens(name, toks, magic=20240520, version=1, count=None, truncate=None):
    hdr = [0] * 256
    hdr[0], hdr[1], hdr[2] = magic, version, len(toks) if count is None else count
    blob = struct.pack("<256i", *hdr) + struct.pack("<%dH" % len(toks), *toks)
    if truncate is not None:
        blob = blob[:truncate]
    with open(path(name), "wb") as f:
        f.write(blob)
    return path(name)


def safetensors(name, tensors, header_override=None):
    """tensors: {name: (shape, list of floats)} written as F32."""
    hdr, data = {}, b""
    for k, (shape, vals) in tensors.items():
        b = struct.pack("<%df" % len(vals), *vals)
        hdr[k] = {"dtype": "F32", "shape": shape, "data_offsets": [len(data), len(data) + len(b)]}
        data += b
    h = header_override if header_override is not None else json.dumps(hdr).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path(name), "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + data)
    return path(name)


MODEL = {"vocab_size": 16, "seq_len": 4, "n_embd": 8, "n_layer": 1, "n_head": 2}
DS = {"train_batch_size": 2, "train_micro_batch_size_per_gpu": 2,
      "optimizer": {"type": "AdamW", "params": {"lr": 0.001}}}
model = write("model.json", json.dumps(MODEL))
ds = write("ds.json", json.dumps(DS))
data = tokens("ok.bin", [i % 16 for i in range(200)])


def full_weights(skip=None, bad_shape=None):
    C, V, T = MODEL["n_embd"], MODEL["vocab_size"], MODEL["seq_len"]
    shapes = {"transformer.wte.weight": [V, C], "transformer.wpe.weight": [T, C],
              "transformer.ln_f.weight": [C], "transformer.ln_f.bias": [C]}
    for suf, shp in [("ln_1.weight", [C]), ("ln_1.bias", [C]), ("attn.c_attn.weight", [C, 3 * C]),
                     ("attn.c_attn.bias", [3 * C]), ("attn.c_proj.weight", [C, C]),
                     ("attn.c_proj.bias", [C]), ("ln_2.weight", [C]), ("ln_2.bias", [C]),
                     ("mlp.c_fc.weight", [C, 4 * C]), ("mlp.c_fc.bias", [4 * C]),
                     ("mlp.c_proj.weight", [4 * C, C]), ("mlp.c_proj.bias", [C])]:
        shapes["transformer.h.0." + suf] = shp
    out = {}
    for k, shp in shapes.items():
        if k == skip:
            continue
        if k == bad_shape:
            shp = [shp[0] + 1] + shp[1:]
        n = 1
        for d in shp:
            n *= d
        out[k] = (shp, [0.01] * n)
    return out


passed = 0


def case(label, args, code, pattern, outputs=(), env=None):
    global passed
    for o in outputs:
        if os.path.exists(o):
            os.unlink(o)
    try:
        p = subprocess.run([ZT] + args, capture_output=True, text=True, timeout=120,
                           env=dict(os.environ, **(env or {})))
    except subprocess.TimeoutExpired:
        failures.append("%s: timed out (hang)" % label)
        return
    err = [l for l in p.stderr.splitlines() if l.startswith("zerotask: error:")]
    problems = []
    if p.returncode != code:
        problems.append("exit %d, want %d" % (p.returncode, code))
    if len(err) != 1:
        problems.append("%d error lines, want 1" % len(err))
    elif not re.search(pattern, err[0]):
        problems.append("message %r does not match %r" % (err[0], pattern))
    for o in outputs:
        if os.path.exists(o):
            problems.append("left output file %s" % o)
    for o in os.listdir(WORK):
        if ".tmp" in o:
            problems.append("left temporary %s" % o)
    if problems:
        failures.append("%s: %s\n  stderr: %s" % (label, "; ".join(problems), p.stderr.strip()[:500]))
    else:
        passed += 1
        print("ok   %-28s %s" % (label, err[0]))


base = ["--ds-config", ds, "--model", model, "--data", data, "--steps", "1"]
outs = [path("out.safetensors"), path("log.jsonl")]
withouts = base + ["--export", outs[0], "--log", outs[1]]


def ds_case(label, text, pattern):
    f = write("ds_%s.json" % label, text)
    case("config " + label, ["--ds-config", f, "--model", model, "--data", data, "--export", outs[0],
                             "--log", outs[1]], 2, pattern, outs)


# ---- command line ----
case("no arguments", [], 2, r"missing --ds-config")
case("unknown option", base + ["--bogus"], 2, r"unknown option '--bogus'")
case("steps not a number", base[:-2] + ["--steps", "abc"], 2, r"--steps abc")
case("option without value", base + ["--export"], 2, r"--export needs a value")
# ---- DeepSpeed config ----
case("config missing", ["--ds-config", path("nope.json"), "--model", model, "--data", data], 2,
     r"nope\.json")
ds_case("unknown_key", json.dumps(dict(DS, train_batch_sizee=2)), r"train_batch_sizee.*did you mean")
ds_case("pipeline_world", json.dumps(dict(DS, pipeline={"stages": 2})),
        r"ds_pipeline_world\.json: pipeline\.stages: 2 does not divide the world size 1")
ds_case("pipeline_stages", json.dumps(dict(DS, pipeline={"stages": 1, "seed_layers": True})),
        r"pipeline\.seed_layers: true is not implemented")
ds_case("not_implemented", json.dumps(dict(DS, fp16={"enabled": True, "auto_cast": True})),
        r"fp16\.auto_cast.*not implement")
ds_case("duplicate", '{"train_batch_size": 2, "train_batch_size": 2}', r"train_batch_size.*(duplicate|twice|more than once)")
ds_case("wrong_type", json.dumps(dict(DS, optimizer={"type": "AdamW", "params": {"lr": "x"}})),
        r"optimizer\.params\.lr")
ds_case("out_of_range", json.dumps(dict(DS, optimizer={"type": "AdamW", "params": {"betas": [1.5, 0.9]}})),
        r"betas")
ds_case("empty", "", r"empty")
ds_case("not_object", "[1, 2]", r"object")
ds_case("syntax", '{"train_batch_size": 2,', r"ds_syntax\.json")
ds_case("batch_mismatch", json.dumps(dict(DS, gradient_accumulation_steps=3)), r"train_batch_size")
# ---- model shape ----
m2 = write("model_missing.json", json.dumps({k: v for k, v in MODEL.items() if k != "n_head"}))
case("model missing key", ["--ds-config", ds, "--model", m2, "--data", data], 2, r"n_head")
m3 = write("model_heads.json", json.dumps(dict(MODEL, n_head=3)))
case("model heads", ["--ds-config", ds, "--model", m3, "--data", data], 2, r"n_head|n_embd")
# ---- data ----
case("data missing", base[:4] + ["--data", path("none.bin")], 1, r"none\.bin", outs)
case("data truncated header", base[:4] + ["--data", tokens("trunc.bin", [1, 2, 3], truncate=100)],
     1, r"trunc\.bin", outs)
case("data wrong magic", base[:4] + ["--data", tokens("magic.bin", [1, 2, 3], magic=12345)], 1,
     r"magic\.bin.*magic", outs)
case("data count mismatch", base[:4] + ["--data", tokens("count.bin", [1, 2, 3], count=10)], 1,
     r"count\.bin", outs)
case("data token >= vocab", base[:4] + ["--data", tokens("vocab.bin", [1, 2, 99, 3])], 1,
     r"vocab\.bin.*99", outs)
# ---- weights ----
case("init missing file", withouts + ["--init-from", path("none.safetensors")], 1,
     r"none\.safetensors", outs)
bad = safetensors("badhdr.safetensors", {}, header_override=b"{not json")
case("init bad header", withouts + ["--init-from", bad], 1, r"badhdr\.safetensors", outs)
miss = safetensors("miss.safetensors", full_weights(skip="transformer.h.0.mlp.c_fc.bias"))
case("init missing tensor", withouts + ["--init-from", miss], 1,
     r"miss\.safetensors.*transformer\.h\.0\.mlp\.c_fc\.bias", outs)
shp = safetensors("shape.safetensors", full_weights(bad_shape="transformer.h.0.attn.c_attn.weight"))
case("init wrong shape", withouts + ["--init-from", shp], 1,
     r"shape\.safetensors.*transformer\.h\.0\.attn\.c_attn\.weight", outs)
# ---- resources ----
huge = write("huge.json", json.dumps({"vocab_size": 50257, "seq_len": 1024, "n_embd": 12288,
                                       "n_layer": 96, "n_head": 96}))
case("model too large", ["--ds-config", ds, "--model", huge, "--data", data, "--export", outs[0]],
     1, r"GiB", outs)
case("export dir missing", base + ["--export", path("no/such/dir/w.safetensors")], 1,
     r"no/such/dir")
case("misspelled STARPU_SCHED", base, 2, r"STARPU_SCHED=dmdaa.*expected one of", env={"STARPU_SCHED": "dmdaa"})
case("bad ZT knob", base, 2, r"ZT_GRAPH_CHUNKS=zero", env={"ZT_GRAPH_CHUNKS": "zero"})

if failures:
    print("\n".join("FAIL " + f for f in failures), file=sys.stderr)
    print("%d passed, %d failed" % (passed, len(failures)))
    sys.exit(1)
print("%d passed, 0 failed" % passed)
