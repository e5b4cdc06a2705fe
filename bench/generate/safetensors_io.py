"""bench/generate/safetensors_io.py: read and write safetensors files by hand (standard library
only), for the benchmark's model converters; the `safetensors` package is not needed.

A file is an 8-byte little-endian header length, a JSON header {name: {"dtype", "shape",
"data_offsets": [begin, end]}, "__metadata__": {str: str}} and the tensors' bytes."""
import json
import os
import struct

DTYPE_BYTES = {"F32": 4, "F16": 2, "BF16": 2, "F64": 8, "I64": 8, "I32": 4, "U8": 1}


class Tensor:
    """one tensor: its safetensors dtype name, shape and raw little-endian bytes"""

    def __init__(self, dtype, shape, data):
        self.dtype, self.shape, self.data = dtype, list(shape), data

    def nbytes_expected(self):
        n = DTYPE_BYTES[self.dtype]
        for d in self.shape:
            n *= d
        return n


def read(path):
    """(tensors: {name: Tensor} in file order, metadata: dict); a malformed file raises
    ValueError naming the file and what is wrong"""
    with open(path, "rb") as f:
        blob = f.read()
    if len(blob) < 8:
        raise ValueError("%s: shorter than a safetensors header" % path)
    (hlen,) = struct.unpack("<Q", blob[:8])
    if 8 + hlen > len(blob):
        raise ValueError("%s: header length %d past the end of the file" % (path, hlen))
    header = json.loads(blob[8:8 + hlen].decode("utf-8"))
    base = 8 + hlen
    meta = header.pop("__metadata__", {}) or {}
    tensors = {}
    for name, h in header.items():
        begin, end = h["data_offsets"]
        if h["dtype"] not in DTYPE_BYTES:
            raise ValueError("%s: tensor %s has dtype %s (expected one of %s)"
                             % (path, name, h["dtype"], ", ".join(DTYPE_BYTES)))
        t = Tensor(h["dtype"], h["shape"], blob[base + begin:base + end])
        if len(t.data) != t.nbytes_expected() or base + end > len(blob):
            raise ValueError("%s: tensor %s holds %d bytes, its shape %s needs %d"
                             % (path, name, len(t.data), t.shape, t.nbytes_expected()))
        tensors[name] = t
    return tensors, meta


def write(path, tensors, metadata=None):
    """write {name: Tensor} (in that order) with the given string metadata; the header is padded
    with spaces to a multiple of 8 bytes, as the reference writer does"""
    header, offset = {}, 0
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    for name, t in tensors.items():
        header[name] = {"dtype": t.dtype, "shape": t.shape,
                        "data_offsets": [offset, offset + len(t.data)]}
        offset += len(t.data)
    hbytes = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hbytes += b" " * (-len(hbytes) % 8)
    with open(path + ".tmp", "wb") as f:
        f.write(struct.pack("<Q", len(hbytes)))
        f.write(hbytes)
        for t in tensors.values():
            f.write(t.data)
    os.replace(path + ".tmp", path)
