"""bench/prepare/hf_worker.py: the Hugging Face `tokenizers` side of bench/prepare/run.py, run by
the peer's Python (/work/venv/hf). One process per round: loads GPT-2's vocab.json + merges.txt
as a byte-level BPE (ByteLevel pre-tokenizer without a prefix space, <|endoftext|> a special
token: what zt-prepare --tokenizer reads from the same files), reads the documents, then times
Tokenizer.encode_batch over all of them (RAYON_NUM_THREADS and TOKENIZERS_PARALLELISM come from
the environment). Loading and reading are outside the timing; zt-prepare's wall time has both.
Prints one JSON line: seconds of encode_batch, the token count and the SHA-256 of the tokens
zt-prepare writes for the same documents (<|endoftext|> then the ids of each, as uint16).

Usage: PYTHON bench/prepare/hf_worker.py --tokenizer DIR --docs DOCS.jsonl"""
import argparse
import array
import hashlib
import json
import os
import time

from tokenizers import Tokenizer, models, pre_tokenizers


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--docs", required=True)
    a = ap.parse_args()
    tok = Tokenizer(models.BPE.from_file(os.path.join(a.tokenizer, "vocab.json"),
                                         os.path.join(a.tokenizer, "merges.txt")))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.add_special_tokens(["<|endoftext|>"])
    eot = tok.token_to_id("<|endoftext|>")
    with open(a.docs, encoding="utf-8") as f:
        docs = [json.loads(line)["text"] for line in f]
    t0 = time.perf_counter()
    enc = tok.encode_batch(docs)
    seconds = time.perf_counter() - t0
    ids = array.array("H")
    for e in enc:
        ids.append(eot)
        ids.extend(e.ids)
    print(json.dumps({"seconds": seconds, "tokens": len(ids),
                      "sha256": hashlib.sha256(ids.tobytes()).hexdigest()}))


main()
