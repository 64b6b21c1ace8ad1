"""GPT-2 written plainly in PyTorch, the peer model of Trident's GPT-2 benchmarks
(benchmarks/gpt2_train_torch.py on the CPU, benchmarks/gpt2_cuda_torch.py on a GPU): pre-LayerNorm
blocks, tanh GELU, learned positions, the output layer tied to the token embedding, no dropout,
N(0, 0.02) weights. `fused` attention is F.scaled_dot_product_attention (PyTorch 2); otherwise the
composition a PyTorch 1.13 user writes (masked scores, softmax, product).
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, T, H, C, fused):
        super().__init__()
        self.H, self.C, self.fused = H, C, fused
        self.ln_1 = nn.LayerNorm(C)
        self.c_attn = nn.Linear(C, 3 * C)
        self.c_proj = nn.Linear(C, C)
        self.ln_2 = nn.LayerNorm(C)
        self.c_fc = nn.Linear(C, 4 * C)
        self.mlp_proj = nn.Linear(4 * C, C)
        if not fused:
            self.register_buffer("mask", torch.tril(torch.ones(T, T, dtype=torch.bool)))

    def forward(self, x):
        b, t, _ = x.shape
        H, C = self.H, self.C
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
        q, k, v = (z.view(b, t, H, C // H).transpose(1, 2) for z in (q, k, v))
        if self.fused:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) / math.sqrt(C // H)
            y = att.masked_fill(~self.mask[:t, :t], float("-inf")).softmax(dim=-1) @ v
        x = x + self.c_proj(y.transpose(1, 2).reshape(b, t, C))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, T, V, L, H, C, fused):
        super().__init__()
        self.V = V
        self.wte = nn.Embedding(V, C)
        self.wpe = nn.Embedding(T, C)
        self.h = nn.ModuleList(Block(T, H, C, fused) for _ in range(L))
        self.ln_f = nn.LayerNorm(C)
        for p in self.parameters():
            if p.dim() >= 2:
                nn.init.normal_(p, std=0.02)

    def forward(self, idx, targets):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        for blk in self.h:
            x = blk(x)
        logits = self.ln_f(x) @ self.wte.weight.t()  # tied output layer
        return F.cross_entropy(logits.float().view(-1, self.V), targets.view(-1))
