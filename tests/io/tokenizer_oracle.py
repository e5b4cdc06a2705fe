#!/usr/bin/env python3
"""tests/io/tokenizer_oracle.py: io/tokenizer.c on ~1 MB of varied text equals Hugging Face.

Generates the test text with make_tokenizer_fixture.py's seeded generator (no `tokenizers`
needed), encodes it with `test_tokenizer --encode` (which also checks that the ids decode back to
the text's bytes) and compares the id count and the SHA-256 of
the ids (little-endian int32) with expected.json, which HF wrote. When `tokenizers` imports in
the python named by ZT_TOKENIZERS_PYTHON (or in this one), the same text is also encoded live by
HF and compared.

Usage: tokenizer_oracle.py TEST_TOKENIZER DATA_DIR TMP_DIR
"""
import hashlib
import json
import os
import subprocess
import sys

exe, data, tmp = sys.argv[1:4]
here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
import make_tokenizer_fixture as fx  # noqa: E402

os.makedirs(tmp, exist_ok=True)
with open(os.path.join(data, "expected.json"), encoding="utf-8") as f:
    exp = json.load(f)
text_path, ids_path = os.path.join(tmp, "text.txt"), os.path.join(tmp, "ids.bin")
with open(text_path, "wb") as f:
    f.write(fx.text(exp["test_seed"], exp["test_bytes"]).encode())
subprocess.run([exe, "--encode", data, text_path, ids_path], check=True)
with open(ids_path, "rb") as f:
    raw = f.read()
count, sha = len(raw) // 4, hashlib.sha256(raw).hexdigest()
print("tokenizer_oracle: %d bytes of text -> %d ids, sha256 %s" % (os.path.getsize(text_path),
                                                                   count, sha))
ok = count == exp["count"] and sha == exp["sha256"]
print("tokenizer_oracle: fixture (HF) %d ids, sha256 %s: %s" % (exp["count"], exp["sha256"],
                                                                "same" if ok else "DIFFERENT"))
py = os.environ.get("ZT_TOKENIZERS_PYTHON", sys.executable)
live = subprocess.run([py, "-c", "import tokenizers"], capture_output=True).returncode == 0
if live:
    out = subprocess.run([py, os.path.join(here, "make_tokenizer_fixture.py"), "--check", data,
                          text_path], check=True, capture_output=True, text=True).stdout.split()
    same = int(out[0]) == count and out[1] == sha
    print("tokenizer_oracle: live HF (%s) %s ids, sha256 %s: %s"
          % (py, out[0], out[1], "same" if same else "DIFFERENT"))
    ok = ok and same
else:
    print("tokenizer_oracle: no `tokenizers` in %s; fixture comparison only" % py)
sys.exit(0 if ok else 1)
