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
import torch.nn as nn
import torch.nn.functional as F

T, V, L, H, C = 1024, 50257, 12, 12, 768


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1 = nn.LayerNorm(C)
        self.c_attn = nn.Linear(C, 3 * C)
        self.c_proj = nn.Linear(C, C)
        self.ln_2 = nn.LayerNorm(C)
        self.c_fc = nn.Linear(C, 4 * C)
        self.mlp_proj = nn.Linear(4 * C, C)

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
        q, k, v = (z.view(b, t, H, C // H).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.c_proj(y.transpose(1, 2).reshape(b, t, C))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(V, C)
        self.wpe = nn.Embedding(T, C)
        self.h = nn.ModuleList(Block() for _ in range(L))
        self.ln_f = nn.LayerNorm(C)
        for p in self.parameters():
            if p.dim() >= 2:
                nn.init.normal_(p, std=0.02)

    def forward(self, idx, targets):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        for blk in self.h:
            x = blk(x)
        logits = self.ln_f(x) @ self.wte.weight.t()  # tied output layer
        return F.cross_entropy(logits.float().view(-1, V), targets.view(-1))


def main():
    batch = int(sys.argv[1]) if len(sys.argv) > 1 else 8
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 10
    torch.manual_seed(1)
    model = GPT().cuda()
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
