"""Writes a GPT-2 vocabulary (encoder.json, vocab.bpe) for the 500 ids of the apps' tiny models:
the 256 bytes under GPT-2's byte alphabet, "t256".."t498", and <|endoftext|> = 499; no merges,
so every byte of a prompt is its own token, and ids 256-498 decode to "t<id>".
Usage: make_tiny_vocab.py DIR
"""
import json
import os
import sys


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    # GPT-2's byte-to-character table: printable bytes map to themselves, the rest to 256 + n.
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\xa1"), ord("\xac") + 1)) + list(range(ord("\xae"), ord("\xff") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    sym = {b: chr(c) for b, c in zip(bs, cs)}
    enc = {sym[b]: b for b in range(256)}
    enc.update({f"t{i}": i for i in range(256, 499)})
    enc["<|endoftext|>"] = 499
    with open(os.path.join(out, "encoder.json"), "w") as f:
        json.dump(enc, f)
    with open(os.path.join(out, "vocab.bpe"), "w") as f:
        f.write("#version: 0.2\n")


if __name__ == "__main__":
    main()
