#include "parallel/pipeline/grad_norm.h"

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "autograd/grad_mode.h"
#include "core/factory.h"
#include "nn/optim/clip_grad.h"
#include "ops/arith.h"
#include "ops/reduce.h"
#include "parallel/tensor_parallel/checkpoint.h"

namespace trident::parallel::pipeline {

namespace {
// A norm rounded to the gradient's dtype, as norm(g) returns it there.
double round_to(double v, DType dt) { return dt == kF32 ? static_cast<double>(static_cast<float>(v)) : v; }
}  // namespace

bool counted_here(const Pipeline& pipe, const Tensor& p) {
  for (const models::TiedParameter& t : pipe.model().layers().tied())
    if (t.tensor.is_same(p)) return pipe.holds_layer(t.layers.front());
  return true;
}

double clip_grad_norm_(const Pipeline& pipe, double max_norm, comm::Communicator* tp) {
  TRIDENT_CHECK(max_norm >= 0, "pipeline::clip_grad_norm_: max_norm must be >= 0, got ", max_norm);
  NoGradGuard no_grad;
  // Under tp, the split parameters' shards: their squares summed over the tp group.
  std::map<std::string, tp::ParamShard> split;
  if (tp != nullptr && tp->size() > 1) split = tp::sharded_parameters(pipe.model());
  std::vector<Tensor> split_grads;
  double local = 0;
  for (const auto& [name, p] : pipe.named_parameters()) {
    const Tensor& g = p.grad();
    if (!g.defined()) continue;
    TRIDENT_CHECK(is_floating(g.dtype()), "pipeline::clip_grad_norm_: gradient of ", name, " has dtype ", g.dtype());
    if (g.numel() == 0 || !counted_here(pipe, p)) continue;
    if (split.count(name) != 0) {
      split_grads.push_back(g.detach());
      continue;
    }
    const double n = norm(g, 2.0).item<double>();
    local += n * n;
  }
  // Every tp rank of a stage holds the same parameters, so the vectors line up.
  if (!split_grads.empty()) {
    Tensor sq = zeros({static_cast<int64_t>(split_grads.size())}, kF64);
    for (size_t i = 0; i < split_grads.size(); ++i) {
      const Tensor g64 = split_grads[i].to(kF64);
      sq.data<double>()[i] = sum(mul(g64, g64)).item<double>();
    }
    tp->all_reduce(sq).wait();
    for (size_t i = 0; i < split_grads.size(); ++i) {
      const double n = round_to(std::sqrt(sq.data<double>()[i]), split_grads[i].dtype());
      local += n * n;
    }
  }
  Tensor sq = scalar_tensor(local, kF64);
  if (pipe.pp()->size() > 1) pipe.pp()->all_reduce(sq).wait();
  const double total = std::sqrt(sq.item<double>());
  nn::clip_grads_with_norm_(pipe.parameters(), max_norm, total);
  return total;
}

}  // namespace trident::parallel::pipeline
