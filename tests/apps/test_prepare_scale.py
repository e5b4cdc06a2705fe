#!/usr/bin/env python3
"""tests/apps/test_prepare_scale.py: zt-prepare at scale: threads, shards, skipped documents.

- --threads 1, 2 and 3 give the same bytes (token file, shards, data.json) and the same summary
  counts, on text files and a JSONL file of several read chunks (so batches interleave);
- --out-dir: the shards, validation then train, put end to end are the --out file; none holds
  more than --shard-tokens; a shard closes only before a document that does not fit in it, and
  only a document longer than a shard is cut; the first --valid-docs documents are the
  validation shards; data.json lists every shard with its token count ("validation" only with
  --valid-docs); byte-level shards too;
- skipped documents are counted exactly in the summary line (empty files, blank lines,
  "text": "", objects without "text" or with null, invalid UTF-8), and the tokens are
  <|endoftext|> + the ids of each kept document (--bad-utf8 skip), or of Python's
  decode("utf-8", errors="replace") of every document (--bad-utf8 replace, random invalid
  bytes included): the ids of test_tokenizer --encode, and of Hugging Face `tokenizers` when
  the python named by ZT_TOKENIZERS_PYTHON (or this one) has it;
- the progress bar: on a terminal and with --progress, not with --quiet nor into a pipe;
- bad runs are one line: exit 2 for the command line (--shard-tokens 0, --out with --out-dir,
  --threads 0, --bad-utf8 other, --valid-docs without --out-dir), exit 1 otherwise (a missing
  file, a malformed JSONL line named by file and line past the first chunk, an --out-dir that
  cannot be made, --valid-docs taking every document), leaving no data.json and no shard.

Usage: test_prepare_scale.py ZT_PREPARE TEST_TOKENIZER DATA_DIR TMP_DIR
       test_prepare_scale.py --hf-encode TOKENIZER_JSON DOCS_JSON OUT_JSON  (under `tokenizers`)
"""
import json
import os
import pty
import random
import re
import shutil
import struct
import subprocess
import sys

EOT = 0  # <|endoftext|> in tests/data/tokenizer
SUMMARY = re.compile(r'zt-prepare: (\d+) documents?, skipped (\d+) empty, (\d+) without "text"'
                     r'(?:, (\d+) bad UTF-8|; replaced bad UTF-8 in (\d+)), (\d+) bytes -> '
                     r'(\d+) tokens')


def hf_encode(tok_json, docs_json, out_json):
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(tok_json)
    with open(docs_json, encoding="utf-8") as f:
        docs = json.load(f)
    with open(out_json, "w") as f:
        json.dump([e.ids for e in tok.encode_batch(docs)], f)


if sys.argv[1] == "--hf-encode":
    hf_encode(*sys.argv[2:5])
    sys.exit(0)

prep, enc, data, tmp = sys.argv[1:5]
shutil.rmtree(tmp, ignore_errors=True)
os.makedirs(tmp)
fails = []
hf_py = os.environ.get("ZT_TOKENIZERS_PYTHON", sys.executable)
if subprocess.run([hf_py, "-c", "import tokenizers"], capture_output=True).returncode != 0:
    hf_py = None


def path(*names):
    return os.path.join(tmp, *names)


def check(what, ok, detail=""):
    print("%s %s%s" % ("ok  " if ok else "FAIL", what, ": " + detail if detail else ""))
    if not ok:
        fails.append(what)


def write(name, content):
    with open(path(name), "wb") as f:
        f.write(content if isinstance(content, bytes) else content.encode())
    return path(name)


def read_tokens(p):
    with open(p, "rb") as f:
        raw = f.read()
    head = struct.unpack("<256i", raw[:1024])
    assert head[0] == 20240520 and head[1] == 1 and len(raw) == 1024 + 2 * head[2], p
    return list(struct.unpack("<%dH" % head[2], raw[1024:]))


def run(args, **kw):
    return subprocess.run([prep] + args, capture_output=True, text=True, **kw)


def summary(r):
    m = SUMMARY.search(r.stdout)
    if r.returncode != 0 or not m:
        raise SystemExit("zt-prepare failed (%d): %s %s" % (r.returncode, r.stdout, r.stderr))
    g = m.groups()
    return {"docs": int(g[0]), "empty": int(g[1]), "no_text": int(g[2]),
            "bad": int(g[3] if g[3] is not None else g[4]), "bytes": int(g[5]),
            "tokens": int(g[6])}


def zt_ids(text):
    """test_tokenizer --encode's ids of text (the encoder tests/io proves against HF)"""
    if not text:
        return []
    p = write("doc.txt", text)
    subprocess.run([enc, "--encode", data, p, path("doc.ids")], check=True)
    with open(path("doc.ids"), "rb") as f:
        raw = f.read()
    return list(struct.unpack("<%di" % (len(raw) // 4), raw))


def oracle(docs, label):
    """<|endoftext|> + ids of each document, from test_tokenizer; checked against HF when
    `tokenizers` is there"""
    ours = [zt_ids(d) for d in docs]
    if hf_py:
        with open(path("docs.json"), "w", encoding="utf-8") as f:
            json.dump(docs, f)
        subprocess.run([hf_py, os.path.abspath(__file__), "--hf-encode",
                        os.path.join(data, "tokenizer.json"), path("docs.json"),
                        path("hf.json")], check=True)
        with open(path("hf.json")) as f:
            hf = json.load(f)
        check("%s: %d documents, HF `tokenizers` gives test_tokenizer's ids" % (label, len(docs)),
              hf == ours)
    return [t for ids in ours for t in [EOT] + ids]


def shards(d):
    with open(os.path.join(d, "data.json")) as f:
        spec = json.load(f)
    return spec, {k: [read_tokens(os.path.join(d, e["path"])) for e in spec[k]] for k in spec}


def dir_bytes(d):
    out = {}
    for n in sorted(os.listdir(d)):
        with open(os.path.join(d, n), "rb") as f:
            out[n] = f.read()
    return out


# ---------------------------------------------------------------------------------------------
# the corpus: text files and a JSONL file of about 2.5 MB (three read chunks of 1 MiB)
rng = random.Random(7)
WORDS = ("the of and to in is was that for it with as his on be at by had are but from or "
         "have an they which one you were all we her she there would their will when who "
         "café 東京 naïve 😀 3.14 o'clock it's we'll").split()


def sentence(n):
    return " ".join(rng.choice(WORDS) for _ in range(n)) + rng.choice([".", "!", "?\n", ",\n\n"])


texts = [write("t%d.txt" % i, "".join(sentence(rng.randint(3, 20))
                                       for _ in range(rng.randint(1, 30)))) for i in range(6)]
big_docs = ["".join(sentence(rng.randint(3, 25)) for _ in range(rng.randint(1, 40)))
            for _ in range(2200)]
big = write("big.jsonl", "".join(json.dumps({"text": d}, ensure_ascii=rng.random() < 0.5) + "\n"
                                 for d in big_docs))
corpus = [texts[0], big] + texts[1:]
tok = ["--tokenizer", data]

# ---- threads: the same bytes whatever their number ------------------------------------------
outs, sums = {}, {}
for n in (1, 2, 3):
    r = run(tok + corpus + ["--threads", str(n), "--out", path("t%d.bin" % n)])
    sums[n] = summary(r)
    with open(path("t%d.bin" % n), "rb") as f:
        outs[n] = f.read()
check("--threads 1, 2, 3: the same token file, %d bytes" % len(outs[1]),
      outs[1] == outs[2] == outs[3])
check("--threads 1, 2, 3: the same counts", sums[1] == sums[2] == sums[3], str(sums[1]))
single = read_tokens(path("t1.bin"))
check("--threads: %d documents, tokens = <|endoftext|> + each document's ids" % sums[1]["docs"],
      sums[1]["docs"] == len(big_docs) + len(texts) and single[:1 + len(zt_ids(open(
          texts[0], encoding="utf-8").read()))] == oracle([open(texts[0], encoding="utf-8")
                                                          .read()], "first file"))

# ---- shards ---------------------------------------------------------------------------------
long_doc = write("long.txt", "".join(sentence(20) for _ in range(700)))  # > one shard
S, V = 5000, 10
sharded = [texts[0], big, long_doc] + texts[1:]
r = run(tok + sharded + ["--out", path("all.bin")])
whole = read_tokens(path("all.bin"))
starts = [i for i, t in enumerate(whole) if t == EOT] + [len(whole)]
docs_len = [starts[i + 1] - starts[i] for i in range(len(starts) - 1)]
spec_bytes = {}
for n in (1, 2, 3):
    d = path("shards%d" % n)
    r = run(tok + sharded + ["--threads", str(n), "--out-dir", d, "--shard-tokens", str(S),
                             "--valid-docs", str(V)])
    summary(r)
    spec_bytes[n] = dir_bytes(d)
check("--out-dir: --threads 1, 2, 3 write the same files (%d)" % len(spec_bytes[1]),
      spec_bytes[1] == spec_bytes[2] == spec_bytes[3])
spec, toks = shards(path("shards1"))
flat_v, flat_t = sum(toks["validation"], []), sum(toks["train"], [])
check("--out-dir: validation + train shards end to end = the --out file (%d tokens)"
      % len(whole), flat_v + flat_t == whole)
check("--out-dir: the first %d documents are the validation shards" % V,
      len(flat_v) == sum(docs_len[:V]))
names = {k: ["%s_%06d.bin" % ("train" if k == "train" else "val", i) for i in range(len(v))]
         for k, v in toks.items()}
check("data.json: train and validation, names and token counts",
      sorted(spec) == ["train", "validation"] and
      all([e["path"] for e in spec[k]] == names[k] and
          [e["tokens"] for e in spec[k]] == [len(t) for t in toks[k]] and
          all(set(e) == {"path", "tokens"} for e in spec[k]) for k in spec),
      "%d train, %d validation shards" % (len(spec["train"]), len(spec["validation"])))
sizes = [len(t) for k in ("validation", "train") for t in toks[k]]
check("--shard-tokens %d: no shard over it" % S, max(sizes) <= S, str(max(sizes)))


def layout(doc_lens):
    """the shard sizes the documented rule gives: a shard closes before a document that does
    not fit in it; a document longer than a shard fills whole shards, its rest starts the next"""
    out, fill = [], 0
    for n in doc_lens:
        if fill and fill + n > S:
            out, fill = out + [fill], 0
        while n > S:
            out, n = out + [S], n - S
        fill += n
    return out + [fill] if fill else out


def cut_docs(doc_starts, split_shards, first):
    """the lengths of the documents a shard boundary cuts"""
    cuts, at = [], first
    for sh in split_shards[:-1]:
        at += len(sh)
        if at not in doc_starts:
            i = max(k for k in range(len(starts)) if starts[k] < at)
            cuts.append(starts[i + 1] - starts[i])
    return cuts


want = layout(docs_len[:V]) + layout(docs_len[V:])
cuts = cut_docs(set(starts), toks["validation"], 0) + cut_docs(set(starts), toks["train"],
                                                               len(flat_v))
check("shards: the documented layout; only documents over %d tokens cut (%s)" % (S, cuts),
      sizes == want and all(n > S for n in cuts) and cuts, "%s vs %s" % (sizes[:8], want[:8]))
r = run(tok + texts + ["--out-dir", path("nov"), "--shard-tokens", "1K"])
spec, toks = shards(path("nov"))
check("--out-dir without --valid-docs: only \"train\"; --shard-tokens 1K is 1000",
      list(spec) == ["train"] and max(len(t) for t in toks["train"]) <= 1000 and
      len(toks["train"]) > 1, "%d shards" % len(toks["train"]))
r = run(texts + ["--out-dir", path("bytes"), "--shard-tokens", "3000"])
run(texts + ["--out", path("bytes.bin")])
spec, toks = shards(path("bytes"))
check("byte-level --out-dir: shards end to end = the --out file",
      r.returncode == 0 and sum(toks["train"], []) == read_tokens(path("bytes.bin")),
      r.stdout.strip())

# ---- skipped documents: counted, and the rest encoded as HF would ---------------------------
good = ["Hello world, it's 3.14!\n", "first line doc", "東京 😀 end", " "]
skip_in = [write("good1.txt", good[0]), write("empty.txt", b""),
           write("bad1.txt", b"caf\xe9 latin-1\n"),
           write("mixed.jsonl", b'{"text": "first line doc"}\n'
                                b'\n'
                                b'{"text": ""}\n'
                                b'{"id": 3}\n'
                                b'{"text": null}\n'
                                b'{"text": "bad \xff\xfe bytes"}\n'
                                b'   \t\n'
                                + json.dumps({"text": good[2]}).encode() + b'\n'
                                b'{"text": "trunc \xe2\x82"}\n'
                                b'{"text": " "}')]
bad_raw = [b"caf\xe9 latin-1\n", b"bad \xff\xfe bytes", b"trunc \xe2\x82"]
r = run(tok + skip_in + ["--out", path("skip.bin")])
s = summary(r)
print(r.stdout.strip())
check("--bad-utf8 skip: 4 kept, 4 empty, 2 without text, 3 bad UTF-8 counted",
      (s["docs"], s["empty"], s["no_text"], s["bad"]) == (4, 4, 2, 3), str(s))
check("--bad-utf8 skip: the kept documents' tokens", read_tokens(path("skip.bin")) ==
      oracle(good, "skip"))
r = run(tok + skip_in + ["--bad-utf8", "replace", "--out", path("repl.bin")])
s = summary(r)
fixed = [b.decode("utf-8", errors="replace") for b in bad_raw]
kept = [good[0], fixed[0], good[1], fixed[1], good[2], fixed[2], good[3]]
check("--bad-utf8 replace: 7 kept, 3 replaced", (s["docs"], s["empty"], s["no_text"], s["bad"])
      == (7, 4, 2, 3), str(s))
check("--bad-utf8 replace: tokens of Python's errors=\"replace\" text",
      read_tokens(path("repl.bin")) == oracle(kept, "replace"))

# random bytes: the maximal-subpart rule on every kind of bad sequence
pieces = [b"a", b" ", b"\xc3\xa9", b"\xe2\x82\xac", b"\xf0\x9f\x98\x80", b"\x80", b"\xbf",
          b"\xc0", b"\xc1\xbf", b"\xc2", b"\xe0\x80", b"\xe0\xa0", b"\xed\xa0\x80", b"\xed\x9f",
          b"\xef\xbf", b"\xf0\x80\x80", b"\xf0\x90", b"\xf4\x90\x80\x80", b"\xf4\x8f\xbf",
          b"\xf5", b"\xff", b"\xfe", b"x1 ", b"\n"]
rand = [b"".join(rng.choice(pieces) for _ in range(rng.randint(1, 40))) for _ in range(40)]
rand_in = [write("r%02d.txt" % i, b) for i, b in enumerate(rand)]
r = run(tok + rand_in + ["--bad-utf8", "replace", "--threads", "2", "--out", path("rand.bin")])
s = summary(r)
nbad = sum(1 for b in rand if b.decode("utf-8", errors="replace").encode() != b)
check("random bytes, --bad-utf8 replace: %d of %d documents replaced" % (nbad, len(rand)),
      s["bad"] == nbad and s["docs"] == len(rand), str(s))
check("random bytes: tokens of Python's errors=\"replace\" text", read_tokens(path("rand.bin"))
      == oracle([b.decode("utf-8", errors="replace") for b in rand], "random"))

# ---- the progress bar -----------------------------------------------------------------------
r = run(tok + corpus + ["--progress", "--out", path("p.bin")])
check("--progress into a pipe: a bar with MB/s", "MB/s" in r.stderr and "(100%)" in r.stderr,
      repr(r.stderr[-80:]))
r = run(tok + corpus + ["--out", path("p.bin")])
check("into a pipe: no bar", r.stderr == "", repr(r.stderr[-80:]))
master, slave = pty.openpty()
p = subprocess.Popen([prep] + tok + corpus + ["--out", path("p.bin")], stdout=subprocess.PIPE,
                     stderr=slave)
os.close(slave)
bar = b""
while True:
    try:
        chunk = os.read(master, 4096)
    except OSError:
        break
    if not chunk:
        break
    bar += chunk
p.communicate()
os.close(master)
check("on a terminal: a bar with MB/s and ETA", p.returncode == 0 and b"MB/s" in bar and
      b"%)" in bar, repr(bar[-80:]))
master, slave = pty.openpty()
r = subprocess.run([prep] + tok + corpus + ["--quiet", "--out", path("p.bin")],
                   capture_output=False, stdout=subprocess.DEVNULL, stderr=slave)
os.close(slave)
os.set_blocking(master, False)
try:
    left = os.read(master, 4096)
except OSError:
    left = b""
os.close(master)
check("--quiet on a terminal: no bar", r.returncode == 0 and left == b"", repr(left[-80:]))

# ---- bad runs: one line, the exit code, nothing left ----------------------------------------


def expect_error(what, args, words, code, left=()):
    r = run(args)
    lines = r.stderr.strip().split("\n")
    ok = (r.returncode == code and len(lines) == 1 and lines[0].startswith("zerotask: error: ")
          and all(w in lines[0] for w in words) and not any(os.path.exists(x) for x in left))
    check("%s: exit %d, one line" % (what, code), ok, "exit %d, %r" % (r.returncode, r.stderr))


out_d = path("bad_out")
expect_error("missing input", tok + [texts[0], path("absent.txt"), "--out-dir", out_d],
             ["input " + path("absent.txt"), "cannot read"], 1, [out_d])
lines = open(big, encoding="utf-8").read().split("\n")
broken = write("broken.jsonl", "\n".join(lines[:2000]) + "\n{\"text\": \"unfinished\n" +
               "\n".join(lines[2000:]))
expect_error("malformed JSONL line past the first chunk",
             tok + [big, broken, "--out-dir", out_d, "--shard-tokens", "2000"],
             ["input " + broken + " line 2001", "not valid JSON"], 1, [out_d])
os.makedirs(path("old"))
write("old/data.json", "{}")
write("old/keep.txt", "mine")
expect_error("a failing run in a used directory",
             tok + [big, broken, "--out-dir", path("old"), "--shard-tokens", "2000"],
             ["line 2001"], 1, [path("old", "data.json"), path("old", "train_000000.bin")])
check("a failing run leaves the directory's other files", os.listdir(path("old")) ==
      ["keep.txt"], str(os.listdir(path("old"))))
expect_error("--shard-tokens 0", tok + [texts[0], "--out-dir", out_d, "--shard-tokens", "0"],
             ["--shard-tokens 0", "2..2147483647"], 2, [out_d])
expect_error("--shard-tokens 3G", tok + [texts[0], "--out-dir", out_d, "--shard-tokens", "3G"],
             ["--shard-tokens 3G"], 2, [out_d])
expect_error("--out with --out-dir", tok + [texts[0], "--out", path("x.bin"), "--out-dir",
                                            out_d], ["--out", "--out-dir", "not both"], 2,
             [out_d, path("x.bin")])
expect_error("--threads 0", tok + [texts[0], "--out", path("x.bin"), "--threads", "0"],
             ["--threads 0"], 2, [path("x.bin")])
expect_error("--bad-utf8 ignore", tok + [texts[0], "--out", path("x.bin"), "--bad-utf8",
                                         "ignore"], ["--bad-utf8 ignore", "skip, replace"], 2)
expect_error("--valid-docs without --out-dir", tok + [texts[0], "--out", path("x.bin"),
                                                      "--valid-docs", "2"],
             ["--valid-docs", "--out-dir"], 2, [path("x.bin")])
expect_error("--valid-docs taking every document", tok + texts + ["--out-dir", out_d,
                                                                   "--valid-docs", "100"],
             ["--valid-docs 100", "none is left to train on"], 1, [out_d])
expect_error("--out-dir is a file", tok + [texts[0], "--out-dir", texts[1]],
             ["--out-dir " + texts[1], "not a directory"], 1)
expect_error("--out-dir the kernel refuses", tok + [texts[0], "--out-dir", "/proc/zt-prepare"],
             ["--out-dir /proc/zt-prepare"], 1)
expect_error("--out-dir under a file", tok + [texts[0], "--out-dir", texts[1] + "/d"],
             ["--out-dir " + texts[1] + "/d"], 1)

print("test_prepare_scale: HF `tokenizers` %s" % ("at " + hf_py if hf_py else
                                                  "not found (test_tokenizer's ids only)"))
for f in fails:
    print("FAIL", f)
sys.exit(1 if fails else 0)
