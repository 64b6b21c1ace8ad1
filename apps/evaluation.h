// The training programs' evaluation (apps/train_common.h's train() calls it before, during and
// after training).
//
// NOTE [Evaluation over dp]: an evaluation batch is --batch x --dp rows, as a step's micro-batch
// is --batch rows per dp rank. Each dp rank evaluates its share of it (ceil(rows / dp) per rank,
// in rank order, so dp rank 0's share is never empty) and the metric sums are added over dp, so
// the validation numbers are those of the serial run with --batch x --dp, whatever the layout.
// Under --pp the batches go through the stages (Pipeline::forward_only); the last stage computes
// the metrics and sends their sums to the other pp ranks first.
#pragma once

#include <map>
#include <string>
#include <utility>

#include "apps/train_common.h"
#include "parallel/pipeline/pipeline.h"

namespace trident::apps {

// {metric name -> (sum, weight)} over the evaluated rows.
using MetricSums = std::map<std::string, std::pair<double, double>>;

// The sums of task.eval over the first --eval-batches evaluation batches of task.val (all with
// 0), in eval mode (train mode afterwards) and inside the run's autocast scope, the same on
// every rank. Collective over `dp` and, with `pipe`, over its pp group.
MetricSums evaluation_sums(const TrainOptions& o, const TrainTask& task, parallel::comm::Communicator& dp,
                           parallel::pipeline::Pipeline* pipe, Device dev);

}  // namespace trident::apps
