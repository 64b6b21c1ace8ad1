#include "data/dataset.h"

#include "ops/index.h"

namespace trident::data {

Example collate(const std::vector<Example>& examples) {
  TRIDENT_CHECK(!examples.empty(), "collate: no examples");
  const size_t n = examples.front().size();
  Example batch(n);
  for (size_t k = 0; k < n; ++k) {
    std::vector<Tensor> parts;
    parts.reserve(examples.size());
    for (size_t i = 0; i < examples.size(); ++i) {
      TRIDENT_CHECK(examples[i].size() == n, "collate: example ", i, " has ", examples[i].size(), " tensors, example 0 has ", n);
      const Tensor& t = examples[i][k];
      TRIDENT_CHECK(t.sizes() == examples[0][k].sizes() && t.dtype() == examples[0][k].dtype(), "collate: tensor ", k,
                    " of example ", i, " is ", t.dtype(), " ", t.sizes(), " but in example 0 it is ", examples[0][k].dtype(),
                    " ", examples[0][k].sizes());
      parts.push_back(t);
    }
    batch[k] = stack(parts, 0);
  }
  return batch;
}

}  // namespace trident::data
