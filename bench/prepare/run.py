#!/usr/bin/env python3
"""bench/prepare/run.py: zt-prepare's throughput against Hugging Face `tokenizers` batch encoding,
both on the same documents with GPT-2's tokenizer and the same number of threads.

The corpus: the fortunes of Debian's fortunes packages (/usr/share/games/fortunes, each file
split at its "%" lines), shuffled with --seed and joined --per-doc at a time into documents,
round after round until --mb MB of text; written as one JSONL file ({"text": ...} a line).
Reproducible: the same packages and seed give the same bytes.

Each round, alternating:
  zerotask  zt-prepare --tokenizer DIR CORPUS.jsonl --threads N --out OUT.bin --quiet, its
            wall time as a process (start-up, loading the 50257-token tokenizer, reading and
            parsing the JSONL, encoding, writing the token file with its fsync);
  HF        bench/prepare/hf_worker.py under --hf-python with RAYON_NUM_THREADS=N and
            TOKENIZERS_PARALLELISM=true: Tokenizer.encode_batch over the same documents, its
            own time only (loading and reading excluded).
MB/s = the documents' UTF-8 text bytes / seconds (the same numerator for both). The tokens must
be equal: zt-prepare's whole token file against <|endoftext|> + HF's ids of each document, by
SHA-256, every round. Prints each round, the medians and the ratio (target: >= 1.5).

Usage: bench/prepare/run.py [--mb 32] [--threads 2] [--rounds 3] [--seed 1] [--per-doc 12]
           [--zt-prepare build/apps/zt-prepare] [--tokenizer /work/venv/gpt2-tokenizer]
           [--hf-python /work/venv/hf/bin/python] [--work DIR] [--json OUT]
Setup: bash bench/generate/setup (the hf virtualenv with `tokenizers`, GPT-2's vocab.json and
merges.txt); a Release build of zt-prepare.
"""
import argparse
import hashlib
import json
import os
import random
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import benchlib  # noqa: E402  bench/benchlib.py: lscpu_flags
FORTUNES = "/usr/share/games/fortunes"


def fortunes():
    """every fortune of the plain fortune files, in file-name order"""
    out = []
    for name in sorted(os.listdir(FORTUNES)):
        p = os.path.join(FORTUNES, name)
        if name.startswith(".") or name.endswith((".dat", ".u8")) or not os.path.isfile(p):
            continue
        with open(p, "rb") as f:
            text = f.read().decode("utf-8", errors="replace")
        out += [s.strip("\n") for s in text.split("\n%\n") if s.strip()]
    return out


def make_corpus(path, mb, seed, per_doc):
    """the JSONL corpus; returns (documents, UTF-8 text bytes)"""
    pool, rng = fortunes(), random.Random(seed)
    docs, size = [], 0
    while size < mb * 1e6:
        rng.shuffle(pool)
        for i in range(0, len(pool) - per_doc + 1, per_doc):
            d = "\n\n".join(pool[i:i + per_doc]) + "\n"
            docs.append(d)
            size += len(d.encode("utf-8"))
            if size >= mb * 1e6:
                break
    with open(path, "w", encoding="utf-8") as f:
        for d in docs:
            f.write(json.dumps({"text": d}, ensure_ascii=False) + "\n")
    return len(docs), size


def token_sha(path):
    """the token count and SHA-256 of an llm.c token file's tokens"""
    with open(path, "rb") as f:
        raw = f.read()
    return (len(raw) - 1024) // 2, hashlib.sha256(raw[1024:]).hexdigest()


def run_zt(a, corpus, out):
    cmd = [a.zt_prepare, "--tokenizer", a.tokenizer, corpus, "--threads", str(a.threads),
           "--out", out, "--quiet"]
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    if p.returncode != 0:
        sys.exit("bench/prepare: zt-prepare failed (%d): %s" % (p.returncode, p.stderr.strip()))
    n, sha = token_sha(out)
    return {"seconds": seconds, "tokens": n, "sha256": sha, "summary": p.stdout.strip()}


def run_hf(a, corpus):
    env = dict(os.environ, RAYON_NUM_THREADS=str(a.threads), TOKENIZERS_PARALLELISM="true")
    p = subprocess.run([a.hf_python, os.path.join(HERE, "hf_worker.py"), "--tokenizer",
                        a.tokenizer, "--docs", corpus], capture_output=True, text=True, env=env)
    if p.returncode != 0:
        sys.exit("bench/prepare: hf_worker failed (%d): %s" % (p.returncode, p.stderr.strip()))
    return json.loads(p.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mb", type=float, default=32)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--per-doc", type=int, default=12)
    ap.add_argument("--zt-prepare", default=os.path.join(ROOT, "build", "apps", "zt-prepare"))
    ap.add_argument("--tokenizer", default="/work/venv/gpt2-tokenizer")
    ap.add_argument("--hf-python", default="/work/venv/hf/bin/python")
    ap.add_argument("--work", default="/tmp/zt-bench-prepare")
    ap.add_argument("--json")
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    corpus, out = os.path.join(a.work, "corpus.jsonl"), os.path.join(a.work, "zt.bin")
    ndocs, nbytes = make_corpus(corpus, a.mb, a.seed, a.per_doc)
    model, flags = benchlib.lscpu_flags()
    print("bench/prepare: %s, %d CPUs, load average %.2f; corpus %d documents, %.1f MB of text "
          "(seed %d); GPT-2 tokenizer %s; %d threads each" % (model, os.cpu_count(),
                                                             os.getloadavg()[0], ndocs,
                                                             nbytes / 1e6, a.seed,
                                                             a.tokenizer, a.threads))
    print("lscpu flags: %s" % flags)
    rows = {"zerotask": [], "HF": []}
    for r in range(a.rounds):
        order = ("zerotask", "HF") if r % 2 == 0 else ("HF", "zerotask")
        for side in order:
            res = run_zt(a, corpus, out) if side == "zerotask" else run_hf(a, corpus)
            res["mb_s"] = nbytes / 1e6 / res["seconds"]
            rows[side].append(res)
            print("  round %d %-8s %7.3f s  %6.2f MB/s  %d tokens  sha256 %s" %
                  (r + 1, side, res["seconds"], res["mb_s"], res["tokens"], res["sha256"][:16]))
    same = all(z["sha256"] == h["sha256"] and z["tokens"] == h["tokens"]
               for z, h in zip(rows["zerotask"], rows["HF"]))
    zt = statistics.median(x["mb_s"] for x in rows["zerotask"])
    hf = statistics.median(x["mb_s"] for x in rows["HF"])
    print(rows["zerotask"][-1]["summary"])
    print("tokens: %s" % ("identical (%d, every round)" % rows["HF"][0]["tokens"] if same
                          else "DIFFERENT"))
    print("median: zerotask %.2f MB/s, HF tokenizers %.2f MB/s: %.2fx (target >= 1.5: %s)" %
          (zt, hf, zt / hf, "met" if zt / hf >= 1.5 and same else "NOT met"))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"cpu": model, "flags": flags, "docs": ndocs, "text_bytes": nbytes,
                       "threads": a.threads, "rounds": rows, "same_tokens": same,
                       "zerotask_mb_s": zt, "hf_mb_s": hf, "ratio": zt / hf}, f, indent=1)
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
