// What training a model needs in memory, estimated before building it (the apps' --dry-run).
#pragma once

#include <cstdint>
#include <string>

namespace trident::models {

// Bytes per element of each kind of state. The defaults are f32 training with AdamW on the CPU:
// f32 parameters and gradients, two f32 moment buffers per parameter, f32 activations.
struct MemoryOptions {
  int64_t param_bytes = 4;
  int64_t grad_bytes = 4;
  int64_t optimizer_slots = 2;  // AdamW/Adam/LAMB: 2; SGD with momentum: 1; plain SGD: 0
  int64_t optimizer_bytes = 4;
  int64_t activation_bytes = 4;
  // Training on a GPU: a padded vocabulary's logits are computed padded and the loss reads a
  // contiguous copy of the real columns; on the CPU the product takes only the real rows
  // (LayerFactory::tied_logits), so neither exists.
  bool cuda = false;
  // The loss runs the output layer in tiles (linear_cross_entropy on the CPU in bf16, NOTE [Loss
  // without logits]: GPT-2's and BERT's masked-LM loss): neither the logits nor their gradient
  // exist.
  bool logits_tiled = false;
};

struct MemoryEstimate {
  int64_t parameters = 0;   // bytes of the weights
  int64_t gradients = 0;    // one gradient per weight
  int64_t optimizer = 0;    // the optimizer's per-weight buffers
  int64_t activations = 0;  // what one forward keeps for backward, plus the largest transient
  int64_t total() const { return parameters + gradients + optimizer + activations; }
  // "parameters 474.7 MiB + gradients 474.7 MiB + optimizer 949.4 MiB + activations 2.1 GiB = 4.0 GiB"
  std::string str() const;
};

// Bytes in binary units with one decimal ("512 B", "1.5 KiB", "474.7 MiB", "2.1 GiB").
std::string format_bytes(int64_t bytes);

}  // namespace trident::models
