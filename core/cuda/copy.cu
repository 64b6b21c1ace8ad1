// The CUDA side of core/copy.h: copies between the CPU and devices and on a device, fill_ and
// add_into_, which core/copy.cpp calls for tensors on CUDA devices.
//
// NOTE [Cross-device copies]: a copy that only moves bytes (same dtype, both sides contiguous
// with one shape) is one cudaMemcpyAsync on the current stream of the CUDA side (the
// destination's for device-to-device). Anything else is done in steps that each are such a
// move or a kernel on one device: the CPU side is first made a contiguous tensor of the CUDA
// side's dtype (by the CPU copy_), moved, and converted or scattered on the device. Copies that
// involve the host synchronize the stream before returning, so the host may read (or free) its
// buffer at once: asynchronous host copies from pinned memory are a later refinement.
#include <cuda_runtime.h>

#include <array>
#include <mutex>

#include "core/copy.h"
#include "core/cuda/check.h"
#include "core/cuda/loops.cuh"
#include "core/cuda/stream.h"
#include "core/factory.h"

namespace trident {

namespace cuda {

#if !defined(TRIDENT_SIMT)  // host code: not compiled by the CPU emulator (tests/simt/simt.h)
int multiprocessor_count() {
  static std::array<int, 64> counts{};
  static std::mutex mu;
  const int d = current_device();
  std::lock_guard<std::mutex> lock(mu);
  int& c = counts[static_cast<size_t>(d)];
  if (c == 0) TRIDENT_CUDA_CHECK(cudaDeviceGetAttribute(&c, cudaDevAttrMultiProcessorCount, d));
  return c;
}

int grid_size(int64_t work, int threads) {
  const int64_t blocks = (work + threads - 1) / threads;
  const int64_t cap = static_cast<int64_t>(multiprocessor_count()) * (2048 / threads) * 4;
  return static_cast<int>(std::max<int64_t>(1, std::min(blocks, cap)));
}
#endif  // !TRIDENT_SIMT

namespace {

// Same-dtype copies move bytes: one kernel per element size.
template <size_t Bytes>
struct Raw {
  alignas(Bytes) unsigned char b[Bytes];
};

// NOTE [Dynamic-dtype conversion]: converting copies are rare next to compute (dtype casts at
// module boundaries), so one kernel serves all 56 pairs of dtypes: it loads through a switch on
// the source dtype into a double or an int64 and stores through a switch on the destination
// dtype. Values convert as NOTE [Value conversion] (core/dtype.h) says, as on the CPU, so the
// results match the CPU bit for bit. A template per pair would cost a minute of compile time.
struct Scalar {
  double f;
  int64_t i;
  bool is_int;
};

__device__ __forceinline__ Scalar load_as(DType t, const char* p, int64_t off) {
  switch (t) {
    case DType::F32: return {static_cast<double>(reinterpret_cast<const float*>(p)[off]), 0, false};
    case DType::F64: return {reinterpret_cast<const double*>(p)[off], 0, false};
    case DType::F16: return {static_cast<double>(static_cast<float>(reinterpret_cast<const Half*>(p)[off])), 0, false};
    case DType::BF16: return {static_cast<double>(static_cast<float>(reinterpret_cast<const BFloat16*>(p)[off])), 0, false};
    case DType::I32: return {0, reinterpret_cast<const int32_t*>(p)[off], true};
    case DType::I64: return {0, reinterpret_cast<const int64_t*>(p)[off], true};
    case DType::U8: return {0, reinterpret_cast<const uint8_t*>(p)[off], true};
    case DType::Bool: return {0, reinterpret_cast<const bool*>(p)[off] ? 1 : 0, true};
  }
  return {0, 0, true};
}

template <typename D>
__device__ __forceinline__ D cast_from(Scalar v) {
  if constexpr (std::is_same_v<D, bool>) {
    return v.is_int ? v.i != 0 : v.f != 0.0;
  } else if constexpr (std::is_same_v<D, Half> || std::is_same_v<D, BFloat16>) {
    return v.is_int ? D(static_cast<float>(v.i)) : D(static_cast<float>(v.f));
  } else if constexpr (std::is_floating_point_v<D>) {
    return v.is_int ? static_cast<D>(v.i) : static_cast<D>(v.f);
  } else {
    // Through int64, as NOTE [Value conversion] says; a float's value is exact in f64.
    return v.is_int ? static_cast<D>(v.i) : static_cast<D>(static_cast<int64_t>(v.f));
  }
}

__device__ __forceinline__ void store_as(DType t, char* p, int64_t off, Scalar v) {
  switch (t) {
    case DType::F32: reinterpret_cast<float*>(p)[off] = cast_from<float>(v); break;
    case DType::F64: reinterpret_cast<double*>(p)[off] = cast_from<double>(v); break;
    case DType::F16: reinterpret_cast<Half*>(p)[off] = cast_from<Half>(v); break;
    case DType::BF16: reinterpret_cast<BFloat16*>(p)[off] = cast_from<BFloat16>(v); break;
    case DType::I32: reinterpret_cast<int32_t*>(p)[off] = cast_from<int32_t>(v); break;
    case DType::I64: reinterpret_cast<int64_t*>(p)[off] = cast_from<int64_t>(v); break;
    case DType::U8: reinterpret_cast<uint8_t*>(p)[off] = cast_from<uint8_t>(v); break;
    case DType::Bool: reinterpret_cast<bool*>(p)[off] = cast_from<bool>(v); break;
  }
}

__global__ void __launch_bounds__(kThreads) convert_kernel(int64_t n, OffsetCalc<2> oc, DType dt, char* dst, DType st,
                                                           const char* src) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    int64_t off[2];
    oc.get(i, off);
    store_as(dt, dst, off[0], load_as(st, src, off[1]));
  }
}

}  // namespace

// The host side: not compiled by the CPU emulator (tests/simt/simt.h), whose tests launch the
// kernel above themselves.
#if !defined(TRIDENT_SIMT)
namespace {

void convert_kernel_launch(const Tensor& dst, const Tensor& src) {
  const int64_t n = dst.numel();
  DeviceGuard g(dst.device().index);
  const auto oc = make_offset_calc<2>(dst.sizes(), {dst.strides(), src.strides()});
  convert_kernel<<<grid_size(n), kThreads, 0, current_stream(dst.device().index).handle()>>>(
      n, oc, dst.dtype(), static_cast<char*>(dst.data_ptr()), src.dtype(), static_cast<const char*>(src.data_ptr()));
  TRIDENT_CUDA_KERNEL_CHECK();
}

template <size_t B>
void move_bytes(const Tensor& dst, const Tensor& src) {
  using T = Raw<B>;
  elementwise<T, T>(dst, {src}, [] __device__(T v) { return v; });
}

void device_copy(const Tensor& dst, const Tensor& src) {
  // dst and src on one device.
  if (dst.dtype() == src.dtype()) {
    const cudaStream_t stream = current_stream(dst.device().index).handle();
    if (dst.sizes() == src.sizes() && dst.is_contiguous() && src.is_contiguous()) {
      if (dst.data_ptr() != src.data_ptr()) {
        DeviceGuard g(dst.device().index);
        TRIDENT_CUDA_CHECK(cudaMemcpyAsync(dst.data_ptr(), src.data_ptr(), dst.nbytes(), cudaMemcpyDeviceToDevice, stream));
      }
      return;
    }
    switch (dst.element_size()) {
      case 1: move_bytes<1>(dst, src); return;
      case 2: move_bytes<2>(dst, src); return;
      case 4: move_bytes<4>(dst, src); return;
      case 8: move_bytes<8>(dst, src); return;
      default: TRIDENT_FAIL("copy_: no CUDA kernel for element size ", dst.element_size());
    }
  }
  convert_kernel_launch(dst, src);
}

bool plain_move(const Tensor& dst, const Tensor& src) {
  return dst.dtype() == src.dtype() && dst.sizes() == src.sizes() && dst.is_contiguous() && src.is_contiguous();
}

// One cudaMemcpyAsync between contiguous tensors of one dtype and shape.
void memcpy_between(const Tensor& dst, const Tensor& src) {
  const size_t n = dst.nbytes();
  if (n == 0) return;
  if (dst.device().is_cuda() && src.device().is_cuda()) {
    DeviceGuard g(dst.device().index);
    const Stream s = current_stream(dst.device().index);
    if (dst.device() == src.device()) {
      TRIDENT_CUDA_CHECK(cudaMemcpyAsync(dst.data_ptr(), src.data_ptr(), n, cudaMemcpyDeviceToDevice, s.handle()));
    } else {
      // The source device's queued work (which may still be writing src) comes first.
      Event e;
      e.record(current_stream(src.device().index));
      e.wait(s);
      TRIDENT_CUDA_CHECK(
          cudaMemcpyPeerAsync(dst.data_ptr(), dst.device().index, src.data_ptr(), src.device().index, n, s.handle()));
      s.synchronize();  // src's stream may free src right after; keep it simple and safe
    }
    return;
  }
  const Device dev = dst.device().is_cuda() ? dst.device() : src.device();
  DeviceGuard g(dev.index);
  const Stream s = current_stream(dev.index);
  TRIDENT_CUDA_CHECK(cudaMemcpyAsync(dst.data_ptr(), src.data_ptr(), n,
                                     dst.device().is_cuda() ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost, s.handle()));
  s.synchronize();  // NOTE [Cross-device copies]
}

Tensor contiguous_like(const Tensor& t, DType dtype, Device device) {
  return empty(t.sizes(), TensorOptions(dtype).device(device));
}

}  // namespace

void copy_impl(const Tensor& dst, const Tensor& src) {
  if (dst.numel() == 0) return;
  // src broadcasts to dst: make it dst's shape first where that matters (it is a view).
  Tensor s = src;
  if (s.sizes() != dst.sizes()) {
    s = src.as_strided(dst.sizes(), broadcast_strides(src.sizes(), src.strides(), dst.sizes()), src.storage_offset());
  }
  if (dst.device().is_cuda() && s.device() == dst.device()) return device_copy(dst, s);
  if (plain_move(dst, s)) return memcpy_between(dst, s);
  if (s.device().is_cpu()) {
    // Host -> device: contiguous in dst's dtype on the host, move, then scatter on the device.
    Tensor staged = contiguous_like(s, dst.dtype(), kCPU);
    copy_(staged, s);
    if (dst.is_contiguous()) return memcpy_between(dst, staged);
    Tensor moved = contiguous_like(s, dst.dtype(), dst.device());
    memcpy_between(moved, staged);
    return device_copy(dst, moved);
  }
  if (dst.device().is_cpu()) {
    // Device -> host: contiguous in dst's dtype on the device, move, then scatter on the host.
    Tensor gathered = contiguous_like(s, dst.dtype(), s.device());
    device_copy(gathered, s);
    if (dst.is_contiguous()) return memcpy_between(dst, gathered);
    Tensor host = contiguous_like(s, dst.dtype(), kCPU);
    memcpy_between(host, gathered);
    return copy_(dst, host);
  }
  // Device -> another device.
  Tensor gathered = contiguous_like(s, dst.dtype(), s.device());
  device_copy(gathered, s);
  if (dst.is_contiguous()) return memcpy_between(dst, gathered);
  Tensor moved = contiguous_like(s, dst.dtype(), dst.device());
  memcpy_between(moved, gathered);
  device_copy(dst, moved);
}

void fill_impl(const Tensor& dst, double value) {
  TRIDENT_CHECK(dst.device().is_cuda(), "fill_: expected a CUDA tensor, got ", dst.device());
  TRIDENT_DISPATCH_ALL(dst.dtype(), "fill_ (CUDA)", [&] {
    const scalar_t v = convert_value<scalar_t, double>(value);
    elementwise<scalar_t>(dst, {}, [v] __device__() { return v; });
  });
}

void add_into_impl(const Tensor& dst, const Tensor& src) {
  TRIDENT_CHECK(dst.device().is_cuda(), "add_into_: expected a CUDA tensor, got ", dst.device());
  TRIDENT_DISPATCH_NUMERIC(dst.dtype(), "add_into_ (CUDA)", [&] {
    using C = compute_t<scalar_t>;
    elementwise<scalar_t, scalar_t, scalar_t>(dst, {dst, src}, [] __device__(scalar_t a, scalar_t b) {
      return static_cast<scalar_t>(static_cast<C>(a) + static_cast<C>(b));
    });
  });
}

#endif  // !TRIDENT_SIMT

}  // namespace cuda
}  // namespace trident
