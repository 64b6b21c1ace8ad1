#include <atomic>

#include "nn/optim/multi_tensor.h"

namespace trident::nn::optim {

namespace {
std::atomic<int64_t> g_launches{0};
}  // namespace

int64_t multi_tensor_launches() { return g_launches.load(std::memory_order_relaxed); }

namespace cuda::detail {
void count_multi_tensor_launch() { g_launches.fetch_add(1, std::memory_order_relaxed); }
}  // namespace cuda::detail

}  // namespace trident::nn::optim
