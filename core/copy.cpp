#include "core/copy.h"

#if defined(__AVX2__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cstring>
#include <optional>
#include <type_traits>
#include <vector>

#include "core/parallel.h"
#include "core/profiler.h"
#include "core/strided.h"
#include "trident_config.h"

namespace trident {

#if TRIDENT_HAVE_CUDA
namespace cuda {  // core/cuda/copy.cu
void copy_impl(const Tensor& dst, const Tensor& src);
void fill_impl(const Tensor& dst, double value);
void add_into_impl(const Tensor& dst, const Tensor& src);
}  // namespace cuda
#endif

namespace detail {
// The CUDA backend: copies between devices and on a device (null in a build without CUDA).
#if TRIDENT_HAVE_CUDA
void (*g_cuda_copy)(const Tensor& dst, const Tensor& src) = &cuda::copy_impl;
void (*g_cuda_fill)(const Tensor& dst, double value) = &cuda::fill_impl;
#else
void (*g_cuda_copy)(const Tensor& dst, const Tensor& src) = nullptr;
void (*g_cuda_fill)(const Tensor& dst, double value) = nullptr;
#endif
}  // namespace detail

namespace {

// NOTE [Transposing copies]: a copy whose destination runs along one dim (stride 1) and whose
// source runs along another (a transpose: `.contiguous()` of a transposed view) reads the source
// one element per cache line when walked in the destination's order: 0.35 GB/s for a 206 MB
// matrix on the development machine, 15x slower than a straight copy. It is walked in square
// tiles of kTile x kTile elements instead, and within a tile 4-byte elements of one dtype go
// through 8 x 8 AVX2 register transposes (8 rows loaded, 8 rows stored): on that matrix about
// the time of a straight copy (40 ms against memcpy's 24; 32 x 32 scalar tiles took 530). The
// dims other than the two are walked one index at a time.
constexpr int64_t kTile = 128;

struct TransposePlan {
  int a = -1;  // the dim along which dst has stride 1
  int b = -1;  // the dim along which src has stride 1
};

// When dst and src (broadcast strides `sst`) are a transpose of each other worth tiling.
std::optional<TransposePlan> transpose_plan(const Tensor& dst, const Shape& sst) {
  TransposePlan p;
  const Shape& size = dst.sizes();
  for (int d = 0; d < static_cast<int>(size.size()); ++d) {
    if (size[static_cast<size_t>(d)] <= 1) continue;
    if (dst.stride(d) == 1) p.a = d;
    if (sst[static_cast<size_t>(d)] == 1) p.b = d;
  }
  if (p.a < 0 || p.b < 0 || p.a == p.b) return std::nullopt;
  if (size[static_cast<size_t>(p.a)] < 8 || size[static_cast<size_t>(p.b)] < 8) return std::nullopt;
  for (int64_t st : sst)
    if (st == 0) return std::nullopt;  // a broadcast source: the plain loop
  return p;
}

#if defined(__AVX2__)
// d[r ld + c] = s[c ls + r] for r, c < 8, 4-byte elements.
inline void transpose8x8(float* d, int64_t ld, const float* s, int64_t ls) {
  const __m256 r0 = _mm256_loadu_ps(s), r1 = _mm256_loadu_ps(s + ls), r2 = _mm256_loadu_ps(s + 2 * ls),
               r3 = _mm256_loadu_ps(s + 3 * ls), r4 = _mm256_loadu_ps(s + 4 * ls), r5 = _mm256_loadu_ps(s + 5 * ls),
               r6 = _mm256_loadu_ps(s + 6 * ls), r7 = _mm256_loadu_ps(s + 7 * ls);
  const __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1), t2 = _mm256_unpacklo_ps(r2, r3),
               t3 = _mm256_unpackhi_ps(r2, r3), t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5),
               t6 = _mm256_unpacklo_ps(r6, r7), t7 = _mm256_unpackhi_ps(r6, r7);
  const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE), u2 = _mm256_shuffle_ps(t1, t3, 0x44),
               u3 = _mm256_shuffle_ps(t1, t3, 0xEE), u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE),
               u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
  _mm256_storeu_ps(d, _mm256_permute2f128_ps(u0, u4, 0x20));
  _mm256_storeu_ps(d + ld, _mm256_permute2f128_ps(u1, u5, 0x20));
  _mm256_storeu_ps(d + 2 * ld, _mm256_permute2f128_ps(u2, u6, 0x20));
  _mm256_storeu_ps(d + 3 * ld, _mm256_permute2f128_ps(u3, u7, 0x20));
  _mm256_storeu_ps(d + 4 * ld, _mm256_permute2f128_ps(u0, u4, 0x31));
  _mm256_storeu_ps(d + 5 * ld, _mm256_permute2f128_ps(u1, u5, 0x31));
  _mm256_storeu_ps(d + 6 * ld, _mm256_permute2f128_ps(u2, u6, 0x31));
  _mm256_storeu_ps(d + 7 * ld, _mm256_permute2f128_ps(u3, u7, 0x31));
}
#endif

template <typename D, typename S>
void transpose_copy(D* d, const S* s, const Tensor& dst, const Shape& sst, const TransposePlan& p) {
  const Shape& size = dst.sizes();
  const int64_t na = size[static_cast<size_t>(p.a)], nb = size[static_cast<size_t>(p.b)];
  const int64_t d_b = dst.stride(p.b), s_a = sst[static_cast<size_t>(p.a)];
  std::vector<int> rest;
  for (int k = 0; k < static_cast<int>(size.size()); ++k)
    if (k != p.a && k != p.b) rest.push_back(k);
  std::vector<int64_t> idx(rest.size(), 0);
  int64_t outer = 1;
  for (int k : rest) outer *= size[static_cast<size_t>(k)];
  // One tile: rows i of dst (along b), columns j (along a); d[i d_b + j] = s[j s_a + i].
  auto tile = [&](D* dt, const S* st, int64_t a0, int64_t a1, int64_t b0, int64_t b1) {
    int64_t i = b0;
#if defined(__AVX2__)
    if constexpr (sizeof(D) == 4 && std::is_same_v<D, S>) {
      const int64_t a8 = a0 + (a1 - a0) / 8 * 8;
      for (; i + 8 <= b1; i += 8) {
        for (int64_t j = a0; j < a8; j += 8)
          transpose8x8(reinterpret_cast<float*>(dt + i * d_b + j), d_b, reinterpret_cast<const float*>(st + j * s_a + i), s_a);
        for (int64_t r = i; r < i + 8; ++r)
          for (int64_t j = a8; j < a1; ++j) dt[r * d_b + j] = st[j * s_a + r];
      }
    }
#endif
    for (; i < b1; ++i) {
      D* dp = dt + i * d_b;
      for (int64_t j = a0; j < a1; ++j) dp[j] = convert_value<D, S>(st[j * s_a + i]);
    }
  };
  for (int64_t o = 0; o < outer; ++o) {
    int64_t doff = 0, soff = 0;
    for (size_t r = 0; r < rest.size(); ++r) {
      doff += idx[r] * dst.stride(rest[r]);
      soff += idx[r] * sst[static_cast<size_t>(rest[r])];
    }
    for (int64_t b0 = 0; b0 < nb; b0 += kTile)
      for (int64_t a0 = 0; a0 < na; a0 += kTile) tile(d + doff, s + soff, a0, std::min(na, a0 + kTile), b0, std::min(nb, b0 + kTile));
    for (size_t r = rest.size(); r-- > 0;) {  // the next index of the other dims
      if (++idx[r] < size[static_cast<size_t>(rest[r])]) break;
      idx[r] = 0;
    }
  }
}

// NOTE [Parallel conversions]: a contiguous copy of a large tensor (a dtype conversion: autocast's
// casts of weights and logits, their gradients' casts back) runs on every thread, in chunks; f32
// -> bf16 eight lanes at a time with the same integer rounding as the scalar conversion (NOTE
// [Half conversions]: ties to even, NaN kept a NaN), so the result is bit for bit the same. On
// the 2-core development VM, f32 -> bf16 of GPT-2's [1024, 50304] logits took 43 ms on one
// thread, bf16 -> f32 14, and a same-dtype copy of it (memmove) 19.
constexpr int64_t kCopyGrain = int64_t{1} << 16;

template <typename D, typename S>
void convert_range(D* d, const S* s, int64_t n) {
  int64_t i = 0;
#if defined(__AVX2__)
  if constexpr (std::is_same_v<D, BFloat16> && std::is_same_v<S, float>) {
    const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff), inf = _mm256_set1_epi32(0x7f800000);
    const __m256i one = _mm256_set1_epi32(1), bias = _mm256_set1_epi32(0x7fff), quiet = _mm256_set1_epi32(0x40),
                  payload = _mm256_set1_epi32(0x7f), zero = _mm256_setzero_si256();
    const auto round = [&](__m256i x) {
      const __m256i top = _mm256_srli_epi32(x, 16);
      const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(x, bias), _mm256_and_si256(top, one)), 16);
      const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(x, abs_mask), inf);
      const __m256i no_payload = _mm256_cmpeq_epi32(_mm256_and_si256(top, payload), zero);
      const __m256i nan_bits = _mm256_or_si256(top, _mm256_and_si256(no_payload, quiet));
      return _mm256_blendv_epi8(rounded, nan_bits, nan);
    };
    for (; i + 16 <= n; i += 16) {
      const __m256i lo = round(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i)));
      const __m256i hi = round(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i + 8)));
      // packus works within 128-bit lanes: [lo 0-3, hi 0-3, lo 4-7, hi 4-7], then put in order.
      const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(lo, hi), 0xD8);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + i), packed);
    }
  }
#endif
  for (; i < n; ++i) d[i] = convert_value<D, S>(s[i]);
}

}  // namespace

void convert_f32_to_bf16(const float* src, BFloat16* dst, int64_t n) { convert_range<BFloat16, float>(dst, src, n); }

void copy_(const Tensor& dst, const Tensor& src) {
  TRIDENT_CHECK(dst.defined() && src.defined(), "copy_: undefined tensor");
  TRIDENT_CHECK(shape_numel(broadcast_shapes(src.sizes(), dst.sizes(), "copy_")) == dst.numel(), "copy_: source shape ",
                src.sizes(), " does not broadcast to destination shape ", dst.sizes());
  if (!dst.device().is_cpu() || !src.device().is_cpu()) {
    TRIDENT_CHECK(detail::g_cuda_copy != nullptr, "copy_ from ", src.device(), " to ", dst.device(),
                  ": no CUDA backend in this build");
    profiler::Scope scope("copy_", dst.device().is_cuda() ? dst.device().index : src.device().index);
    detail::g_cuda_copy(dst, src);
    dst.bump_version();
    return;
  }
  dst.bump_version();
  if (dst.numel() == 0) return;
  profiler::Scope scope("copy_");
  if (dst.sizes() == src.sizes() && dst.is_contiguous() && src.is_contiguous()) {  // NOTE [Parallel conversions]
    const int64_t n = dst.numel();
    if (dst.dtype() == src.dtype()) {
      if (dst.data_ptr() == src.data_ptr()) return;
      auto* d = static_cast<char*>(dst.data_ptr());
      const auto* s = static_cast<const char*>(src.data_ptr());
      const auto bytes = static_cast<int64_t>(dst.nbytes());
      if (d + bytes <= s || s + bytes <= d) {  // disjoint: in chunks on every thread
        parallel_for(0, bytes, kCopyGrain * 8, [&](int64_t b, int64_t e) { std::memcpy(d + b, s + b, static_cast<size_t>(e - b)); });
      } else {
        std::memmove(d, s, static_cast<size_t>(bytes));
      }
      return;
    }
    TRIDENT_DISPATCH_ALL(dst.dtype(), "copy_", [&] {
      using D = scalar_t;
      D* d = static_cast<D*>(dst.data_ptr());
      TRIDENT_DISPATCH_ALL(src.dtype(), "copy_", [&] {
        const auto* s = static_cast<const scalar_t*>(src.data_ptr());
        parallel_for(0, n, kCopyGrain, [&](int64_t b, int64_t e) { convert_range<D, scalar_t>(d + b, s + b, e - b); });
      });
    });
    return;
  }
  const Shape sst = broadcast_strides(src.sizes(), src.strides(), dst.sizes());
  if (const auto plan = transpose_plan(dst, sst)) {  // NOTE [Transposing copies]
    TRIDENT_DISPATCH_ALL(dst.dtype(), "copy_", [&] {
      using D = scalar_t;
      D* d = static_cast<D*>(dst.data_ptr());
      TRIDENT_DISPATCH_ALL(src.dtype(), "copy_", [&] {
        transpose_copy<D, scalar_t>(d, static_cast<const scalar_t*>(src.data_ptr()), dst, sst, *plan);
      });
    });
    return;
  }
  StridedLoop<2> loop(dst.sizes(), {dst.strides(), sst});
  TRIDENT_DISPATCH_ALL(dst.dtype(), "copy_", [&] {
    using D = scalar_t;
    D* d = static_cast<D*>(dst.data_ptr());
    TRIDENT_DISPATCH_ALL(src.dtype(), "copy_", [&] {
      using S = scalar_t;
      const S* s = static_cast<const S*>(src.data_ptr());
      loop.run([&](const std::array<int64_t, 2>& off, int64_t n, const std::array<int64_t, 2>& st) {
        D* dp = d + off[0];
        const S* sp = s + off[1];
        if (st[0] == 1 && st[1] == 1) {  // runs of a permuted copy (attention's heads): vectorized
          convert_range<D, S>(dp, sp, n);
        } else {
          for (int64_t i = 0; i < n; ++i) dp[i * st[0]] = convert_value<D, S>(sp[i * st[1]]);
        }
      });
    });
  });
}

void fill_(const Tensor& dst, double value) {
  TRIDENT_CHECK(dst.defined(), "fill_: undefined tensor");
  if (!dst.device().is_cpu()) {
    TRIDENT_CHECK(detail::g_cuda_fill != nullptr, "fill_ on ", dst.device(), ": no CUDA backend in this build");
    detail::g_cuda_fill(dst, value);
    dst.bump_version();
    return;
  }
  dst.bump_version();
  StridedLoop<1> loop(dst.sizes(), {dst.strides()});
  TRIDENT_DISPATCH_ALL(dst.dtype(), "fill_", [&] {
    const scalar_t v = convert_value<scalar_t, double>(value);
    scalar_t* d = static_cast<scalar_t*>(dst.data_ptr());
    loop.run([&](const std::array<int64_t, 1>& off, int64_t n, const std::array<int64_t, 1>& st) {
      scalar_t* p = d + off[0];
      for (int64_t i = 0; i < n; ++i) p[i * st[0]] = v;
    });
  });
}

}  // namespace trident

namespace trident {
namespace detail {
#if TRIDENT_HAVE_CUDA
void (*g_cuda_add_into)(const Tensor& dst, const Tensor& src) = &cuda::add_into_impl;
#else
void (*g_cuda_add_into)(const Tensor& dst, const Tensor& src) = nullptr;
#endif
}

void add_into_(const Tensor& dst, const Tensor& src) {
  TRIDENT_CHECK(dst.dtype() == src.dtype(), "add_into_: dtypes differ: ", dst.dtype(), " and ", src.dtype());
  TRIDENT_CHECK(dst.device() == src.device(), "add_into_: devices differ: ", dst.device(), " and ", src.device());
  TRIDENT_CHECK(shape_numel(broadcast_shapes(src.sizes(), dst.sizes(), "add_into_")) == dst.numel(),
                "add_into_: shape ", src.sizes(), " does not broadcast to ", dst.sizes());
  if (!dst.device().is_cpu()) {
    TRIDENT_CHECK(detail::g_cuda_add_into != nullptr, "add_into_ on ", dst.device(), ": no CUDA backend in this build");
    detail::g_cuda_add_into(dst, src);
    dst.bump_version();
    return;
  }
  dst.bump_version();
  const Shape sst = broadcast_strides(src.sizes(), src.strides(), dst.sizes());
  StridedLoop<2> loop(dst.sizes(), {dst.strides(), sst});
  TRIDENT_DISPATCH_NUMERIC(dst.dtype(), "add_into_", [&] {
    using C = compute_t<scalar_t>;
    scalar_t* d = static_cast<scalar_t*>(dst.data_ptr());
    const scalar_t* s = static_cast<const scalar_t*>(src.data_ptr());
    loop.run([&](const std::array<int64_t, 2>& off, int64_t n, const std::array<int64_t, 2>& st) {
      scalar_t* dp = d + off[0];
      const scalar_t* sp = s + off[1];
      if (st[0] == 1 && st[1] == 1) {
        for (int64_t i = 0; i < n; ++i) dp[i] = static_cast<scalar_t>(static_cast<C>(dp[i]) + static_cast<C>(sp[i]));
      } else {
        for (int64_t i = 0; i < n; ++i)
          dp[i * st[0]] = static_cast<scalar_t>(static_cast<C>(dp[i * st[0]]) + static_cast<C>(sp[i * st[1]]));
      }
    });
  });
}

}  // namespace trident
