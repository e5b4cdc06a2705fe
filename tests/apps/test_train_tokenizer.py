#!/usr/bin/env python3
"""tests/apps/test_train_tokenizer.py: zt-prepare --train-tokenizer learns the BPE Hugging Face
`tokenizers` learns, and writes files `tokenizers` loads and encodes with as zerotask does.

Always (recorded oracles, no `tokenizers` needed):
- on the corpus of tests/data/tokenizer (make_tokenizer_fixture.py's seeded text, one JSONL
  document per line, as HF's BpeTrainer was given it), a vocabulary of 2000: the merges equal
  HF's recorded ones (tests/data/tokenizer/tokenizer.json) one for one, and the vocabulary is
  HF's with <|endoftext|> moved from id 0 (HF's trainer puts special tokens first) to the last id
  and every other id one lower;
- ~1 MB of held-out varied text and the fixture's edge cases, encoded by zerotask with the
  written tokenizer.json and with vocab.json + merges.txt alone: the same ids, whose count and
  SHA-256 equal those HF gave with that tokenizer.json (tests/data/tokenizer_train/expected.json);
- small corpora built to force ties, runs of one character and short vocabularies: the SHA-256
  of the written model (vocabulary and merges) equals the one HF's trainer gave (expected.json);
- a plain text file and --out: the token file is <|endoftext|> then the document's ids.
When `tokenizers` imports in the python named by ZT_TOKENIZERS_PYTHON (or in this one), HF is
also run live: it loads the written tokenizer.json and encodes the held-out text and edge cases
(ids compared), and its BpeTrainer learns every corpus here (whole models compared), and also
the fortunes corpus (zt-prepare --fortunes, 4096 tokens) when it is installed.

Usage: test_train_tokenizer.py ZT_PREPARE TEST_TOKENIZER DATA_DIR TMP_DIR
       test_train_tokenizer.py --record ZT_PREPARE TEST_TOKENIZER DATA_DIR TMP_DIR
           (with `tokenizers`: rewrite DATA_DIR/tokenizer_train/expected.json from HF's answers)
       test_train_tokenizer.py --hf-encode DIR TEXT_FILE     (HF side: "count sha256" per line:
                                                               the text, then each edge case)
       test_train_tokenizer.py --hf-train JSONL N OUT.json   (HF side: BpeTrainer, N - 1 tokens,
                                                               then <|endoftext|> added last)
"""
import hashlib
import json
import os
import random
import shutil
import struct
import subprocess
import sys

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "io"))
import make_tokenizer_fixture as fx  # noqa: E402

EOT = fx.EOT


def sha_ids(ids):
    return hashlib.sha256(b"".join(struct.pack("<i", i) for i in ids)).hexdigest()


def model_sha(tok_json):
    """SHA-256 of a tokenizer.json's model: vocabulary by id, then merges as "left right"."""
    model = tok_json["model"]
    vocab = sorted(((i, s) for s, i in model["vocab"].items() if s != EOT))
    merges = [m if isinstance(m, str) else " ".join(m) for m in model["merges"]]
    return hashlib.sha256(json.dumps([vocab, merges]).encode()).hexdigest()


def stress_docs(seed):
    """a small corpus made of few characters: runs, ties and repeated words"""
    rng = random.Random(seed)
    if seed % 2:
        alph = rng.choice(["ab", "abc", "abcd", "aab", "xyz"])
        words = ["".join(rng.choice(alph) for _ in range(rng.randint(2, 10)))
                 for _ in range(rng.randint(3, 40))]
        return [" ".join(rng.choice(words) for _ in range(rng.randint(1, 50)))
                for _ in range(rng.randint(5, 100))]
    alph = rng.choice(["ab", "abc", "a ", "xy z", "ab\n\t ", "é😀a"])
    docs = []
    for _ in range(rng.randint(5, 200)):
        parts = [rng.choice(alph) * rng.randint(1, 12) if rng.random() < 0.5 else
                 "".join(rng.choice(alph) for _ in range(rng.randint(1, 8)))
                 for _ in range(rng.randint(1, 30))]
        docs.append("".join(parts))
    return docs


STRESS = [(seed, random.Random(seed).choice([257, 258, 260, 270, 300, 400, 1000]))
          for seed in range(24)]


# ---------------------------------------------------------------------------------------------
# the HF side (run under a python with `tokenizers`)

def hf_encode(d, text_path):
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
    with open(text_path, "rb") as f:
        ids = tok.encode(f.read().decode("utf-8")).ids
    print(len(ids), sha_ids(ids))
    for s in fx.EDGE:
        ids = tok.encode(s).ids
        print(len(ids), sha_ids(ids))


def hf_train(jsonl, n, out):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=n - 1, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    with open(jsonl, encoding="utf-8") as f:
        docs = [json.loads(line)["text"] for line in f]
    tok.train_from_iterator(docs, trainer=trainer)
    tok.add_special_tokens([EOT])
    tok.save(out)


# ---------------------------------------------------------------------------------------------
# the zerotask side

class Run:
    def __init__(self, prep, enc, data, tmp):
        self.prep, self.enc, self.data, self.tmp = prep, enc, data, tmp
        shutil.rmtree(tmp, ignore_errors=True)
        os.makedirs(tmp)
        self.fails = []
        py = os.environ.get("ZT_TOKENIZERS_PYTHON", sys.executable)
        self.py = py if subprocess.run([py, "-c", "import tokenizers"],
                                       capture_output=True).returncode == 0 else None

    def path(self, name):
        return os.path.join(self.tmp, name)

    def check(self, what, ok, detail=""):
        print("%s %s%s" % ("ok  " if ok else "FAIL", what, ": " + detail if detail else ""))
        if not ok:
            self.fails.append(what)

    def write_jsonl(self, name, docs):
        with open(self.path(name), "w", encoding="utf-8") as f:
            for d in docs:
                f.write(json.dumps({"text": d}) + "\n")
        return self.path(name)

    def train(self, inputs, dirname, n, extra=()):
        d = self.path(dirname)
        r = subprocess.run([self.prep] + list(inputs) + ["--train-tokenizer", d, "--vocab-size",
                                                         str(n)] + list(extra),
                           capture_output=True, text=True)
        if r.returncode != 0:
            raise SystemExit("zt-prepare failed (%d): %s" % (r.returncode, r.stderr.strip()))
        print(r.stdout.strip())
        with open(os.path.join(d, "tokenizer.json"), encoding="utf-8") as f:
            return d, json.load(f)

    def zt_ids(self, d, text):
        """zerotask's ids of text with d's tokenizer (test_tokenizer also checks the decode)"""
        if not text:  # nothing to encode (test_tokenizer --encode would write no ids)
            return []
        with open(self.path("doc.txt"), "wb") as f:
            f.write(text.encode())
        subprocess.run([self.enc, "--encode", d, self.path("doc.txt"), self.path("doc.ids")],
                       check=True)
        with open(self.path("doc.ids"), "rb") as f:
            raw = f.read()
        return list(struct.unpack("<%di" % (len(raw) // 4), raw))

    def hf(self, *args):
        return subprocess.run([self.py, os.path.abspath(__file__)] + list(args), check=True,
                              capture_output=True, text=True).stdout.split("\n")


def check_against_fixture(run, tok):
    """merges and vocabulary against HF's recorded training on the same documents"""
    with open(os.path.join(run.data, "tokenizer", "tokenizer.json"), encoding="utf-8") as f:
        hf = json.load(f)
    ours = [tuple(m.split(" ")) for m in tok["model"]["merges"]]
    theirs = [tuple(m) if not isinstance(m, str) else tuple(m.split(" "))
              for m in hf["model"]["merges"]]
    first = next((i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b), None)
    run.check("merges equal HF BpeTrainer's recorded merges", ours == theirs,
              "%d vs %d merges%s" % (len(ours), len(theirs),
                                     "" if first is None else ", first difference at %d" % first))
    n = len(hf["model"]["vocab"])
    want = {s: (n - 1 if s == EOT else i - 1) for s, i in hf["model"]["vocab"].items()}
    run.check("vocabulary is HF's with <|endoftext|> last", tok["model"]["vocab"] == want and
              tok["added_tokens"][0]["id"] == n - 1, "%d tokens, <|endoftext|> = %d"
              % (len(tok["model"]["vocab"]), tok["added_tokens"][0]["id"]))


def held_out(run, d, exp):
    """~1 MB of held-out text and the edge cases: zerotask's ids (both file forms) against the
    recorded HF ids and, live, against HF itself"""
    text = fx.text(fx.TEST_SEED, fx.TEST_BYTES)
    two = run.path("two-files")
    os.makedirs(two, exist_ok=True)
    for name in ("vocab.json", "merges.txt"):
        shutil.copy(os.path.join(d, name), two)
    ids = run.zt_ids(d, text)
    ours = ["%d %s" % (len(ids), sha_ids(ids))]
    same_forms = run.zt_ids(two, text) == ids
    for s in fx.EDGE:
        e = run.zt_ids(d, s)
        same_forms = same_forms and run.zt_ids(two, s) == e
        ours.append("%d %s" % (len(e), sha_ids(e)))
    run.check("tokenizer.json and vocab.json + merges.txt give the same ids", same_forms)
    print("held-out: %d bytes -> %s; %d edge cases" % (len(text.encode()), ours[0], len(fx.EDGE)))
    if exp:
        run.check("held-out ids equal the recorded HF ids", ours[0] == exp["held_out"],
                  "HF %s" % exp["held_out"])
        run.check("edge-case ids equal the recorded HF ids", ours[1:] == exp["edge"])
    if run.py:
        with open(run.path("held.txt"), "wb") as f:
            f.write(text.encode())
        live = [l for l in run.hf("--hf-encode", d, run.path("held.txt")) if l]
        run.check("live HF loads tokenizer.json and gives the same held-out ids",
                  live[0] == ours[0], "HF %s" % live[0])
        bad = [fx.EDGE[i] for i in range(len(fx.EDGE)) if live[1 + i] != ours[1 + i]]
        run.check("live HF gives the same ids on %d edge cases" % len(fx.EDGE), not bad,
                  "differ: %r" % bad[:5] if bad else "")
    return ours


def stress(run, exp):
    """small corpora: the model's SHA-256 against HF's (recorded, and live)"""
    got = {}
    for seed, n in STRESS:
        jsonl = run.write_jsonl("stress%d.jsonl" % seed, stress_docs(seed))
        _, tok = run.train([jsonl], "stress%d" % seed, n)
        got[str(seed)] = model_sha(tok)
        if run.py:
            run.hf("--hf-train", jsonl, str(n), run.path("hf%d.json" % seed))
            with open(run.path("hf%d.json" % seed), encoding="utf-8") as f:
                hf = json.load(f)
            hf["model"]["vocab"][EOT] = hf["added_tokens"][0]["id"]
            hf["model"]["merges"] = [" ".join(m) if not isinstance(m, str) else m
                                     for m in hf["model"]["merges"]]
            run.check("corpus %d (vocab %d): live HF learns the same model" % (seed, n),
                      hf["model"]["vocab"] == tok["model"]["vocab"] and
                      hf["model"]["merges"] == tok["model"]["merges"] and
                      hf["added_tokens"][0]["id"] == tok["added_tokens"][0]["id"])
    if exp:
        bad = [s for s in got if got[s] != exp["stress"].get(s)]
        run.check("%d small corpora: models equal HF's recorded ones" % len(got), not bad,
                  "differ: corpora %s" % bad if bad else "")
    return got


def fortunes_live(run):
    """zt-prepare --fortunes against HF's trainer on the same files (each file one document)"""
    d = os.environ.get("ZT_FORTUNES_DIR") or "/usr/share/games/fortunes"
    if not run.py or not os.path.isdir(d):
        return
    names = sorted(n for n in os.listdir(d) if not n.startswith(".") and
                   not n.endswith((".dat", ".u8")) and os.path.isfile(os.path.join(d, n)))
    docs = []
    for n in names:
        with open(os.path.join(d, n), "rb") as f:
            docs.append(f.read().decode("utf-8"))
    jsonl = run.write_jsonl("fortunes.jsonl", docs)
    _, tok = run.train(["--fortunes"], "fortunes", 4096)
    run.hf("--hf-train", jsonl, "4096", run.path("hf-fortunes.json"))
    with open(run.path("hf-fortunes.json"), encoding="utf-8") as f:
        hf = json.load(f)
    hf["model"]["vocab"][EOT] = hf["added_tokens"][0]["id"]
    merges = [" ".join(m) if not isinstance(m, str) else m for m in hf["model"]["merges"]]
    run.check("fortunes (%d files, vocab 4096): live HF learns the same model" % len(docs),
              hf["model"]["vocab"] == tok["model"]["vocab"] and merges == tok["model"]["merges"],
              "%d merges" % len(merges))


def text_and_out(run):
    """a plain text file as one document, and --out tokenizing it with the new tokenizer"""
    doc = "Hello hello HELLO, it's 3.14 o'clock!\n\tHello  world 東京 😀\n" * 20
    with open(run.path("plain.txt"), "w", encoding="utf-8") as f:
        f.write(doc)
    d, tok = run.train([run.path("plain.txt")], "plain", 300, ["--out", run.path("plain.bin")])
    with open(run.path("plain.bin"), "rb") as f:
        raw = f.read()
    head = struct.unpack("<256i", raw[:1024])
    tokens = list(struct.unpack("<%dH" % head[2], raw[1024:]))
    eot = tok["added_tokens"][0]["id"]
    run.check("--out: <|endoftext|> then the document's ids", head[0] == 20240520 and
              tokens == [eot] + run.zt_ids(d, doc), "%d tokens, <|endoftext|> = %d"
              % (len(tokens), eot))


def main():
    if sys.argv[1] == "--hf-encode":
        return hf_encode(sys.argv[2], sys.argv[3])
    if sys.argv[1] == "--hf-train":
        return hf_train(sys.argv[2], int(sys.argv[3]), sys.argv[4])
    record = sys.argv[1] == "--record"
    run = Run(*sys.argv[2 if record else 1:][:4])
    exp_path = os.path.join(run.data, "tokenizer_train", "expected.json")
    exp = None
    if not record:
        with open(exp_path, encoding="utf-8") as f:
            exp = json.load(f)
    if record and not run.py:
        sys.exit("--record needs `tokenizers` (set ZT_TOKENIZERS_PYTHON)")
    print("live HF: %s" % (run.py or "no `tokenizers` found; recorded oracles only"))
    jsonl = run.write_jsonl("corpus.jsonl", fx.text(fx.TRAIN_SEED, fx.TRAIN_BYTES).split("\n"))
    d, tok = run.train([jsonl], "fixture", fx.VOCAB)
    check_against_fixture(run, tok)
    ours = held_out(run, d, exp)
    got = stress(run, exp)
    fortunes_live(run)
    text_and_out(run)
    if record and not run.fails:
        os.makedirs(os.path.dirname(exp_path), exist_ok=True)
        with open(exp_path, "w", encoding="utf-8") as f:
            json.dump({"about": "HF `tokenizers` answers for tests/apps/test_train_tokenizer.py: "
                                "ids (count, SHA-256 of little-endian int32) of the held-out "
                                "text and of each edge case with the trained tokenizer.json; "
                                "SHA-256 of the model HF's BpeTrainer learns from each small "
                                "corpus", "held_out": ours[0], "edge": ours[1:],
                       "stress": got}, f, indent=1)
            f.write("\n")
        print("recorded %s" % exp_path)
    if run.fails:
        print("test_train_tokenizer: %d check(s) failed: %s" % (len(run.fails),
                                                                "; ".join(run.fails)))
        sys.exit(1)
    print("test_train_tokenizer: all checks passed")


if __name__ == "__main__":
    main()
