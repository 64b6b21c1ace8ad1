"""torch.optim's side of tests/nn/torch_optim_oracle_test.cpp (NOTE [Optimizers against PyTorch]).

    /usr/bin/python3 tests/nn/torch_optim_oracle.py FILE.safetensors

FILE holds the initial parameters "init.<i>", the gradients of every update "grad.<s>.<i>", and
for each case the parameters Trident had after update s, "<case>.step.<s>.<i>". Each case below
builds the same optimizer (and learning-rate scheduler) with torch.optim, runs the same updates
and compares the parameters after each (normwise relative difference at most 1e-12). Exits 0
when all agree, 1 otherwise, 2 when the file and this list of cases disagree.
"""
import math
import os
import sys

import torch
from torch.optim import SGD, Adam, AdamW, RMSprop
from torch.optim.lr_scheduler import ExponentialLR, PolynomialLR, StepLR

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from safetensors_io import load  # noqa: E402  (tests/safetensors_io.py)

TOL = 1e-12


CASES = {
    "sgd_nesterov_weight_decay": lambda p: (SGD(p, lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.05), None),
    "sgd_dampening": lambda p: (SGD(p, lr=0.05, momentum=0.8, dampening=0.3), None),
    "sgd_plain_step_lr": lambda p: (lambda o: (o, StepLR(o, step_size=2, gamma=0.5)))(SGD(p, lr=0.2)),
    "rmsprop_centered_momentum_weight_decay": lambda p: (
        RMSprop(p, lr=0.01, alpha=0.9, eps=1e-3, weight_decay=0.05, momentum=0.5, centered=True), None),
    "rmsprop_plain": lambda p: (RMSprop(p, lr=0.01, eps=1e-3), None),
    "adam_l2_amsgrad": lambda p: (Adam(p, lr=0.01, betas=(0.8, 0.95), eps=1e-3, weight_decay=0.1, amsgrad=True), None),
    "adam_exponential_lr": lambda p: (lambda o: (o, ExponentialLR(o, gamma=0.7)))(Adam(p, lr=0.02, eps=1e-3)),
    "adamw_groups_polynomial_lr": lambda p: (lambda o: (o, PolynomialLR(o, total_iters=8, power=2.0)))(
        AdamW([{"params": [p[0], p[2]], "weight_decay": 0.1, "lr": 0.02}, {"params": [p[1]], "weight_decay": 0.0, "lr": 0.01}],
              betas=(0.9, 0.99), eps=1e-3)),
}


CLIPS = {  # name: (max_norm, norm_type), norm_type None for clip_grad_value_
    "clip_norm2": (1.0, 2.0),
    "clip_norm2_above_max": (100.0, 2.0),
    "clip_norm_inf": (0.5, math.inf),
    "clip_norm3": (2.0, 3.0),
    "clip_value": (0.7, None),
}


def check_clipping(W, n):
    """torch.nn.utils.clip_grad_norm_ / clip_grad_value_ on update 0's gradients."""
    failed = []
    names = sorted({k.split(".")[0] for k in W if ".clipped." in k})
    if set(names) != set(CLIPS):
        print(f"clipping cases only in the file: {sorted(set(names) - set(CLIPS))}; only here: {sorted(set(CLIPS) - set(names))}")
        return ["clipping cases"]
    for name in names:
        max_norm, p = CLIPS[name]
        params = [W[f"init.{i}"].clone().requires_grad_(True) for i in range(n)]
        for i, t in enumerate(params):
            t.grad = W[f"grad.0.{i}"].clone()
        if p is None:
            torch.nn.utils.clip_grad_value_(params, max_norm)
            total = 0.0
        else:
            total = float(torch.nn.utils.clip_grad_norm_(params, max_norm, p))
        diffs = [(W[f"{name}.clipped.{i}"] - t.grad).abs().max().item() / t.grad.abs().max().item() for i, t in enumerate(params)]
        dn = abs(W[f"{name}.norm"].item() - total) / max(abs(total), 1e-300)
        ok = max(diffs) <= TOL and dn <= TOL
        print(f"{name}: clipped gradients within {max(diffs):.3e}, total norm {W[name + '.norm'].item():.6g} vs {total:.6g}"
              + ("" if ok else "  FAILED"))
        if not ok:
            failed.append(name)
    return failed


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    W = load(sys.argv[1])
    n = len([k for k in W if k.startswith("init.")])
    steps = len({k.split(".")[1] for k in W if k.startswith("grad.")})
    names = sorted({k.split(".")[0] for k in W if ".step." in k})
    failed, worst = check_clipping(W, n), 0.0
    if set(names) != set(CASES):
        print(f"cases only in the file: {sorted(set(names) - set(CASES))}; only here: {sorted(set(CASES) - set(names))}")
        return 2
    for name in names:
        p = [W[f"init.{i}"].clone().requires_grad_(True) for i in range(n)]
        opt, sched = CASES[name](p)
        case_worst = 0.0
        for s in range(steps):
            for i in range(n):
                p[i].grad = W[f"grad.{s}.{i}"].clone()
            opt.step()
            if sched is not None:
                sched.step()
            for i in range(n):
                got, ref = W[f"{name}.step.{s}.{i}"], p[i].detach()
                r = (got - ref).abs().max().item() / ref.abs().max().item()
                case_worst = max(case_worst, r)
                if not r <= TOL:
                    failed.append(f"{name}.step.{s}.{i}")
                    print(f"{name}: update {s}, parameter {i}: normwise relative difference {r:.3e}\n"
                          f"  Trident {got.flatten()[:6].tolist()}\n  PyTorch {ref.flatten()[:6].tolist()}")
        worst = max(worst, case_worst)
        print(f"{name}: {steps} updates, worst normwise relative difference {case_worst:.3e}")
    print(f"{len(names)} optimizers and {len(CLIPS)} clippings, worst {worst:.3e}, tolerance {TOL:.0e}: " + ("OK" if not failed else "FAILED " + " ".join(sorted(set(f.rsplit('.', 2)[0] for f in failed)))))
    return 0 if not failed else 1


if __name__ == "__main__":
    sys.exit(main())
