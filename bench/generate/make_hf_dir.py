#!/usr/bin/python3
"""bench/generate/make_hf_dir.py: a Hugging Face GPT-2 directory from a zerotask export, so that
`transformers` and llama.cpp's converter run the very weights zerotask runs.

In: the model shape file (configs/demo_model.json style), the weights `zt-train --export` writes
(safetensors with Hugging Face GPT-2 names, F32/BF16/F16) and a tokenizer directory (vocab.json +
merges.txt and/or tokenizer.json), or `--tokenizer bytes`: GPT-2's 256 byte tokens and no merges,
the byte-level vocabulary of the demo corpus (token id = byte value).
Out (DIR): config.json (GPT2LMHeadModel: n_positions = n_ctx = seq_len, gelu_new, layer-norm
epsilon 1e-5, tied word embeddings), model.safetensors (the model's tensors in the dtype stored,
or --dtype, with the "format": "pt" metadata transformers asks for; a stored lm_head.weight or
attention-mask buffer is left out), the tokenizer files and a tokenizer_config.json.

Usage: /usr/bin/python3 bench/generate/make_hf_dir.py --model M.json --weights W.safetensors
           --tokenizer DIR|bytes --out DIR [--dtype keep|f32|bf16|f16]
Standard library, plus torch for a --dtype conversion."""
import argparse
import json
import os
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(1, os.path.join(HERE, "..", "..", "tests", "ref"))
import gpt2_shape  # noqa: E402
import safetensors_io as st  # noqa: E402
from gpt2_bytes import bytes_to_unicode  # noqa: E402

ST_DTYPE = {"f32": "F32", "bf16": "BF16", "f16": "F16"}
TORCH_DTYPE = {"F32": "float32", "BF16": "bfloat16", "F16": "float16"}
TOKENIZER_FILES = ("tokenizer.json", "vocab.json", "merges.txt", "special_tokens_map.json")
EOS = "<|endoftext|>"


class Bad(Exception):
    """an input that cannot make a directory: the message names the file and what was expected"""


def convert(t, dtype):
    """the tensor in safetensors dtype `dtype` (rounded to nearest even by torch)"""
    if t.dtype == dtype:
        return t
    import torch
    src = {"F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16}
    x = torch.frombuffer(bytearray(t.data), dtype=src[t.dtype]).to(src[dtype])
    raw = x.view(torch.int16 if dtype != "F32" else torch.int32).numpy().tobytes()
    return st.Tensor(dtype, t.shape, raw)


def model_tensors(shape, weights, dtype):
    """{name: Tensor} of every tensor the shape needs, checked against the export; Bad names the
    first that is missing, of another shape, or an unknown extra"""
    try:
        have, _ = st.read(weights)
    except (OSError, ValueError, KeyError) as e:
        raise Bad("weights %s: %s" % (weights, e))
    want = gpt2_shape.tensors(shape)
    names = {n for n, _, _ in want}
    for n in have:
        if n not in names and n != "lm_head.weight" and not n.endswith((".attn.bias",
                                                                         ".attn.masked_bias")):
            raise Bad("weights %s: tensor %s is not a tensor of this GPT-2" % (weights, n))
    out = {}
    for n, sh, _ in want:
        t = have.get(n)
        if t is None:
            raise Bad("weights %s: tensor %s missing (expected shape %s)" % (weights, n, sh))
        if t.shape != sh or t.dtype not in TORCH_DTYPE:
            raise Bad("weights %s: tensor %s is %s %s, expected F32/BF16/F16 %s"
                      % (weights, n, t.dtype, t.shape, sh))
        out[n] = convert(t, dtype or t.dtype)
    dtypes = {t.dtype for t in out.values()}
    if len(dtypes) != 1:
        raise Bad("weights %s: tensors of several dtypes %s: pass --dtype" % (weights, dtypes))
    return out


def write_tokenizer(src, out, vocab_size, seq_len):
    """copy (or, for "bytes", write) the tokenizer files; the id of <|endoftext|> or None"""
    if src == "bytes":
        vocab = {ch: b for b, ch in sorted(bytes_to_unicode().items())}
        with open(os.path.join(out, "vocab.json"), "w") as f:
            json.dump(vocab, f, ensure_ascii=False)
        with open(os.path.join(out, "merges.txt"), "w") as f:
            f.write("#version: 0.2\n")
    else:
        if not os.path.isdir(src):
            raise Bad("tokenizer %s: not a directory (expected vocab.json + merges.txt or "
                      "tokenizer.json, or the word bytes)" % src)
        for name in TOKENIZER_FILES:
            if os.path.exists(os.path.join(src, name)):
                shutil.copyfile(os.path.join(src, name), os.path.join(out, name))
    vocab = tokenizer_vocab(out)
    if max(vocab.values()) >= vocab_size:
        raise Bad("tokenizer %s: id %d past the model's vocab_size %d"
                  % (src, max(vocab.values()), vocab_size))
    eos = vocab.get(EOS)
    cfg = {"tokenizer_class": "GPT2Tokenizer", "model_max_length": seq_len,
           "add_prefix_space": False, "bos_token": EOS if eos is not None else None,
           "eos_token": EOS if eos is not None else None,
           "unk_token": EOS if eos is not None else None}
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    return eos


def tokenizer_vocab(d):
    """{token: id} of the tokenizer in d: tokenizer.json's model vocabulary and added tokens,
    else vocab.json"""
    p = os.path.join(d, "tokenizer.json")
    try:
        if os.path.exists(p):
            with open(p) as f:
                j = json.load(f)
            v = dict(j["model"]["vocab"])
            v.update({a["content"]: a["id"] for a in j.get("added_tokens", [])})
            return v
        with open(os.path.join(d, "vocab.json")) as f:
            return json.load(f)
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise Bad("tokenizer %s: unreadable (%s)" % (d, e))


def hf_config(s, dtype, eos):
    return {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2",
            "vocab_size": s["vocab_size"], "n_positions": s["seq_len"], "n_ctx": s["seq_len"],
            "n_embd": s["n_embd"], "n_layer": s["n_layer"], "n_head": s["n_head"],
            "n_inner": None, "activation_function": "gelu_new", "layer_norm_epsilon": 1e-5,
            "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0,
            "initializer_range": 0.02, "scale_attn_weights": True, "use_cache": True,
            "tie_word_embeddings": True, "bos_token_id": eos, "eos_token_id": eos,
            "torch_dtype": TORCH_DTYPE[dtype], "dtype": TORCH_DTYPE[dtype]}


def make(a):
    try:
        s = gpt2_shape.load_shape(a.model)
    except (OSError, ValueError) as e:
        raise Bad("model %s" % e)
    tensors = model_tensors(s, a.weights, ST_DTYPE.get(a.dtype))
    dtype = next(iter(tensors.values())).dtype
    tmp = a.out.rstrip("/") + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    try:
        eos = write_tokenizer(a.tokenizer, tmp, s["vocab_size"], s["seq_len"])
        st.write(os.path.join(tmp, "model.safetensors"), tensors, {"format": "pt"})
        with open(os.path.join(tmp, "config.json"), "w") as f:
            json.dump(hf_config(s, dtype, eos), f, indent=1)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    shutil.rmtree(a.out, ignore_errors=True)
    os.replace(tmp, a.out)
    return dtype


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--weights", required=True)
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--dtype", default="keep", choices=["keep"] + sorted(ST_DTYPE))
    a = ap.parse_args()
    try:
        dtype = make(a)
    except Bad as e:
        print("zerotask: error: %s" % e, file=sys.stderr)
        sys.exit(1)
    print("make_hf_dir: %s (%s)" % (a.out, dtype))


if __name__ == "__main__":
    main()
