#!/usr/bin/env python3
"""Checks the training programs' logged losses (the metrics JSON lines of train_gpt2/train_bert).

  app_losses.py compare A.jsonl B.jsonl --rtol R [--from S]
      every step logged in both (steps >= S) has |a - b| <= R |a|; both must log the same steps
  app_losses.py falls A.jsonl
      every logged loss is finite, and the mean of the last 5 is below the mean of the first 5
Prints one summary line (and the worst steps); exit status 1 when the check fails.
Used by scripts/app-cuda-check.sh; runs by hand on any two metrics files.
"""
import argparse
import json
import math
import sys


def losses(path, first=0):
    out = {}
    with open(path) as f:
        for line in f:
            j = json.loads(line)
            if "loss" in j and j["step"] >= first:
                out[j["step"]] = j["loss"]
    if not out:
        sys.exit(f"{path}: no logged losses")
    return out


def compare(a_path, b_path, rtol, first):
    a, b = losses(a_path, first), losses(b_path, first)
    if sorted(a) != sorted(b):
        print(f"FAIL: the runs logged different steps: {sorted(a)} vs {sorted(b)}")
        return 1
    rel = {s: abs(a[s] - b[s]) / max(abs(a[s]), 1e-30) for s in a}
    worst = max(rel, key=rel.get)
    bad = [s for s in sorted(a) if not (rel[s] <= rtol)]
    for s in bad[:5]:
        print(f"  step {s}: {a[s]:.9g} vs {b[s]:.9g} (relative {rel[s]:.2e})")
    verdict = "ok" if not bad else "FAIL"
    print(f"{verdict}: {len(a)} steps, max relative difference {rel[worst]:.2e} at step {worst} "
          f"(tolerance {rtol:g}); losses {a[min(a)]:.4f} -> {a[max(a)]:.4f}")
    return 0 if not bad else 1


def falls(path):
    a = losses(path)
    v = [a[s] for s in sorted(a)]
    if not all(math.isfinite(x) for x in v):
        print(f"FAIL: a non-finite loss: {v}")
        return 1
    k = min(5, len(v) // 2)
    head, tail = sum(v[:k]) / k, sum(v[-k:]) / k
    ok = tail < head
    print(f"{'ok' if ok else 'FAIL'}: {len(v)} finite losses, mean of the first {k} {head:.4f}, "
          f"of the last {k} {tail:.4f}")
    return 0 if ok else 1


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("compare")
    c.add_argument("a")
    c.add_argument("b")
    c.add_argument("--rtol", type=float, required=True)
    c.add_argument("--from", dest="first", type=int, default=0)
    f = sub.add_parser("falls")
    f.add_argument("a")
    args = p.parse_args()
    if args.cmd == "compare":
        return compare(args.a, args.b, args.rtol, args.first)
    return falls(args.a)


if __name__ == "__main__":
    sys.exit(main())
