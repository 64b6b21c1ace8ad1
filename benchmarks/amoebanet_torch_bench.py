"""PyTorch twin of benchmarks/amoebanet_bench.cpp: the same AmoebaNet (the TensorFlow TPU
reference's network, as models/amoebanet.h builds it), written plainly in PyTorch, trained on
random images with the same optimizer; prints JSON {"images_per_s", "parameters", "step_ms"}.

    OMP_NUM_THREADS=T python3 amoebanet_torch_bench.py T [--genotype D --cells 6 --filters 32
        --image 32 --batch 32 --steps 6 --classes 10]

It is also a second implementation to check Trident's against: the parameter count must agree
(scripts/bench-amoebanet-vs-torch.sh checks it).
"""
import argparse
import json
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

GENOTYPES = {
    "D": {
        "normal": (["1x1", "max_pool_3x3", "none", "1x7_7x1", "1x1", "1x7_7x1", "max_pool_3x3", "none", "avg_pool_3x3", "1x1"],
                   [1, 1, 1, 0, 0, 0, 2, 2, 1, 5], [0, 3, 4, 6]),
        "reduction": (["max_pool_2x2", "max_pool_3x3", "none", "3x3", "1x7_7x1", "max_pool_3x3", "none", "max_pool_2x2",
                       "avg_pool_3x3", "1x1"], [0, 0, 2, 1, 2, 2, 3, 1, 2, 3], [4, 5, 6]),
    },
    "B": {
        "normal": (["1x1", "max_pool_3x3", "none", "separable_3x3_2", "1x1", "separable_3x3_2", "1x1", "none",
                    "avg_pool_3x3", "1x1"], [1, 1, 1, 0, 1, 0, 2, 2, 1, 5], [0, 3, 4, 6]),
        "reduction": (["max_pool_2x2", "max_pool_3x3", "none", "3x3", "dil_2_separable_5x5_2", "max_pool_3x3", "none",
                       "separable_3x3_2", "avg_pool_3x3", "1x1"], [0, 0, 2, 1, 2, 2, 3, 1, 4, 3], [5, 6]),
    },
}


def cdiv(n, s):
    return (n + s - 1) // s


class ConvBn(nn.Module):
    def __init__(self, cin, cout, k, s, p, relu, eps, mom):
        super().__init__()
        self.relu = relu
        self.conv = nn.Conv2d(cin, cout, k, s, p, bias=False)
        self.bn = nn.BatchNorm2d(cout, eps=eps, momentum=mom)

    def forward(self, x):
        return self.bn(self.conv(F.relu(x) if self.relu else x))


class FactorizedReduction(nn.Module):
    def __init__(self, cin, cout, relu, eps, mom):
        super().__init__()
        self.relu = relu
        self.path1_conv = nn.Conv2d(cin, cout // 2, 1, 2, bias=False)
        self.path2_conv = nn.Conv2d(cin, cout // 2, 1, 2, bias=False)
        self.bn = nn.BatchNorm2d(cout, eps=eps, momentum=mom)

    def forward(self, x):
        h = F.relu(x) if self.relu else x
        shifted = F.pad(h, (-1, 1, -1, 1))
        return self.bn(torch.cat([self.path1_conv(h), self.path2_conv(shifted)], 1))


class Bottleneck(nn.Module):
    def __init__(self, cin, f, k, factorized, s, eps, mom):
        super().__init__()
        r = f // 4
        w = r if r >= 1 else f
        c = cin
        self.pre = None
        if r >= 1:
            self.pre = ConvBn(cin, w, 1, 1, 0, True, eps, mom)
            c = w
        self.convs = nn.ModuleList()
        if factorized:
            self.convs.append(ConvBn(c, w, (1, k), (1, s), (0, k // 2), True, eps, mom))
            self.convs.append(ConvBn(w, w, (k, 1), (s, 1), (k // 2, 0), True, eps, mom))
        else:
            self.convs.append(ConvBn(c, w, k, s, k // 2, True, eps, mom))
        self.post = ConvBn(w, f, 1, 1, 0, True, eps, mom) if r >= 1 else None

    def forward(self, x):
        if self.pre is not None:
            x = self.pre(x)
        for c in self.convs:
            x = c(x)
        return self.post(x) if self.post is not None else x


class Separable(nn.Module):
    def __init__(self, cin, f, k, n, s, eps, mom):
        super().__init__()
        self.blocks = nn.ModuleList()
        c = cin
        for i in range(n):
            self.blocks.append(nn.ModuleDict({
                "depthwise": nn.Conv2d(c, c, k, s if i == 0 else 1, k // 2, groups=c, bias=False),
                "pointwise": nn.Conv2d(c, f, 1, bias=False),
                "bn": nn.BatchNorm2d(f, eps=eps, momentum=mom)}))
            c = f

    def forward(self, x):
        for b in self.blocks:
            x = b["bn"](b["pointwise"](b["depthwise"](F.relu(x))))
        return x


class Pool(nn.Module):
    def __init__(self, kind, k, s, cin, f, eps, mom):
        super().__init__()
        self.kind, self.k, self.s = kind, k, s
        self.p = k // 2 if k % 2 else 0
        self.proj = ConvBn(cin, f, 1, 1, 0, False, eps, mom) if cin != f else None

    def forward(self, x):
        ceil = self.k % 2 == 0
        if self.kind == "max":
            x = F.max_pool2d(x, self.k, self.s, self.p, ceil_mode=ceil)
        else:
            x = F.avg_pool2d(x, self.k, self.s, self.p, ceil_mode=ceil, count_include_pad=False)
        return self.proj(x) if self.proj is not None else x


def make_op(name, c, f, s, eps, mom):
    if name == "none" and s == 1 and c == f:
        return nn.Identity()
    if name in ("none", "1x1"):
        return ConvBn(c, f, 1, s, 0, True, eps, mom)
    if name == "3x3":
        return Bottleneck(c, f, 3, False, s, eps, mom)
    if name == "1x7_7x1":
        return Bottleneck(c, f, 7, True, s, eps, mom)
    if "pool" in name:
        return Pool(name[:3], int(name[-1]), s, c, f, eps, mom)
    if "separable" in name:
        k = int(name.split("x")[0][-1])
        return Separable(c, f, k, int(name.split("_")[-1]), s, eps, mom)
    raise ValueError(name)


class Cell(nn.Module):
    """cur, prev: (C, H, W) per image; prev None for the first cell."""

    def __init__(self, spec, reduction, f, cur, prev, eps, mom):
        super().__init__()
        ops, inputs, self.concat = spec
        stride = 2 if reduction else 1
        self.has_prev = prev is not None
        p = prev if prev is not None else cur
        self.prev_reduce = None
        if prev is not None and prev[1] != cur[1]:
            self.prev_reduce = FactorizedReduction(prev[0], f, True, eps, mom)
            p = (f, cur[1], cur[2])
        elif prev is not None and prev[0] != f:
            self.prev_reduce = ConvBn(prev[0], f, 1, 1, 0, True, eps, mom)
            p = (f, cur[1], cur[2])
        self.base = ConvBn(cur[0], f, 1, 1, 0, True, eps, mom)
        states = [(f, cur[1], cur[2]), p]
        self.inputs = inputs
        self.ops = nn.ModuleList()
        for i in range(5):
            outs = []
            for j in (2 * i, 2 * i + 1):
                s = stride if inputs[j] < 2 else 1
                c, h, w = states[inputs[j]]
                self.ops.append(make_op(ops[j], c, f, s, eps, mom))
                outs.append((f, cdiv(h, s), cdiv(w, s)))
            assert outs[0] == outs[1]
            states.append(outs[0])
        last = states[-1]
        self.reduce = nn.ModuleDict()
        for k in self.concat:
            if states[k] != last:
                self.reduce[str(k)] = (FactorizedReduction(states[k][0], last[0], False, eps, mom) if states[k][1] != last[1]
                                       else ConvBn(states[k][0], last[0], 1, 1, 0, False, eps, mom))
        self.out = (last[0] * len(self.concat), last[1], last[2])

    def forward(self, cur, prev):
        p = prev if prev is not None else cur
        if self.prev_reduce is not None:
            p = self.prev_reduce(p)
        st = [self.base(cur), p]
        for i in range(5):
            st.append(self.ops[2 * i](st[self.inputs[2 * i]]) + self.ops[2 * i + 1](st[self.inputs[2 * i + 1]]))
        parts = [self.reduce[str(k)](st[k]) if str(k) in self.reduce else st[k] for k in self.concat]
        return torch.cat(parts, 1)


class AmoebaNet(nn.Module):
    def __init__(self, genotype="D", cells=6, filters=32, classes=10, image=32, in_channels=3, stem_filters=32,
                 dropout=0.5, eps=1e-3, mom=0.1):
        super().__init__()
        g = GENOTYPES[genotype]
        imagenet = image >= 64
        s = 2 if imagenet else 1
        self.stem_conv = nn.Conv2d(in_channels, stem_filters, 3, s, 0, bias=False)
        self.stem_bn = nn.BatchNorm2d(stem_filters, eps=eps, momentum=mom)
        n = (image - 3) // s + 1
        cur, prev = (stem_filters, n, n), None
        self.cells = nn.ModuleList()

        def add(red, f):
            nonlocal cur, prev
            c = Cell(g["reduction"] if red else g["normal"], red, f, cur, prev, eps, mom)
            self.cells.append(c)
            prev, cur = cur, c.out
        if imagenet:
            add(True, filters // 4)
            add(True, filters // 2)
        red = [cells // 3, 2 * cells // 3]
        f = filters
        for i in range(cells):
            if i in red:
                f *= 2
                add(True, f)
            add(False, f)
        self.dropout = dropout
        self.fc = nn.Linear(cur[0], classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x):
        cur, prev = self.stem_bn(self.stem_conv(x)), None
        for c in self.cells:
            cur, prev = c(cur, prev), cur
        x = F.relu(cur).mean((2, 3))
        return self.fc(F.dropout(x, self.dropout, self.training))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("threads", type=int)
    ap.add_argument("--genotype", default="D")
    ap.add_argument("--cells", type=int, default=6)
    ap.add_argument("--filters", type=int, default=32)
    ap.add_argument("--image", type=int, default=32)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--classes", type=int, default=10)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    ap.add_argument("--count-only", action="store_true")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    model = AmoebaNet(a.genotype, a.cells, a.filters, a.classes, a.image)
    params = sum(p.numel() for p in model.parameters())
    if a.count_only:
        print(json.dumps({"parameters": params}))
        return
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(a.batch, 3, a.image, a.image)
    y = torch.randint(0, a.classes, (a.batch,))
    times = []
    for step in range(a.steps + 1):  # the first step warms up
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.precision == "bf16"):
            loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        if step > 0:
            times.append(time.perf_counter() - t0)
    times.sort()
    med = times[len(times) // 2]
    print(json.dumps({"images_per_s": a.batch / med, "parameters": params, "step_ms": med * 1e3,
                      "loss": float(loss), "finite": math.isfinite(float(loss))}))


if __name__ == "__main__":
    main()
