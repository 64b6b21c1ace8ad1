"""PyTorch twin of benchmarks/attention_cuda_bench.cpp: F.scaled_dot_product_attention (its
fused flash kernels) on the same shapes, bf16, causal, forward and forward + backward, timed
with CUDA events; prints rows in the same format, each ending with the sdpa backend PyTorch's
dispatcher picked for the forward and for the forward + backward (torch._fused_sdp_choice, the
choice F.scaled_dot_product_attention makes under the torch.backends.cuda *_sdp_enabled flags,
which the header line prints), and a last line "sdpa backends: ..." that scripts/gpu-check.sh
puts in its row. Exits 1 (after the rows it could measure) when a shape fails.
  python3 benchmarks/attention_cuda_torch.py [--iters N] [--batch B] [--heads H] [--seq T]
"""
import argparse
import sys

import torch
import torch.nn.functional as F


def sdpa_backend(q, k, v):
    """The backend F.scaled_dot_product_attention dispatches to for these inputs (in this grad
    mode): flash, efficient, cudnn, math; "unknown (...)" when this torch cannot say."""
    try:
        choice = int(torch._fused_sdp_choice(q, k, v, is_causal=True))
    except (AttributeError, RuntimeError, TypeError) as e:
        return f"unknown ({type(e).__name__})"
    try:
        from torch.nn.attention import SDPBackend  # torch >= 2.2
    except ImportError:
        SDPBackend = getattr(torch.backends.cuda, "SDPBackend", None)  # torch 2.0, 2.1
    try:
        name = SDPBackend(choice).name.lower()
    except (TypeError, ValueError):
        # aten's enum: sdp_utils_cpp.h SDPBackend {error = -1, math, flash_attention, efficient_attention, cudnn_attention}
        name = {-1: "error", 0: "math", 1: "flash_attention", 2: "efficient_attention", 3: "cudnn_attention"}.get(choice, str(choice))
    return name.replace("_attention", "")


def sdpa_flags():
    flags = []
    for name in ("flash", "mem_efficient", "math", "cudnn"):
        fn = getattr(torch.backends.cuda, f"{name}_sdp_enabled", None)
        if fn is not None:
            flags.append(f"{name} {'on' if fn() else 'off'}")
    return ", ".join(flags)


def run(B, H, T, D, iters):
    g = torch.Generator(device="cuda").manual_seed(1)
    mk = lambda: torch.randn(B, H, T, D, device="cuda", generator=g).to(torch.bfloat16)
    q, k, v, dout = mk(), mk(), mk(), mk()
    ql, kl, vl = (x.detach().requires_grad_() for x in (q, k, v))
    with torch.no_grad():
        fwd_backend = sdpa_backend(q, k, v)
    fb_backend = sdpa_backend(ql, kl, vl)

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
    return times, f"{fwd_backend}/{fb_backend}"


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
    print(f"torch {torch.__version__} F.scaled_dot_product_attention, bf16, causal, B={B} H={H} T={T}, {a.iters} iterations;"
          f" sdpa flags: {sdpa_flags()}; backend column: forward/forward+backward")
    backends, failed = [], []
    for D in (64, 128):
        try:
            (fwd, fb), backend = run(B, H, T, D, a.iters)
        except Exception as e:  # noqa: BLE001: any failure is the row's, reported and counted
            print(f"{'PyTorch sdpa':<13} {D:5d} FAILED: {type(e).__name__}: {e}", file=sys.stderr)
            print(f"{'PyTorch sdpa':<13} {D:5d} FAILED ({type(e).__name__})")
            failed.append(D)
            continue
        fwd_flops = 4.0 * B * H * T * T * D / 2.0
        print(f"{'PyTorch sdpa':<13} {D:5d} {fwd:12.3f} {fwd_flops / (fwd * 1e-3) / 1e12:12.2f} {fb:14.3f} "
              f"{fwd_flops * 3.5 / (fb * 1e-3) / 1e12:16.2f}  {backend}")
        backends.append(f"D={D} {backend}")
    print(f"sdpa backends: T={T} {', '.join(backends) or 'none'}" + (f"; FAILED D={failed}" if failed else ""))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
