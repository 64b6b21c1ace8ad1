#include "apps/evaluation.h"

#include <algorithm>
#include <cstring>

#include <nlohmann/json.hpp>

#include "apps/device.h"
#include "autograd/grad_mode.h"
#include "core/factory.h"
#include "data/loader.h"
#include "ops/autocast.h"

namespace trident::apps {

using json = nlohmann::json;

namespace {

// `root`'s evaluation sums on every rank of `group` (the last pp rank's, NOTE [Pipeline training
// apps]), sent as JSON (doubles print so that they read back exactly).
MetricSums sums_from(parallel::comm::Communicator& group, const MetricSums& sums, int root) {
  std::string text;
  if (group.rank() == root) {
    json j = json::object();
    for (const auto& [k, v] : sums) j[k] = {v.first, v.second};
    text = j.dump();
  }
  Tensor len = scalar_tensor(static_cast<double>(text.size()), DType::I64);
  group.broadcast(len, root).wait();
  Tensor bytes = zeros({len.item<int64_t>()}, DType::U8);
  if (group.rank() == root) std::memcpy(bytes.data_ptr(), text.data(), text.size());
  group.broadcast(bytes, root).wait();
  std::string got(static_cast<size_t>(bytes.numel()), '\0');
  std::memcpy(got.data(), bytes.data_ptr(), got.size());
  const json j = json::parse(got);
  MetricSums out;
  for (const auto& [k, v] : j.items()) out[k] = {v.at(0).get<double>(), v.at(1).get<double>()};
  return out;
}

// The sums of every dp rank's share of the evaluation batches (NOTE [Evaluation over dp]): dp
// rank 0's share is never empty when there are rows at all, so its metric names are every name.
MetricSums summed_over(parallel::comm::Communicator& dp, const MetricSums& sums) {
  if (dp.size() == 1) return sums;
  MetricSums out = sums_from(dp, sums, 0);  // the names
  Tensor v = zeros({2 * static_cast<int64_t>(out.size())}, DType::F64);
  double* p = v.data<double>();
  for (const auto& [k, s] : out) {
    const auto it = sums.find(k);
    if (it != sums.end()) {
      p[0] = it->second.first;
      p[1] = it->second.second;
    }
    p += 2;
  }
  dp.all_reduce(v, parallel::comm::ReduceOp::Sum).wait();
  const double* q = v.data<double>();
  for (auto& [k, s] : out) {
    s = {q[0], q[1]};
    q += 2;
  }
  return out;
}
}  // namespace

MetricSums evaluation_sums(const TrainOptions& o, const TrainTask& task, parallel::comm::Communicator& dp,
                           parallel::pipeline::Pipeline* pipe, Device dev) {
  models::LayeredModel& model = *task.model;
  const int64_t dp_size = dp.size();
  model.eval();
  NoGradGuard ng;
  data::Loader vl(task.val, {.batch_size = o.batch * dp_size, .drop_last = false, .num_workers = 0, .seed = o.seed});
  MetricSums sums;
  int64_t n = 0;
  while (auto ex = vl.next()) {
    if (o.eval_batches > 0 && n == o.eval_batches) break;
    ++n;
    const models::Batch whole = task.to_batch(*ex);
    const int64_t rows = whole.size(), share = (rows + dp_size - 1) / dp_size;
    const int64_t first = std::min(rows, dp.rank() * share), last = std::min(rows, first + share);
    if (first == last) continue;  // the same on every pp and tp rank of this dp index
    const models::Batch b = (dp_size > 1 ? whole.slice(first, last) : whole).to(dev);
    // The metrics (the losses) inside the autocast scope too, as the training loss is: there
    // the cross-entropy of bf16/f16 logits is computed and returned in f32; outside it, in the
    // logits' dtype, which rounds a validation loss to 8 bits of mantissa (5.34375 for 5.3412).
    MetricSums of_batch;
    {
      autocast::Guard guard(autocast_dtype(o.precision), o.precision != "fp32");
      if (!pipe)
        of_batch = task.eval(model.layers().run(b), b);
      else if (const models::Activations outs = pipe->forward_only(b); pipe->stage() + 1 == pipe->num_stages())
        of_batch = task.eval(outs, b);
    }
    for (const auto& [k, v] : of_batch) {
      sums[k].first += v.first;
      sums[k].second += v.second;
    }
  }
  model.train();
  if (pipe) sums = sums_from(*pipe->pp(), sums, pipe->num_stages() - 1);
  return summed_over(dp, sums);
}

}  // namespace trident::apps
