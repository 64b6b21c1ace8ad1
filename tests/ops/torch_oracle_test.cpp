// NOTE [Ops against PyTorch]: the ops whose meaning lies in their options and edge cases, against
// PyTorch itself (Debian's python3-torch, tests/ops/torch_oracle.py). The gradient checks prove
// that each backward is the derivative of its forward; they cannot tell whether the forward is
// what a PyTorch user means by the name (label smoothing with class weights and ignored targets,
// a ceil-mode pooling window that starts in the padding, the running variance's correction,
// which of tied maxima gets the gradient, the causal mask of a non-square attention). Each case
// runs on fresh f64 inputs, including the ties, zeros and boundary values where the
// conventions differ; its output, and the gradient of sum(out * g) for a random g with respect
// to every differentiable input, go with the inputs into one safetensors file; the script
// evaluates the same expressions in PyTorch and requires agreement to 1e-12 (normwise relative;
// integer outputs exactly). Two more tests run the f32 fast kernels (2e-5) and f16/bf16 inputs
// (a few units of their last place) against PyTorch in f64 from the same values. They skip,
// saying why, when /usr/bin/python3 cannot import torch.

#include <bit>
#include <functional>

#include "nn/attention.h"
#include "nn/safetensors.h"
#include "test_util.h"

using namespace trident;

namespace {

#ifndef TRIDENT_TORCH_ORACLE
#error "tests/CMakeLists.txt defines TRIDENT_TORCH_ORACLE (the path of torch_oracle.py)"
#endif

using Inputs = std::vector<Tensor>;

struct Case {
  std::string name;  // the key of the same expression in torch_oracle.py
  Inputs inputs;
  std::vector<size_t> differentiable;  // inputs whose gradient is compared
  std::function<Tensor(const Inputs&)> f;
  std::vector<size_t> after;  // inputs the op updates in place (batch norm's running statistics)
  Case(std::string n, Inputs in, std::vector<size_t> d, std::function<Tensor(const Inputs&)> fn, std::vector<size_t> a = {})
      : name(std::move(n)), inputs(std::move(in)), differentiable(std::move(d)), f(std::move(fn)), after(std::move(a)) {}
};

Generator gen(1234);
Tensor rnd(const Shape& s) { return randn(s, DType::F64, &gen); }
Tensor ints(int64_t lo, int64_t hi, const Shape& s) { return randint(lo, hi, s, DType::I64, &gen); }
Tensor i64(const std::vector<int64_t>& v, const Shape& s) { return from_vector<int64_t>(v, s); }
// Values on a grid of halves in [-2, 2]: ties, zeros and exact boundaries are common.
Tensor grid(const Shape& s) { return div(ints(-4, 5, s).to(DType::F64), 2.0); }

std::vector<Case> cases() {
  std::vector<Case> c;
  // ---- losses ----
  c.push_back({"cross_entropy_weight_smoothing_ignore", {rnd({6, 5}), i64({0, 4, -100, 2, 2, 1}, {6}), abs(rnd({5}))}, {0},
               [](const Inputs& x) {
                 CrossEntropyOptions o;
                 o.label_smoothing = 0.15;
                 o.weight = x[2];
                 return cross_entropy(x[0], x[1], o);
               }});
  c.push_back({"cross_entropy_k_dims_sum", {rnd({2, 4, 3, 2}), i64({0, 3, 1, 1, 2, -100, 3, 0, 0, 1, 2, 3}, {2, 3, 2})}, {0},
               [](const Inputs& x) {
                 CrossEntropyOptions o;
                 o.reduction = Reduction::Sum;
                 o.label_smoothing = 0.2;
                 return cross_entropy(x[0], x[1], o);
               }});
  c.push_back({"cross_entropy_none", {rnd({5, 7}), i64({6, 0, -100, 3, 3}, {5})}, {0}, [](const Inputs& x) {
                 CrossEntropyOptions o;
                 o.reduction = Reduction::None;
                 return cross_entropy(x[0], x[1], o);
               }});
  c.push_back({"nll_loss_weight_ignore", {log_softmax(rnd({6, 4}), 1), i64({3, -100, 0, 0, 2, 1}, {6}), abs(rnd({4}))}, {0},
               [](const Inputs& x) {
                 NllLossOptions o;
                 o.weight = x[2];
                 return nll_loss(x[0], x[1], o);
               }});
  c.push_back({"mse_loss_sum", {rnd({3, 4}), rnd({3, 4})}, {0, 1}, [](const Inputs& x) { return mse_loss(x[0], x[1], Reduction::Sum); }});
  c.push_back({"bce_with_logits_pos_weight", {mul(rnd({4, 3}), 3.0), sigmoid(rnd({4, 3})), abs(rnd({3}))}, {0, 1},
               [](const Inputs& x) { return binary_cross_entropy_with_logits(x[0], x[1], Reduction::Mean, x[2]); }});
  // ---- normalization ----
  c.push_back({"layer_norm_two_dims", {rnd({3, 4, 6}), rnd({4, 6}), rnd({4, 6})}, {0, 1, 2},
               [](const Inputs& x) { return layer_norm(x[0], {4, 6}, x[1], x[2], 1e-5); }});
  c.push_back({"batch_norm_training", {rnd({4, 3, 5, 5}), rnd({3}), add(abs(rnd({3})), 0.5), rnd({3}), rnd({3})}, {0, 3, 4},
               [](const Inputs& x) { return batch_norm(x[0], x[1], x[2], x[3], x[4], true, 0.3, 1e-3); }, {1, 2}});
  c.push_back({"batch_norm_eval", {rnd({4, 3, 5}), rnd({3}), add(abs(rnd({3})), 0.5), rnd({3}), rnd({3})}, {0, 3, 4},
               [](const Inputs& x) { return batch_norm(x[0], x[1], x[2], x[3], x[4], false, 0.1, 1e-5); }});
  // ---- convolution and pooling ----
  c.push_back({"conv2d_stride_pad_dilation_groups", {rnd({2, 4, 9, 8}), rnd({6, 2, 3, 2}), rnd({6})}, {0, 1, 2},
               [](const Inputs& x) { return conv2d(x[0], x[1], x[2], {2, 1}, {1, 2}, {2, 1}, 2); }});
  c.push_back({"conv2d_depthwise_stride2", {rnd({2, 3, 8, 7}), rnd({6, 1, 5, 5})}, {0, 1},
               [](const Inputs& x) { return conv2d(x[0], x[1], Tensor(), {2, 2}, {2, 2}, {1, 1}, 3); }});
  c.push_back({"max_pool2d_ceil_padding_dilation", {rnd({2, 3, 9, 10})}, {0},
               [](const Inputs& x) { return max_pool2d(x[0], {3, 2}, Int2{2, 2}, {1, 1}, {1, 2}, true); }});
  c.push_back({"max_pool2d_ties", {grid({1, 2, 6, 6})}, {0}, [](const Inputs& x) { return max_pool2d(x[0], {2, 2}, Int2{1, 1}); }});
  c.push_back({"avg_pool2d_ceil_exclude_pad", {rnd({2, 2, 7, 8})}, {0},
               [](const Inputs& x) { return avg_pool2d(x[0], {3, 3}, Int2{2, 2}, {1, 1}, true, false); }});
  c.push_back({"avg_pool2d_ceil_include_pad", {rnd({2, 2, 7, 8})}, {0},
               [](const Inputs& x) { return avg_pool2d(x[0], {3, 2}, Int2{2, 3}, {1, 1}, true, true); }});
  c.push_back({"adaptive_avg_pool2d_uneven", {rnd({2, 3, 7, 10})}, {0}, [](const Inputs& x) { return adaptive_avg_pool2d(x[0], {3, 4}); }});
  // ---- softmax and reductions ----
  c.push_back({"softmax_middle_dim", {rnd({3, 4, 5})}, {0}, [](const Inputs& x) { return softmax(x[0], 1); }});
  c.push_back({"log_softmax_first_dim", {rnd({3, 4, 5})}, {0}, [](const Inputs& x) { return log_softmax(x[0], 0); }});
  c.push_back({"var_correction0_keepdim", {rnd({4, 5, 6})}, {0}, [](const Inputs& x) { return var(x[0], {0, 2}, 0.0, true); }});
  c.push_back({"std_correction1", {rnd({4, 5, 6})}, {0}, [](const Inputs& x) { return std_dev(x[0], {1}, 1.0); }});
  c.push_back({"logsumexp_two_dims", {rnd({3, 4, 5})}, {0}, [](const Inputs& x) { return logsumexp(x[0], {1, 2}); }});
  c.push_back({"norm_p3_keepdim", {rnd({3, 4})}, {0}, [](const Inputs& x) { return norm(x[0], 3.0, {1}, true); }});
  c.push_back({"norm_p1", {rnd({3, 4})}, {0}, [](const Inputs& x) { return norm(x[0], 1.0, {0}); }});
  c.push_back({"amax_ties", {grid({4, 6})}, {0}, [](const Inputs& x) { return amax(x[0], {1}); }});
  c.push_back({"amin_ties_all", {grid({3, 5})}, {0}, [](const Inputs& x) { return amin(x[0], {0, 1}); }});
  c.push_back({"max_dim_values", {rnd({4, 6})}, {0}, [](const Inputs& x) { return max(x[0], 1, true).values; }});
  c.push_back({"argmax_ties", {grid({5, 6})}, {}, [](const Inputs& x) { return argmax(x[0], 1); }});
  c.push_back({"mean_dims", {rnd({3, 4, 5})}, {0}, [](const Inputs& x) { return mean(x[0], {0, 2}, true); }});
  // ---- element-wise, at the points where conventions differ ----
  c.push_back({"maximum_ties", {grid({4, 5}), grid({4, 5})}, {0, 1}, [](const Inputs& x) { return maximum(x[0], x[1]); }});
  c.push_back({"minimum_broadcast_ties", {grid({4, 5}), grid({5})}, {0, 1}, [](const Inputs& x) { return minimum(x[0], x[1]); }});
  c.push_back({"clamp_at_bounds", {grid({5, 4})}, {0}, [](const Inputs& x) { return clamp(x[0], -1.0, 0.5); }});
  c.push_back({"relu_at_zero", {grid({5, 4})}, {0}, [](const Inputs& x) { return relu(x[0]); }});
  c.push_back({"abs_at_zero", {grid({5, 4})}, {0}, [](const Inputs& x) { return abs(x[0]); }});
  c.push_back({"gelu_erf", {mul(rnd({5, 4}), 3.0)}, {0}, [](const Inputs& x) { return gelu(x[0]); }});
  c.push_back({"gelu_tanh", {mul(rnd({5, 4}), 3.0)}, {0}, [](const Inputs& x) { return gelu(x[0], "tanh"); }});
  c.push_back({"pow_cube_and_sqrt", {rnd({5, 4})}, {0}, [](const Inputs& x) { return add(pow(x[0], 3.0), pow(add(abs(x[0]), 0.1), 0.5)); }});
  c.push_back({"div_broadcast", {rnd({3, 1, 4}), add(abs(rnd({2, 1})), 0.5)}, {0, 1}, [](const Inputs& x) { return div(x[0], x[1]); }});
  c.push_back({"where_broadcast", {gt(rnd({3, 4}), 0.0), rnd({3, 4}), rnd({4})}, {1, 2}, [](const Inputs& x) { return where(x[0], x[1], x[2]); }});
  c.push_back({"masked_fill_broadcast", {rnd({3, 4}), gt(rnd({4}), 0.0)}, {0}, [](const Inputs& x) { return masked_fill(x[0], x[1], 2.5); }});
  // ---- indexing and shapes ----
  c.push_back({"gather_dim1", {rnd({3, 5}), ints(0, 5, {3, 4})}, {0}, [](const Inputs& x) { return gather(x[0], 1, x[1]); }});
  c.push_back({"scatter_add_dim0", {rnd({4, 3}), ints(0, 4, {6, 3}), rnd({6, 3})}, {0, 2},
               [](const Inputs& x) { return scatter_add(x[0], 0, x[1], x[2]); }});
  c.push_back({"index_select_repeats", {rnd({4, 3}), i64({3, 0, 3, 1, 3}, {5})}, {0}, [](const Inputs& x) { return index_select(x[0], 0, x[1]); }});
  c.push_back({"embedding_padding_idx", {rnd({7, 3}), i64({2, 5, 2, 0, 6, 5, 5, 1}, {2, 4})}, {0},
               [](const Inputs& x) { return embedding(x[0], x[1], 2); }});
  c.push_back({"one_hot", {i64({3, 0, 4, 4}, {2, 2})}, {}, [](const Inputs& x) { return one_hot(x[0], 6); }});
  c.push_back({"pad_constant", {rnd({2, 3, 4})}, {0}, [](const Inputs& x) { return pad(x[0], {1, 2, 0, 1}, 0.5); }});
  c.push_back({"slice_step_transpose", {rnd({5, 6})}, {0}, [](const Inputs& x) { return transpose(slice(x[0], 1, 1, 6, 2), 0, 1); }});
  c.push_back({"cat_stack", {rnd({2, 3}), rnd({2, 3})}, {0, 1},
               [](const Inputs& x) { return cat({stack({x[0], x[1]}, 1), unsqueeze(x[0], 1)}, 1); }});
  // ---- products and attention ----
  c.push_back({"matmul_batch_broadcast", {rnd({2, 1, 3, 4}), rnd({5, 4, 2})}, {0, 1}, [](const Inputs& x) { return matmul(x[0], x[1]); }});
  c.push_back({"matmul_vector", {rnd({4}), rnd({3, 4, 2})}, {0, 1}, [](const Inputs& x) { return matmul(x[0], x[1]); }});
  c.push_back({"linear_3d", {rnd({2, 3, 4}), rnd({5, 4}), rnd({5})}, {0, 1, 2}, [](const Inputs& x) { return linear(x[0], x[1], x[2]); }});
  c.push_back({"sdpa_bool_mask_scale", {rnd({2, 3, 5, 4}), rnd({2, 3, 6, 4}), rnd({2, 3, 6, 4}), gt(rnd({5, 6}), -0.8)}, {0, 1, 2},
               [](const Inputs& x) {
                 // Every query keeps key 0, so no row is masked entirely.
                 AttentionOptions o;
                 o.attn_mask = logical_or(x[3], eq(reshape(arange(0, 6, 1, DType::F64), {1, 6}), 0.0));
                 o.scale = 0.7;
                 return scaled_dot_product_attention(x[0], x[1], x[2], o);
               }});
  c.push_back({"sdpa_causal_rectangular", {rnd({1, 2, 4, 3}), rnd({1, 2, 6, 3}), rnd({1, 2, 6, 3})}, {0, 1, 2},
               [](const Inputs& x) {
                 AttentionOptions o;
                 o.is_causal = true;
                 return scaled_dot_product_attention(x[0], x[1], x[2], o);
               }});
  c.push_back({"sdpa_additive_mask", {rnd({2, 2, 3, 4}), rnd({2, 2, 5, 4}), rnd({2, 2, 5, 4}), rnd({2, 1, 3, 5})}, {0, 1, 2, 3},
               [](const Inputs& x) {
                 AttentionOptions o;
                 o.attn_mask = x[3];
                 return scaled_dot_product_attention(x[0], x[1], x[2], o);
               }});
  // ---- nn::MultiheadSelfAttention against torch.nn.functional.multi_head_attention_forward ----
  const auto mha = [](bool causal) {
    return [causal](const Inputs& x) {
      nn::MultiheadSelfAttentionOptions o;
      o.causal = causal;
      nn::MultiheadSelfAttention m(8, 2, o, DType::F64);
      m.qkv->weight = x[1];  // the inputs themselves, so their gradients are the module's
      m.qkv->bias = x[2];
      m.proj->weight = x[3];
      m.proj->bias = x[4];
      return x.size() > 5 ? m.forward(x[0], x[5]) : m.forward(x[0]);
    };
  };
  c.push_back({"mha_bool_mask", {rnd({2, 5, 8}), mul(rnd({24, 8}), 0.5), rnd({24}), mul(rnd({8, 8}), 0.5), rnd({8}),
                                 logical_or(gt(rnd({5, 5}), 0.0), eq(reshape(arange(0, 5, 1, DType::F64), {5, 1}), reshape(arange(0, 5, 1, DType::F64), {1, 5})))},
               {0, 1, 2, 3, 4}, mha(false)});
  c.push_back({"mha_causal", {rnd({2, 6, 8}), mul(rnd({24, 8}), 0.5), rnd({24}), mul(rnd({8, 8}), 0.5), rnd({8})}, {0, 1, 2, 3, 4}, mha(true)});
  // ---- non-contiguous inputs: views made inside the op's expression (transposes, permutes,
  // strided slices, expands), as both sides write them ----
  c.push_back({"softmax_of_transpose", {rnd({5, 3, 4})}, {0}, [](const Inputs& x) { return softmax(transpose(x[0], 0, 2), 1); }});
  c.push_back({"layer_norm_of_permute", {rnd({4, 3, 6}), rnd({6}), rnd({6})}, {0, 1, 2},
               [](const Inputs& x) { return layer_norm(permute(x[0], {1, 0, 2}), {6}, x[1], x[2]); }});
  c.push_back({"conv2d_of_channels_last", {rnd({2, 7, 6, 4}), rnd({5, 4, 3, 3}), rnd({5})}, {0, 1, 2},
               [](const Inputs& x) { return conv2d(permute(x[0], {0, 3, 1, 2}), x[1], x[2], {1, 1}, {1, 1}); }});
  c.push_back({"matmul_of_transposes", {rnd({2, 4, 3}), rnd({2, 5, 4})}, {0, 1},
               [](const Inputs& x) { return matmul(transpose(x[0], 1, 2), transpose(x[1], 1, 2)); }});
  c.push_back({"cross_entropy_of_strided_logits", {rnd({4, 12}), i64({0, 5, 2, 3}, {4})}, {0},
               [](const Inputs& x) { return cross_entropy(slice(x[0], 1, 0, 12, 2), x[1]); }});
  c.push_back({"mul_of_expand", {rnd({3, 1}), rnd({3, 4})}, {0, 1}, [](const Inputs& x) { return mul(expand(x[0], {3, 4}), x[1]); }});
  c.push_back({"gather_of_transpose", {rnd({5, 3}), ints(0, 5, {3, 4})}, {0}, [](const Inputs& x) { return gather(transpose(x[0], 0, 1), 1, x[1]); }});
  c.push_back({"sum_of_strided_rows", {rnd({6, 5})}, {0}, [](const Inputs& x) { return sum(slice(x[0], 0, 1, 6, 2), {1}); }});
  c.push_back({"max_pool2d_of_channels_last", {rnd({2, 6, 7, 3})}, {0},
               [](const Inputs& x) { return max_pool2d(permute(x[0], {0, 3, 1, 2}), {2, 2}, std::nullopt, {0, 0}, {1, 1}, true); }});
  c.push_back({"embedding_of_transposed_indices", {rnd({6, 3}), ints(0, 6, {4, 2})}, {0},
               [](const Inputs& x) { return embedding(x[0], transpose(x[1], 0, 1)); }});
  c.push_back({"sdpa_of_transposed_heads", {rnd({2, 5, 3, 4}), rnd({2, 6, 3, 4}), rnd({2, 6, 3, 4})}, {0, 1, 2},
               [](const Inputs& x) { return scaled_dot_product_attention(transpose(x[0], 1, 2), transpose(x[1], 1, 2), transpose(x[2], 1, 2)); }});
  c.push_back({"batch_norm_of_channels_last", {rnd({3, 4, 5, 2}), rnd({2}), rnd({2})}, {0, 1, 2}, [](const Inputs& x) {
                 return batch_norm(permute(x[0], {0, 3, 1, 2}), Tensor(), Tensor(), x[1], x[2], true, 0.1, 1e-5);
               }});
  // ---- empty dims ----
  c.push_back({"sum_over_empty_dim", {rnd({3, 0, 2})}, {0}, [](const Inputs& x) { return sum(x[0], {1}); }});
  c.push_back({"mean_over_empty_dim", {rnd({3, 0, 2})}, {}, [](const Inputs& x) { return mean(x[0], {1}); }});  // NaN
  c.push_back({"matmul_inner_size_zero", {rnd({2, 0}), rnd({0, 3})}, {0, 1}, [](const Inputs& x) { return matmul(x[0], x[1]); }});
  c.push_back({"cat_with_empty", {rnd({2, 0}), rnd({2, 3})}, {0, 1}, [](const Inputs& x) { return cat({x[0], x[1]}, 1); }});
  c.push_back({"softmax_no_rows", {rnd({0, 5})}, {0}, [](const Inputs& x) { return softmax(x[0], 1); }});
  c.push_back({"linear_no_rows", {rnd({0, 4}), rnd({3, 4}), rnd({3})}, {0, 1, 2}, [](const Inputs& x) { return linear(x[0], x[1], x[2]); }});
  // ---- casts: round to nearest even at ties, overflow to inf, subnormals, signed zero ----
  const auto floats = [](const std::vector<uint32_t>& bits) {
    std::vector<float> v;
    for (uint32_t b : bits) v.push_back(std::bit_cast<float>(b));
    return from_vector<float>(v, {static_cast<int64_t>(v.size())});
  };
  c.push_back({"cast_f32_to_bf16",
               {floats({0x3F808000, 0x3F818000, 0x3F808001, 0xBF808000, 0x7F7FFFFF, 0x7F7F7FFF, 0x00000001, 0x00008000,
                        0x00018000, 0x80000000, 0x7F800000, 0xFF800000, 0x40490FDB, 0x7149F2CA})},
               {0}, [](const Inputs& x) { return x[0].to(DType::BF16).to(DType::F64); }});
  c.push_back({"cast_f32_to_f16",
               {floats({0x477FE000, 0x477FEF00, 0x477FF000, 0x47800000, 0x33000000, 0x33400000, 0x33800000, 0x3F801000,
                        0x3F803000, 0x3F801001, 0xB2D6BF95, 0x387FC000, 0x3A83126F, 0x80000000})},
               {0}, [](const Inputs& x) { return x[0].to(DType::F16).to(DType::F64); }});
  // From f64 both go through f32 (so 1 + 2^-11 + 2^-40 rounds twice, to 1), as PyTorch's do.
  c.push_back({"cast_f64_to_f16_and_bf16", {from_vector<double>({1 + 0x1p-11 + 0x1p-40, 1 + 0x1p-8 + 0x1p-40, 70000.0, -3e-8, 1e-300}, {5})},
               {0}, [](const Inputs& x) { return stack({x[0].to(DType::F16).to(DType::F64), x[0].to(DType::BF16).to(DType::F64)}); }});
  return c;
}

// Runs the cases, writes their file and has torch_oracle.py check it.
void check_against_torch(std::vector<Case> all, const std::string& tag) {
  nn::StateDict file;
  for (Case& k : all) {
    SCOPED_TRACE(k.name);
    for (size_t i : k.differentiable) {
      k.inputs[i] = k.inputs[i].detach().clone();
      k.inputs[i].set_requires_grad(true);
    }
    for (size_t i = 0; i < k.inputs.size(); ++i) file[k.name + ".in." + std::to_string(i)] = k.inputs[i].detach().clone();
    Tensor out;
    ASSERT_NO_THROW(out = k.f(k.inputs));
    file[k.name + ".out"] = out.detach();
    for (size_t i : k.after) file[k.name + ".after." + std::to_string(i)] = k.inputs[i];
    if (k.differentiable.empty()) continue;
    const Tensor g = rnd(out.sizes()).to(out.dtype());
    file[k.name + ".gout"] = g;
    out.backward(g);
    for (size_t i : k.differentiable) {
      ASSERT_TRUE(k.inputs[i].grad().defined()) << "input " << i << " got no gradient";
      file[k.name + ".grad." + std::to_string(i)] = k.inputs[i].grad();
    }
  }
  trident::testing::expect_python_accepts(TRIDENT_TORCH_ORACLE, "", file, "torch_oracle_" + tag);
}

// The f32 kernels (NOTE [Conv2d algorithms]: Winograd F(4x4, 3x3) and F(2, 7), the blocked
// im2col path, the depthwise register blocks; the SIMD softmax, cross-entropy and layer norm;
// the fast f32 GELU; the CPU flash attention) on shapes that select them, against PyTorch in f64
// from the same f32 inputs: "f32_" cases, tolerance 2e-5 normwise (f32 sums and Winograd's
// transforms).
Tensor r32(const Shape& s, double scale = 1.0) { return mul(rnd(s), scale).to(DType::F32); }

std::vector<Case> f32_cases() {
  std::vector<Case> c;
  const auto conv = [](Int2 stride, Int2 padding, Int2 dilation, int64_t groups) {
    return [=](const Inputs& x) { return conv2d(x[0], x[1], x.size() > 2 ? x[2] : Tensor(), stride, padding, dilation, groups); };
  };
  c.push_back({"f32_conv3x3_winograd", {r32({2, 8, 11, 9}), r32({8, 8, 3, 3}, 0.3), r32({8})}, {0, 1, 2}, conv({1, 1}, {1, 1}, {1, 1}, 1)});
  c.push_back({"f32_conv3x3_winograd_pad2_groups", {r32({2, 16, 10, 10}), r32({16, 8, 3, 3}, 0.3)}, {0, 1}, conv({1, 1}, {2, 2}, {1, 1}, 2)});
  c.push_back({"f32_conv3x3_stride2_blocked", {r32({2, 8, 13, 12}), r32({12, 8, 3, 3}, 0.3), r32({12})}, {0, 1, 2}, conv({2, 2}, {1, 1}, {1, 1}, 1)});
  c.push_back({"f32_conv1x7_f27", {r32({2, 8, 9, 12}), r32({8, 8, 1, 7}, 0.3)}, {0, 1}, conv({1, 1}, {0, 3}, {1, 1}, 1)});
  c.push_back({"f32_conv7x1_f27", {r32({2, 8, 12, 9}), r32({8, 8, 7, 1}, 0.3)}, {0, 1}, conv({1, 1}, {3, 0}, {1, 1}, 1)});
  c.push_back({"f32_conv5x5_dilated_blocked", {r32({1, 4, 14, 14}), r32({6, 4, 5, 5}, 0.3)}, {0, 1}, conv({1, 1}, {4, 4}, {2, 2}, 1)});
  c.push_back({"f32_depthwise3x3_stride2", {r32({2, 4, 17, 23}), r32({4, 1, 3, 3})}, {0, 1}, conv({2, 2}, {1, 1}, {1, 1}, 4)});
  c.push_back({"f32_depthwise5x5_multiplier2", {r32({1, 3, 28, 28}), r32({6, 1, 5, 5})}, {0, 1}, conv({1, 1}, {2, 2}, {1, 1}, 3)});
  c.push_back({"f32_max_pool2d_ceil", {r32({2, 3, 9, 10})}, {0}, [](const Inputs& x) { return max_pool2d(x[0], {3, 3}, Int2{2, 2}, {1, 1}, {1, 1}, true); }});
  c.push_back({"f32_avg_pool2d_exclude_pad", {r32({2, 3, 9, 10})}, {0}, [](const Inputs& x) { return avg_pool2d(x[0], {3, 3}, Int2{2, 2}, {1, 1}, true, false); }});
  c.push_back({"f32_softmax_long_rows", {r32({4, 700}, 3.0)}, {0}, [](const Inputs& x) { return softmax(x[0], 1); }});
  c.push_back({"f32_log_softmax_long_rows", {r32({4, 700}, 3.0)}, {0}, [](const Inputs& x) { return log_softmax(x[0], 1); }});
  c.push_back({"f32_cross_entropy_smoothing", {r32({8, 1000}, 2.0), ints(0, 1000, {8})}, {0}, [](const Inputs& x) {
                 CrossEntropyOptions o;
                 o.label_smoothing = 0.1;
                 return cross_entropy(x[0], x[1], o);
               }});
  c.push_back({"f32_layer_norm", {r32({6, 300}), r32({300}), r32({300})}, {0, 1, 2}, [](const Inputs& x) { return layer_norm(x[0], {300}, x[1], x[2]); }});
  c.push_back({"f32_gelu_erf", {r32({4, 64}, 4.0)}, {0}, [](const Inputs& x) { return gelu(x[0]); }});
  c.push_back({"f32_gelu_tanh", {r32({4, 64}, 4.0)}, {0}, [](const Inputs& x) { return gelu(x[0], "tanh"); }});
  c.push_back({"f32_sigmoid_tanh", {r32({4, 64}, 4.0)}, {0}, [](const Inputs& x) { return add(sigmoid(x[0]), tanh(x[0])); }});
  c.push_back({"f32_sdpa_causal", {r32({2, 2, 37, 16}), r32({2, 2, 45, 16}), r32({2, 2, 45, 16})}, {0, 1, 2}, [](const Inputs& x) {
                 AttentionOptions o;
                 o.is_causal = true;
                 return scaled_dot_product_attention(x[0], x[1], x[2], o);
               }});
  c.push_back({"f32_matmul", {r32({37, 64}), r32({64, 29})}, {0, 1}, [](const Inputs& x) { return matmul(x[0], x[1]); }});
  return c;
}

// f16 and bf16 inputs compute in f32 and round once (NOTE [Accumulation]; a bf16 attention on the
// bf16 GEMM kernels also rounds its probabilities once, NOTE [bf16 attention on the CPU]): "h16_" cases, against
// PyTorch in f64 from the same half-precision values, within 1e-2 normwise (a few units of bf16's
// last place; f16's is 8x finer).
std::vector<Case> half_cases() {
  std::vector<Case> c;
  const auto h = [](const Shape& s, DType dt, double scale = 1.0) { return mul(rnd(s), scale).to(dt); };
  for (const DType dt : {DType::BF16, DType::F16}) {
    const std::string p = dt == DType::BF16 ? "h16_bf16_" : "h16_f16_";
    c.push_back({p + "matmul", {h({6, 32}, dt), h({32, 5}, dt)}, {0, 1}, [](const Inputs& x) { return matmul(x[0], x[1]); }});
    c.push_back({p + "linear", {h({4, 16}, dt), h({8, 16}, dt, 0.3), h({8}, dt)}, {0, 1, 2}, [](const Inputs& x) { return linear(x[0], x[1], x[2]); }});
    c.push_back({p + "softmax", {h({4, 50}, dt, 3.0)}, {0}, [](const Inputs& x) { return softmax(x[0], 1); }});
    c.push_back({p + "log_softmax", {h({4, 50}, dt, 3.0)}, {0}, [](const Inputs& x) { return log_softmax(x[0], 1); }});
    c.push_back({p + "layer_norm", {h({4, 24}, dt), h({24}, dt), h({24}, dt)}, {0, 1, 2}, [](const Inputs& x) { return layer_norm(x[0], {24}, x[1], x[2]); }});
    c.push_back({p + "gelu_tanh", {h({4, 24}, dt, 3.0)}, {0}, [](const Inputs& x) { return gelu(x[0], "tanh"); }});
    c.push_back({p + "cross_entropy", {h({6, 40}, dt, 2.0), ints(0, 40, {6})}, {0}, [](const Inputs& x) { return cross_entropy(x[0], x[1]); }});
    c.push_back({p + "conv2d", {h({2, 4, 7, 7}, dt), h({6, 4, 3, 3}, dt, 0.3)}, {0, 1}, [](const Inputs& x) { return conv2d(x[0], x[1], Tensor(), {1, 1}, {1, 1}); }});
    c.push_back({p + "sum_mean", {h({5, 40}, dt)}, {0}, [](const Inputs& x) { return add(sum(x[0], {1}), mean(x[0], {1})); }});
    c.push_back({p + "sdpa_causal", {h({1, 2, 9, 8}, dt), h({1, 2, 9, 8}, dt), h({1, 2, 9, 8}, dt)}, {0, 1, 2}, [](const Inputs& x) {
                   AttentionOptions o;
                   o.is_causal = true;
                   return scaled_dot_product_attention(x[0], x[1], x[2], o);
                 }});
  }
  return c;
}

}  // namespace

TEST(OpsAgainstPyTorch, HalfPrecisionInputsComputeInF32) {
  if (const std::string why = trident::testing::torch_missing(); !why.empty()) GTEST_SKIP() << why;
  check_against_torch(half_cases(), "h16");
}

TEST(OpsAgainstPyTorch, OptionsAndEdgeCasesMatchInF64) {
  if (const std::string why = trident::testing::torch_missing(); !why.empty()) GTEST_SKIP() << why;
  check_against_torch(cases(), "f64");
}

TEST(OpsAgainstPyTorch, TheF32KernelsMatchInF32Precision) {
  if (const std::string why = trident::testing::torch_missing(); !why.empty()) GTEST_SKIP() << why;
  check_against_torch(f32_cases(), "f32");
}
