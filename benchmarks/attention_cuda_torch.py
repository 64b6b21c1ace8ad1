"""PyTorch twin of benchmarks/attention_cuda_bench.cpp: F.scaled_dot_product_attention (its
fused flash kernels) on the same shapes, bf16, causal, forward and forward + backward, timed
with CUDA events; prints rows in the same format.
  python3 benchmarks/attention_cuda_torch.py [--iters N] [--batch B] [--heads H] [--seq T]
"""
import argparse
import sys

import torch
import torch.nn.functional as F


def run(B, H, T, D, iters):
    g = torch.Generator(device="cuda").manual_seed(1)
    mk = lambda: torch.randn(B, H, T, D, device="cuda", generator=g).to(torch.bfloat16)
    q, k, v, dout = mk(), mk(), mk(), mk()
    ql, kl, vl = (x.detach().requires_grad_() for x in (q, k, v))

    def forward():
        with torch.no_grad():
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    def forward_backward():
        out = F.scaled_dot_product_attention(ql, kl, vl, is_causal=True)
        out.backward(dout)
        ql.grad = kl.grad = vl.grad = None

    times = []
    for fn in (forward, forward_backward):
        for _ in range(3):
            fn()
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop) / iters)
    return times


def main():
    # Line-buffered: the rows printed so far survive a kill by gpu-check's timeout (stdout is a file).
    sys.stdout.reconfigure(line_buffering=True)
    ap = argparse.ArgumentParser()
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--seq", type=int, default=1024)
    a = ap.parse_args()
    B, H, T = a.batch, a.heads, a.seq
    print(f"torch {torch.__version__} F.scaled_dot_product_attention, bf16, causal, B={B} H={H} T={T}, {a.iters} iterations")
    for D in (64, 128):
        fwd, fb = run(B, H, T, D, a.iters)
        fwd_flops = 4.0 * B * H * T * T * D / 2.0
        print(f"{'PyTorch sdpa':<13} {D:5d} {fwd:12.3f} {fwd_flops / (fwd * 1e-3) / 1e12:12.2f} {fb:14.3f} "
              f"{fwd_flops * 3.5 / (fb * 1e-3) / 1e12:16.2f}")


if __name__ == "__main__":
    main()
