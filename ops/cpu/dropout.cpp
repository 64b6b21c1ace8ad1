#include "ops/cpu/dropout.h"

#include "core/factory.h"
#include "core/parallel.h"
#include "ops/cpu/isa.h"
#include "ops/math/dropout.h"

namespace trident::cpu {
namespace {

// Philox blocks generated together: the loop over them is what vectorizes (32x32 -> 64-bit
// multiplies map to vpmuludq), 4 elements per block.
constexpr int64_t kBlocksPerBatch = 16;

// Elements [4 b, 4 e) of out = x * mask * scale, computed in C.
template <typename T, typename C>
inline void dropout_blocks(const T* x, T* out, int64_t n, int64_t b, int64_t e, PhiloxState s, uint32_t threshold, C scale) {
  uint32_t bits[kBlocksPerBatch * 4];  // element i of the batch: bits[i]
  for (int64_t b0 = b; b0 < e; b0 += kBlocksPerBatch) {
    const int64_t nb = std::min(kBlocksPerBatch, e - b0);
#pragma omp simd
    for (int64_t k = 0; k < nb; ++k) philox::block(s.seed, s.offset, static_cast<uint64_t>(b0 + k), bits + 4 * k);
    const int64_t i0 = b0 * 4, len = std::min(nb * 4, n - i0);
#pragma omp simd
    for (int64_t i = 0; i < len; ++i)
      out[i0 + i] = static_cast<T>(math::dropout_apply(static_cast<C>(x[i0 + i]), bits[i], threshold, scale));
  }
}

}  // namespace

// f32, compiled for AVX2+FMA and for baseline x86-64 (NOTE [ISA clones]) and for AVX-512 (NOTE
// [AVX-512 kernels]): Philox dominates.
TRIDENT_CPU_KERNEL(dropout_blocks_f32,
                   (const float* x, float* out, int64_t n, int64_t b, int64_t e, PhiloxState s, uint32_t threshold, float scale),
                   { dropout_blocks<float, float>(x, out, n, b, e, s, threshold, scale); })

namespace {
template <typename T, typename C>
inline void dropout_range(const T* x, T* out, int64_t n, int64_t b, int64_t e, PhiloxState s, uint32_t threshold, C scale) {
  if constexpr (std::is_same_v<T, float>) {
    TRIDENT_CPU_PICK(dropout_blocks_f32)(x, out, n, b, e, s, threshold, scale);
  } else {
    dropout_blocks<T, C>(x, out, n, b, e, s, threshold, scale);
  }
}
}  // namespace

Tensor dropout(const Tensor& x_in, const PhiloxState& state, double p) {
  const Tensor x = x_in.contiguous();
  Tensor out = empty(x.sizes(), x.dtype());
  const int64_t n = x.numel();
  const uint32_t threshold = math::dropout_threshold(p);
  const double scale = p >= 1.0 ? 0.0 : 1.0 / (1.0 - p);
  TRIDENT_DISPATCH_FLOATING(x.dtype(), "dropout", [&] {
    using C = compute_t<scalar_t>;
    const scalar_t* xp = x.data<scalar_t>();
    scalar_t* op = out.data<scalar_t>();
    // Parallel over Philox blocks of 4 elements: each block is generated once, by one thread.
    parallel_for(0, (n + 3) / 4, 4096, [&](int64_t b, int64_t e) {
      dropout_range<scalar_t, C>(xp, op, n, b, e, state, threshold, static_cast<C>(scale));
    });
  });
  return out;
}

}  // namespace trident::cpu
