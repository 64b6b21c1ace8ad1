// GPT-2's hyperparameters: presets, JSON round trip (Hugging Face's config.json keys), the
// parameter count and a memory estimate computed from the architecture alone, so that
// --dry-run can describe an 8.3B model without allocating it.
//
// Presets (layers, heads, width; context 1024, vocabulary 50257 unless noted):
//   124M (12, 12, 768)   355M (24, 16, 1024)   774M (36, 20, 1280)   1.5B (48, 25, 1600)
//   8.3B (72, 32, 3072): Megatron-LM's, vocabulary padded to 51200 (a multiple of 128 x 8, for
//        its 8-way tensor-parallel split), so 8,317,... parameters as Shoeybi et al. count them
//   tiny (4, 4, 256), context 256, vocabulary 50257 padded to 50304: for the CPU
// Dropout is Hugging Face's default 0.1 (embedding, attention probabilities, residual) in every
// preset; training from scratch often turns it off ({"embd_pdrop": 0, ...} as an override).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "core/rng.h"
#include "models/layer_factory.h"
#include "models/memory_estimate.h"

namespace trident::models {

struct GPT2Config {
  int64_t n_layer = 12;
  int64_t n_head = 12;
  int64_t n_embd = 768;
  int64_t vocab_size = 50257;
  // Rows of the embedding table: 0 = vocab_size; otherwise >= vocab_size (50304 = 393 x 128 for
  // aligned GEMMs). Padded rows are never predicted (LayerFactory::tied_logits slices them off).
  int64_t padded_vocab_size = 0;
  int64_t n_positions = 1024;  // the context
  double embd_pdrop = 0.1;
  double attn_pdrop = 0.1;
  double resid_pdrop = 0.1;
  double layer_norm_epsilon = 1e-5;
  double initializer_range = 0.02;
  DType dtype = DType::F32;  // of the parameters ("dtype" in JSON: "f32", "f64", ...)

  // ---- not in the JSON: how this process builds the model ----
  // Makes the layers tensor parallelism splits (NOTE [Parallel layers by configuration]); null:
  // the serial ones.
  std::shared_ptr<const LayerFactory> layers;
  // Dropout draws from it (null: the default generator).
  Generator* dropout_generator = nullptr;
  // NOTE [Loss without logits]: given targets, the head hands the loss its final hidden states and
  // the loss runs the tied output layer inside the cross-entropy (LayerFactory::
  // tied_cross_entropy, linear_cross_entropy), so the [B, T, V] logits need not exist; forward()
  // with targets then returns the loss and no logits. Only where the factory can
  // (tied_cross_entropy_fused(): the serial one); false: logits always, the loss on them.
  bool loss_without_logits = true;

  int64_t vocab_rows() const { return padded_vocab_size > 0 ? padded_vocab_size : vocab_size; }
  int64_t head_dim() const { return n_embd / n_head; }
  const LayerFactory& factory() const { return layers ? *layers : *serial_layers(); }

  // Throws naming the first invalid field (sizes not positive, n_head not dividing n_embd,
  // padded_vocab_size below vocab_size, a dropout outside [0, 1), ...).
  void validate() const;

  // {"model_type": "gpt2", "n_layer": 12, ...}: every field above, Hugging Face's keys.
  std::string to_json() const;
  // Sets the fields a JSON object names: "preset" first (replacing everything with that
  // preset), then the others. An unknown key, a value of the wrong type or an invalid result is
  // an error naming it; on error nothing changes.
  void apply_json(std::string_view json);
  // A preset's config or defaults (124M) with apply_json(json).
  static GPT2Config from_json(std::string_view json);
  // A Hugging Face config.json: the keys above are read, the rest (activation_function,
  // architectures, ...) ignored; n_ctx is taken when n_positions is absent.
  static GPT2Config from_hf_config(std::string_view json);

  // A preset by name, then apply_json(overrides) when given ("{\"n_layer\": 2}").
  static GPT2Config preset(std::string_view name, std::string_view overrides = {});
  static std::vector<std::string> preset_names();

  // Parameters of GPT2LMHeadModel (the output layer is tied to wte: counted once), from the
  // sizes alone: V' C + P C + L (12 C^2 + 13 C) + 2 C, with V' the padded vocabulary and P
  // the context. 124M with V' = 50257, P = 1024: 124,439,808.
  int64_t num_parameters() const;

  // Memory for training on batches of [batch, seq_len] tokens (seq_len <= n_positions): the
  // parameters, their gradients and optimizer buffers, and the activations this implementation
  // keeps for backward. Activation elements per token, with C = n_embd, H = n_head, V = vocab:
  //   per block 17 C + H + 4: the block input (C, kept by ln_1), ln_1's output (C, by c_attn),
  //     q, k, v (3C, by attention), the attention output and its [B, T, C] copy (2C), the
  //     residual after attention (C, by ln_2), ln_2's output (C, by c_fc), c_fc's output (4C, by
  //     GELU) and GELU's output (4C, by c_proj); the attention's log-sum-exp (H) and the two
  //     LayerNorms' mean and 1/std (4). Dropout keeps nothing (its mask is regenerated).
  //   plus 2 C (ln_f's input is the last block's output; ln_f's output is kept by the output
  //     layer and ln_f's statistics) and 2 V: the logits and, in backward, their gradient; with a
  //     padded vocabulary on a GPU (MemoryOptions::cuda) the loss reads a contiguous copy of the
  //     sliced logits, so V counts the padded columns too.
  // Attention never stores the [T, T] scores (fused, FlashAttention-style), so nothing grows with
  // T^2. tests/models/gpt2_test.cpp compares the estimate with the allocator's measured peak.
  MemoryEstimate estimate_memory(int64_t batch, int64_t seq_len, const MemoryOptions& options = {}) const;
};

}  // namespace trident::models
