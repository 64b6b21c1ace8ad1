#include "parallel/checkpoint.h"

#include "core/factory.h"

namespace trident::parallel {

void save_training_checkpoint(const std::string& path, comm::Communicator& dp, const nn::TrainingCheckpointParts& parts,
                              const nn::TrainingProgress& progress, ZeroOptimizer* zero) {
  TRIDENT_CHECK(!(zero && parts.optimizer), "save_training_checkpoint ", path,
                ": give the ZeroOptimizer or parts.optimizer, not both");
  nn::optim::OptimizerState full;
  if (zero) full = zero->state_dict();  // collective
  std::string failure;
  if (dp.rank() == 0) {
    try {
      nn::TrainingCheckpointParts p = parts;
      std::unique_ptr<nn::optim::Optimizer> unsharded;
      if (zero) {
        unsharded = zero->factory()(zero->param_groups());
        unsharded->load_state_dict(full);
        p.optimizer = unsharded.get();
      }
      nn::save_training_checkpoint(path, p, progress);
    } catch (const Error& e) {
      failure = e.message();
    }
  }
  Tensor ok = scalar_tensor(failure.empty() ? 1.0 : 0.0, DType::I32);
  dp.broadcast(ok, 0).wait();
  if (dp.rank() == 0 && !failure.empty()) TRIDENT_FAIL(failure);
  TRIDENT_CHECK(ok.item<int>() == 1, "save_training_checkpoint ", path, ": dp rank 0 (", dp.world_rank(0),
                " in the world) failed to write the checkpoint; its error says why");
}

nn::TrainingProgress load_training_checkpoint(const std::string& path, const nn::TrainingCheckpointParts& parts,
                                              ZeroOptimizer* zero) {
  if (!zero) return nn::load_training_checkpoint(path, parts);
  TRIDENT_CHECK(parts.optimizer == nullptr, "load_training_checkpoint ", path,
                ": give the ZeroOptimizer or parts.optimizer, not both");
  std::unique_ptr<nn::optim::Optimizer> unsharded = zero->factory()(zero->param_groups());
  nn::TrainingCheckpointParts p = parts;
  p.optimizer = unsharded.get();
  nn::TrainingProgress progress = nn::load_training_checkpoint(path, p);
  zero->load_state_dict(unsharded->state_dict());
  return progress;
}

}  // namespace trident::parallel
