// The cross-backend suite: every op with CUDA kernels, on fresh random inputs, run on the GPU in
// f32, f16 and bf16 and compared with the CPU in f64 on the same (rounded) inputs, forward and
// backward. Every device allocation is poisoned with NaN (cuda::set_poison_allocations), so an
// output element a kernel forgets to write fails, and NaN never passes the comparison. Skips
// without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "core/cuda/allocator.h"
#include "cuda/cuda_test_util.h"
#include "test_util.h"

using namespace trident;

namespace {

const Device kGPU = Device::cuda(0);
using trident::testing::relative_error;
using trident::testing::tolerance;

enum class Domain { Any, Positive, AwayFromZero };

struct OpCase {
  std::string name;
  std::vector<Shape> shapes;
  std::function<Tensor(const std::vector<Tensor>&)> fn;
  Domain domain = Domain::Any;
  bool backward = true;  // float output: also compare input gradients
};

std::vector<OpCase> op_table() {
  using V = std::vector<Tensor>;
  std::vector<OpCase> t;
  const Shape m{33, 65}, row{65}, a3{4, 1, 7}, b3{1, 5, 7};
  // Arithmetic, broadcasting, scalars.
  t.push_back({"add_broadcast", {m, row}, [](const V& x) { return add(x[0], x[1]); }});
  t.push_back({"sub_broadcast3", {a3, b3}, [](const V& x) { return sub(x[0], x[1]); }});
  t.push_back({"mul", {m, m}, [](const V& x) { return mul(x[0], x[1]); }});
  t.push_back({"div", {m, m}, [](const V& x) { return div(x[0], x[1]); }, Domain::AwayFromZero});
  t.push_back({"maximum", {a3, b3}, [](const V& x) { return maximum(x[0], x[1]); }});
  t.push_back({"minimum", {m, row}, [](const V& x) { return minimum(x[0], x[1]); }});
  t.push_back({"add_scalar", {m}, [](const V& x) { return add(x[0], 0.75); }});
  t.push_back({"rdiv_scalar", {m}, [](const V& x) { return rdiv(x[0], 2.0); }, Domain::AwayFromZero});
  t.push_back({"neg", {m}, [](const V& x) { return neg(x[0]); }});
  t.push_back({"add_transposed", {{65, 33}, m}, [](const V& x) { return add(transpose(x[0], 0, 1), x[1]); }});
  t.push_back({"odd_length_tail", {{1001}}, [](const V& x) { return mul(x[0], 3.0); }});
  // Unary.
  t.push_back({"relu", {m}, [](const V& x) { return relu(x[0]); }});
  t.push_back({"tanh", {m}, [](const V& x) { return tanh(x[0]); }});
  t.push_back({"sigmoid", {m}, [](const V& x) { return sigmoid(x[0]); }});
  t.push_back({"exp", {m}, [](const V& x) { return exp(x[0]); }});
  t.push_back({"log", {m}, [](const V& x) { return log(x[0]); }, Domain::Positive});
  t.push_back({"sqrt", {m}, [](const V& x) { return sqrt(x[0]); }, Domain::Positive});
  t.push_back({"rsqrt", {m}, [](const V& x) { return rsqrt(x[0]); }, Domain::Positive});
  t.push_back({"abs", {m}, [](const V& x) { return abs(x[0]); }, Domain::AwayFromZero});
  t.push_back({"gelu", {m}, [](const V& x) { return gelu(x[0]); }});
  t.push_back({"gelu_tanh", {m}, [](const V& x) { return gelu(x[0], GeluApproximation::Tanh); }});
  t.push_back({"pow3", {m}, [](const V& x) { return pow(x[0], 3.0); }});
  t.push_back({"pow2.5", {m}, [](const V& x) { return pow(x[0], 2.5); }, Domain::Positive});
  t.push_back({"clamp", {m}, [](const V& x) { return clamp(x[0], -0.5, 0.7); }});
  // Comparison and selection.
  t.push_back({"lt_broadcast", {m, row}, [](const V& x) { return lt(x[0], x[1]); }, Domain::Any, false});
  t.push_back({"ge_scalar", {m}, [](const V& x) { return ge(x[0], 0.25); }, Domain::Any, false});
  t.push_back({"where", {m, m, row}, [](const V& x) { return where(gt(x[0], 0.0), x[1], x[2]); }});
  t.push_back({"where_scalar", {m, m}, [](const V& x) { return where(gt(x[0], 0.0), x[1], -2.0); }});
  t.push_back({"masked_fill", {m, row}, [](const V& x) { return masked_fill(x[0], lt(x[1], 0.0), 3.0); }});
  // Reductions.
  t.push_back({"sum_all", {m}, [](const V& x) { return sum(x[0]); }});
  t.push_back({"sum_dim0", {m}, [](const V& x) { return sum(x[0], {0}); }});
  t.push_back({"sum_long_rows", {{6, 5000}}, [](const V& x) { return sum(x[0], {1}, true); }});
  t.push_back({"mean_dims02", {{6, 9, 11}}, [](const V& x) { return mean(x[0], {0, 2}); }});
  t.push_back({"amax_dim1", {m}, [](const V& x) { return amax(x[0], {1}); }});
  t.push_back({"amin_dim0", {m}, [](const V& x) { return amin(x[0], {0}); }});
  t.push_back({"max_all", {m}, [](const V& x) { return max(x[0]); }});
  // max(x, dim)'s values: the backward scatters into zeros that must be on the device.
  t.push_back({"max_dim1_values", {m}, [](const V& x) { return max(x[0], 1).values; }});
  t.push_back({"min_dim0_keepdim", {m}, [](const V& x) { return min(x[0], 0, true).values; }});
  t.push_back({"argmax_dim1", {m}, [](const V& x) { return argmax(x[0], 1); }, Domain::Any, false});
  t.push_back({"argmin_all", {{4000}}, [](const V& x) { return argmin(x[0]); }, Domain::Any, false});
  t.push_back({"var_dim1", {m}, [](const V& x) { return var(x[0], {1}); }});
  t.push_back({"std_dim0", {m}, [](const V& x) { return std_dev(x[0], {0}, 0.0); }});
  t.push_back({"logsumexp_dim1", {m}, [](const V& x) { return logsumexp(x[0], {1}); }});
  t.push_back({"norm2_dim1", {m}, [](const V& x) { return norm(x[0], 2.0, {1}); }});
  t.push_back({"norm1_all", {m}, [](const V& x) { return norm(x[0], 1.0); }, Domain::AwayFromZero});
  t.push_back({"norm3_dim0", {m}, [](const V& x) { return norm(x[0], 3.0, {0}); }, Domain::AwayFromZero});
  // Softmax.
  t.push_back({"softmax_last", {m}, [](const V& x) { return softmax(x[0], -1); }});
  t.push_back({"softmax_dim0", {m}, [](const V& x) { return softmax(x[0], 0); }});
  t.push_back({"softmax_long_rows", {{3, 3000}}, [](const V& x) { return softmax(x[0], 1); }});
  t.push_back({"log_softmax_last", {m}, [](const V& x) { return log_softmax(x[0], -1); }});
  t.push_back({"log_softmax_long", {{2, 4097}}, [](const V& x) { return log_softmax(x[0], 1); }});
  t.push_back({"softmax_beyond_registers", {{2, 9000}}, [](const V& x) { return softmax(x[0], 1); }});
  t.push_back({"softmax_packed_warp_rows", {{7, 1024}}, [](const V& x) { return softmax(x[0], 1); }});
  t.push_back({"log_softmax_packed", {{50, 128}}, [](const V& x) { return log_softmax(x[0], 1); }});
  // Column reductions (NOTE [CUDA column reductions]): split over many rows, and with outer dims.
  t.push_back({"sum_dim0_tall", {{4100, 37}}, [](const V& x) { return sum(x[0], {0}); }});
  t.push_back({"amax_middle_dim", {{3, 700, 50}}, [](const V& x) { return amax(x[0], {1}); }});
  t.push_back({"mean_leading_dims", {{20, 30, 40}}, [](const V& x) { return mean(x[0], {0, 1}, true); }});
  // 16-byte packs of columns per thread where the columns are a multiple of the pack (4 f32, 8
  // bf16/f16): several column blocks with a partial last one, a max, and a base pointer off the
  // 16-byte alignment (a slice one element in), which must take the unpacked path.
  t.push_back({"sum_dim0_packed", {{1000, 264}}, [](const V& x) { return sum(x[0], {0}); }});
  t.push_back({"amax_middle_dim_packed", {{3, 700, 48}}, [](const V& x) { return amax(x[0], {1}); }});
  t.push_back({"sum_dim0_unaligned", {{1 + 300 * 264}},
               [](const V& x) { return sum(reshape(narrow(x[0], 0, 1, 300 * 264), {300, 264}), {0}); }});
  // Matrix products (cuBLASLt): plain, transposed operands, batched, broadcast batch, a shared
  // right operand folded into one tall GEMM, linear with and without bias.
  t.push_back({"matmul_2d", {{33, 70}, {70, 17}}, [](const V& x) { return matmul(x[0], x[1]); }});
  t.push_back({"matmul_transposed", {{70, 33}, {17, 70}},
               [](const V& x) { return matmul(transpose(x[0], 0, 1), transpose(x[1], 0, 1)); }});
  t.push_back({"bmm", {{3, 9, 40}, {3, 40, 12}}, [](const V& x) { return bmm(x[0], x[1]); }});
  // Odd batch strides (369 and 533 elements): batch i > 0 of an f16/bf16 operand starts only
  // 2-byte aligned although the base pointer is 256-byte aligned; cuBLASLt must see that through
  // the layout's strided-batch offset.
  t.push_back({"bmm_odd_batch_strides", {{3, 9, 41}, {3, 41, 13}}, [](const V& x) { return bmm(x[0], x[1]); }});
  t.push_back({"matmul_broadcast_batch", {{2, 1, 5, 8}, {3, 8, 6}}, [](const V& x) { return matmul(x[0], x[1]); }});
  t.push_back({"matmul_shared_rhs", {{4, 7, 24}, {24, 10}}, [](const V& x) { return matmul(x[0], x[1]); }});
  t.push_back({"matmul_vector", {{5, 24}, {24}}, [](const V& x) { return matmul(x[0], x[1]); }});
  t.push_back({"linear_bias", {{2, 9, 48}, {20, 48}, {20}}, [](const V& x) { return linear(x[0], x[1], x[2]); }});
  t.push_back({"linear_no_bias", {{13, 48}, {20, 48}}, [](const V& x) { return linear(x[0], x[1]); }});
  t.push_back({"linear_strided_input", {{6, 96}, {20, 48}, {20}},
               [](const V& x) { return linear(slice(x[0], 1, 0, 96, 2), x[1], x[2]); }});
  // linear_gelu: tanh GELU in the cuBLASLt epilogue for f16/bf16 when out_features divides by 8;
  // the exact form, 20 outputs and f32 take linear then gelu.
  t.push_back({"linear_gelu_tanh_epilogue", {{2, 9, 48}, {24, 48}, {24}},
               [](const V& x) { return linear_gelu(x[0], x[1], x[2], GeluApproximation::Tanh); }});
  t.push_back({"linear_gelu_tanh_epilogue_no_bias", {{13, 48}, {32, 48}},
               [](const V& x) { return linear_gelu(x[0], x[1], Tensor(), GeluApproximation::Tanh); }});
  t.push_back({"linear_gelu_tanh_20_outputs", {{7, 48}, {20, 48}, {20}},
               [](const V& x) { return linear_gelu(x[0], x[1], x[2], GeluApproximation::Tanh); }});
  t.push_back({"linear_gelu_exact", {{7, 48}, {24, 48}, {24}},
               [](const V& x) { return linear_gelu(x[0], x[1], x[2], GeluApproximation::None); }});
  // Layer norm: a warp per row below 1024 columns, a block per row above; weight and bias given
  // or not; a transposed (non-contiguous) input; two normalized dims.
  for (int64_t cols : {1, 33, 768, 5000}) {
    const int64_t rows = cols >= 768 ? 5 : 37;
    t.push_back({"layer_norm_affine_" + std::to_string(cols), {{rows, cols}, {cols}, {cols}},
                 [cols](const V& x) { return layer_norm(x[0], {cols}, x[1], x[2]); }});
    t.push_back({"layer_norm_plain_" + std::to_string(cols), {{rows, cols}},
                 [cols](const V& x) { return layer_norm(x[0], {cols}); }});
  }
  t.push_back({"layer_norm_weight_only", {{3, 7, 65}, {65}}, [](const V& x) { return layer_norm(x[0], {65}, x[1]); }});
  // Residual add + layer norm (one kernel on CUDA): both outputs in the result, so both and all
  // four inputs' gradients are compared; warp and block rows; a transposed residual.
  for (int64_t cols : {33, 768, 5000}) {
    const int64_t rows = cols >= 768 ? 5 : 37;
    t.push_back({"add_layer_norm_" + std::to_string(cols), {{rows, cols}, {rows, cols}, {cols}, {cols}}, [cols](const V& x) {
                   const AddLayerNorm o = add_layer_norm(x[0], x[1], {cols}, x[2], x[3]);
                   return add(mul(o.sum, 0.7), o.out);
                 }});
  }
  t.push_back({"add_layer_norm_plain_transposed_residual", {{40, 33}, {33, 40}}, [](const V& x) {
                 const AddLayerNorm o = add_layer_norm(x[0], transpose(x[1], 0, 1), {33});
                 return add(mul(o.sum, 0.7), o.out);
               }});
  t.push_back({"layer_norm_transposed", {{40, 33}, {40}, {40}},
               [](const V& x) { return layer_norm(transpose(x[0], 0, 1), {40}, x[1], x[2]); }});
  t.push_back({"layer_norm_two_dims", {{4, 6, 10}, {6, 10}, {6, 10}},
               [](const V& x) { return layer_norm(x[0], {6, 10}, x[1], x[2], 1e-3); }});
  // Batch norm: batch statistics (no running statistics to update), and eval with running
  // statistics made from inputs (detached: buffers, not parameters). 4-D, 2-D (spatial 1), 3-D.
  t.push_back({"batch_norm_train", {{4, 3, 5, 7}, {3}, {3}},
               [](const V& x) { return batch_norm(x[0], Tensor(), Tensor(), x[1], x[2], true); }});
  t.push_back({"batch_norm_train_2d_plain", {{6, 5}},
               [](const V& x) { return batch_norm(x[0], Tensor(), Tensor(), Tensor(), Tensor(), true); }});
  t.push_back({"batch_norm_train_large_planes", {{3, 2, 41, 43}, {2}, {2}},
               [](const V& x) { return batch_norm(x[0], Tensor(), Tensor(), x[1], x[2], true, 0.1, 1e-3); }});
  t.push_back({"batch_norm_eval", {{4, 3, 9}, {3}, {3}, {3}, {3}},
               [](const V& x) {
                 return batch_norm(x[0], x[3].detach(), add(abs(x[4].detach()), 0.5), x[1], x[2], false);
               }});
  // conv2d through cuDNN (NOTE [cuDNN convolutions]): bias or not, odd sizes, stride 2, dilation 2,
  // groups, depthwise (with a channel multiplier), AmoebaNet's 1x7 / 7x1, pointwise, unbatched,
  // a transposed (non-contiguous) input. Input, weight and bias gradients are all compared.
  t.push_back({"conv2d_3x3_bias", {{2, 5, 9, 11}, {7, 5, 3, 3}, {7}},
               [](const V& x) { return conv2d(x[0], x[1], x[2], {1, 1}, {1, 1}); }});
  t.push_back({"conv2d_stride2", {{3, 4, 13, 10}, {6, 4, 3, 3}, {6}},
               [](const V& x) { return conv2d(x[0], x[1], x[2], {2, 2}, {1, 1}); }});
  t.push_back({"conv2d_dilation2", {{2, 3, 15, 14}, {5, 3, 3, 3}},
               [](const V& x) { return conv2d(x[0], x[1], Tensor(), {1, 1}, {2, 2}, {2, 2}); }});
  t.push_back({"conv2d_groups3", {{2, 6, 9, 9}, {9, 2, 3, 3}, {9}},
               [](const V& x) { return conv2d(x[0], x[1], x[2], {1, 1}, {1, 1}, {1, 1}, 3); }});
  t.push_back({"conv2d_depthwise", {{2, 8, 12, 11}, {8, 1, 3, 3}},
               [](const V& x) { return conv2d(x[0], x[1], Tensor(), {1, 1}, {1, 1}, {1, 1}, 8); }});
  t.push_back({"conv2d_depthwise_x2_5x5_s2", {{2, 4, 11, 13}, {8, 1, 5, 5}, {8}},
               [](const V& x) { return conv2d(x[0], x[1], x[2], {2, 2}, {2, 2}, {1, 1}, 4); }});
  t.push_back({"conv2d_1x7", {{2, 6, 9, 17}, {5, 6, 1, 7}},
               [](const V& x) { return conv2d(x[0], x[1], Tensor(), {1, 1}, {0, 3}); }});
  t.push_back({"conv2d_7x1_s2", {{2, 6, 17, 9}, {5, 6, 7, 1}},
               [](const V& x) { return conv2d(x[0], x[1], Tensor(), {2, 1}, {3, 0}); }});
  t.push_back({"conv2d_pointwise", {{3, 16, 7, 7}, {24, 16, 1, 1}, {24}},
               [](const V& x) { return conv2d(x[0], x[1], x[2]); }});
  t.push_back({"conv2d_long_reduction", {{4, 64, 14, 14}, {32, 64, 3, 3}},
               [](const V& x) { return conv2d(x[0], x[1], Tensor(), {1, 1}, {1, 1}); }});
  t.push_back({"conv2d_unbatched", {{3, 8, 8}, {4, 3, 3, 3}, {4}}, [](const V& x) { return conv2d(x[0], x[1], x[2]); }});
  t.push_back({"conv2d_transposed_input", {{2, 3, 10, 7}, {4, 3, 3, 3}},
               [](const V& x) { return conv2d(transpose(x[0], 2, 3), x[1], Tensor(), {1, 1}, {1, 1}); }});
  // Pooling (NOTE [CUDA pooling]): max with padding, dilation and ceil mode (values, gradients
  // and the i64 indices), avg with count_include_pad both ways and ceil mode, adaptive avg with
  // uniform, non-uniform, enlarging and whole-plane windows.
  t.push_back({"max_pool2d_3x3_s2_p1", {{2, 3, 11, 12}},
               [](const V& x) { return max_pool2d(x[0], {3, 3}, Int2{2, 2}, {1, 1}); }});
  t.push_back({"max_pool2d_2x2", {{2, 4, 8, 9}}, [](const V& x) { return max_pool2d(x[0], {2, 2}); }});
  t.push_back({"max_pool2d_dilated_ceil", {{2, 3, 10, 9}},
               [](const V& x) { return max_pool2d(x[0], {3, 2}, Int2{2, 2}, {1, 0}, {2, 1}, true); }});
  t.push_back({"max_pool2d_indices", {{2, 3, 11, 12}},
               [](const V& x) { return max_pool2d_with_indices(x[0], {3, 3}, Int2{2, 1}, {1, 1}, {1, 2}, true).second; },
               Domain::Any, false});
  t.push_back({"max_pool2d_unbatched_s1", {{3, 9, 7}},
               [](const V& x) { return max_pool2d(x[0], {3, 3}, Int2{1, 1}, {1, 1}); }});
  for (bool include_pad : {true, false}) {
    const std::string tag = include_pad ? "_include_pad" : "_exclude_pad";
    t.push_back({"avg_pool2d_3x3_s1_p1" + tag, {{2, 3, 9, 10}},
                 [include_pad](const V& x) { return avg_pool2d(x[0], {3, 3}, Int2{1, 1}, {1, 1}, false, include_pad); }});
    t.push_back({"avg_pool2d_ceil_s2" + tag, {{2, 2, 10, 11}},
                 [include_pad](const V& x) { return avg_pool2d(x[0], {3, 3}, Int2{2, 2}, {1, 1}, true, include_pad); }});
  }
  t.push_back({"avg_pool2d_2x2", {{3, 4, 8, 6}}, [](const V& x) { return avg_pool2d(x[0], {2, 2}); }});
  t.push_back({"adaptive_avg_pool2d_global", {{2, 5, 7, 9}}, [](const V& x) { return adaptive_avg_pool2d(x[0], {1, 1}); }});
  t.push_back({"adaptive_avg_pool2d_uniform", {{2, 3, 8, 12}}, [](const V& x) { return adaptive_avg_pool2d(x[0], {4, 3}); }});
  t.push_back({"adaptive_avg_pool2d_nonuniform", {{2, 3, 10, 7}},
               [](const V& x) { return adaptive_avg_pool2d(x[0], {4, 3}); }});
  t.push_back({"adaptive_avg_pool2d_enlarging", {{1, 2, 3, 2}}, [](const V& x) { return adaptive_avg_pool2d(x[0], {5, 4}); }});
  t.push_back({"adaptive_avg_pool2d_large_plane", {{1, 3, 112, 112}},
               [](const V& x) { return adaptive_avg_pool2d(x[0], {1, 1}); }});
  // Dropout with a fresh generator of the same seed on each side: the same mask.
  t.push_back({"dropout_p0.3", {m}, [](const V& x) {
                 Generator gen(77);
                 return dropout(x[0], 0.3, true, &gen);
               }});
  // Indexing with fixed indices (on the input's device), repeats included.
  auto on = [](const std::vector<int64_t>& v, const Shape& s, const Tensor& like) {
    return from_vector<int64_t>(v, s).to(like.device());
  };
  t.push_back({"index_select_dim1", {m}, [on](const V& x) { return index_select(x[0], 1, on({3, 0, 3, 64, 17}, {5}, x[0])); }});
  t.push_back({"embedding_padding", {{50, 16}},
               [on](const V& x) { return embedding(x[0], on({1, 4, 4, 49, 0, 4}, {2, 3}, x[0]), 4); }});
  t.push_back({"gather_dim0", {m}, [on](const V& x) {
                 std::vector<int64_t> v(4 * 65);
                 for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<int64_t>((i * 7) % 33);
                 return gather(x[0], 0, on(v, {4, 65}, x[0]));
               }});
  // Losses (the class losses with fixed targets, some ignored).
  t.push_back({"cross_entropy", {m}, [on](const V& x) {
                 std::vector<int64_t> v(33);
                 for (size_t i = 0; i < v.size(); ++i) v[i] = i % 5 == 2 ? -100 : static_cast<int64_t>((i * 11) % 65);
                 return cross_entropy(x[0], on(v, {33}, x[0]));
               }});
  t.push_back({"cross_entropy_smooth_3d", {{4, 7, 5}}, [on](const V& x) {
                 std::vector<int64_t> v(20);
                 for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<int64_t>(i % 7);
                 CrossEntropyOptions o;
                 o.label_smoothing = 0.1;
                 o.reduction = Reduction::Sum;
                 return cross_entropy(x[0], on(v, {4, 5}, x[0]), o);
               }});
  t.push_back({"nll_loss", {m}, [on](const V& x) {
                 std::vector<int64_t> v(33);
                 for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<int64_t>((i * 3) % 65);
                 return nll_loss(log_softmax(x[0], 1), on(v, {33}, x[0]));
               }});
  t.push_back({"mse_loss_broadcast", {m, row}, [](const V& x) { return mse_loss(x[0], x[1]); }});
  t.push_back({"mse_loss_none", {m, m}, [](const V& x) { return mse_loss(x[0], x[1], Reduction::None); }});
  t.push_back({"bce_with_logits", {m, m, row}, [](const V& x) {
                 return binary_cross_entropy_with_logits(x[0], sigmoid(x[1]), Reduction::Sum, add(abs(x[2]), 0.5).detach());
               }});
  return t;
}

Tensor draw(const Shape& s, Domain d, Generator& g) {
  Tensor x = randn(s, kF64, &g);
  if (d == Domain::Positive) return add(abs(x), 0.1);
  if (d == Domain::AwayFromZero) return where(lt(x, 0.0), sub(x, 0.5), add(x, 0.5));
  return x;
}

class CrossBackend : public trident::testing::PoisonedCuda<::testing::TestWithParam<DType>> {};

// One case: forward and (when differentiable) input gradients of the device against the f64 CPU.
// Failures are recorded and the table goes on, so one GPU run reports every op that is off.
void check_case(const OpCase& c, DType dt, Generator& g) {
  // Inputs rounded to dt, so both sides see the same values.
  std::vector<Tensor> ref_in, dev_in;
  for (const Shape& s : c.shapes) {
    const Tensor x = draw(s, c.domain, g).to(dt);
    ref_in.push_back(x.to(kF64).detach().set_requires_grad(c.backward));
    dev_in.push_back(x.to(kGPU).detach().set_requires_grad(c.backward));
  }
  const Tensor ref = c.fn(ref_in);
  const Tensor got = c.fn(dev_in);
  ASSERT_EQ(got.device(), kGPU);
  ASSERT_EQ(got.sizes(), ref.sizes());
  if (!is_floating(ref.dtype())) {
    EXPECT_EQ(got.to(kCPU).to_vector<int64_t>(), ref.to_vector<int64_t>());
    return;
  }
  EXPECT_EQ(got.dtype(), dt);
  const double err = relative_error(got.to(kCPU), ref);
  EXPECT_LE(err, tolerance(dt, false)) << "forward";
  if (!c.backward) return;
  // Backward of sum(out * w) for a random w, the same on both sides.
  const Tensor w = randn(ref.sizes(), kF64, &g).to(dt);
  sum(mul(ref, w.to(kF64))).backward();
  sum(mul(got, w.to(kGPU))).backward();
  for (size_t i = 0; i < ref_in.size(); ++i) {
    // An input used only through a comparison (where's condition) has no gradient on either side.
    EXPECT_EQ(dev_in[i].grad().defined(), ref_in[i].grad().defined()) << "input " << i;
    if (!ref_in[i].grad().defined() || !dev_in[i].grad().defined()) continue;
    EXPECT_EQ(dev_in[i].grad().device(), kGPU);
    const double gerr = relative_error(dev_in[i].grad().to(kCPU), ref_in[i].grad());
    EXPECT_LE(gerr, tolerance(dt, true)) << "gradient of input " << i;
  }
}

TEST_P(CrossBackend, EveryOpMatchesTheCpuInF64) {
  const DType dt = GetParam();
  uint64_t seed = 1000 + static_cast<uint64_t>(dt);
  for (const OpCase& c : op_table()) {
    SCOPED_TRACE(c.name + " in " + std::string(dtype_name(dt)));
    // A crash (not a failure) would end the table without naming the op: with this set, each case
    // is named on stderr before it runs.
    if (std::getenv("TRIDENT_TRACE_CASES") != nullptr) std::fprintf(stderr, "case %s\n", c.name.c_str());
    Generator g(seed++);
    try {
      check_case(c, dt, g);
    } catch (const std::exception& e) {
      ADD_FAILURE() << "threw: " << e.what();
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CrossBackend, ::testing::Values(DType::F32, DType::F16, DType::BF16),
                         [](const ::testing::TestParamInfo<DType>& i) { return std::string(dtype_name(i.param)); });

// NOTE [Relu into a narrower dtype]: the CUDA kernels round as the CPU's do, so the values and the
// gradients are the CPU's bit for bit, for every pair of dtypes the GPU has.
class CrossBackendReluTo : public trident::testing::PoisonedCuda<> {};

TEST_F(CrossBackendReluTo, MatchesTheCpuBitForBit) {
  Generator gen(21);
  for (const DType in : {kF32, kF16, kBF16}) {
    for (const DType out : {kF32, kF16, kBF16}) {
      SCOPED_TRACE(::testing::Message() << dtype_name(in) << " -> " << dtype_name(out));
      const Tensor x = mul(randn({67, 129}, kF32, &gen), 4.0).to(in), gy = randn({67, 129}, kF32, &gen).to(out);
      Tensor xc = x.detach().set_requires_grad(), xd = x.to(kGPU).detach().set_requires_grad();
      const Tensor yc = relu(xc, out), yd = relu(xd, out);
      ASSERT_EQ(yd.dtype(), out);
      EXPECT_EQ(yd.to(kCPU).to(kF32).to_vector<float>(), yc.to(kF32).to_vector<float>());
      yc.backward(gy);
      yd.backward(gy.to(kGPU));
      ASSERT_EQ(xd.grad().dtype(), in);
      EXPECT_EQ(xd.grad().to(kCPU).to(kF32).to_vector<float>(), xc.grad().to(kF32).to_vector<float>());
    }
  }
}

TEST(CrossBackendErrors, AnOpWithoutACudaKernelNamesTheOpAndTheDevice) {
  TRIDENT_REQUIRE_CUDA();
  const Tensor x = ones({2, 3}, TensorOptions(kF32).device(kGPU));
  const std::string msg = trident::testing::error_message([&] { logical_not(gt(x, 0.0)); });
  EXPECT_NE(msg.find("logical_not"), std::string::npos) << msg;
  EXPECT_NE(msg.find("cuda:0"), std::string::npos) << msg;
  const std::string f64 = trident::testing::error_message([&] { relu(x.to(kF64)); });
  EXPECT_NE(f64.find("f64"), std::string::npos) << f64;
  const std::string mixed = trident::testing::error_message([&] { add(x, ones({2, 3})); });
  EXPECT_NE(mixed.find("same device"), std::string::npos) << mixed;
}

}  // namespace
