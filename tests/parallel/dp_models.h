// The models the data-parallel tests train serially and in parallel. Each is a ModelCase: how
// to build it (the same weights every time), the global batch of a step, and the loss (a mean
// over the batch's rows, so that the average of the ranks' losses on their rows is the loss of
// the global batch). To test another model, add a case to dp_model_cases(): every equivalence
// test runs over all of them.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "models/gpt2.h"
#include "trident.h"

namespace trident::testing {

struct DpBatch {
  Tensor x, y;
  // Rows [begin, begin + count) of the batch (dim 0 of x and y).
  DpBatch rows(int64_t begin, int64_t count) const { return {narrow(x, 0, begin, count), narrow(y, 0, begin, count)}; }
};

struct ModelCase {
  std::string name;
  std::function<std::shared_ptr<nn::Module>()> make;
  std::function<DpBatch(int step, int64_t batch)> batch;
  std::function<Tensor(nn::Module&, const DpBatch&)> loss;
};

// tanh written as a user-defined differentiable function (autograd/function.h): data
// parallelism (post-accumulate hooks, buckets, no_sync) must treat it like a built-in op.
class UserTanh : public nn::UnaryModule {
 public:
  UserTanh() : nn::UnaryModule("UserTanh") {}
  Tensor forward(const Tensor& x) override {
    static const autograd::LambdaFunction fn(
        "UserTanh",
        [](autograd::FunctionCtx& ctx, const autograd::TensorList& in) {
          Tensor y = tanh(in[0]);
          ctx.save_for_backward({y});
          return autograd::TensorList{y};
        },
        [](autograd::FunctionCtx& ctx, const autograd::TensorList& g) {
          const Tensor y = ctx.saved_tensors()[0];
          return autograd::TensorList{mul(g[0], add(neg(mul(y, y)), 1.0))};
        });
    return fn({x})[0];
  }
};

// An MLP regressing a smooth function of its input.
inline ModelCase mlp_case() {
  ModelCase c;
  c.name = "mlp";
  c.make = [] {
    Generator g(7);
    return std::static_pointer_cast<nn::Module>(std::make_shared<nn::Sequential>(
        std::initializer_list<std::shared_ptr<nn::UnaryModule>>{std::make_shared<nn::Linear>(6, 24, true, kF32, &g),
                                                                std::make_shared<nn::GELU>(),
                                                                std::make_shared<nn::Linear>(24, 24, true, kF32, &g),
                                                                std::make_shared<nn::GELU>(),
                                                                std::make_shared<nn::Linear>(24, 3, true, kF32, &g)}));
  };
  c.batch = [](int step, int64_t batch) {
    Generator g(1000 + static_cast<uint64_t>(step));
    Tensor x = randn({batch, 6}, kF32, &g);
    Tensor y = tanh(narrow(x, 1, 0, 3));
    return DpBatch{x, y};
  };
  c.loss = [](nn::Module& m, const DpBatch& b) { return mse_loss(static_cast<nn::Sequential&>(m).forward(b.x), b.y); };
  return c;
}

// The MLP with a user-defined function as its first activation.
inline ModelCase mlp_user_function_case() {
  ModelCase c = mlp_case();
  c.name = "mlp_user_function";
  c.make = [] {
    Generator g(7);
    return std::static_pointer_cast<nn::Module>(std::make_shared<nn::Sequential>(
        std::initializer_list<std::shared_ptr<nn::UnaryModule>>{std::make_shared<nn::Linear>(6, 24, true, kF32, &g),
                                                                std::make_shared<UserTanh>(),
                                                                std::make_shared<nn::Linear>(24, 24, true, kF32, &g),
                                                                std::make_shared<nn::GELU>(),
                                                                std::make_shared<nn::Linear>(24, 3, true, kF32, &g)}));
  };
  return c;
}

// A one-block causal transformer language model from nn modules: token and position embeddings,
// pre-LN causal self-attention and MLP with residuals, a final LayerNorm and a linear head.
class TinyTransformer : public nn::Module {
 public:
  static constexpr int64_t kVocab = 19, kContext = 8, kWidth = 16, kHeads = 2;
  TinyTransformer() : nn::Module("TinyTransformer") {
    Generator g(11);
    wte = register_module("wte", std::make_shared<nn::Embedding>(kVocab, kWidth, std::nullopt, kF32, &g));
    wpe = register_module("wpe", std::make_shared<nn::Embedding>(kContext, kWidth, std::nullopt, kF32, &g));
    ln1 = register_module("ln1", std::make_shared<nn::LayerNorm>(Shape{kWidth}));
    attn = register_module("attn", std::make_shared<nn::MultiheadSelfAttention>(
                                       kWidth, kHeads, nn::MultiheadSelfAttentionOptions{.causal = true}, kF32, &g));
    ln2 = register_module("ln2", std::make_shared<nn::LayerNorm>(Shape{kWidth}));
    fc = register_module("fc", std::make_shared<nn::Linear>(kWidth, 4 * kWidth, true, kF32, &g));
    proj = register_module("proj", std::make_shared<nn::Linear>(4 * kWidth, kWidth, true, kF32, &g));
    ln_f = register_module("ln_f", std::make_shared<nn::LayerNorm>(Shape{kWidth}));
    head = register_module("head", std::make_shared<nn::Linear>(kWidth, kVocab, false, kF32, &g));
  }
  // tokens [B, T] (i64) -> logits [B, T, V]
  Tensor forward(const Tensor& tokens) {
    const int64_t T = tokens.size(1);
    Tensor h = add(wte->forward(tokens), wpe->forward(arange(static_cast<double>(T), DType::I64)));
    h = add(h, attn->forward(ln1->forward(h)));
    h = add(h, proj->forward(gelu(fc->forward(ln2->forward(h)), GeluApproximation::Tanh)));
    return head->forward(ln_f->forward(h));
  }
  std::shared_ptr<nn::Embedding> wte, wpe;
  std::shared_ptr<nn::LayerNorm> ln1, ln2, ln_f;
  std::shared_ptr<nn::MultiheadSelfAttention> attn;
  std::shared_ptr<nn::Linear> fc, proj, head;
};

inline ModelCase transformer_case() {
  ModelCase c;
  c.name = "tiny_transformer";
  c.make = [] { return std::static_pointer_cast<nn::Module>(std::make_shared<TinyTransformer>()); };
  c.batch = [](int step, int64_t batch) {
    // A learnable sequence: each token is the previous one plus a per-sequence stride, mod V.
    Generator g(2000 + static_cast<uint64_t>(step));
    constexpr int64_t T = TinyTransformer::kContext, V = TinyTransformer::kVocab;
    std::vector<int64_t> x, y;
    const std::vector<int64_t> start = randint(0, V, {batch}, DType::I64, &g).to_vector<int64_t>();
    const std::vector<int64_t> stride = randint(1, 4, {batch}, DType::I64, &g).to_vector<int64_t>();
    for (int64_t b = 0; b < batch; ++b) {
      for (int64_t t = 0; t <= T; ++t) {
        const int64_t tok = (start[static_cast<size_t>(b)] + t * stride[static_cast<size_t>(b)]) % V;
        if (t < T) x.push_back(tok);
        if (t > 0) y.push_back(tok);
      }
    }
    return DpBatch{from_vector<int64_t>(x, {batch, T}), from_vector<int64_t>(y, {batch, T})};
  };
  c.loss = [](nn::Module& m, const DpBatch& b) {
    Tensor logits = static_cast<TinyTransformer&>(m).forward(b.x);
    return cross_entropy(reshape(logits, {-1, TinyTransformer::kVocab}), reshape(b.y, {-1}));
  };
  return c;
}

// A tiny models::GPT2LMHeadModel (two blocks, tied output layer) with dropout off, so that a
// step is a function of the weights and the batch alone, on the same learnable sequences as
// the tiny transformer. The loss is the model's own (the mean over the batch's targets).
inline ModelCase gpt2_case() {
  ModelCase c;
  c.name = "gpt2";
  c.make = [] {
    models::GPT2Config config = models::GPT2Config::preset(
        "tiny", R"({"n_layer": 2, "n_head": 2, "n_embd": 16, "n_positions": 8, "vocab_size": 19,
                    "padded_vocab_size": 24, "embd_pdrop": 0, "attn_pdrop": 0, "resid_pdrop": 0})");
    Generator g(13);
    return std::static_pointer_cast<nn::Module>(std::make_shared<models::GPT2LMHeadModel>(config, &g));
  };
  c.batch = transformer_case().batch;  // vocabulary 19, context 8: the same as the tiny transformer's
  c.loss = [](nn::Module& m, const DpBatch& b) { return static_cast<models::GPT2LMHeadModel&>(m).forward(b.x, b.y).loss; };
  return c;
}

// Every model the equivalence tests run over.
inline std::vector<ModelCase> dp_model_cases() { return {mlp_case(), mlp_user_function_case(), transformer_case(), gpt2_case()}; }

}  // namespace trident::testing
