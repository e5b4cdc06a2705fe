#!/usr/bin/env python3
"""tests/faults/test_prepare_train.py: zt-prepare --train-tokenizer on bad input: one clear line,
exit 2 (command line) or 1 (anything else), and never a tokenizer directory left behind.

Cases:
  - --vocab-size below 257 (the 256 bytes and <|endoftext|>), above 65536 (llm.c's uint16 ids),
    missing, or given without --train-tokenizer; --train-tokenizer with --tokenizer or
    --max-bytes: exit 2, the option named;
  - an empty corpus (an empty file; a JSONL file whose texts are empty), invalid UTF-8 (the file
    and byte named), a JSONL line without "text" (its line named), a missing input file: exit 1,
    the directory not created;
  - a directory that cannot be made (its parent missing; a file in its place; a place the kernel
    refuses): exit 1, the directory named;
  - a write that fails half way (a file-size limit): exit 1, the file named, the new directory
    removed again; an existing directory keeps its old files untouched.

Usage: test_prepare_train.py APPS_DIR MPIEXEC WORKDIR
"""
import json
import os
import resource
import signal

import faultlib as F

F.setup()
PREP = F.prog("zt-prepare")


def text_file(name, content):
    with open(F.path(name), "wb") as f:
        f.write(content)
    return F.path(name)


corpus = text_file("corpus.txt", ("Hello world, it's a test of the trainer. " * 200).encode())
out = F.path("tok")


def train(*args, vocab="300", inputs=(corpus,), d=out):
    return [PREP] + list(inputs) + ["--train-tokenizer", d, "--vocab-size", vocab] + list(args)


def expect_nothing_left(label, d=out):
    F.check(label + ": no directory left", not os.path.exists(d), d)


# the command line: exit 2
F.expect("vocab size 256", train(vocab="256"), 2, ["--vocab-size 256", ">= 257"])
F.expect("vocab size 65537", train(vocab="65537"), 2, ["--vocab-size 65537", "65536"])
F.expect("vocab size not a number", train(vocab="lots"), 2, ["--vocab-size", "integer"])
F.expect("vocab size missing", [PREP, corpus, "--train-tokenizer", out], 2,
         ["missing --vocab-size", "--train-tokenizer"])
F.expect("vocab size alone", [PREP, corpus, "--vocab-size", "300", "--out", F.path("x.bin")], 2,
         ["--vocab-size 300", "only with --train-tokenizer"])
F.expect("with --tokenizer", train("--tokenizer", out), 2, ["--tokenizer", "--train-tokenizer"])
F.expect("with --max-bytes", train("--max-bytes", "100"), 2, ["--max-bytes", "--train-tokenizer"])
expect_nothing_left("command line")

# the input: exit 1, nothing written
F.expect("empty file", train(inputs=[text_file("empty.txt", b"")]), 1,
         ["empty corpus", "nothing to train"])
empty_jsonl = text_file("empty.jsonl", (json.dumps({"text": ""}) + "\n\n").encode())
F.expect("JSONL of empty texts", train(inputs=[empty_jsonl]), 1, ["empty corpus"])
bad_utf8 = text_file("bad.txt", b"fine text \xc3\x28 then more")
F.expect("invalid UTF-8", train(inputs=[corpus, bad_utf8]), 1,
         ["input " + bad_utf8, "UTF-8", "byte 10"])
no_text = text_file("notext.jsonl", b'{"text": "one"}\n{"txt": "two"}\n')
F.expect("JSONL line without text", train(inputs=[no_text]), 1,
         ["input " + no_text, "line 2", '"text"'])
F.expect("missing input", train(inputs=[F.path("absent.txt")]), 1,
         [F.path("absent.txt"), "cannot read"])
expect_nothing_left("bad input")

# the directory
F.expect("parent missing", train(d=F.path("nowhere/tok")), 1,
         ["tokenizer directory " + F.path("nowhere/tok"), "cannot create"])
F.expect("a file in its place", train(d=corpus), 1,
         ["tokenizer directory " + corpus, "not a directory"])
F.expect("refused by the kernel", train(d="/proc/zt-train-tokenizer"), 1,
         ["tokenizer directory /proc/zt-train-tokenizer", "cannot create"])


def small_files():
    """a file-size limit that stops tokenizer.json half way (SIGXFSZ ignored: write fails)"""
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))


def run_limited(label, cmd, words):
    p = F.subprocess.run(cmd, capture_output=True, text=True, timeout=60, preexec_fn=small_files)
    lines = F.error_lines(p)
    F.check(label, p.returncode == 1 and len(lines) == 1 and
            lines[0].startswith("zerotask: error: ") and all(w in lines[0] for w in words),
            "exit %d, %r" % (p.returncode, lines))


run_limited("write fails half way", train(), ["tokenizer.json", "write failed", "too large"])
expect_nothing_left("write fails half way")
os.makedirs(out)
text_file("tok/tokenizer.json", b"old")
run_limited("write fails in an existing directory", train(),
            ["tokenizer.json", "write failed"])
with open(os.path.join(out, "tokenizer.json"), "rb") as f:
    F.check("existing directory: old file untouched, no temporaries",
            f.read() == b"old" and os.listdir(out) == ["tokenizer.json"], str(os.listdir(out)))
F.finish()
