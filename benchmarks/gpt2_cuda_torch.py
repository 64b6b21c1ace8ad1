#!/usr/bin/env python3
"""The model of benchmarks/gpt2_cuda_bench.cpp written plainly in PyTorch on the same GPU: GPT-2
124M (12 layers, 12 heads, width 768, vocabulary 50257, context 1024), batch 8, bf16 autocast
with f32 master weights, fused attention (F.scaled_dot_product_attention), AdamW (fused), no
dropout, random tokens. Prints JSON like the C++ program: the median step time of STEPS steps after
3 warm-up steps, each ended by reading the loss. MFU counts the FLOPs of apps/mfu.h's NOTE [MFU]
for GPT-2 against --peak-tflops, the peak the C++ benchmark used (its "peak_tflops": gpu-check.sh
passes it), so that both sides divide by the same number; without it "mfu" is null.
"sdpa_backend": the backend F.scaled_dot_product_attention picks for the model's attention in
training (bf16 [B, H, T, C / H], causal; attention_cuda_torch.sdpa_backend).

    python3 benchmarks/gpt2_cuda_torch.py [BATCH] [STEPS] [--peak-tflops P]
"""
import argparse
import json
import time

import torch

from attention_cuda_torch import sdpa_backend
from gpt2_torch_model import GPT

T, V, L, H, C = 1024, 50257, 12, 12, 768


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("batch", type=int, nargs="?", default=8)
    ap.add_argument("steps", type=int, nargs="?", default=10)
    ap.add_argument("--peak-tflops", type=float, default=0.0, help="dense peak TFLOP/s for MFU (0: none)")
    a = ap.parse_args()
    batch, steps = a.batch, a.steps
    torch.manual_seed(1)
    model = GPT(T, V, L, H, C, fused=True).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1, fused=True)
    x = torch.randint(0, V, (batch, T), device="cuda")
    y = torch.randint(0, V, (batch, T), device="cuda")
    probe = torch.randn(batch, H, T, C // H, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    backend = sdpa_backend(probe, probe, probe)
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
    # NOTE [MFU] (apps/mfu.h): 6 FLOPs per parameter whose products every position runs (all but
    # wpe, a lookup; wte is the tied output layer) plus 12 L T C for attention, as gpt2_cuda_bench.
    flops_per_token = 6 * (n - model.wpe.weight.numel()) + 12 * L * C * T
    mfu = tps * flops_per_token / (a.peak_tflops * 1e12) if a.peak_tflops > 0 else None
    print(json.dumps({"tokens_per_s": tps, "step_ms": med * 1e3, "mfu": mfu,
                      "peak_tflops": a.peak_tflops if a.peak_tflops > 0 else None, "parameters": n, "last_loss": last,
                      "sdpa_backend": backend}))


if __name__ == "__main__":
    main()
