"""bench/generate/to_gguf.py: llama.cpp's own converter (convert_hf_to_gguf.py, from the sources
bench/generate/setup unpacks) on a Hugging Face GPT-2 directory, run by the peer's Python
(/work/venv/hf: torch, transformers, gguf). One change: a byte-level BPE vocabulary the
converter does not know by the hash of its test string (a vocabulary trained on another corpus,
or the demo's 256 bytes) is written with GPT-2's pre-tokenizer, which is what such a vocabulary
uses; GPT-2's own vocabulary is recognised as usual. Two: a vocabulary without merges (the demo's
256 bytes), which llama.cpp's "gpt2" tokenizer refuses to load, is written as tokenizer model
"none" with the vocabulary size only: llama.cpp then runs the model on token ids, which is all
the benchmark feeds it. The weights are untouched by either.

Usage: PYTHON bench/generate/to_gguf.py LLAMA_CPP_DIR HF_DIR --outtype f32|f16|bf16 --outfile F"""
import json
import os
import sys


def has_merges(d):
    """whether the tokenizer in directory d has at least one BPE merge"""
    p = os.path.join(d, "tokenizer.json")
    if os.path.exists(p):
        with open(p) as f:
            return bool(json.load(f)["model"].get("merges"))
    with open(os.path.join(d, "merges.txt")) as f:
        return any(l.strip() and not l.startswith("#version") for l in f)


def main():
    llama_dir = sys.argv[1]
    sys.path.insert(0, llama_dir)
    import convert_hf_to_gguf as conv
    from conversion import base

    known = base.TextModel.get_vocab_base_pre

    def vocab_pre(self, tokenizer):
        try:
            return known(self, tokenizer)
        except NotImplementedError:
            return "gpt-2"

    base.TextModel.get_vocab_base_pre = vocab_pre
    gpt2_vocab = base.TextModel._set_vocab_gpt2

    def set_vocab_gpt2(self):
        if has_merges(self.dir_model):
            return gpt2_vocab(self)
        self.gguf_writer.add_tokenizer_model("none")
        self.gguf_writer.add_vocab_size(self.hparams["vocab_size"])

    base.TextModel._set_vocab_gpt2 = set_vocab_gpt2
    sys.argv = [conv.__file__] + sys.argv[2:]
    conv.main()


if __name__ == "__main__":
    main()
