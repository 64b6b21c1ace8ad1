// AmoebaNet genotypes: which operation each cell applies to which hidden state, and which
// states it concatenates, as the TensorFlow TPU reference implementation defines them
// (tensorflow/tpu models/official/amoeba_net, model_specs.py; see /work/shared/REFERENCES.md).
//
// A cell starts with two hidden states: 0 is the current input after the cell's 1x1
// "base" convolution, 1 is the previous cell's output (reduced to the current shape). Five
// combinations follow; combination i applies ops[2i] to state inputs[2i] and ops[2i+1] to
// state inputs[2i+1] and appends their sum as state 2 + i. The cell's output concatenates the
// states listed in `concat` (the reference's `used_hiddenstates` == 0) along the channels.
//
// Operations are named as the reference names them:
//   "none"                identity (a strided or channel-changing 1x1 conv when shapes differ)
//   "1x1"                 relu, 1x1 conv, batch norm
//   "3x3", "1x7_7x1"      bottleneck: relu-1x1-bn to filters/4, relu-3x3-bn (or relu-1x7-bn,
//                         relu-7x1-bn), relu-1x1-bn back to filters
//   "max_pool_2x2", "max_pool_3x3", "avg_pool_3x3"
//   "separable_KxK_N"     N times relu, depthwise KxK, pointwise 1x1, batch norm
//   "dil_2_separable_5x5_2"  AmoebaNet-B's; the reference parses it as separable_5x5_2 and
//                         ignores the dilation, and so does Trident (same parameters).
#pragma once

#include <string>
#include <vector>

namespace trident::models {

struct CellOpSpec {
  enum class Kind { Identity, Conv1x1, Bottleneck, MaxPool, AvgPool, Separable };
  Kind kind = Kind::Identity;
  // Bottleneck: "3x3" (kernel {3, 3}) or "1x7_7x1" (factorized: a 1xk then a kx1 conv).
  // Pools and separable convolutions: the square kernel in kernel[0].
  int64_t kernel = 1;
  bool factorized = false;  // Bottleneck 1xk-kx1
  int64_t repeats = 1;      // Separable: how many relu-depthwise-pointwise-bn blocks
  std::string name;         // the reference's name, for printing

  // Parses a reference name; throws trident::Error naming it and listing the known forms.
  static CellOpSpec parse(const std::string& name);
};

struct CellGenotype {
  std::vector<int> inputs;        // 10 hidden-state indices, two per combination
  std::vector<CellOpSpec> ops;    // 10 operations, two per combination
  std::vector<int> concat;        // states concatenated into the output
};

struct Genotype {
  std::string name;  // "D" or "B"
  CellGenotype normal, reduction;
};

// AmoebaNet-D: normal cell concatenating [0, 3, 4, 6] (the reference's choice; the paper says
// [4, 5, 6], and only the reference's reproduces GPipe's Table 1), reduction cell [4, 5, 6].
const Genotype& amoebanet_d_genotype();
// AmoebaNet-B: normal cell [0, 3, 4, 6], reduction cell [5, 6].
const Genotype& amoebanet_b_genotype();
// "D" or "B" (case-insensitive); throws naming the unknown genotype.
const Genotype& amoebanet_genotype(const std::string& name);

}  // namespace trident::models
