"""PyTorch twins of benchmarks/cpu_ops_bench.cpp: same names, same shapes, same work.

Prints JSON {name: median milliseconds}. Run with the thread count as the first argument.
"""
import json
import math
import sys
import time

import torch
import torch.nn.functional as F


def param(shape, seed, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(*shape, generator=g) * scale).detach()


def timed(fn, min_time=1.0, repeats=5, warmup=0.5):
    # Warm-up for `warmup` seconds, not one call: a case measured right after the process starts
    # (scripts/bench-cpu-vs-torch.sh runs one case per process) would otherwise time its first
    # page faults and thread start-up. The Trident side warms up as long (--benchmark_min_warmup_time).
    t0 = time.perf_counter()
    while True:
        fn()
        if time.perf_counter() - t0 >= warmup:
            break
    n, t = 1, 0.0
    while True:  # iterations per repeat: enough for min_time / repeats
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        t = time.perf_counter() - t0
        if t > min_time / repeats or n > 10000:
            break
        n *= 2
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        samples.append((time.perf_counter() - t0) / n)
    samples.sort()
    return samples[len(samples) // 2] * 1e3


def case(leaves, backward, forward):
    for t in leaves:
        t.requires_grad_(backward)

    def step():
        y = forward()
        if backward:
            y.backward(torch.ones_like(y))
            for t in leaves:
                t.grad = None
    return step

# benchmarks/cpu_ops_bench.cpp's kConvSpecs: name, (N, C, H, W), O, (kH, kW), stride, (ph, pw), groups, bias, with fwdbwd.
CONV_SPECS = [
    ("conv2d3x3", "8x64x56x56->64", (8, 64, 56, 56), 64, (3, 3), 1, (1, 1), 1, True, True),
    ("conv2d3x3", "8x256x14x14->256", (8, 256, 14, 14), 256, (3, 3), 1, (1, 1), 1, True, True),
    ("conv2d3x3", "1x128x28x28->128", (1, 128, 28, 28), 128, (3, 3), 1, (1, 1), 1, True, False),
    ("conv2d3x3", "32x64x28x28->64", (32, 64, 28, 28), 64, (3, 3), 1, (1, 1), 1, True, False),
    ("conv2d3x3s2", "8x64x56x56->128", (8, 64, 56, 56), 128, (3, 3), 2, (1, 1), 1, True, True),
    ("conv2d1x7", "8x128x28x28->128", (8, 128, 28, 28), 128, (1, 7), 1, (0, 3), 1, False, True),
    ("conv2d7x1", "8x128x28x28->128", (8, 128, 28, 28), 128, (7, 1), 1, (3, 0), 1, False, False),
    ("depthwise5x5", "8x128x28x28", (8, 128, 28, 28), 128, (5, 5), 1, (2, 2), 128, False, True),
    ("depthwise3x3", "32x64x56x56", (32, 64, 56, 56), 64, (3, 3), 1, (1, 1), 64, False, True),
    ("depthwise3x3", "32x64x15x15", (32, 64, 15, 15), 64, (3, 3), 1, (1, 1), 64, False, "bwd only"),
    ("depthwise3x3s2", "8x128x56x56", (8, 128, 56, 56), 128, (3, 3), 2, (1, 1), 128, False, False),
    ("depthwise5x5s2", "8x128x56x56", (8, 128, 56, 56), 128, (5, 5), 2, (2, 2), 128, False, False),
    ("depthwise7x7", "1x256x14x14", (1, 256, 14, 14), 256, (7, 7), 1, (3, 3), 256, False, True),
    ("conv2d1x1", "32x128x30x30->64", (32, 128, 30, 30), 64, (1, 1), 1, (0, 0), 1, False, "bwd only"),
    ("conv2d1x1", "8x256x28x28->256", (8, 256, 28, 28), 256, (1, 1), 1, (0, 0), 1, False, "bwd only"),
    ("conv2d1x7", "32x8x30x30->8", (32, 8, 30, 30), 8, (1, 7), 1, (0, 3), 1, False, "bwd only"),
    ("conv2d1x1", "32x32x30x30->32", (32, 32, 30, 30), 32, (1, 1), 1, (0, 0), 1, False, "bwd only"),
    ("conv2d1x1s2", "32x128x30x30->32", (32, 128, 30, 30), 32, (1, 1), 2, (0, 0), 1, False, "bwd only"),
    ("conv2d1x1s2", "8x256x56x56->512", (8, 256, 56, 56), 512, (1, 1), 2, (0, 0), 1, False, "bwd only"),
    ("depthwise3x3", "32x32x30x30", (32, 32, 30, 30), 32, (3, 3), 1, (1, 1), 32, False, "bwd only"),
    ("conv2d3x3", "8x512x7x7->512", (8, 512, 7, 7), 512, (3, 3), 1, (1, 1), 1, True, "bwd only"),
    ("depthwise3x3", "32x128x8x8", (32, 128, 8, 8), 128, (3, 3), 1, (1, 1), 128, False, "bwd only"),
]
# The bf16 rows (BM_conv_bf16): op, shape, spec of CONV_SPECS above by its op and shape, passes.
CONV_BF16 = [
    ("conv2d3x3", "8x64x56x56->64", ("fwdbwd",)),
    ("conv2d3x3", "8x256x14x14->256", ("fwd", "fwdbwd")),
    ("conv2d3x3s2", "8x64x56x56->128", ("fwdbwd",)),
    ("conv2d1x7", "8x128x28x28->128", ("fwdbwd",)),
    ("conv2d1x1", "32x128x30x30->64", ("fwdbwd",)),
    ("conv2d1x1", "8x256x28x28->256", ("fwdbwd",)),
    ("depthwise5x5", "8x128x28x28", ("fwdbwd",)),
    ("depthwise3x3", "32x64x56x56", ("fwdbwd",)),
    ("depthwise3x3", "32x64x15x15", ("fwdbwd",)),
    ("conv2d1x7", "32x8x30x30->8", ("fwdbwd",)),
    ("conv2d1x1", "32x32x30x30->32", ("fwdbwd",)),
    ("conv2d1x1s2", "32x128x30x30->32", ("fwdbwd",)),
    ("conv2d1x1s2", "8x256x56x56->512", ("fwdbwd",)),
    ("depthwise3x3", "32x32x30x30", ("fwdbwd",)),
    ("conv2d3x3", "8x512x7x7->512", ("fwd", "fwdbwd")),
    ("depthwise3x3", "32x128x8x8", ("fwdbwd",)),
]


def conv_case(spec, bwd, dtype=torch.float32):
    op, shape, xs, o, k, stride, pad, groups, bias, _ = spec
    x = param(xs, 1).to(dtype)
    w = param((o, xs[1] // groups) + k, 2, 1.0 / math.sqrt(xs[1] // groups * k[0] * k[1])).to(dtype)
    b = param((o,), 3).to(dtype) if bias else None
    leaves = [x, w] + ([b] if bias else [])
    return case(leaves, bwd, lambda x=x, w=w, b=b, stride=stride, pad=pad, groups=groups: F.conv2d(x, w, b, stride, pad, 1, groups))


def conv_cases():
    for spec in CONV_SPECS:
        op, shape, with_bwd = spec[0], spec[1], spec[9]
        passes = {True: (False, True), False: (False,), "bwd only": (True,)}[with_bwd]
        for bwd in passes:
            yield f"{op}/{'fwdbwd' if bwd else 'fwd'}/{shape}", conv_case(spec, bwd)
    for op, shape, passes in CONV_BF16:
        spec = next(s for s in CONV_SPECS if s[0] == op and s[1] == shape)
        for tag in passes:
            yield f"{op}_bf16/{tag}/{shape}", conv_case(spec, tag == "fwdbwd", torch.bfloat16)


def cases():
    a, b = param((1024, 1024), 1), param((1024, 1024), 2)
    yield "matmul/fwd/1024x1024x1024", case([], False, lambda: a @ b)
    for m, k, n in ((1024, 1024, 1024), (1024, 256, 50304)):
        ha, hb = param((m, k), 1).bfloat16().detach(), param((k, n), 2).bfloat16().detach()
        yield f"matmul_bf16/fwd/{m}x{k}x{n}", case([], False, lambda ha=ha, hb=hb: ha @ hb)
    for bwd in (False, True):
        hx, hw = param((1024, 768), 1).bfloat16().detach(), param((3072, 768), 2, 0.02).bfloat16().detach()
        hbias = param((3072,), 3).bfloat16().detach()
        yield f"linear_bf16/{'fwdbwd' if bwd else 'fwd'}/1024x768->3072", case([hx, hw, hbias], bwd,
                                                                               lambda x=hx, w=hw, b=hbias: F.linear(x, w, b))
    for bwd in (False, True):
        ba, bb = param((48, 128, 64), 1), param((48, 64, 128), 2)
        yield f"bmm/{'fwdbwd' if bwd else 'fwd'}/48x128x64x128", case([ba, bb], bwd, lambda ba=ba, bb=bb: torch.matmul(ba, bb))
        x, w, bias = param((1024, 768), 1), param((3072, 768), 2, 0.02), param((3072,), 3)
        yield f"linear/{'fwdbwd' if bwd else 'fwd'}/1024x768->3072", case([x, w, bias], bwd,
                                                                          lambda x=x, w=w, bias=bias: F.linear(x, w, bias))
        q, k, v = param((4, 12, 256, 64), 1), param((4, 12, 256, 64), 2), param((4, 12, 256, 64), 3)
        causal = torch.ones(256, 256, dtype=torch.bool).tril()

        def attn(q=q, k=k, v=v):  # PyTorch 1.13 has no fused attention: the composition a user writes
            s = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(64))
            s = s.masked_fill(~causal, float("-inf"))
            return torch.softmax(s, dim=-1) @ v
        yield f"attention/{'fwdbwd' if bwd else 'fwd'}/4x12x256x64-causal", case([q, k, v], bwd, attn)
        hq, hk, hv = (t.bfloat16().detach() for t in (q, k, v))
        yield f"attention_bf16/{'fwdbwd' if bwd else 'fwd'}/4x12x256x64-causal", case([hq, hk, hv], bwd,
                                                                                    lambda q=hq, k=hk, v=hv: attn(q, k, v))
    yield from conv_cases()
    for bwd in (False, True):
        tag = "fwdbwd" if bwd else "fwd"
        x, w, b = param((4096, 768), 1), param((768,), 2), param((768,), 3)
        yield f"layer_norm/{tag}/4096x768", case([x, w, b], bwd, lambda x=x, w=w, b=b: F.layer_norm(x, (768,), w, b))
        for stride, name in ((1, "max_pool3x3"), (2, "max_pool3x3s2")):
            x = param((32, 64, 30, 30), 1)
            yield f"{name}/{tag}/32x64x30x30", case([x], bwd, lambda x=x, s=stride: F.max_pool2d(x, 3, s, 1))
        x = param((32, 64, 30, 30), 1)
        yield f"avg_pool3x3/{tag}/32x64x30x30", case([x], bwd, lambda x=x: F.avg_pool2d(x, 3, 1, 1, False, False))
        x = param((32, 128, 30, 30), 1)
        yield f"relu/{tag}/32x128x30x30", case([x], bwd, lambda x=x: torch.relu(x))
        x, w, b = param((32, 128, 30, 30), 1), param((128,), 2), param((128,), 3)
        mean, var = torch.zeros(128), torch.ones(128)
        yield f"batch_norm/{tag}/32x128x30x30", case([x, w, b], bwd,
                                                     lambda x=x, w=w, b=b, m=mean, v=var: F.batch_norm(x, m, v, w, b, True))
        x = param((4096, 1024), 1, 3.0)
        yield f"softmax/{tag}/4096x1024", case([x], bwd, lambda x=x: torch.softmax(x, -1))
        logits = param((256, 50304), 1, 2.0)
        target = torch.randint(0, 50257, (256,), generator=torch.Generator().manual_seed(4))
        yield f"cross_entropy/{tag}/256x50304", case([logits], bwd, lambda l=logits, t=target: F.cross_entropy(l, t))
        hx, hw = param((1024, 256), 1).bfloat16().detach(), param((50304, 256), 2, 0.02).bfloat16().detach()
        ht = torch.randint(0, 50304, (1024,), generator=torch.Generator().manual_seed(4))
        yield f"linear_cross_entropy_bf16/{tag}/1024x256->50304", case(
            [hx, hw], bwd, lambda x=hx, w=hw, t=ht: F.cross_entropy(F.linear(x, w), t))


def main():
    threads = int(sys.argv[1]) if len(sys.argv) > 1 else 1
    only = set(sys.argv[2:])
    torch.set_num_threads(threads)
    out = {}
    for name, fn in cases():
        if only and name not in only:
            continue
        out[name] = timed(fn)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
