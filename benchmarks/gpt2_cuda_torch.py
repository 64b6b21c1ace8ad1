#!/usr/bin/env python3
"""The model of benchmarks/gpt2_cuda_bench.cpp written plainly in PyTorch on the same GPU: GPT-2
124M (12 layers, 12 heads, width 768, vocabulary 50257, context 1024), batch 8, bf16 autocast
with f32 master weights, fused attention (F.scaled_dot_product_attention), AdamW (fused), no
dropout, random tokens. Prints JSON like the C++ program: the median step time of STEPS steps after
3 warm-up steps, each ended by reading the loss.

    python3 benchmarks/gpt2_cuda_torch.py [BATCH] [STEPS]
"""
import json
import sys
import time

import torch

from gpt2_torch_model import GPT

T, V, L, H, C = 1024, 50257, 12, 12, 768


def main():
    batch = int(sys.argv[1]) if len(sys.argv) > 1 else 8
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 10
    torch.manual_seed(1)
    model = GPT(T, V, L, H, C, fused=True).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1, fused=True)
    x = torch.randint(0, V, (batch, T), device="cuda")
    y = torch.randint(0, V, (batch, T), device="cuda")
    times = []
    for i in range(steps + 3):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(x, y)
        loss.backward()
        opt.step()
        last = loss.item()
        if i >= 3:
            times.append(time.perf_counter() - t0)
    times.sort()
    med = times[len(times) // 2]
    n = sum(p.numel() for p in model.parameters())
    tps = batch * T / med
    print(json.dumps({"tokens_per_s": tps, "step_ms": med * 1e3, "mfu": tps * (6 * n + 12 * L * C * T) / 989e12,
                      "parameters": n, "last_loss": last}))


if __name__ == "__main__":
    main()
