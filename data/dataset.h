// Datasets: what the loader (data/loader.h) reads examples from.
//
// An example is a short list of tensors in a fixed order that a dataset documents (an image
// and its label; a window of input tokens and its targets; BERT's ids, segments, mask and
// labels). A batch is the same list with each tensor stacked along a new leading dim.
#pragma once

#include <cstdint>
#include <vector>

#include "core/rng.h"
#include "core/tensor.h"

namespace trident::data {

using Example = std::vector<Tensor>;

class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t size() const = 0;
  // Example `index`. Called concurrently from the loader's worker threads, so it must not
  // mutate shared state. Randomness (augmentation, masking) comes only from `gen`, which the
  // loader seeds from (seed, epoch, index): the same example comes out whatever the number of
  // workers.
  virtual Example get(int64_t index, Generator& gen) const = 0;
};

// Stacks examples into a batch: tensor i of the result is the stack of tensor i of every
// example (all must have the same shapes and dtypes; the error names the first mismatch).
Example collate(const std::vector<Example>& examples);

}  // namespace trident::data
