#!/usr/bin/env python3
"""tests/io/st_python.py: the independent side of test_safetensors (json + struct only, no numpy,
no safetensors package).

  st_python.py write <dir>   write <dir>/foreign.safetensors (F32, BF16 and F16 tensors, F16
                             subnormals/inf/nan/-0 included, an unpadded header) and
                             <dir>/foreign.expected (the float32 values each tensor must read as,
                             in header order, converted by Python's own struct 'e'/'f' codecs)
  st_python.py check <file>  parse a file written by zerotask's writer and check the format:
                             header length a multiple of 8, padded with spaces only, tensors in
                             the written order with contiguous offsets, F32 data equal to the
                             pattern test_safetensors.c wrote, and the __metadata__ it gave.
Exit status 0 on success; a message on stderr otherwise.
"""
import json
import math
import struct
import sys


def bf16_bits(x):
    """Top 16 bits of the binary32 encoding (truncation, exactly representable inputs)."""
    return struct.unpack("<I", struct.pack("<f", x))[0] >> 16


def write(d):
    tensors = []  # (name, dtype, shape, raw bytes, expected float32 list)
    a = [i * 0.5 - 1.25 for i in range(6)]
    tensors.append(("a.weight", "F32", [2, 3], struct.pack("<6f", *a), a))
    b_src = [1.0, -2.5, 3.140625, 65536.0, -0.0078125]
    b_bits = [bf16_bits(x) for x in b_src]
    b_exp = [struct.unpack("<f", struct.pack("<I", v << 16))[0] for v in b_bits]
    tensors.append(("b.bf16", "BF16", [5], struct.pack("<5H", *b_bits), b_exp))
    h_src = [0.0, -0.0, 1.0, -2.0, 0.333251953125, 65504.0, 2.0 ** -24, 3 * 2.0 ** -24,
             -(2.0 ** -14) * 0.5, 2.0 ** -14, math.inf, -math.inf, math.nan]
    h_raw = b"".join(struct.pack("<e", x) for x in h_src)
    h_exp = [struct.unpack("<e", h_raw[2 * i:2 * i + 2])[0] for i in range(len(h_src))]
    tensors.append(("h.f16", "F16", [13], h_raw, h_exp))
    header = {"__metadata__": {"format": "pt", "source": "st_python.py"}}
    off = 0
    for name, dt, shape, raw, _ in tensors:
        header[name] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + len(raw)]}
        off += len(raw)
    hj = json.dumps(header, separators=(",", ":")).encode()
    if len(hj) % 8 == 0:
        hj += b" "  # keep it unaligned on purpose: readers must not assume padding
    with open(d + "/foreign.safetensors", "wb") as f:
        f.write(struct.pack("<Q", len(hj)))
        f.write(hj)
        for t in tensors:
            f.write(t[3])
    with open(d + "/foreign.expected", "wb") as f:
        for t in tensors:
            f.write(struct.pack("<%df" % len(t[4]), *t[4]))


def fail(msg):
    sys.stderr.write("st_python.py check: " + msg + "\n")
    sys.exit(1)


def check(path):
    with open(path, "rb") as f:
        buf = f.read()
    n = struct.unpack("<Q", buf[:8])[0]
    if n % 8:
        fail("header length %d is not a multiple of 8" % n)
    raw = buf[8:8 + n]
    text = raw.decode("utf-8")
    stripped = text.rstrip(" ")
    if not stripped.endswith("}") or any(c != " " for c in text[len(stripped):]):
        fail("header is not padded with spaces only")
    pairs = json.loads(stripped, object_pairs_hook=lambda kv: kv)
    keys = [k for k, _ in pairs]
    meta = dict(pairs).get("__metadata__")
    if meta != [("run", "test"), ("step", "7")]:
        fail("metadata %r" % (meta,))
    names = [k for k in keys if k != "__metadata__"]
    want_names = ["z.first", "scalar", "empty", "m.weight"]
    if names != want_names:
        fail("tensor order %r, want %r" % (names, want_names))
    data = buf[8 + n:]
    pos = 0
    for k, v in pairs:
        if k == "__metadata__":
            continue
        v = dict(v)
        if v["dtype"] != "F32":
            fail("%s dtype %s" % (k, v["dtype"]))
        b, e = v["data_offsets"]
        if b != pos:
            fail("%s starts at %d, want %d" % (k, b, pos))
        numel = 1
        for s in v["shape"]:
            numel *= s
        if e - b != 4 * numel:
            fail("%s: %d bytes for shape %r" % (k, e - b, v["shape"]))
        vals = struct.unpack("<%df" % numel, data[b:e])
        # the pattern test_safetensors.c writes: element i of tensor j is j * 100 + i * 0.25
        j = want_names.index(k)
        for i, x in enumerate(vals):
            if x != j * 100 + i * 0.25:
                fail("%s[%d] = %r, want %r" % (k, i, x, j * 100 + i * 0.25))
        pos = e
    if pos != len(data):
        fail("%d data bytes, tensors cover %d" % (len(data), pos))
    print("st_python.py check: ok (%d tensors, header %d bytes)" % (len(names), n))


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "write":
        write(sys.argv[2])
    elif len(sys.argv) == 3 and sys.argv[1] == "check":
        check(sys.argv[2])
    else:
        sys.exit("usage: st_python.py write <dir> | check <file>")
