#include "parallel/pipeline/grad_norm.h"

#include <cmath>

#include "autograd/grad_mode.h"
#include "core/factory.h"
#include "nn/optim/clip_grad.h"
#include "ops/reduce.h"

namespace trident::parallel::pipeline {

double clip_grad_norm_(const Pipeline& pipe, double max_norm) {
  TRIDENT_CHECK(max_norm >= 0, "pipeline::clip_grad_norm_: max_norm must be >= 0, got ", max_norm);
  NoGradGuard no_grad;
  const auto& tied = pipe.model().layers().tied();
  // A tied parameter counts on the stage holding its first layer only.
  auto counted_here = [&](const Tensor& p) {
    for (const models::TiedParameter& t : tied)
      if (t.tensor.is_same(p)) return t.layers.front() >= pipe.layer_begin() && t.layers.front() < pipe.layer_end();
    return true;
  };
  double local = 0;
  for (const auto& [name, p] : pipe.named_parameters()) {
    const Tensor& g = p.grad();
    if (!g.defined()) continue;
    TRIDENT_CHECK(is_floating(g.dtype()), "pipeline::clip_grad_norm_: gradient of ", name, " has dtype ", g.dtype());
    if (g.numel() == 0 || !counted_here(p)) continue;
    const double n = norm(g, 2.0).item<double>();
    local += n * n;
  }
  Tensor sq = scalar_tensor(local, kF64);
  if (pipe.pp()->size() > 1) pipe.pp()->all_reduce(sq).wait();
  const double total = std::sqrt(sq.item<double>());
  nn::clip_grads_with_norm_(pipe.parameters(), max_norm, total);
  return total;
}

void sync_full_model(const Pipeline& pipe) {
  comm::Communicator& pp = *pipe.pp();
  if (pp.size() == 1) return;
  NoGradGuard no_grad;
  const auto ranges = stage_ranges(pipe.balance());
  std::vector<comm::Work> works;
  for (size_t s = 0; s < ranges.size(); ++s)
    for (auto& [name, p] : pipe.model().layers().named_parameters(static_cast<size_t>(ranges[s].first),
                                                                  static_cast<size_t>(ranges[s].second)))
      works.push_back(pp.broadcast(p, static_cast<int>(s)));
  comm::wait_all(works);
}

}  // namespace trident::parallel::pipeline
