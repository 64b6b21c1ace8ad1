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
using trident::testing::relative_error;

namespace {

const Device kGPU = Device::cuda(0);

// One training step on each device from losses lc (CPU) and lg (GPU) of the same batch: the
// losses agree within 1e-4 relative (f32 sums in other orders: ~1e-6 per op, a few dozen ops
// deep), every GPU gradient is on the GPU, both optimizers step.
void step_both(Tensor lc, Tensor lg, nn::optim::Optimizer& oc, nn::optim::Optimizer& og, const std::vector<Tensor>& gpu_params,
               int step) {
  ASSERT_EQ(lg.device(), kGPU);
  const double a = lc.item<double>(), b = lg.item<double>();
  EXPECT_NEAR(b, a, 1e-4 * std::abs(a)) << "step " << step;
  lc.backward();
  lg.backward();
  for (const Tensor& p : gpu_params) ASSERT_TRUE(!p.grad().defined() || p.grad().device() == kGPU);
  oc.step();
  og.step();
}

// The trained weights agree within 1e-3 relative per parameter: Adam divides by sqrt(v), so an
// element whose gradient is at rounding level moves by up to lr either way (weights agree to
// about lr / |w| there, not to f32 precision).
void expect_same_parameters(const std::vector<Tensor>& pc, const std::vector<Tensor>& pg) {
  ASSERT_EQ(pc.size(), pg.size());
  for (size_t i = 0; i < pc.size(); ++i) EXPECT_LE(relative_error(pg[i].to(kCPU), pc[i]), 1e-3) << "parameter " << i;
}

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
    step_both(cpu.forward(x, y).loss, gpu.forward(x.to(kGPU), y.to(kGPU)).loss, oc, og, gpu.parameters(), step);
  }
  expect_same_parameters(cpu.parameters(), gpu.parameters());
}

// BERT pre-training (both heads, padding masks, mixed segments, MLM labels at a third of the
// positions) for a few steps on each device, as above.
TEST(CudaModels, TinyBertPretrainsOnTheGpuAsOnTheCpu) {
  TRIDENT_REQUIRE_CUDA();
  models::BertConfig c = models::BertConfig::preset("tiny");
  c.vocab_size = 37;
  c.padded_vocab_size = 40;
  c.hidden_size = 64;
  c.num_attention_heads = 2;
  c.intermediate_size = 128;
  c.num_hidden_layers = 2;
  c.max_position_embeddings = 32;
  c.hidden_dropout_prob = c.attention_probs_dropout_prob = 0.0;
  Generator g1(9), g2(9);
  models::BertForPreTraining cpu(c, &g1), gpu(c, &g2);
  gpu.to(kGPU);
  nn::optim::AdamWOptions o;
  o.lr = 3e-3;
  nn::optim::AdamW oc({{cpu.parameters(), o}}), og({{gpu.parameters(), o}});
  Generator data(10);
  for (int step = 0; step < 4; ++step) {
    const int64_t B = 4, T = 24;
    std::vector<int64_t> mask(B * T, 1), types(B * T, 0), labels(B * T, -100);
    const Tensor ids = randint(0, 37, {B, T}, DType::I64, &data);
    const std::vector<int64_t> idv = ids.to_vector<int64_t>();
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < T; ++t) {
        const size_t i = static_cast<size_t>(b * T + t);
        if (t >= T - 3 * b) mask[i] = 0;  // row b has 3 b padding positions
        if (t >= T / 2) types[i] = 1;
        if ((t + step) % 3 == 0 && mask[i] == 1) labels[i] = (idv[i] + 5) % 37;
      }
    const models::Batch batch{{"input_ids", ids},
                              {"token_type_ids", from_vector<int64_t>(types, {B, T})},
                              {"attention_mask", from_vector<int64_t>(mask, {B, T})},
                              {"mlm_labels", from_vector<int64_t>(labels, {B, T})},
                              {"next_sentence_label", from_vector<int64_t>({0, 1, 1, 0}, {B})}};
    models::Batch on_gpu;
    for (const auto& [name, t] : batch.tensors()) on_gpu.set(name, t.to(kGPU));
    oc.zero_grad();
    og.zero_grad();
    step_both(cpu.forward(batch).loss, gpu.forward(on_gpu).loss, oc, og, gpu.parameters(), step);
  }
  expect_same_parameters(cpu.parameters(), gpu.parameters());
}

// A tiny AmoebaNet-D (stem, normal and reduction cells: 3x3 / 1x7 / 7x1 and separable
// convolutions through cuDNN, max and average pooling, batch norm in training mode, global
// average pooling) trained a few SGD steps on each device from the same weights and images.
// Dropout is off so both sides compute the same function. A max-pooling window whose two largest
// values differ by f32 rounding could pick another element on each device; with random inputs
// that is rare, and would move one gradient element, well inside these tolerances.
TEST(CudaModels, TinyAmoebaNetTrainsOnTheGpuAsOnTheCpu) {
  TRIDENT_REQUIRE_CUDA();
  models::AmoebaNetConfig c = models::AmoebaNetConfig::from_name("amoebanet-d(2,8)", 10, 32);
  c.stem_filters = 8;
  c.dropout = 0.0;
  c.validate();
  Generator g1(11), g2(11);
  models::AmoebaNet cpu(c, &g1), gpu(c, &g2);
  gpu.to(kGPU);
  for (const Tensor& p : gpu.parameters()) ASSERT_EQ(p.device(), kGPU);
  nn::optim::SGDOptions o;
  o.lr = 0.05;
  o.momentum = 0.9;
  nn::optim::SGD oc(cpu.parameters(), o), og(gpu.parameters(), o);
  Generator data(12);
  for (int step = 0; step < 3; ++step) {
    const Tensor x = randn({4, 3, 32, 32}, kF32, &data), y = randint(0, 10, {4}, DType::I64, &data);
    oc.zero_grad();
    og.zero_grad();
    step_both(cross_entropy(cpu.forward(x), y), cross_entropy(gpu.forward(x.to(kGPU)), y.to(kGPU)), oc, og,
              gpu.parameters(), step);
  }
  expect_same_parameters(cpu.parameters(), gpu.parameters());
  // The batch norms' buffers moved with the model and were updated there: running statistics as
  // the CPU's, and num_batches_tracked (i64) counting the 3 training forwards.
  const auto bc = cpu.named_buffers(), bg = gpu.named_buffers();
  ASSERT_EQ(bc.size(), bg.size());
  ASSERT_FALSE(bg.empty());
  for (size_t i = 0; i < bg.size(); ++i) {
    ASSERT_EQ(bg[i].second.device(), kGPU) << bg[i].first;
    if (bg[i].second.dtype() == DType::I64)
      EXPECT_EQ(bg[i].second.item<int64_t>(), 3) << bg[i].first;
    else
      EXPECT_LE(relative_error(bg[i].second.to(kCPU), bc[i].second), 1e-3) << bg[i].first;
  }
}

// Greedy generation with the model and its key/value cache on the GPU (apps/generate --device
// cuda): the cache is made on the device, the result is a host tensor, and the tokens are the
// CPU model's, with and without the cache (greedy picks agree unless the top two logits are
// within f32 rounding, ~1e-6 relative, of each other: for 24 picks from 61 random logits, unlikely).
TEST(CudaModels, TinyGpt2GeneratesOnTheGpuAsOnTheCpu) {
  TRIDENT_REQUIRE_CUDA();
  models::GPT2Config c = models::GPT2Config::preset("tiny");
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 64;
  c.vocab_size = 61;
  c.padded_vocab_size = 64;
  c.n_positions = 32;
  Generator g1(11), g2(11);
  models::GPT2LMHeadModel cpu(c, &g1), gpu(c, &g2);
  gpu.to(kGPU);
  const models::GPT2KVCache cache = gpu.make_cache(2, 8);
  ASSERT_EQ(cache.keys[0].device(), kGPU);
  const Tensor prompt = from_vector<int64_t>({1, 5, 9, 2, 7, 3}, {2, 3});
  models::GenerateOptions o;
  o.max_new_tokens = 12;
  o.sampling.greedy = true;
  const Tensor want = models::generate(cpu, prompt, o);
  const Tensor got = models::generate(gpu, prompt, o);
  EXPECT_TRUE(got.device().is_cpu());
  EXPECT_EQ(got.to_vector<int64_t>(), want.to_vector<int64_t>());
  o.use_cache = false;
  EXPECT_EQ(models::generate(gpu, prompt, o).to_vector<int64_t>(), want.to_vector<int64_t>());
}

}  // namespace
