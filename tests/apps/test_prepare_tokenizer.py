#!/usr/bin/env python3
"""tests/apps/test_prepare_tokenizer.py: zt-prepare --tokenizer DIR writes BPE token files.

- a text file and a JSONL file (two documents and a blank line) become one llm.c token file
  whose tokens are <|endoftext|> then the ids of each document, the ids being those
  `test_tokenizer --encode` gives (the tokenizer HF's fixture proves);
- a tokenizer.json written like GPT-2's own ("" subword prefix and suffix) gives the same ids;
- errors are one line, nothing written: a JSONL line whose "text" is not a string (its line
  number named), invalid UTF-8 under --bad-utf8 error (the file named), a vocabulary over 65536
  tokens, --max-bytes with --tokenizer. (A line without "text" and invalid UTF-8 by default are
  skipped and counted: test_prepare_scale.py.)

Usage: test_prepare_tokenizer.py ZT_PREPARE TEST_TOKENIZER DATA_DIR TMP_DIR
"""
import json
import os
import shutil
import struct
import subprocess
import sys

prep, enc, data, tmp = sys.argv[1:5]
shutil.rmtree(tmp, ignore_errors=True)
os.makedirs(tmp)
fails = []


def path(name):
    return os.path.join(tmp, name)


def ids_of(text):
    with open(path("doc.txt"), "wb") as f:
        f.write(text.encode())
    subprocess.run([enc, "--encode", data, path("doc.txt"), path("doc.ids")], check=True)
    with open(path("doc.ids"), "rb") as f:
        raw = f.read()
    return list(struct.unpack("<%di" % (len(raw) // 4), raw))


def read_tokens(p):
    with open(p, "rb") as f:
        raw = f.read()
    head = struct.unpack("<256i", raw[:1024])
    assert head[0] == 20240520 and head[1] == 1, head[:3]
    return list(struct.unpack("<%dH" % head[2], raw[1024:]))


docs = ["Hello world, it's 3.14 o'clock!\n\tNext  line\n", "東京 café 😀 we'll see",
        "second <|endoftext|> inside"]
with open(path("a.txt"), "w", encoding="utf-8") as f:
    f.write(docs[0])
with open(path("b.jsonl"), "w", encoding="utf-8") as f:
    f.write(json.dumps({"text": docs[1]}) + "\n\n" + json.dumps({"text": docs[2], "id": 7}) + "\n")
r = subprocess.run([prep, "--tokenizer", data, path("a.txt"), path("b.jsonl"), "--out",
                    path("out.bin")], capture_output=True, text=True)
print(r.stdout.strip(), r.stderr.strip())
want = []
for d in docs:
    want += [0] + ids_of(d)
if r.returncode != 0 or read_tokens(path("out.bin")) != want:
    fails.append("tokens differ from test_tokenizer's ids (rc %d)" % r.returncode)
else:
    print("test_prepare_tokenizer: %d tokens = <|endoftext|> + ids of each of %d documents"
          % (len(want), len(docs)))


def expect_error(what, args, want_text, code=1):
    out = path("bad.bin")
    r = subprocess.run([prep] + args + ["--out", out], capture_output=True, text=True)
    line = r.stderr.strip()
    print("test_prepare_tokenizer: %s -> rc %d: %s" % (what, r.returncode, line))
    if r.returncode != code or want_text not in line or "\n" in line or os.path.exists(out):
        fails.append("%s: expected exit %d and one line with %r" % (what, code, want_text))


with open(path("bad.jsonl"), "w") as f:
    f.write('{"text": "ok"}\n{"text": 5}\n')
expect_error("JSONL line with a number for text", ["--tokenizer", data, path("bad.jsonl")],
             "bad.jsonl line 2: expected a JSON object with a string \"text\"")
with open(path("bad.txt"), "wb") as f:
    f.write(b"fine\xff")
expect_error("invalid UTF-8", ["--tokenizer", data, "--bad-utf8", "error", path("bad.txt")],
             "bad.txt: tokenizer: input is not valid UTF-8 at byte 4")
big = path("big")
os.makedirs(big)
with open(os.path.join(data, "tokenizer.json"), encoding="utf-8") as f:
    tj = json.load(f)
tj["added_tokens"].append({"id": 70000, "content": "<|big|>", "single_word": False,
                           "lstrip": False, "rstrip": False, "normalized": False,
                           "special": True})
with open(os.path.join(big, "tokenizer.json"), "w", encoding="utf-8") as f:
    json.dump(tj, f)
# GPT-2's own tokenizer.json writes "" where a trained one writes null: the same tokenizer
g2 = path("gpt2style")
os.makedirs(g2)
tj2 = json.loads(json.dumps(tj))
tj2["added_tokens"].pop()
tj2["model"]["continuing_subword_prefix"] = tj2["model"]["end_of_word_suffix"] = ""
with open(os.path.join(g2, "tokenizer.json"), "w", encoding="utf-8") as f:
    json.dump(tj2, f)
r = subprocess.run([prep, "--tokenizer", g2, path("a.txt"), "--out", path("g2.bin")],
                   capture_output=True, text=True)
if r.returncode != 0 or read_tokens(path("g2.bin")) != [0] + ids_of(docs[0]):
    fails.append("a tokenizer.json with \"\" subword affixes: %s" % r.stderr.strip())
expect_error("vocabulary over 65536", ["--tokenizer", big, path("a.txt")],
             "70001 tokens do not fit llm.c's uint16 token file")
expect_error("--max-bytes with --tokenizer", ["--tokenizer", data, "--max-bytes", "9",
                                              path("a.txt")], "not both", code=2)
for f in fails:
    print("FAIL", f)
sys.exit(1 if fails else 0)
