#include "core/copy.h"

#include <cstring>

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

}  // namespace

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
  if (dst.dtype() == src.dtype() && dst.sizes() == src.sizes() && dst.is_contiguous() && src.is_contiguous()) {
    if (dst.data_ptr() != src.data_ptr()) std::memmove(dst.data_ptr(), src.data_ptr(), dst.nbytes());
    return;
  }
  const Shape sst = broadcast_strides(src.sizes(), src.strides(), dst.sizes());
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
        if (st[0] == 1 && st[1] == 1) {
          for (int64_t i = 0; i < n; ++i) dp[i] = convert_value<D, S>(sp[i]);
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
