// Higher-order gradients on the GPU (NOTE [Higher-order gradients] in autograd/engine.h): the
// recorded formulas run the same ops on CUDA tensors, so a Hessian-vector product computed there
// in f32 must match the CPU's in f64.
#include "cuda/cuda_test_util.h"

using namespace trident;
using trident::testing::relative_error;
using autograd::TensorList;

namespace {

const Device kGPU = Device::cuda(0);

class CudaHigherOrder : public trident::testing::PoisonedCuda<> {};

using ScalarFn = std::function<Tensor(const TensorList&)>;

// H v for the parameters `ps` of f: grad(<grad(f, ps, create_graph), v>, ps).
TensorList hvp(const ScalarFn& f, const TensorList& ps, const TensorList& vs) {
  TensorList g = autograd::grad({f(ps)}, ps, {}, false, false, /*create_graph=*/true);
  Tensor dot;
  for (size_t i = 0; i < g.size(); ++i) {
    Tensor term = sum(mul(g[i], vs[i]));
    dot = dot.defined() ? add(dot, term) : term;
  }
  return autograd::grad({dot}, ps);
}

TensorList leaves(const std::vector<Shape>& shapes, uint64_t seed, DType dt, Device d) {
  TensorList out;
  Generator g(seed);
  for (const Shape& s : shapes) out.push_back(mul(randn(s, kF64, &g), 0.5).to(dt).to(d).detach().set_requires_grad());
  return out;
}

// f on the CPU in f64 and on the GPU in f32, the same values: the products agree to f32's error.
void expect_hvp_matches(const ScalarFn& f, const std::vector<Shape>& shapes, double tol) {
  const TensorList p64 = leaves(shapes, 1, kF64, kCPU), v64 = leaves(shapes, 2, kF64, kCPU);
  const TensorList p32 = leaves(shapes, 1, kF32, kGPU), v32 = leaves(shapes, 2, kF32, kGPU);
  const TensorList ref = hvp(f, p64, v64), got = hvp(f, p32, v32);
  for (size_t i = 0; i < ref.size(); ++i) {
    ASSERT_EQ(got[i].device(), kGPU);
    EXPECT_LE(relative_error(got[i].to(kCPU), ref[i]), tol) << "parameter " << i;
  }
}

}  // namespace

TEST_F(CudaHigherOrder, MlpWithGeluLayerNormAndCrossEntropy) {
  expect_hvp_matches(
      [](const TensorList& p) {
        const Tensor x = p[0];
        const Tensor h = layer_norm(linear_gelu(x, p[1], p[2], GeluApproximation::Tanh), {16}, p[3], Tensor());
        const Tensor target = from_vector<int64_t>({1, 0, 3, 2, 1, 0}).to(x.device());
        return cross_entropy(linear(h, p[4]), target);
      },
      {{6, 8}, {16, 8}, {16}, {16}, {4, 16}}, 1e-4);
}

// sum(y^2) of causal attention, D = 64. With dropout: the CUDA kernel's mask and the CPU's are
// the same for one generator state (ops/attention.h), and the recorded path draws it again for
// either (a generator of its own, seeded alike for the two devices and for every evaluation).
void expect_causal_attention_hvp_matches(double dropout_p) {
  expect_hvp_matches(
      [dropout_p](const TensorList& p) {
        Generator g(11);
        AttentionOptions o;
        o.is_causal = true;
        o.dropout_p = dropout_p;
        o.generator = &g;
        const Tensor y = scaled_dot_product_attention(p[0], p[1], p[2], o);
        return sum(mul(y, y));
      },
      {{2, 2, 16, 64}, {2, 2, 16, 64}, {2, 2, 16, 64}}, 1e-4);
}

TEST_F(CudaHigherOrder, CausalAttention) { expect_causal_attention_hvp_matches(0.0); }
TEST_F(CudaHigherOrder, CausalAttentionWithDropout) { expect_causal_attention_hvp_matches(0.2); }

TEST_F(CudaHigherOrder, ConvBatchNormPooling) {
  expect_hvp_matches(
      [](const TensorList& p) {
        // (no convolution bias: batch norm's batch statistics cancel it, its gradient is 0)
        const Tensor y = conv2d(p[0], p[1], Tensor(), {1, 1}, {1, 1});
        const Tensor z = avg_pool2d(max_pool2d(batch_norm(y, Tensor(), Tensor(), p[2], p[3], true, 0.1, 1e-5), {2, 2}), {2, 2});
        return sum(mul(z, mul(z, z)));
      },
      {{2, 3, 8, 8}, {4, 3, 3, 3}, {4}, {4}}, 1e-4);
}
