#include "parallel/tensor_parallel/grad_norm.h"

#include <cmath>
#include <map>

#include "autograd/grad_mode.h"
#include "core/factory.h"
#include "ops/arith.h"
#include "nn/optim/clip_grad.h"
#include "ops/reduce.h"
#include "parallel/tensor_parallel/checkpoint.h"

namespace trident::parallel::tp {

namespace {
// A norm rounded to the gradient's dtype, as norm(g) returns it there.
double round_to(double v, DType dt) { return dt == kF32 ? static_cast<double>(static_cast<float>(v)) : v; }
}  // namespace

double clip_grad_norm_(nn::Module& model, double max_norm, comm::Communicator& group) {
  TRIDENT_CHECK(max_norm >= 0, "tp::clip_grad_norm_: max_norm must be >= 0, got ", max_norm);
  NoGradGuard no_grad;
  const std::map<std::string, ParamShard> split = sharded_parameters(model);
  std::vector<Tensor> split_grads;
  double total = 0;
  for (const auto& [name, p] : model.named_parameters()) {
    const Tensor& g = p.grad();
    if (!g.defined()) continue;
    TRIDENT_CHECK(is_floating(g.dtype()), "tp::clip_grad_norm_: gradient of ", name, " has dtype ", g.dtype());
    if (split.count(name) != 0) {
      split_grads.push_back(g.detach());
    } else if (g.numel() > 0) {
      const double n = norm(g, 2.0).item<double>();
      total += n * n;
    }
  }
  // Every rank has the same split parameters (the same model structure), so the vectors line up.
  Tensor sq = zeros({static_cast<int64_t>(split_grads.size())}, kF64);
  for (size_t i = 0; i < split_grads.size(); ++i) {
    const Tensor g64 = split_grads[i].to(kF64);
    sq.data<double>()[i] = sum(mul(g64, g64)).item<double>();
  }
  if (group.size() > 1 && sq.numel() > 0) group.all_reduce(sq).wait();
  for (size_t i = 0; i < split_grads.size(); ++i) {
    const double n = round_to(std::sqrt(sq.data<double>()[i]), split_grads[i].dtype());
    total += n * n;
  }
  total = std::sqrt(total);
  nn::clip_grads_with_norm_(model.parameters(), max_norm, total);
  return total;
}

}  // namespace trident::parallel::tp
