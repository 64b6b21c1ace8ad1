"""PyTorch's side of tests/ops/torch_oracle_test.cpp (NOTE [Ops against PyTorch] there).

    /usr/bin/python3 tests/ops/torch_oracle.py FILE.safetensors

FILE holds, per case, the inputs "<case>.in.<i>", Trident's output "<case>.out", the upstream
gradient "<case>.gout", Trident's gradients "<case>.grad.<i>" and the inputs an op updates in
place after it ran ("<case>.after.<i>"). Each case's expression below is what a PyTorch user
writes for the same call; the script evaluates it on the same inputs, back-propagates gout,
and compares everything (normwise relative difference at most 1e-12; integer and boolean
outputs exactly). Exits 0 when all agree, 1 otherwise (each difference printed), 2 when the
file and this list of cases disagree.
"""
import math
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from safetensors_io import load  # noqa: E402  (tests/safetensors_io.py)

TOL = 1e-12


def sdpa(q, k, v, mask=None, causal=False, scale=None):
    """Scaled dot-product attention as PyTorch 2's F.scaled_dot_product_attention defines it
    (1.13 lacks it): a boolean mask keeps the True entries, a float mask is added, the causal
    mask is the top-left lower triangle of the L x S scores."""
    s = (q @ k.transpose(-2, -1)) * (scale if scale is not None else 1.0 / math.sqrt(q.shape[-1]))
    if causal:
        L, S = s.shape[-2:]
        s = s.masked_fill(~torch.ones(L, S, dtype=torch.bool).tril(), float("-inf"))
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else s + mask
    return s.softmax(-1) @ v


def mha(x, w, b, wo, bo, masked_out):
    """torch.nn.MultiheadAttention's computation for self-attention (batch first), 2 heads."""
    xt = x.transpose(0, 1)
    y, _ = F.multi_head_attention_forward(xt, xt, xt, x.shape[-1], 2, w, b, None, None, False, 0.0, wo, bo,
                                          training=False, need_weights=False, attn_mask=masked_out)
    return y.transpose(0, 1)


def batch_norm_training(x, rm, rv, w, b):
    out = F.batch_norm(x, rm, rv, w, b, training=True, momentum=0.3, eps=1e-3)
    return out  # rm and rv are updated in place, as Trident's


CASES = {
    "cross_entropy_weight_smoothing_ignore": lambda x, t, w: F.cross_entropy(x, t, weight=w, ignore_index=-100, label_smoothing=0.15),
    "cross_entropy_k_dims_sum": lambda x, t: F.cross_entropy(x, t, reduction="sum", label_smoothing=0.2),
    "cross_entropy_none": lambda x, t: F.cross_entropy(x, t, reduction="none"),
    "nll_loss_weight_ignore": lambda x, t, w: F.nll_loss(x, t, weight=w),
    "mse_loss_sum": lambda a, b: F.mse_loss(a, b, reduction="sum"),
    "bce_with_logits_pos_weight": lambda x, y, pw: F.binary_cross_entropy_with_logits(x, y, pos_weight=pw),
    "layer_norm_two_dims": lambda x, w, b: F.layer_norm(x, (4, 6), w, b, 1e-5),
    "batch_norm_training": batch_norm_training,
    "batch_norm_eval": lambda x, rm, rv, w, b: F.batch_norm(x, rm, rv, w, b, training=False, momentum=0.1, eps=1e-5),
    "conv2d_stride_pad_dilation_groups": lambda x, w, b: F.conv2d(x, w, b, (2, 1), (1, 2), (2, 1), 2),
    "conv2d_depthwise_stride2": lambda x, w: F.conv2d(x, w, None, 2, 2, 1, 3),
    "max_pool2d_ceil_padding_dilation": lambda x: F.max_pool2d(x, (3, 2), (2, 2), (1, 1), (1, 2), ceil_mode=True),
    "max_pool2d_ties": lambda x: F.max_pool2d(x, 2, 1),
    "avg_pool2d_ceil_exclude_pad": lambda x: F.avg_pool2d(x, 3, 2, 1, ceil_mode=True, count_include_pad=False),
    "avg_pool2d_ceil_include_pad": lambda x: F.avg_pool2d(x, (3, 2), (2, 3), 1, ceil_mode=True, count_include_pad=True),
    "adaptive_avg_pool2d_uneven": lambda x: F.adaptive_avg_pool2d(x, (3, 4)),
    "softmax_middle_dim": lambda x: x.softmax(1),
    "log_softmax_first_dim": lambda x: x.log_softmax(0),
    "var_correction0_keepdim": lambda x: x.var((0, 2), unbiased=False, keepdim=True),
    "std_correction1": lambda x: x.std(1, unbiased=True),
    "logsumexp_two_dims": lambda x: x.logsumexp((1, 2)),
    "norm_p3_keepdim": lambda x: torch.linalg.vector_norm(x, 3, 1, keepdim=True),
    "norm_p1": lambda x: torch.linalg.vector_norm(x, 1, 0),
    "amax_ties": lambda x: x.amax(1),
    "amin_ties_all": lambda x: x.amin((0, 1)),
    "max_dim_values": lambda x: x.max(1, keepdim=True).values,
    "argmax_ties": lambda x: x.argmax(1),
    "mean_dims": lambda x: x.mean((0, 2), keepdim=True),
    "maximum_ties": torch.maximum,
    "minimum_broadcast_ties": torch.minimum,
    "clamp_at_bounds": lambda x: x.clamp(-1.0, 0.5),
    "relu_at_zero": F.relu,
    "abs_at_zero": torch.abs,
    "gelu_erf": F.gelu,
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "pow_cube_and_sqrt": lambda x: x**3 + (x.abs() + 0.1) ** 0.5,
    "div_broadcast": torch.div,
    "where_broadcast": torch.where,
    "masked_fill_broadcast": lambda x, m: x.masked_fill(m, 2.5),
    "gather_dim1": lambda x, i: x.gather(1, i),
    "scatter_add_dim0": lambda x, i, s: x.scatter_add(0, i, s),
    "index_select_repeats": lambda x, i: x.index_select(0, i),
    "embedding_padding_idx": lambda w, i: F.embedding(i, w, padding_idx=2),
    "one_hot": lambda i: F.one_hot(i, 6),
    "pad_constant": lambda x: F.pad(x, (1, 2, 0, 1), value=0.5),
    "slice_step_transpose": lambda x: x[:, 1:6:2].transpose(0, 1),
    "cat_stack": lambda a, b: torch.cat([torch.stack([a, b], 1), a.unsqueeze(1)], 1),
    "matmul_batch_broadcast": torch.matmul,
    "matmul_vector": torch.matmul,
    "linear_3d": F.linear,
    "sdpa_bool_mask_scale": lambda q, k, v, m: sdpa(q, k, v, mask=m | (torch.arange(6) == 0).view(1, 6), scale=0.7),
    "sdpa_causal_rectangular": lambda q, k, v: sdpa(q, k, v, causal=True),
    "sdpa_additive_mask": lambda q, k, v, m: sdpa(q, k, v, mask=m),
    "mha_bool_mask": lambda x, w, b, wo, bo, m: mha(x, w, b, wo, bo, ~m),  # PyTorch's True = masked out
    "mha_causal": lambda x, w, b, wo, bo: mha(x, w, b, wo, bo, ~torch.ones(x.shape[1], x.shape[1], dtype=torch.bool).tril()),
    "softmax_of_transpose": lambda x: x.transpose(0, 2).softmax(1),
    "layer_norm_of_permute": lambda x, w, b: F.layer_norm(x.permute(1, 0, 2), (6,), w, b),
    "conv2d_of_channels_last": lambda x, w, b: F.conv2d(x.permute(0, 3, 1, 2), w, b, 1, 1),
    "matmul_of_transposes": lambda a, b: a.transpose(1, 2) @ b.transpose(1, 2),
    "cross_entropy_of_strided_logits": lambda x, t: F.cross_entropy(x[:, 0:12:2], t),
    "mul_of_expand": lambda a, b: a.expand(3, 4) * b,
    "gather_of_transpose": lambda x, i: x.transpose(0, 1).gather(1, i),
    "sum_of_strided_rows": lambda x: x[1:6:2].sum(1),
    "max_pool2d_of_channels_last": lambda x: F.max_pool2d(x.permute(0, 3, 1, 2), 2, ceil_mode=True),
    "embedding_of_transposed_indices": lambda w, i: F.embedding(i.transpose(0, 1), w),
    "sdpa_of_transposed_heads": lambda q, k, v: sdpa(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)),
    "batch_norm_of_channels_last": lambda x, w, b: F.batch_norm(x.permute(0, 3, 1, 2), None, None, w, b, training=True, eps=1e-5),
    "sum_over_empty_dim": lambda x: x.sum(1),
    "mean_over_empty_dim": lambda x: x.mean(1),
    "matmul_inner_size_zero": torch.matmul,
    "cat_with_empty": lambda a, b: torch.cat([a, b], 1),
    "softmax_no_rows": lambda x: x.softmax(1),
    "linear_no_rows": F.linear,
    "cast_f32_to_bf16": lambda x: x.to(torch.bfloat16).double(),
    "cast_f32_to_f16": lambda x: x.to(torch.float16).double(),
    "cast_f64_to_f16_and_bf16": lambda x: torch.stack([x.to(torch.float16).double(), x.to(torch.bfloat16).double()]),
}


def conv(stride, padding, dilation, groups):
    return lambda x, w, b=None: F.conv2d(x, w, b, stride, padding, dilation, groups)


# The f32 kernels, evaluated here in f64 from the same f32 inputs.
F32_TOL = 2e-5
F32_CASES = {
    "f32_conv3x3_winograd": conv(1, 1, 1, 1),
    "f32_conv3x3_winograd_pad2_groups": conv(1, 2, 1, 2),
    "f32_conv3x3_stride2_blocked": conv(2, 1, 1, 1),
    "f32_conv1x7_f27": conv(1, (0, 3), 1, 1),
    "f32_conv7x1_f27": conv(1, (3, 0), 1, 1),
    "f32_conv5x5_dilated_blocked": conv(1, 4, 2, 1),
    "f32_depthwise3x3_stride2": conv(2, 1, 1, 4),
    "f32_depthwise5x5_multiplier2": conv(1, 2, 1, 3),
    "f32_max_pool2d_ceil": lambda x: F.max_pool2d(x, 3, 2, 1, 1, ceil_mode=True),
    "f32_avg_pool2d_exclude_pad": lambda x: F.avg_pool2d(x, 3, 2, 1, ceil_mode=True, count_include_pad=False),
    "f32_softmax_long_rows": lambda x: x.softmax(1),
    "f32_log_softmax_long_rows": lambda x: x.log_softmax(1),
    "f32_cross_entropy_smoothing": lambda x, t: F.cross_entropy(x, t, label_smoothing=0.1),
    "f32_layer_norm": lambda x, w, b: F.layer_norm(x, (300,), w, b),
    "f32_gelu_erf": F.gelu,
    "f32_gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "f32_sigmoid_tanh": lambda x: torch.sigmoid(x) + torch.tanh(x),
    "f32_sdpa_causal": lambda q, k, v: sdpa(q, k, v, causal=True),
    "f32_matmul": torch.matmul,
}
CASES.update(F32_CASES)

# f16 and bf16 inputs, evaluated here in f64 from the same half-precision values: within a few
# units of the last place of the output's dtype (bf16 2^-8, f16 2^-11).
H16_TOL = {"bf16": 1e-2, "f16": 1.5e-3}
H16_CASES = {}
for _p in ("h16_bf16_", "h16_f16_"):
    H16_CASES.update({
        _p + "matmul": torch.matmul,
        _p + "linear": F.linear,
        _p + "softmax": lambda x: x.softmax(1),
        _p + "log_softmax": lambda x: x.log_softmax(1),
        _p + "layer_norm": lambda x, w, b: F.layer_norm(x, (24,), w, b),
        _p + "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
        _p + "cross_entropy": F.cross_entropy,
        _p + "conv2d": lambda x, w: F.conv2d(x, w, None, 1, 1),
        _p + "sum_mean": lambda x: x.sum(1) + x.mean(1),
        _p + "sdpa_causal": lambda q, k, v: sdpa(q, k, v, causal=True),
    })
CASES.update(H16_CASES)


def rel(a, b):
    """Normwise relative difference over the finite entries; inf when the non-finite entries
    (inf, -inf, NaN) are not the same on both sides."""
    fin = torch.isfinite(b)
    if not torch.equal(torch.isfinite(a), fin):
        return math.inf
    an, bn = a[~fin], b[~fin]
    if not (torch.equal(an.isnan(), bn.isnan()) and torch.equal(an[~an.isnan()], bn[~bn.isnan()])):
        return math.inf
    a, b = a[fin], b[fin]
    if not b.numel():
        return 0.0
    scale = b.abs().max().item()
    return (a - b).abs().max().item() / (scale if scale > 0 else 1.0)


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    W = load(sys.argv[1])
    names = sorted({k.split(".")[0] for k in W})
    # The file of one test: f64 cases, f32 ones or half-precision ones.
    f32 = all(n in F32_CASES for n in names)
    h16 = all(n in H16_CASES for n in names)
    expected = set(F32_CASES) if f32 else set(H16_CASES) if h16 else set(CASES) - set(F32_CASES) - set(H16_CASES)
    tol = F32_TOL if f32 else TOL
    f32 = f32 or h16  # both evaluate in f64 from their inputs
    unknown, missing = sorted(set(names) - expected), sorted(expected - set(names))
    if unknown or missing:
        print(f"cases only in the file: {unknown}; only here: {missing}")
        return 2
    failed, worst = [], 0.0
    for name in names:
        n_in = len([k for k in W if k.startswith(name + ".in.")])
        # f32 cases: PyTorch in f64 from the same f32 values
        inputs = [W[f"{name}.in.{i}"].clone() for i in range(n_in)]
        if f32:
            inputs = [t.double() if t.is_floating_point() else t for t in inputs]
        diff = [i for i in range(n_in) if f"{name}.grad.{i}" in W]
        for i in diff:
            inputs[i].requires_grad_(True)
        out = CASES[name](*inputs)
        checks = [("out", out.detach(), W[name + ".out"])]
        checks += [(f"after.{i}", inputs[i], W[f"{name}.after.{i}"]) for i in range(n_in) if f"{name}.after.{i}" in W]
        if diff:
            out.backward(W[name + ".gout"].to(out.dtype))
            checks += [(f"grad.{i}", inputs[i].grad, W[f"{name}.grad.{i}"]) for i in diff]
        for what, ref, got in checks:
            key = f"{name}.{what}"
            if ref is None or ref.shape != got.shape:
                failed.append(key)
                print(f"{key}: shape {list(got.shape)} from Trident, {None if ref is None else list(ref.shape)} here")
                continue
            if not ref.is_floating_point():
                ok = torch.equal(ref.to(got.dtype), got)
                print(f"{key}: {'equal' if ok else 'DIFFERENT'}")
                if not ok:
                    failed.append(key)
                    print(f"  Trident {got.flatten()[:12].tolist()}\n  PyTorch {ref.flatten()[:12].tolist()}")
                continue
            r = rel(got.to(ref.dtype), ref.detach())
            worst = max(worst, r)
            print(f"{key}: normwise relative difference {r:.3e}")
            limit = H16_TOL[name.split("_")[1]] if h16 else tol
            if not r <= limit:
                failed.append(key)
                print(f"  Trident {got.flatten()[:12].tolist()}\n  PyTorch {ref.detach().flatten()[:12].tolist()}")
    print(f"{len(names)} {'f16/bf16' if h16 else 'f32' if f32 else 'f64'} cases, worst {worst:.3e}, tolerance {'1e-02 (bf16), 1.5e-03 (f16)' if h16 else f'{tol:.0e}'}: " + ("OK" if not failed else "FAILED " + " ".join(failed)))
    return 0 if not failed else 1


if __name__ == "__main__":
    sys.exit(main())
