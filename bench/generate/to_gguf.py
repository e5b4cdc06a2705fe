"""bench/generate/to_gguf.py: llama.cpp's own converter (convert_hf_to_gguf.py, from the sources
bench/generate/setup unpacks) on a Hugging Face GPT-2 directory, run by the peer's Python
(/work/venv/hf: torch, transformers, gguf). One change: a byte-level BPE vocabulary the
converter does not know by the hash of its test string (a vocabulary trained on another corpus,
or the demo's 256 bytes) is written with GPT-2's pre-tokenizer, which is what such a vocabulary
uses; GPT-2's own vocabulary is recognised as usual. The weights are untouched by this.

Usage: PYTHON bench/generate/to_gguf.py LLAMA_CPP_DIR HF_DIR --outtype f32|f16|bf16 --outfile F"""
import sys


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
    sys.argv = [conv.__file__] + sys.argv[2:]
    conv.main()


if __name__ == "__main__":
    main()
