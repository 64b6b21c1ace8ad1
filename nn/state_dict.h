// State dicts: a model's (or an optimizer's) tensors by name, and loading values into tensors
// that already exist.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace trident::nn {

// NOTE [StateDict order]: a std::map, so iteration is sorted by name. The order of a state dict
// carries no meaning anywhere it is used: loading matches tensors by name, and a safetensors
// file orders its tensors itself (by dtype, then name). Sorted iteration makes files, error
// messages and checksums deterministic whatever order the tensors were registered in, and lookups
// by name are logarithmic. Registration order, which optimizers and printing want, belongs to the
// Module (its named_parameters() list), not to this map.
using StateDict = std::map<std::string, Tensor>;

// A tensor whose shape or dtype differs between the target and the source.
struct StateDictMismatch {
  std::string name;
  Shape expected_shape;  // the target's
  DType expected_dtype;
  Shape got_shape;       // the source's
  DType got_dtype;
};

struct LoadResult {
  std::vector<std::string> missing;       // in the target, not in the source (left unchanged)
  std::vector<std::string> unexpected;    // in the source, not in the target (ignored)
  std::vector<StateDictMismatch> mismatched;  // in both, different shape or dtype (left unchanged)
  std::vector<std::string> loaded;        // copied
  bool ok() const { return missing.empty() && unexpected.empty() && mismatched.empty(); }
};

// Copies source values into the existing target tensors, in place (copy_, no autograd), so
// handles held elsewhere (an optimizer's parameter list, a tied weight) see the new values.
// Source tensors may live on another device than their targets; names, shapes and dtypes must
// match exactly (no casts).
//  strict: any missing, unexpected or mismatched name throws ONE trident::Error listing all of
//          them (mismatches with both shapes and dtypes) and nothing is copied;
//  non-strict: copies the matching tensors and returns the lists.
LoadResult load_into(const StateDict& target, const StateDict& source, bool strict = true);

// The report load_into(strict) throws: every missing, unexpected and mismatched name.
std::string describe_load_problems(const LoadResult& r);

}  // namespace trident::nn
