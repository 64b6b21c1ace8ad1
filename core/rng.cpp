#include "core/rng.h"

namespace trident {

void Generator::manual_seed(uint64_t seed) {
  std::lock_guard<std::mutex> lock(mu_);
  state_ = {seed, 0};
}
uint64_t Generator::seed() const {
  std::lock_guard<std::mutex> lock(mu_);
  return state_.seed;
}
PhiloxState Generator::state() const {
  std::lock_guard<std::mutex> lock(mu_);
  return state_;
}
void Generator::set_state(const PhiloxState& s) {
  std::lock_guard<std::mutex> lock(mu_);
  state_ = s;
}
PhiloxState Generator::reserve(uint64_t blocks) {
  std::lock_guard<std::mutex> lock(mu_);
  PhiloxState s = state_;
  state_.offset += blocks;
  return s;
}

Generator& default_generator() {
  static Generator g(0);
  return g;
}
void manual_seed(uint64_t seed) { default_generator().manual_seed(seed); }

}  // namespace trident
