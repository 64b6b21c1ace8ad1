#include "models/amoebanet_genotype.h"

#include <algorithm>
#include <cctype>
#include <regex>

#include "core/error.h"

namespace trident::models {

CellOpSpec CellOpSpec::parse(const std::string& name) {
  CellOpSpec op;
  op.name = name;
  std::smatch m;
  static const std::regex pool(R"((max|avg)_pool_(\d)x(\d))");
  // The reference's parser reads the kernel and the repeat count and nothing else, so
  // "dil_2_separable_5x5_2" is a plain separable_5x5_2 there; we follow it.
  static const std::regex separable(R"((?:dil_\d+_)?separable_(\d)x(\d)_(\d+))");
  if (name == "none") {
    op.kind = Kind::Identity;
  } else if (name == "1x1") {
    op.kind = Kind::Conv1x1;
  } else if (name == "3x3") {
    op.kind = Kind::Bottleneck;
    op.kernel = 3;
  } else if (name == "1x7_7x1") {
    op.kind = Kind::Bottleneck;
    op.kernel = 7;
    op.factorized = true;
  } else if (std::regex_match(name, m, pool) && m[2] == m[3] && (m[2] == "2" || m[2] == "3")) {
    op.kind = m[1] == "max" ? Kind::MaxPool : Kind::AvgPool;
    op.kernel = std::stoll(m[2]);
  } else if (std::regex_match(name, m, separable) && m[1] == m[2] && std::stoll(m[3]) >= 1) {
    op.kind = Kind::Separable;
    op.kernel = std::stoll(m[1]);
    op.repeats = std::stoll(m[3]);
    TRIDENT_CHECK(op.kernel % 2 == 1, "AmoebaNet: separable kernel must be odd, got '", name, "'");
  } else {
    TRIDENT_FAIL("AmoebaNet: unknown cell operation '", name,
                 "'; known: none, 1x1, 3x3, 1x7_7x1, max_pool_2x2, max_pool_3x3, avg_pool_2x2, avg_pool_3x3, "
                 "separable_KxK_N (K odd), dil_R_separable_KxK_N");
  }
  return op;
}

namespace {

CellGenotype make_cell(const std::vector<std::string>& ops, std::vector<int> inputs, std::vector<int> concat) {
  CellGenotype c;
  TRIDENT_ASSERT(ops.size() == 10 && inputs.size() == 10, "a cell has five combinations of two operations");
  for (size_t i = 0; i < ops.size(); ++i) {
    TRIDENT_ASSERT(inputs[i] >= 0 && inputs[i] < 2 + static_cast<int>(i / 2), "operation ", i, " reads state ", inputs[i],
                   " before it exists");
    c.ops.push_back(CellOpSpec::parse(ops[i]));
  }
  c.inputs = std::move(inputs);
  c.concat = std::move(concat);
  return c;
}

}  // namespace

// Transcribed from the reference's model_specs.py (operations, hiddenstate_indices, and the
// complement of used_hiddenstates as the concatenation).
const Genotype& amoebanet_d_genotype() {
  static const Genotype g{
      "D",
      make_cell({"1x1", "max_pool_3x3", "none", "1x7_7x1", "1x1", "1x7_7x1", "max_pool_3x3", "none", "avg_pool_3x3", "1x1"},
                {1, 1, 1, 0, 0, 0, 2, 2, 1, 5}, {0, 3, 4, 6}),
      make_cell({"max_pool_2x2", "max_pool_3x3", "none", "3x3", "1x7_7x1", "max_pool_3x3", "none", "max_pool_2x2",
                 "avg_pool_3x3", "1x1"},
                {0, 0, 2, 1, 2, 2, 3, 1, 2, 3}, {4, 5, 6})};
  return g;
}

const Genotype& amoebanet_b_genotype() {
  static const Genotype g{
      "B",
      make_cell({"1x1", "max_pool_3x3", "none", "separable_3x3_2", "1x1", "separable_3x3_2", "1x1", "none", "avg_pool_3x3",
                 "1x1"},
                {1, 1, 1, 0, 1, 0, 2, 2, 1, 5}, {0, 3, 4, 6}),
      make_cell({"max_pool_2x2", "max_pool_3x3", "none", "3x3", "dil_2_separable_5x5_2", "max_pool_3x3", "none",
                 "separable_3x3_2", "avg_pool_3x3", "1x1"},
                {0, 0, 2, 1, 2, 2, 3, 1, 4, 3}, {5, 6})};
  return g;
}

const Genotype& amoebanet_genotype(const std::string& name) {
  std::string n = name;
  std::transform(n.begin(), n.end(), n.begin(), [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
  if (n == "D") return amoebanet_d_genotype();
  if (n == "B") return amoebanet_b_genotype();
  TRIDENT_FAIL("AmoebaNet: unknown genotype '", name, "' (known: D, B)");
}

}  // namespace trident::models
