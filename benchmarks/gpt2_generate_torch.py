"""The generation of benchmarks/gpt2_generate_bench.cpp written plainly in PyTorch (1.13, CPU):
GPT-2 124M (vocabulary 50257, context 1024, random N(0, 0.02) weights), one sequence, a prompt of
P tokens, then N greedy tokens with a key/value cache (each block writes its keys and values into
buffers allocated once for the P + N positions and attends over those written; every position's
logits are computed), as Trident's make_cache and forward_cached do.
Prints JSON {"prefill_ms", "token_ms", "tokens_per_s", "threads"}: the medians of `runs`
generations after a warm-up.

    python3 benchmarks/gpt2_generate_torch.py THREADS [P] [N] [RUNS]
"""
import json
import math
import sys
import time

import torch
import torch.nn.functional as F

from gpt2_torch_model import GPT

V, T, L, H, C = 50257, 1024, 12, 12, 768


def block_cached(blk, x, cache, start):
    """cache: this block's keys and values [1, H, capacity, C / H], allocated once (as Trident's
    make_cache does: no allocation per step); positions [start, start + t) are written."""
    b, t, _ = x.shape
    q, k, v = blk.c_attn(blk.ln_1(x)).split(C, dim=2)
    q, k, v = (z.view(b, t, H, C // H).transpose(1, 2) for z in (q, k, v))
    cache[0][:, :, start:start + t] = k
    cache[1][:, :, start:start + t] = v
    s = start + t
    k, v = cache[0][:, :, :s], cache[1][:, :, :s]
    att = (q @ k.transpose(-2, -1)) / math.sqrt(C // H)
    if t > 1:  # causal within the new positions (they follow the `start` cached ones)
        mask = torch.ones(t, s, dtype=torch.bool).tril(diagonal=start)
        att = att.masked_fill(~mask, float("-inf"))
    y = att.softmax(dim=-1) @ v
    x = x + blk.c_proj(y.transpose(1, 2).reshape(b, t, C))
    return x + blk.mlp_proj(F.gelu(blk.c_fc(blk.ln_2(x)), approximate="tanh"))


def forward_cached(model, idx, caches, start):
    x = model.wte(idx) + model.wpe(torch.arange(start, start + idx.shape[1]))
    for blk, cache in zip(model.h, caches):
        x = block_cached(blk, x, cache, start)
    return model.ln_f(x) @ model.wte.weight.t()


def main():
    threads = int(sys.argv[1])
    P = int(sys.argv[2]) if len(sys.argv) > 2 else 64
    N = int(sys.argv[3]) if len(sys.argv) > 3 else 64
    runs = int(sys.argv[4]) if len(sys.argv) > 4 else 3
    torch.set_num_threads(threads)
    torch.manual_seed(1)
    model = GPT(T, V, L, H, C, fused=False).eval()
    prompt = torch.randint(0, V, (1, P))
    prefill, token = [], []
    with torch.no_grad():
        for r in range(runs + 1):
            caches = [[torch.zeros(1, H, P + N, C // H) for _ in range(2)] for _ in range(L)]
            at = []
            t0 = time.perf_counter()
            logits = forward_cached(model, prompt, caches, 0)
            n = P
            for i in range(N):
                nxt = logits[:, -1, :].argmax(dim=-1, keepdim=True)
                at.append((time.perf_counter() - t0) * 1e3)
                if i + 1 < N:
                    logits = forward_cached(model, nxt, caches, n)
                    n += 1
            if r == 0:
                continue
            prefill.append(at[0])
            token += [b - a for a, b in zip(at, at[1:])]
    prefill.sort()
    token.sort()
    tok = token[len(token) // 2]
    print(json.dumps({"prefill_ms": round(prefill[len(prefill) // 2], 2), "token_ms": round(tok, 3),
                      "tokens_per_s": round(1e3 / tok, 2), "threads": torch.get_num_threads(),
                      "parameters": sum(p.numel() for p in model.parameters())}))


if __name__ == "__main__":
    main()
