"""The model of benchmarks/gpt2_train_bench.cpp written plainly in PyTorch (1.13, CPU): GPT-2 with
vocabulary 50304, context 128, 4 layers, 4 heads, width 256, batch 8, AdamW, no dropout, random
tokens. Prints JSON {"tokens_per_s", "step_ms", "threads"}: the median step time.

    python3 benchmarks/gpt2_train_torch.py THREADS [STEPS]
    python3 benchmarks/gpt2_train_torch.py THREADS STEPS hvp   (-> {"grad_ms", "hvp_ms", "threads"})
    python3 benchmarks/gpt2_train_torch.py THREADS STEPS bf16  (the forward under torch.autocast("cpu", bfloat16))

The hvp mode times the gradient (forward + backward) and a Hessian-vector product over every
parameter (forward, backward with create_graph, the dot with v, a second backward), as
bench_gpt2_train's.
"""
import json
import sys
import time

import torch

from gpt2_torch_model import GPT

B, T, V, L, H, C = 8, 128, 50304, 4, 4, 256


def main():
    threads = int(sys.argv[1])
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 10
    torch.set_num_threads(threads)
    torch.manual_seed(1)
    model = GPT(T, V, L, H, C, fused=False)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
    x = torch.randint(0, V, (B, T))
    y = torch.randint(0, V, (B, T))
    if len(sys.argv) > 3 and sys.argv[3] == "hvp":
        return hvp(model, x, y, steps)
    bf16 = len(sys.argv) > 3 and sys.argv[3] == "bf16"
    times = []
    for i in range(steps + 3):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss = model(x, y)
        loss.backward()
        opt.step()
        loss.item()
        if i >= 3:
            times.append(time.perf_counter() - t0)
    times.sort()
    med = times[len(times) // 2]
    print(json.dumps({"tokens_per_s": B * T / med, "step_ms": med * 1e3, "threads": torch.get_num_threads(),
                      "parameters": sum(p.numel() for p in model.parameters()), "last_loss": loss.item()}))


def median_ms(runs, f):
    times = []
    for i in range(runs + 1):
        t0 = time.perf_counter()
        f()
        if i >= 1:
            times.append(time.perf_counter() - t0)
    times.sort()
    return times[len(times) // 2] * 1e3


def hvp(model, x, y, steps):
    params = list(model.parameters())
    vs = [torch.randn_like(p) for p in params]

    def grad():
        torch.autograd.grad(model(x, y), params)[-1].sum().item()

    def hessian_vector():
        g = torch.autograd.grad(model(x, y), params, create_graph=True)
        dot = sum((gi * vi).sum() for gi, vi in zip(g, vs))
        torch.autograd.grad(dot, params)[-1].sum().item()

    grad_ms = median_ms(steps, grad)
    hvp_ms = median_ms(steps, hessian_vector)
    print(json.dumps({"grad_ms": grad_ms, "hvp_ms": hvp_ms, "threads": torch.get_num_threads(),
                      "parameters": sum(p.numel() for p in params)}))


if __name__ == "__main__":
    main()
