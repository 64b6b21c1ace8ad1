// Whole models on the GPU against the CPU: a tiny GPT-2 trained a few AdamW steps from the same
// initial weights on the same batches, once on each device, must give the same losses and
// weights up to f32 rounding (cuBLASLt, the fused attention and the reductions sum in other orders
// than the CPU). This is the end-to-end check that every op of a training step has a CUDA kernel
// and that gradients and optimizer updates stay on the device. Skips without a GPU.
#include <gtest/gtest.h>

#include <cmath>

#include "core/cuda/allocator.h"
#include "cuda/cuda_test_util.h"
#include "test_util.h"

using namespace trident;
using trident::testing::rel_error;

namespace {

const Device kGPU = Device::cuda(0);

TEST(CudaModels, TinyGpt2TrainsOnTheGpuAsOnTheCpu) {
  TRIDENT_REQUIRE_CUDA();
  models::GPT2Config c = models::GPT2Config::preset("tiny");
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 64;  // head dim 32
  c.vocab_size = 61;
  c.padded_vocab_size = 64;
  c.n_positions = 32;
  c.embd_pdrop = c.attn_pdrop = c.resid_pdrop = 0.0;
  Generator g1(7), g2(7);
  models::GPT2LMHeadModel cpu(c, &g1), gpu(c, &g2);
  gpu.to(kGPU);
  for (const Tensor& p : gpu.parameters()) ASSERT_EQ(p.device(), kGPU);
  nn::optim::AdamWOptions o;
  o.lr = 3e-3;
  nn::optim::AdamW oc({{cpu.parameters(), o}}), og({{gpu.parameters(), o}});
  Generator data(8);
  for (int step = 0; step < 5; ++step) {
    const Tensor x = randint(0, 61, {4, 32}, DType::I64, &data), y = randint(0, 61, {4, 32}, DType::I64, &data);
    oc.zero_grad();
    og.zero_grad();
    Tensor lc = cpu.forward(x, y).loss, lg = gpu.forward(x.to(kGPU), y.to(kGPU)).loss;
    ASSERT_EQ(lg.device(), kGPU);
    const double a = lc.item<double>(), b = lg.item<double>();
    // f32 sums in other orders: ~1e-6 relative per op, a few dozen ops deep.
    EXPECT_NEAR(b, a, 1e-4 * std::abs(a)) << "step " << step;
    lc.backward();
    lg.backward();
    for (const Tensor& p : gpu.parameters()) ASSERT_EQ(p.grad().device(), kGPU);
    oc.step();
    og.step();
  }
  const auto pc = cpu.parameters(), pg = gpu.parameters();
  ASSERT_EQ(pc.size(), pg.size());
  // Adam divides by sqrt(v): an element whose gradient is at rounding level moves by up to lr
  // either way, so weights agree to about lr / |w| on those elements, not to f32 precision.
  for (size_t i = 0; i < pc.size(); ++i) EXPECT_LE(rel_error(pg[i].to(kCPU), pc[i]), 1e-3) << "parameter " << i;
}

}  // namespace
