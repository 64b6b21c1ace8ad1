#!/usr/bin/env python3
"""Times the cases of cuda_ops_bench in PyTorch on the same GPU and prints the comparison.

    cuda_ops_bench > trident.jsonl
    python3 benchmarks/cuda_ops_torch.py trident.jsonl

Each case is timed as cuda_ops_bench times it: 3 warm-up calls, then ITERS back-to-back calls
between two CUDA events. The ratio is PyTorch's time over Trident's (above 1: Trident is faster).
"""
import json
import sys

import torch

ITERS = 20
DTYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}


def op(name):
    return {
        "matmul": lambda x: x[0] @ x[1],
        "matmul_tf32": lambda x: x[0] @ x[1],
        "linear": lambda x: torch.nn.functional.linear(x[0], x[1], x[2]),
        "bmm": lambda x: torch.bmm(x[0], x[1]),
        "add": lambda x: x[0] + x[1],
        "gelu_tanh": lambda x: torch.nn.functional.gelu(x[0], approximate="tanh"),
        "softmax": lambda x: torch.softmax(x[0], -1),
        "sum_rows": lambda x: x[0].sum(1),
        "sum_cols": lambda x: x[0].sum(0),
        "transpose_copy": lambda x: x[0].t().contiguous(),
        "layer_norm": lambda x: torch.nn.functional.layer_norm(x[0], x[0].shape[-1:], x[1], x[2]),
        "add_layer_norm": lambda x: torch.nn.functional.layer_norm(x[0] + x[1], x[0].shape[-1:], x[2], x[3]),
        "conv2d_3x3": lambda x: torch.nn.functional.conv2d(x[0], x[1], padding=1),
        "conv2d_3x3_fwdbwd": lambda x: conv_fwdbwd(x, 1),
        "conv2d_dw3x3_fwdbwd": lambda x: conv_fwdbwd(x, x[0].shape[1]),
        "max_pool2d_3x3s2": lambda x: torch.nn.functional.max_pool2d(x[0], 3, 2, 1),
        "avg_pool2d_3x3s1": lambda x: torch.nn.functional.avg_pool2d(x[0], 3, 1, 1, count_include_pad=False),
        "copy": lambda x: x[0].clone(),
        "cross_entropy": lambda x: torch.nn.functional.cross_entropy(x[0], targets(x[0])),
        "cross_entropy_fwdbwd": lambda x: cross_entropy_fwdbwd(x[0]),
    }.get(name)


_targets = {}


def targets(logits):
    """Class indices for the cross-entropy rows, drawn once per shape."""
    key = tuple(logits.shape)
    if key not in _targets:
        g = torch.Generator(device=logits.device).manual_seed(1)
        _targets[key] = torch.randint(0, logits.shape[1], (logits.shape[0],), device=logits.device, generator=g)
    return _targets[key]


def cross_entropy_fwdbwd(logits):
    with torch.enable_grad():
        a = logits.detach().requires_grad_()
        torch.nn.functional.cross_entropy(a, targets(a)).backward()
        return a.grad


def conv_fwdbwd(x, groups):
    """Forward and both backward passes of a padded 3x3 convolution; x[2] is the output gradient."""
    with torch.enable_grad():
        a, w = x[0].detach().requires_grad_(), x[1].detach().requires_grad_()
        torch.nn.functional.conv2d(a, w, padding=1, groups=groups).backward(x[2])
        return a.grad


def adamw_step(shapes):
    """One AdamW step over the given parameter shapes, with PyTorch's fused (or foreach) kernels."""
    ps = [torch.randn(s, device="cuda").requires_grad_() for s in shapes]
    for p in ps:
        p.grad = torch.full_like(p, 1e-3)
    try:
        opt = torch.optim.AdamW(ps, lr=6e-4, weight_decay=0.1, fused=True)
    except (TypeError, RuntimeError):
        opt = torch.optim.AdamW(ps, lr=6e-4, weight_decay=0.1, foreach=True)
    return opt.step


def time_ms(f):
    for _ in range(3):
        f()
    torch.cuda.synchronize()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(ITERS):
        f()
    stop.record()
    stop.synchronize()
    return start.elapsed_time(stop) / ITERS


def main():
    # Line-buffered: the rows printed so far survive a kill by gpu-check's timeout (stdout is a file).
    sys.stdout.reconfigure(line_buffering=True)
    rows = [json.loads(line) for line in open(sys.argv[1]) if line.startswith("{")]
    # The bandwidth-bound rows as a share of the device's copy bandwidth, Trident's copy row of
    # the same run (issue 4's goal for layer norm, softmax + cross-entropy and AdamW: >= 70%).
    copy = next((r["bytes"] / r["ms"] / 1e6 for r in rows if r["name"] == "copy"), None)

    def of_copy(gbps):
        return f"  ({100 * gbps / copy:.0f}% of copy)" if copy else ""

    print(f"{'op':<21}{'dtype':<6}{'shapes':<34}{'trident ms':>11}{'torch ms':>10}{'ratio':>7}  throughput (trident / torch)")
    with torch.no_grad():
        for r in rows:
            f = op(r["name"])
            if r["name"] == "adamw_gpt2":
                step = adamw_step(r["shapes"])
                t = time_ms(step)
                a, b = r["bytes"] / r["ms"] / 1e6, r["bytes"] / t / 1e6
                shapes = f"{len(r['shapes'])} tensors"
                print(f"{r['name']:<21}{r['dtype']:<6}{shapes:<34}{r['ms']:>11.4f}{t:>10.4f}{t / r['ms']:>7.2f}  {a:,.0f} / {b:,.0f} GB/s{of_copy(a)}")
                continue
            if f is None:
                print(f"{r['name']:<21}{r['dtype']:<6}(no PyTorch twin)")
                continue
            torch.backends.cuda.matmul.allow_tf32 = r["name"] == "matmul_tf32"
            x = [torch.randn(s, device="cuda", dtype=DTYPES[r["dtype"]]) for s in r["shapes"]]
            t = time_ms(lambda: f(x))
            torch.backends.cuda.matmul.allow_tf32 = False
            if r["flops"] and r["name"] not in ("add",):
                unit, a, b = "TFLOP/s", r["flops"] / r["ms"] / 1e9, r["flops"] / t / 1e9
            else:
                unit, a, b = "GB/s", r["bytes"] / r["ms"] / 1e6, r["bytes"] / t / 1e6
            shapes = "x".join("[" + ",".join(map(str, s)) + "]" for s in r["shapes"])
            share = of_copy(a) if unit == "GB/s" and r["name"] != "copy" else ""
            print(f"{r['name']:<21}{r['dtype']:<6}{shapes:<34}{r['ms']:>11.4f}{t:>10.4f}{t / r['ms']:>7.2f}  {a:,.0f} / {b:,.0f} {unit}{share}")
    print(f"(torch {torch.__version__}, {torch.cuda.get_device_name()})")


if __name__ == "__main__":
    main()
