#include "models/layer_factory.h"

#include "autograd/grad_mode.h"
#include "core/copy.h"
#include "core/factory.h"
#include "nn/embedding.h"
#include "nn/init.h"
#include "ops/index.h"
#include "ops/linalg.h"
#include "ops/shape.h"

namespace trident::models {

DenseLayer::DenseLayer(const LinearSpec& s)
    : nn::UnaryModule(s.layout == WeightLayout::InOut ? "Conv1D" : "Linear"),
      in_features(s.in_features),
      out_features(s.out_features),
      layout(s.layout) {
  TRIDENT_CHECK(s.in_features > 0 && s.out_features > 0, "linear layer ", s.name, ": feature counts must be positive, got in=",
                s.in_features, ", out=", s.out_features);
  const Shape shape = layout == WeightLayout::InOut ? Shape{in_features, out_features} : Shape{out_features, in_features};
  weight = register_parameter("weight", zeros(shape, s.dtype));
  if (s.init_weight) {
    NoGradGuard no_grad;
    s.init_weight(weight);
  }
  if (s.bias) bias = register_parameter("bias", zeros({out_features}, s.dtype));
}

Tensor DenseLayer::forward(const Tensor& x) {
  // The [in, out] layout is read transposed in place: one GEMM either way (ops/linalg.h).
  return linear(x, layout == WeightLayout::InOut ? transpose(weight, 0, 1) : weight, bias);
}

std::string DenseLayer::extra_repr() const {
  return detail::str("in_features=", in_features, ", out_features=", out_features, ", bias=", bias.defined() ? "true" : "false");
}

std::shared_ptr<nn::UnaryModule> LayerFactory::linear(const LinearSpec& spec) const {
  return std::make_shared<DenseLayer>(spec);
}

std::shared_ptr<nn::UnaryModule> LayerFactory::vocab_embedding(const EmbeddingSpec& s) const {
  auto e = std::make_shared<nn::Embedding>(s.num_embeddings, s.embedding_dim, s.padding_idx, s.dtype);
  NoGradGuard no_grad;
  if (s.init_weight) s.init_weight(e->weight);
  if (s.padding_idx) fill_(select(e->weight.detach(), 0, *e->padding_idx), 0.0);
  return e;
}

Tensor LayerFactory::tied_logits(const Tensor& hidden, const Tensor& weight, const Tensor& bias, int64_t vocab_size) const {
  TRIDENT_CHECK(weight.dim() == 2 && vocab_size > 0 && vocab_size <= weight.size(0), "tied_logits: vocab_size ",
                vocab_size, " must be in [1, ", weight.dim() == 2 ? weight.size(0) : 0, "] for an embedding table of shape ",
                weight.sizes());
  if (vocab_size == weight.size(0)) return trident::linear(hidden, weight, bias);
  // A padded table (GPT-2's 50257 rows padded to 50304): on a GPU the product runs over every
  // row, its output rows aligned for the GEMM, and the logits are narrowed after. On the CPU the
  // padding buys the GEMM nothing, and narrowing the logits costs three copies of them per step
  // (the loss makes its rows contiguous forward and backward, and narrow's backward scatters the
  // gradient back). There the product takes only the real rows (a view of the table, no copy),
  // so the logits come out contiguous: the same losses bit for bit, 5% more tokens/s (4 layers,
  // width 256, context 128, batch 8, 2 threads: 1514 -> 1590; over 8 steps the op profiler's
  // copy_ went from 337 to 180 ms and the loss's forward and backward from 474 to 248 ms).
  if (!hidden.device().is_cuda()) {
    return trident::linear(hidden, narrow(weight, 0, 0, vocab_size), bias.defined() ? narrow(bias, 0, 0, vocab_size) : bias);
  }
  return narrow(trident::linear(hidden, weight, bias), -1, 0, vocab_size);
}

Tensor LayerFactory::vocab_cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index,
                                         Reduction reduction) const {
  CrossEntropyOptions o;
  o.ignore_index = ignore_index;
  o.reduction = reduction;
  return cross_entropy(logits, targets, o);
}

Tensor LayerFactory::tied_cross_entropy(const Tensor& hidden, const Tensor& weight, const Tensor& bias, int64_t vocab_size,
                                        const Tensor& targets, int64_t ignore_index, Reduction reduction) const {
  // On a GPU the composition with tied_logits' padded product (its rows aligned for the GEMM).
  if (!tied_cross_entropy_fused() || hidden.device().is_cuda())
    return vocab_cross_entropy(tied_logits(hidden, weight, bias, vocab_size), targets, ignore_index, reduction);
  LinearCrossEntropyOptions o;
  o.reduction = reduction;
  o.ignore_index = ignore_index;
  o.vocab_size = vocab_size;
  return linear_cross_entropy(hidden, weight, bias, targets, o);
}

std::shared_ptr<nn::LayerNorm> LayerFactory::residual_layer_norm(int64_t features, double eps, DType dtype) const {
  return std::make_shared<nn::LayerNorm>(Shape{features}, eps, true, dtype);
}

std::shared_ptr<const LayerFactory> serial_layers() {
  static const std::shared_ptr<const LayerFactory> f = std::make_shared<LayerFactory>();
  return f;
}

void check_divisible(const LayerFactory& f, int64_t value, const char* what) {
  TRIDENT_CHECK(value % f.partitions() == 0, what, " ", value, " does not divide by the ", f.partitions(),
                " tensor-parallel partitions");
}

}  // namespace trident::models
