"""Writes a tiny train and validation token shard for the apps' end-to-end tests.

llm.c's format: a header of 256 int32 (magic 20240520, version 1, token count), then uint16
tokens. The stream is a repetitive 97-token cycle over ids < 500, which a small model learns
quickly. Usage: make_tiny_shards.py DIR TRAIN_TOKENS VAL_TOKENS
"""
import struct
import sys


def shard(path, n, offset):
    toks = [((i + offset) * 37) % 97 * 5 for i in range(n)]
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", 20240520, 1, n, *([0] * 253)))
        f.write(struct.pack("<%dH" % n, *toks))


if __name__ == "__main__":
    d, n_train, n_val = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    shard(d + "/tiny_train_000000.bin", n_train, 0)
    shard(d + "/tiny_val_000000.bin", n_val, 11)
