#!/usr/bin/env python3
"""tests/faults/test_generate.py: zt-generate refuses bad input in one line, writing nothing.

Inputs come from a tiny model (vocabulary 2048, context 16) trained one step and exported, the
project's BPE fixture (tests/data/tokenizer, 2000 tokens) and a second model of another width.
Controls first: the good command lines exit 0 (so each refusal below is the fault's own).
Cases (each asserts the exit code and exactly one "zerotask: error:" line naming the thing):
  - exit 2, the command line: an unknown option, a missing value, --model missing, no prompt
    or two prompt sources, --weights with --checkpoint, --prompt without --tokenizer, a negative
    or non-numeric --temperature, --top-p outside (0, 1], a negative --top-k, --max-new-tokens 0
    or negative, --max-batch 0, --repetition-penalty 0, a non-numeric --seed, --prompt-ids that
    are not a list of ids; a model shape file without n_head or missing; a --ds-config dtype
    that is not fp32/bf16/fp16, a --ds-config with text after its object, DeepSpeed keys
    taken but unused with the wrong type (pin_memory "yes", buffer_size -5, aio.single_submit 1);
  - exit 2, the prompts: an id >= vocab_size, an empty --prompt-ids or --prompt, a prompt
    longer than the context (ids and text); a prompts file line that is not JSON, not an
    object, two objects, has an empty, non-integer, negative or out-of-vocabulary prompt_ids, a
    "prompt" without --tokenizer, neither key, a wrong type or value of max_new_tokens,
    temperature, top_k, top_p or seed (seed 1.5 too) (each naming FILE:LINE, blank lines
    counted), a file with no prompt;
  - exit 1, the files: a tokenizer directory missing, a tokenizer.json that is not JSON or
    lacks model.merges, a vocab.json without merges.txt, a merges.txt with a bad line; weights
    missing, not safetensors, truncated, with an integer dtype, of another n_embd, n_layer or
    vocab_size, without one tensor (named); a checkpoint directory or tag missing, or written
    for another model (zt-train --save-dir on another width); the prompts file missing or a
    directory; --logits into a directory that does not exist;
  - --logits onto the --weights file: exit 2, the weights untouched;
  - no output is left: --logits OUT names a file that must not exist after any refusal;
  - --trace FILE that cannot be written, checked before any work: FILE in a directory that does
    not exist, FILE an existing directory, FILE in a read-only directory (skipped where this
    user may write there anyway: root): exit 1 (a file-system error, as docs/inference.md has
    it, not 2: the command line itself is well formed), the one line naming --trace, FILE and
    what was expected (so no stack trace), and no .json or .ztr file written;
  - --trace run.json (a path relative to the working folder) on a tiny run: exit 0, run.json
    (JSON) and run.ztr written, zt-trace summary run.ztr exits 0, and the trace names the
    policy: prio (the inference engine's default) unless STARPU_SCHED chose one.

Usage: test_generate.py APPS_DIR MPIEXEC WORKDIR
"""
import hashlib
import json
import os
import shutil
import struct
import sys

import faultlib as F

F.setup()
GEN, ZT = F.prog("zt-generate"), F.prog("zt-train")
HERE = os.path.dirname(os.path.abspath(__file__))
TOKENIZER = os.path.join(HERE, "..", "data", "tokenizer")
V, T = 2048, 16
OUT = F.path("logits.safetensors")  # no refusal may leave it


def export(name, shape, save_dir=None):
    """a model shape file and the weights of one training step of it (zt-train --export)"""
    model = F.write_json(name + ".json", shape)
    ds = F.write_json("ds.json", {"train_batch_size": 2,
                                  "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}})
    data = F.write_tokens("tokens.bin", [(i * 7) % 64 for i in range(400)])
    out = F.path(name + ".safetensors")
    extra = ["--save-dir", save_dir] if save_dir else []
    p = F.run([ZT, "--ds-config", ds, "--model", model, "--data", data, "--steps", "1",
               "--quiet", "--export", out] + extra, 120)
    if not F.check("make " + name, p is not None and p.returncode == 0,
                   "zt-train exit %s" % (p.returncode if p else "(hang)")):
        F.finish()
    return model, out


SHAPE = {"vocab_size": V, "seq_len": T, "n_embd": 16, "n_layer": 1, "n_head": 2}
MODEL, WEIGHTS = export("model", SHAPE, save_dir=F.path("ckpt"))
_, WIDE = export("wide", dict(SHAPE, n_embd=32), save_dir=F.path("wide_ckpt"))
_, DEEP = export("deep", dict(SHAPE, n_layer=2))
_, SMALLV = export("smallv", dict(SHAPE, vocab_size=V // 2))
BASE = [GEN, "--model", MODEL, "--weights", WEIGHTS, "--max-new-tokens", "4", "--quiet"]
IDS = ["--prompt-ids", "1,2,3"]


def cmd(*args, base=BASE, logits=True):
    return list(base) + list(args) + (["--logits", OUT] if logits else [])


def expect(label, args, code, words, **kw):
    """F.expect, then: nothing left at OUT"""
    F.expect(label, args, code, words, **kw)
    if os.path.exists(OUT):
        F.check(label + ": no output", False, "%s was left" % OUT)
        os.remove(OUT)


def prompts(name, *lines):
    """a prompts file of raw lines"""
    p = F.path(name)
    with open(p, "w") as f:
        f.write("".join(l + "\n" for l in lines))
    return p


def controls():
    """the good command lines the cases bend: each exits 0"""
    good = prompts("good.jsonl", '{"prompt_ids": [1, 2]}', "", '{"prompt": "hi", "seed": 3}')
    for label, args in (("--prompt-ids", cmd(*IDS)),
                        ("--prompt --tokenizer", cmd("--prompt", "hi", "--tokenizer", TOKENIZER)),
                        ("--prompts", cmd("--prompts", good, "--tokenizer", TOKENIZER)),
                        ("--checkpoint", cmd(*IDS, base=[GEN, "--model", MODEL, "--checkpoint",
                                                         F.path("ckpt"), "--quiet"]))):
        p = F.run(args, 120)
        F.check("control " + label, p is not None and p.returncode == 0,
                "exit %s %s" % (p.returncode if p else "(hang)",
                                F.error_lines(p)[:1] if p else ""))
        if os.path.exists(OUT):
            os.remove(OUT)


def command_line():
    ds_bad = F.write_json("ds_fp8.json", {"dtype": "fp8"})
    ds_pin = F.write_json("ds_pin.json", {"zero_optimization": {"stage": 3, "offload_param": {
        "device": "cpu", "pin_memory": "yes"}}})
    ds_size = F.write_json("ds_size.json", {"zero_optimization": {"stage": 3, "offload_param": {
        "device": "cpu", "buffer_size": -5}}})
    ds_aio = F.write_json("ds_aio.json", {"aio": {"single_submit": 1}})
    ds_more = F.path("ds_more.json")
    with open(ds_more, "w") as f:
        f.write('{"dtype": "fp32"} {"dtype": "bf16"}\n')
    no_head = F.write_json("no_head.json", {k: v for k, v in SHAPE.items() if k != "n_head"})
    cases = [
        ("unknown option", cmd(*IDS, "--frobnicate"), ["--frobnicate"]),
        ("option without its value", cmd(*IDS, logits=False) + ["--max-new-tokens"],
         ["--max-new-tokens"]),
        ("no --model", [GEN, "--weights", WEIGHTS] + IDS, ["--model"]),
        ("no prompt", cmd(), ["--prompt"]),
        ("two prompt sources", cmd(*IDS, "--prompt", "hi", "--tokenizer", TOKENIZER),
         ["--prompt"]),
        ("--weights and --checkpoint", cmd(*IDS, "--checkpoint", F.path("ckpt")),
         ["--weights", "--checkpoint"]),
        ("--prompt without --tokenizer", cmd("--prompt", "hi"), ["--tokenizer"]),
        ("--temperature -1", cmd(*IDS, "--temperature", "-1"), ["--temperature", "-1"]),
        ("--temperature abc", cmd(*IDS, "--temperature", "abc"), ["--temperature", "abc"]),
        ("--top-p 0", cmd(*IDS, "--top-p", "0"), ["--top-p", "0"]),
        ("--top-p 1.5", cmd(*IDS, "--top-p", "1.5"), ["--top-p", "1.5"]),
        ("--top-k -1", cmd(*IDS, "--top-k", "-1"), ["--top-k", "-1"]),
        ("--max-new-tokens 0", cmd(*IDS, "--max-new-tokens", "0"), ["--max-new-tokens", "0"]),
        ("--max-new-tokens -3", cmd(*IDS, "--max-new-tokens", "-3"), ["--max-new-tokens", "-3"]),
        ("--max-batch 0", cmd(*IDS, "--max-batch", "0"), ["--max-batch", "0"]),
        ("--repetition-penalty 0", cmd(*IDS, "--repetition-penalty", "0"),
         ["--repetition-penalty"]),
        ("--seed abc", cmd(*IDS, "--seed", "abc"), ["--seed", "abc"]),
        ("--prompt-ids 1,,2", cmd("--prompt-ids", "1,,2"), ["--prompt-ids"]),
        ("--prompt-ids 1,x", cmd("--prompt-ids", "1,x"), ["--prompt-ids"]),
        ("--prompt-ids 3,-1", cmd("--prompt-ids", "3,-1"), ["-1", str(V)]),
        ("model without n_head", cmd(*IDS, "--model", no_head), ["n_head"]),
        ("model file missing", cmd(*IDS, "--model", F.path("nope.json")), ["nope.json"]),
        ("--ds-config dtype fp8", cmd(*IDS, "--ds-config", ds_bad), ["dtype", "fp8"]),
        ("--ds-config pin_memory \"yes\"", cmd(*IDS, "--ds-config", ds_pin),
         ["pin_memory", "true or false"]),
        ("--ds-config buffer_size -5", cmd(*IDS, "--ds-config", ds_size), ["buffer_size"]),
        ("--ds-config aio.single_submit 1", cmd(*IDS, "--ds-config", ds_aio),
         ["single_submit", "true or false"]),
        ("--ds-config with text after its object", cmd(*IDS, "--ds-config", ds_more),
         [ds_more, "one JSON object"]),
    ]
    for label, args, words in cases:
        expect(label, args, 2, words)


def bad_prompts():
    long_ids = ",".join(str(i + 1) for i in range(T + 1))
    expect("id >= vocab_size", cmd("--prompt-ids", "1,5000,2"), 2, ["5000", str(V)])
    expect("id = vocab_size", cmd("--prompt-ids", "%d" % V), 2, [str(V)])
    expect("empty --prompt-ids", cmd("--prompt-ids", ""), 2, ["prompt"])
    expect("empty --prompt", cmd("--prompt", "", "--tokenizer", TOKENIZER), 2, ["prompt"])
    expect("prompt longer than the context", cmd("--prompt-ids", long_ids), 2,
           [str(T + 1), str(T)])
    expect("text longer than the context",
           cmd("--prompt", " ".join("w%d" % i for i in range(T)), "--tokenizer", TOKENIZER), 2,
           [str(T)])
    good = '{"prompt_ids": [1, 2, 3]}'
    lines = [
        ("not JSON", '{"prompt_ids": [1, 2'), ("not an object", "[1, 2, 3]"),
        ("two objects", '{"prompt_ids": [1]} {"prompt_ids": [2]}'),
        ("a number", "5"), ("empty prompt_ids", '{"prompt_ids": []}'),
        ("prompt_ids not integers", '{"prompt_ids": [1, "a"]}'),
        ("prompt_ids 1.5", '{"prompt_ids": [1.5]}'),
        ("negative prompt_ids", '{"prompt_ids": [1, -1]}'),
        ("prompt_ids >= vocab_size", '{"prompt_ids": [1, 5000]}'),
        ("prompt_ids longer than the context", json.dumps({"prompt_ids": list(range(T + 1))})),
        ("neither prompt nor prompt_ids", '{"text": "hi"}'),
        ("max_new_tokens a string", '{"prompt_ids": [1], "max_new_tokens": "ten"}'),
        ("max_new_tokens 0", '{"prompt_ids": [1], "max_new_tokens": 0}'),
        ("temperature -1", '{"prompt_ids": [1], "temperature": -1}'),
        ("top_k -2", '{"prompt_ids": [1], "top_k": -2}'),
        ("top_p 1.5", '{"prompt_ids": [1], "top_p": 1.5}'),
        ("seed a string", '{"prompt_ids": [1], "seed": "x"}'),
        ("seed 1.5", '{"prompt_ids": [1], "seed": 1.5}'),
    ]
    for k, (label, line) in enumerate(lines):
        f = prompts("bad%d.jsonl" % k, good, "", line, good)
        word = [w for w in ("max_new_tokens", "temperature", "top_k", "top_p", "seed")
                if w in line]
        expect("prompts line: " + label, cmd("--prompts", f), 2, ["%s:3" % f] + word)
    f = prompts("text_no_tok.jsonl", good, '{"prompt": "hi"}')
    expect("prompts line: prompt without --tokenizer", cmd("--prompts", f), 2,
           ["%s:2" % f, "tokenizer"])
    f = prompts("empty_text.jsonl", good, '{"prompt": ""}')
    expect("prompts line: empty prompt", cmd("--prompts", f, "--tokenizer", TOKENIZER), 2,
           ["%s:2" % f])
    f = prompts("no_prompts.jsonl", "", "")
    expect("prompts file without a prompt", cmd("--prompts", f), 2, [f])
    f = prompts("nul.jsonl", good, '{"prompt": "before\\u0000after"}')
    expect("prompts line: a text holding \\u0000 (cJSON would cut it there)",
           cmd("--prompts", f, "--tokenizer", TOKENIZER), 2, ["%s:2" % f, "u0000"])


def bad_tokenizers():
    def tok_dir(name, files):
        d = F.path(name)
        os.makedirs(d)
        for fn, text in files.items():
            with open(os.path.join(d, fn), "w", encoding="utf-8") as f:
                f.write(text)
        return d

    with open(os.path.join(TOKENIZER, "tokenizer.json"), encoding="utf-8") as f:
        tj = json.load(f)
    no_merges = dict(tj, model={k: v for k, v in tj["model"].items() if k != "merges"})
    with open(os.path.join(TOKENIZER, "vocab.json"), encoding="utf-8") as f:
        vocab = f.read()
    with open(os.path.join(TOKENIZER, "merges.txt"), encoding="utf-8") as f:
        merges = f.read()
    cases = [
        ("tokenizer directory missing", F.path("no_tok"), ["no_tok"]),
        ("tokenizer.json not JSON", tok_dir("tok_json", {"tokenizer.json": '{"model": {"vo'}),
         ["tok_json"]),
        ("tokenizer.json without merges",
         tok_dir("tok_nomerges", {"tokenizer.json": json.dumps(no_merges)}), ["merges"]),
        ("vocab.json without merges.txt", tok_dir("tok_vocab_only", {"vocab.json": vocab}),
         ["tok_vocab_only"]),
        ("vocab.json not JSON", tok_dir("tok_badvocab", {"vocab.json": "{\"a\": ",
                                                         "merges.txt": merges}), ["vocab.json"]),
        ("merges.txt bad line", tok_dir("tok_badmerge", {"vocab.json": vocab, "merges.txt":
                                                         "#version: 0.2\nt h\nonlyone\n"}),
         ["merges"]),
    ]
    for label, d, words in cases:
        expect(label, cmd("--prompt", "hi", "--tokenizer", d), 1, words)


def damaged(name, edit):
    """a copy of WEIGHTS changed by edit(header dict, data bytes) -> (header, data)"""
    with open(WEIGHTS, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    hdr, data = json.loads(raw[8:8 + n]), raw[8 + n:]
    hdr, data = edit(hdr, data)
    h = json.dumps(hdr).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    p = F.path(name)
    with open(p, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + data)
    return p


def bad_weights():
    gone = "transformer.h.0.mlp.c_fc.bias"

    def drop(hdr, data):
        """the tensor and its bytes gone, the others' offsets moved down: a valid file"""
        b, e = hdr.pop(gone)["data_offsets"]
        for info in hdr.values():
            if isinstance(info, dict) and "data_offsets" in info and info["data_offsets"][0] >= e:
                info["data_offsets"] = [o - (e - b) for o in info["data_offsets"]]
        return hdr, data[:b] + data[e:]

    def as_int(hdr, data):
        hdr["transformer.wte.weight"]["dtype"] = "I32"
        return hdr, data

    junk = F.path("junk.safetensors")
    with open(junk, "wb") as f:
        f.write(b"this is not a safetensors file at all\n" * 4)
    with open(WEIGHTS, "rb") as f:
        raw = f.read()
    cut = F.path("truncated.safetensors")
    with open(cut, "wb") as f:
        f.write(raw[:len(raw) - 100])
    cases = [
        ("weights missing", F.path("nope.safetensors"), ["nope.safetensors"]),
        ("weights not safetensors", junk, [junk]),
        ("weights truncated", cut, [cut]),
        ("weights of dtype I32", damaged("i32.safetensors", as_int), ["i32.safetensors"]),
        ("weights without a tensor", damaged("missing.safetensors", drop),
         ["missing.safetensors", gone]),
        ("weights of another n_embd", WIDE, [WIDE]),
        ("weights of another n_layer", DEEP, [DEEP]),
        ("weights of another vocab_size", SMALLV, [SMALLV]),
    ]
    for label, w, words in cases:
        expect(label, cmd(*IDS, "--weights", w), 1, words)
    ck = [GEN, "--model", MODEL, "--quiet"]
    expect("checkpoint missing", cmd(*IDS, "--checkpoint", F.path("no_ckpt"), base=ck), 1,
           ["no_ckpt"])
    expect("checkpoint tag missing",
           cmd(*IDS, "--checkpoint", os.path.join(F.path("ckpt"), "step999"), base=ck), 1,
           ["step999"])
    expect("checkpoint of another model", cmd(*IDS, "--checkpoint", F.path("wide_ckpt"), base=ck),
           1, ["wide_ckpt"])


def bad_files():
    expect("prompts file missing", cmd("--prompts", F.path("nope.jsonl")), 1, ["nope.jsonl"])
    os.makedirs(F.path("prompts_dir"))
    expect("prompts file a directory", cmd("--prompts", F.path("prompts_dir")), 1,
           ["prompts_dir", "cannot read"])
    out = os.path.join(F.path("no_dir"), "logits.safetensors")
    F.expect("--logits into a missing directory", cmd(*IDS, "--logits", out, logits=False), 1,
             ["--logits", out])
    with open(WEIGHTS, "rb") as f:
        before = hashlib.sha256(f.read()).hexdigest()
    F.expect("--logits onto --weights", cmd(*IDS, "--logits", WEIGHTS, logits=False), 2,
             ["--logits", "--weights"])
    with open(WEIGHTS, "rb") as f:
        F.check("--logits onto --weights: weights untouched",
                hashlib.sha256(f.read()).hexdigest() == before, WEIGHTS)


def json_and_ztr():
    """the .json and .ztr files under WORK (a refused --trace may add none)"""
    return {os.path.join(r, n) for r, _, files in os.walk(F.WORK) for n in files
            if n.endswith((".json", ".ztr"))}


def bad_trace():
    """--trace FILE that cannot be written: exit 1 (a file-system error, not a bad command line:
    docs/inference.md), one line naming FILE and what was expected, nothing written"""
    ro = F.path("ro_dir")
    os.makedirs(ro)
    os.makedirs(F.path("trace_dir"))
    os.chmod(ro, 0o555)
    cases = [("--trace into a missing directory", os.path.join(F.path("no_dir"), "run.json"),
              ["does not exist", "expected an existing, writable directory"]),
             ("--trace onto a directory", F.path("trace_dir"),
              ["is a directory", "expected a file"])]
    # root may write into a read-only directory (CAP_DAC_OVERRIDE), so as root the case would
    # prove nothing: it runs only where the directory really is read-only to this user
    if os.access(ro, os.W_OK):
        print("skip --trace into a read-only directory: %s is writable to this user" % ro)
    else:
        cases.append(("--trace into a read-only directory", os.path.join(ro, "run.json"),
                      ["not writable"]))
    for label, out, words in cases:
        before = json_and_ztr()
        expect(label, cmd(*IDS, "--trace", out), 1, ["--trace", out] + words)
        left = json_and_ztr() - before
        F.check(label + ": nothing written", not left, "left %s" % sorted(left))
    os.chmod(ro, 0o755)


def trace_run():
    """--trace run.json (relative to the working folder) writes run.json and run.ztr, which
    zt-trace summary reads"""
    cwd = os.getcwd()
    os.chdir(F.WORK)
    try:
        p = F.run(cmd(*IDS, "--trace", "run.json", logits=False), 120)
        s = F.run([F.prog("zt-trace"), "summary", "run.ztr"], 60)
    finally:
        os.chdir(cwd)
    F.check("--trace run.json", p is not None and p.returncode == 0,
            "exit %s %s" % (p.returncode if p else "(hang)", F.error_lines(p)[:1] if p else ""))
    for name in ("run.json", "run.ztr"):
        F.check("--trace run.json: %s written" % name, os.path.isfile(F.path(name)), F.path(name))
    try:
        with open(F.path("run.json")) as f:
            json.load(f)
        F.check("--trace run.json: run.json is JSON", True, F.path("run.json"))
    except (OSError, ValueError) as e:
        F.check("--trace run.json: run.json is JSON", False, str(e))
    F.check("zt-trace summary run.ztr", s is not None and s.returncode == 0,
            "exit %s %s" % (s.returncode if s else "(hang)", F.error_lines(s)[:1] if s else ""))
    # the inference engine starts StarPU with prio unless the user chose a policy
    want = os.environ.get("STARPU_SCHED") or "prio"
    try:
        with open(F.path("run.ztr")) as f:
            meta = [l for l in f.read(4096).splitlines() if l.startswith("# meta ")]
    except OSError:
        meta = []
    F.check("--trace run.json: the policy is %s" % want,
            meta != [] and ("sched=%s" % want) in meta[0].split(), meta[:1])


if not os.access(GEN, os.X_OK):
    F.check("zt-generate", False, "%s is not a program (not built yet?)" % GEN)
    F.finish()
    sys.exit(1)
shutil.rmtree(F.path("no_tok"), ignore_errors=True)
controls()
command_line()
bad_prompts()
bad_tokenizers()
bad_weights()
bad_files()
bad_trace()
trace_run()
F.finish()
