// The serial references of the pipeline MPI tests (pipeline_mpi_test.cpp,
// pipeline_stage_only_mpi_test.cpp): every rank computes them itself (the same model from the
// same seed on the same mini-batch), so no rank depends on another for the expected values.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "nn/normalization.h"
#include "parallel/comm/communicator.h"
#include "pipeline_models.h"
#include "test_util.h"

namespace trident::testing::pipeline_reference {

using parallel::comm::Communicator;

constexpr int64_t kBatch = 8, kSeq = 8;

inline std::shared_ptr<Communicator> fresh_group(const std::string& name) {
  auto w = Communicator::world();
  return w->split(0, w->rank(), name);
}

struct Serial {
  double loss = 0;
  std::map<std::string, Tensor> grads;
  double scale = 0;  // the largest gradient entry of the model
  // Per layer of the list: its buffers (batch norm's running statistics) after the step.
  std::vector<std::vector<std::pair<std::string, Tensor>>> buffers;
};

inline std::vector<std::vector<std::pair<std::string, Tensor>>> layer_buffers(models::LayeredModel& model) {
  std::vector<std::vector<std::pair<std::string, Tensor>>> out;
  for (size_t i = 0; i < model.layers().size(); ++i) {
    out.emplace_back();
    for (const auto& [name, b] : model.layers()[i]->named_buffers()) out.back().emplace_back(name, b.clone());
  }
  return out;
}

inline double max_abs(const Tensor& t) {
  double m = 0;
  for (double x : t.to_vector<double>()) m = std::max(m, std::fabs(x));
  return m;
}

inline int64_t batch_size(const std::string& kind) { return kind == "amoebanet" ? trident::testing::kAmoebaBatch : kBatch; }

// The serial reference: the whole layer list on the whole mini-batch. With batch norm
// (AmoebaNet) GPipe normalizes each micro-batch by its own statistics, so its serial reference
// runs the same M micro-batches one after another through the whole model, each loss divided by
// the mini-batch's label count and the gradients accumulating; M is ignored for the others.
// deferred: the model's batch norms defer their running statistics and commit them after the
// last micro-batch (NOTE [Deferred batch norm]).
inline const Serial& serial(const std::string& kind, int64_t M = 1, bool deferred = false) {
  static std::map<std::tuple<std::string, int64_t, bool>, Serial> cache;
  if (kind != "amoebanet") M = 1;
  auto it = cache.find({kind, M, deferred});
  if (it != cache.end()) return it->second;
  auto model = make_pipeline_model(kind);
  std::vector<nn::BatchNorm2d*> bns;
  model->apply([&](nn::Module& m) {
    if (auto* bn = dynamic_cast<nn::BatchNorm2d*>(&m); bn != nullptr && deferred) {
      bn->deferred = true;
      bns.push_back(bn);
    }
  });
  const models::Batch batch = make_pipeline_batch(kind, batch_size(kind), kSeq, 7);
  const std::vector<double> counts = model->loss_counts(batch);
  Serial s;
  for (const models::Batch& mb : batch.split(M)) {
    Tensor loss = model->loss(model->layers().run(mb), mb, counts);
    loss.backward();
    s.loss += loss.item<double>();
  }
  for (nn::BatchNorm2d* bn : bns) bn->commit_deferred();
  s.buffers = layer_buffers(*model);
  for (const auto& [name, p] : model->named_parameters()) {
    s.grads[name] = p.grad().clone();
    s.scale = std::max(s.scale, max_abs(p.grad()));
  }
  return cache[{kind, M, deferred}] = s;
}

// |got - want| <= 1e-5 |want| + 1e-5 max|want|: relative 1e-5, with the tensor's scale as the
// floor for single entries that cancel to near zero. The attention key bias is the exception:
// its gradient is zero in exact arithmetic (softmax ignores a shift common to every key), so
// what both sides hold is rounding noise of the terms that cancel (1e-14 here); it is compared
// against the model's gradient scale instead (1e-6 of the largest gradient entry).
inline ::testing::AssertionResult close_rel(const Tensor& got, const Tensor& want, const std::string& name = "",
                                     double model_scale = 0) {
  if (name.find("key.bias") != std::string::npos || name.find("c_attn.bias") != std::string::npos)
    return trident::testing::all_close(got, want, 1e-5, std::max(1e-5 * max_abs(want), 1e-6 * model_scale));
  return trident::testing::all_close(got, want, 1e-5, 1e-5 * max_abs(want));
}

}  // namespace trident::testing::pipeline_reference
