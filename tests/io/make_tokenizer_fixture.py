#!/usr/bin/env python3
"""tests/io/make_tokenizer_fixture.py: the oracle fixture of io/tokenizer.c.

Trains a GPT-2-style byte-level BPE with Hugging Face `tokenizers` on a seeded, varied corpus
and writes, under OUT (default tests/data/tokenizer):
  tokenizer.json          the trained tokenizer (model BPE, ByteLevel pre-tokenizer and decoder)
  vocab.json, merges.txt  the same model in GPT-2's two-file form (the second loader)
  expected.json           the ids HF gives: the count and SHA-256 of the ids of a ~1 MB text
                          made by the same generator with another seed (ids as little-endian
                          int32), and the full ids of short edge-case strings
                          (each as the hex of its UTF-8 bytes: some hold NUL)

The corpus covers what the GPT-2 regex and the byte-level mapping must get right: prose,
contractions in any case, numbers, whitespace runs (tabs, newlines, many spaces, trailing
spaces), emoji, CJK, Arabic, combining marks, accented Latin, punctuation runs, <|endoftext|>.

Usage: make_tokenizer_fixture.py [OUT]          (needs `tokenizers`; run once, commit the files)
       make_tokenizer_fixture.py --text SEED N  print the test text (N bytes) to stdout
       make_tokenizer_fixture.py --check DIR FILE  HF ids of FILE with DIR/tokenizer.json:
                                                   "count sha256" on stdout
"""
import hashlib
import json
import os
import random
import struct
import sys

TRAIN_SEED, TEST_SEED = 1234, 5678
TRAIN_BYTES, TEST_BYTES = 400_000, 1_000_000
VOCAB = 2000
EOT = "<|endoftext|>"

WORDS = ("the of and to in is was for on that with as by at from this be have it are not "
         "or an which one all were they when there been has more time would who will no "
         "if out so said what up its about into than them can only other new some could "
         "these two may first then do any like my now over such our man me even most made "
         "after also did many before must through back years where much your way well down "
         "should because each just those people how too little state good very make world "
         "Engine Tensor Stage Zero Offload Checkpoint GPU NVMe StarPU Python").split()
CONTRACTIONS = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'T", "'RE", "'Ve", "'M",
                "'LL", "'D", "'x", "'"]
ACCENTED = "café naïve résumé Zürich señor façade Ångström crème brûlée élève Øre ŝablono".split()
CJK = "東京 日本語 中文 漢字 机器学习 训练 模型 한국어 서울 ひらがな カタカナ".split()
ARABIC = "مرحبا العالم كتاب اللغة العربية سلام".split()
EMOJI = ["😀", "🚀", "👍🏽", "👨‍👩‍👧", "🇫🇷", "❤️", "🎉🎉", "🤖", "✨"]
COMBINING = ["e\u0301", "a\u0308", "n\u0303", "o\u0302\u0323", "\u0301", "Z\u0335\u0336"]
PUNCT = ["...", "!!", "?!", "--", "—", "()", "[]", "{}", ";", ":", ",", ".", "\"", "“”", "«»",
         "#", "$", "%", "&&", "**", "+=", "->", "<=", "@", "\\", "^", "_", "`", "|", "~", "§"]
SPACES = [" ", " ", " ", " ", "  ", "   ", "\t", "\n", "\n\n", " \n", "\t\t", "\r\n", " \t ",
          "\u00a0", "\u3000", "\u2003"]


def piece(rng):
    """One token-ish piece of text, drawn from the kinds above."""
    r = rng.random()
    if r < 0.45:
        w = rng.choice(WORDS)
        return w.upper() if rng.random() < 0.05 else (w.title() if rng.random() < 0.1 else w)
    if r < 0.55:
        return rng.choice(WORDS) + rng.choice(CONTRACTIONS)
    if r < 0.63:
        k = rng.choice([1, 2, 3, 4, 6, 9])
        return "".join(rng.choice("0123456789") for _ in range(k)) + rng.choice(["", ".5", ",000"])
    if r < 0.68:
        return rng.choice(ACCENTED)
    if r < 0.73:
        return rng.choice(CJK)
    if r < 0.76:
        return rng.choice(ARABIC)
    if r < 0.80:
        return rng.choice(EMOJI)
    if r < 0.83:
        return rng.choice(WORDS) + rng.choice(COMBINING)
    if r < 0.92:
        return rng.choice(PUNCT)
    if r < 0.93:
        return EOT
    return rng.choice(SPACES)


def text(seed, nbytes):
    """Deterministic text of about nbytes UTF-8 bytes."""
    rng = random.Random(seed)
    out, size = [], 0
    while size < nbytes:
        p = piece(rng) + (rng.choice(SPACES) if rng.random() < 0.3 else " ")
        if rng.random() < 0.02:
            p += " " * rng.randint(2, 9) + "\n"
        out.append(p)
        size += len(p.encode())
    return "".join(out)


EDGE = [
    "", " ", "  ", "   ", "\t", "\n", "\n\n\n", " \n", "\n ", "a ", "a  ", "a   b", "a\tb",
    "a\t\tb", "a \t b", "a\n\nb", "a \n b", "  leading", "trailing  ", "\r\n", "x\r\ny",
    "hello world", "Hello World", "HELLO WORLD", "hello, world!", "hello...world",
    "it's", "It's", "IT'S", "don't", "DON'T", "we're", "WE'RE", "I've", "I'm", "you'll",
    "he'd", "HE'D", "'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "''", "'", "' s", "'sss",
    "rock'n'roll", "o'clock", "x'y'z", "'hello'", "\"quoted\"", "Mc'Donald's",
    "1", "12", "123", "1234", "12345678901234567890", "3.14159", "1,000,000", "-42", "+7",
    "v2.0", "a1b2c3", "x 1 y 2", "2024-01-01", "١٢٣", "Ⅻ", "½", "²³", "①②",
    "café", "naïve", "Zürich", "e\u0301", "\u0301", "a\u0301\u0302\u0303", "Z\u0335\u0336",
    "東京", "日本語のテキスト", "中文 测试", "한국어", "مرحبا بالعالم", "שלום", "Привет мир",
    "Ελληνικά", "हिन्दी", "ไทย",
    "😀", "😀😀", "👍🏽", "👨‍👩‍👧", "🇫🇷🇩🇪", "❤️", "a😀b", " 😀", "😀 ", "🚀 launch",
    "\u00a0", "a\u00a0b", "\u3000", "\u2003x", "\u200b", "a\u200db", "\ufeffbom", "\u2028",
    "\u0085", "\x0b", "\x0c", "\x1f", "\x00", "a\x00b", "\x7f",
    "\u180e'll", "\t\t\u180ex", "a\u180e b", "\u180e", " \u180e ", "\x1c\x1d\x1e x",
    "...", "!!!", "?!?!", "---", "—", "()", "[]{}", "<>", "a->b", "a<=b", "@user", "#tag",
    "$100", "100%", "a&b", "a**b", "C++", "C#", ".NET", "\\n", "`code`", "~/path/to/file",
    "https://example.com/a?b=c&d=e", "user@example.com", "foo_bar_baz", "CamelCaseWord",
    "snake_case", "__init__", "«guillemets»", "“smart quotes”", "§1",
    EOT, EOT + EOT, "a" + EOT + "b", " " + EOT + " ", "x " + EOT, EOT + "\n", "<|endoftext",
    "<|endoftext|", "|endoftext|>", "<|", "|>", "<|endoftext|>hello<|endoftext|>",
    "the the the the", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "ababababababababab",
    "zzzzzzzzzzzz", "qwxz", "Engine Tensor Stage", "StarPU NVMe GPU",
    "The quick brown fox jumps over the lazy dog.",
    "It's 3.14 o'clock; we'll see.\n\tNext line  \n",
    "    def f(x):\n        return x + 1\n",
    "line one\nline two\n\nline four   \n",
    "mixed 東京 and café and 😀 and 123!",
    "tabs\tand\tspaces  mixed \t \n end",
    "Ünïcödé wörds everywhere",
    "emoji🚀inside🚀words",
    "السلام عليكم 123",
    "a" * 300,
    "the " * 80,
    "😀" * 40,
    " " * 50 + "x",
    "x" + " " * 50,
    "\n" * 30,
    "ab" + "\t" * 7 + "cd",
    "I'LL'VE'D", "she's'nt", "'''", "can't've", "y'all'd've",
    "1st 2nd 3rd 4th", "10x faster", "0.001", "1e-5", "0x1F", "CUDA_VISIBLE_DEVICES=0",
    "[1, 2, 3]", "{\"text\": \"hi\"}", "<html><body></body></html>",
]


def write_fixture(out):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    os.makedirs(out, exist_ok=True)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=[EOT], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    corpus = text(TRAIN_SEED, TRAIN_BYTES).split("\n")
    tok.train_from_iterator(corpus, trainer=trainer)
    tok.save(os.path.join(out, "tokenizer.json"))
    tok.model.save(out)  # vocab.json + merges.txt
    ids = tok.encode(text(TEST_SEED, TEST_BYTES)).ids
    edge = [{"hex": s.encode().hex(), "ids": tok.encode(s).ids} for s in EDGE]
    expected = {"test_seed": TEST_SEED, "test_bytes": TEST_BYTES, "count": len(ids),
                "sha256": sha(ids), "vocab_size": tok.get_vocab_size(), "edge": edge}
    with open(os.path.join(out, "expected.json"), "w", encoding="utf-8") as f:
        json.dump(expected, f, ensure_ascii=True, separators=(",", ":"))
        f.write("\n")
    print("tokenizer fixture: vocab %d, %d test ids, %d edge cases, in %s"
          % (tok.get_vocab_size(), len(ids), len(edge), out))


def sha(ids):
    return hashlib.sha256(b"".join(struct.pack("<i", i) for i in ids)).hexdigest()


def main():
    if len(sys.argv) >= 2 and sys.argv[1] == "--text":
        sys.stdout.buffer.write(text(int(sys.argv[2]), int(sys.argv[3])).encode())
        return
    if len(sys.argv) >= 2 and sys.argv[1] == "--check":
        from tokenizers import Tokenizer
        tok = Tokenizer.from_file(os.path.join(sys.argv[2], "tokenizer.json"))
        with open(sys.argv[3], "rb") as f:
            ids = tok.encode(f.read().decode("utf-8")).ids
        print(len(ids), sha(ids))
        return
    here = os.path.dirname(os.path.abspath(__file__))
    write_fixture(sys.argv[1] if len(sys.argv) > 1 else
                  os.path.join(here, "..", "data", "tokenizer"))


if __name__ == "__main__":
    main()
