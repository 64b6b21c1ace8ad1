"""safetensors files for the tests that use PyTorch as their oracle, read and written by hand
(Debian has no Python safetensors package): an 8-byte little-endian header length, the JSON
header (names, dtypes, shapes, data offsets, "__metadata__"), then the raw little-endian data.
"""
import json
import struct

import torch

DTYPES = {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
          "I64": torch.int64, "I32": torch.int32, "U8": torch.uint8, "BOOL": torch.bool}


def load(path):
    """{name: tensor} of the file (the metadata is left out)."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    out = {}
    for name, v in header.items():
        if name == "__metadata__":
            continue
        s, e = v["data_offsets"]
        raw = bytearray(data[8 + n + s : 8 + n + e])
        dt = DTYPES[v["dtype"]]
        out[name] = (torch.frombuffer(raw, dtype=dt) if raw else torch.empty(0, dtype=dt)).reshape(v["shape"])
    return out


def save(path, tensors, metadata):
    """A file as Hugging Face's writer lays it out: names sorted, data packed in that order,
    "__metadata__", the JSON header padded with spaces to a multiple of 8 bytes."""
    codes = {dt: code for code, dt in DTYPES.items()}
    header, blobs, offset = {}, [], 0
    for name in sorted(tensors):
        t = tensors[name].detach().contiguous()
        raw = t.numpy().tobytes()
        header[name] = {"dtype": codes[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    header["__metadata__"] = metadata
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for raw in blobs:
            f.write(raw)
