"""bench/generate/gpt2_shape.py: the tensors of a GPT-2 of a given shape under Hugging Face's
names and layouts (what `zt-train --export` writes: Conv1D weights stored [in, out]), and the
weight bytes a decode step reads (the benchmark's memory-bandwidth ceiling). Standard library."""
import json

# (suffix, shape in units of (C, C) as (rows, cols) with 0 = a vector, initialisation)
LAYER = [("ln_1.weight", (1, 0), "one"), ("ln_1.bias", (1, 0), "zero"),
         ("attn.c_attn.weight", (1, 3), "normal"), ("attn.c_attn.bias", (3, 0), "zero"),
         ("attn.c_proj.weight", (1, 1), "proj"), ("attn.c_proj.bias", (1, 0), "zero"),
         ("ln_2.weight", (1, 0), "one"), ("ln_2.bias", (1, 0), "zero"),
         ("mlp.c_fc.weight", (1, 4), "normal"), ("mlp.c_fc.bias", (4, 0), "zero"),
         ("mlp.c_proj.weight", (4, 1), "proj"), ("mlp.c_proj.bias", (1, 0), "zero")]
KEYS = ("vocab_size", "seq_len", "n_embd", "n_layer", "n_head")


def load_shape(path):
    """the model shape file (configs/demo_model.json style) as a dict of ints; ValueError names
    the file and the missing or bad key"""
    with open(path) as f:
        j = json.load(f)
    for k in KEYS:
        if not isinstance(j.get(k), int) or j[k] < 1:
            raise ValueError("%s: %s must be a positive integer" % (path, k))
    if j["n_embd"] % j["n_head"]:
        raise ValueError("%s: n_embd %d is not a multiple of n_head %d"
                         % (path, j["n_embd"], j["n_head"]))
    return {k: j[k] for k in KEYS}


def tensors(s):
    """[(name, shape list, init)] of every parameter, in the order zerotask declares them"""
    V, T, C, L = s["vocab_size"], s["seq_len"], s["n_embd"], s["n_layer"]
    out = [("transformer.wte.weight", [V, C], "normal"),
           ("transformer.wpe.weight", [T, C], "normal")]
    for l in range(L):
        for suffix, (r, c), init in LAYER:
            shape = [r * C, c * C] if c else [r * C]
            out.append(("transformer.h.%d.%s" % (l, suffix), shape, init))
    out += [("transformer.ln_f.weight", [C], "one"), ("transformer.ln_f.bias", [C], "zero")]
    return out


def decode_weight_bytes(s, matrix_bytes, vector_bytes=4):
    """bytes of weights one decode step of one sequence must read: every layer's matrices and
    vectors, wte once (the tied output head; the embedding reads one row of it) and ln_f; of wpe
    only one row. matrix_bytes: bytes per element of the matrices (4 f32, 2 bf16/f16);
    vector_bytes: of the biases and layer-norm vectors"""
    C, V, L = s["n_embd"], s["vocab_size"], s["n_layer"]
    matrices = V * C + L * 12 * C * C
    vectors = L * 13 * C + 2 * C
    return matrices * matrix_bytes + vectors * vector_bytes + C * matrix_bytes
