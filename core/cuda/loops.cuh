// Element-wise launch machinery shared by the CUDA kernels (core/cuda/copy.cu, ops/cuda/*.cu).
//
//   elementwise<Out, In...>(out, {ins...}, [] __device__ (In... x) -> Out { ... }, "op");
//
// runs the functor over every element of `out`, the inputs broadcast to out's shape.
//
// NOTE [Vectorized element-wise]: when out and every input are contiguous with out's shape and
// their addresses are 16-byte aligned, each thread moves 16 bytes per access (4 f32, 8 f16):
// one kernel per functor reads whole packs of each operand, applies the functor lane by lane and
// writes one pack. Anything else (broadcasting, views, misaligned offsets) goes through the
// strided kernel, which turns each linear index into per-operand offsets over the shape after
// merging the dimensions that are contiguous for every operand (OffsetCalc). Both kernels are
// grid-stride loops sized to the device's multiprocessors.
#pragma once

#include <cuda_runtime.h>

#include <array>
#include <cstdint>
#include <utility>

#include "core/cuda/check.h"
#include "core/cuda/stream.h"
#include "core/shape.h"
#include "core/tensor.h"

namespace trident::cuda {

constexpr int kMaxDims = 12;
constexpr int kThreads = 256;

// Per-operand element offsets of a linear index over a (merged) shape.
template <int N>
struct OffsetCalc {
  int ndim = 0;
  int64_t sizes[kMaxDims] = {};
  int64_t strides[N][kMaxDims] = {};

  __device__ __forceinline__ void get(int64_t linear, int64_t (&off)[N]) const {
#pragma unroll
    for (int k = 0; k < N; ++k) off[k] = 0;
    for (int d = ndim - 1; d >= 0; --d) {
      const int64_t size = sizes[d];
      const int64_t idx = linear % size;
      linear /= size;
#pragma unroll
      for (int k = 0; k < N; ++k) off[k] += idx * strides[k][d];
    }
  }
};

// Builds the calculator for `shape` and each operand's strides (already broadcast to shape: 0
// along broadcast dims): drops size-1 dims and merges a dim into the next outer one when every
// operand steps through both as through one.
template <int N>
OffsetCalc<N> make_offset_calc(const Shape& shape, const std::array<Shape, N>& strides) {
  OffsetCalc<N> oc;
  // Innermost first while merging, reversed at the end.
  int64_t sz[64];
  int64_t st[N][64];
  int nd = 0;
  for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
    const int64_t s = shape[static_cast<size_t>(d)];
    if (s == 1) continue;
    bool merge = nd > 0;
    for (int k = 0; k < N && merge; ++k)
      merge = strides[static_cast<size_t>(k)][static_cast<size_t>(d)] == st[k][nd - 1] * sz[nd - 1];
    if (merge) {
      sz[nd - 1] *= s;
    } else {
      sz[nd] = s;
      for (int k = 0; k < N; ++k) st[k][nd] = strides[static_cast<size_t>(k)][static_cast<size_t>(d)];
      ++nd;
    }
  }
  TRIDENT_CHECK(nd <= kMaxDims, "CUDA element-wise kernel: ", nd, " dims after merging (at most ", kMaxDims,
                " supported), shape ", shape);
  oc.ndim = nd;
  for (int i = 0; i < nd; ++i) {
    oc.sizes[i] = sz[nd - 1 - i];
    for (int k = 0; k < N; ++k) oc.strides[k][i] = st[k][nd - 1 - i];
  }
  return oc;
}

// Blocks for a grid-stride loop over `work` items: enough to fill the device, no more.
int grid_size(int64_t work, int threads = kThreads);
// Multiprocessors of the current device (cached).
int multiprocessor_count();

template <typename T, int V>
struct alignas(sizeof(T) * V) Pack {
  T v[V];
};

template <typename... T>
constexpr int vec_width() {
  constexpr size_t widest = std::max({sizeof(T)...});
  return static_cast<int>(16 / widest) > 0 ? static_cast<int>(16 / widest) : 1;
}

template <int V, typename Out, typename F, typename... In>
__global__ void __launch_bounds__(kThreads) vectorized_kernel(int64_t n, F f, Out* out, const In*... in) {
  // No __restrict__: in-place ops pass out as an input too (each element is read, then written,
  // by the same thread).
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x * V;
  for (int64_t base = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * V; base < n; base += step) {
    if (base + V <= n) {
      Pack<Out, V> r;
      auto body = [&](const Pack<In, V>&... p) {
#pragma unroll
        for (int j = 0; j < V; ++j) r.v[j] = f(p.v[j]...);
      };
      body(*reinterpret_cast<const Pack<In, V>*>(in + base)...);
      *reinterpret_cast<Pack<Out, V>*>(out + base) = r;
    } else {
      for (int64_t i = base; i < n; ++i) out[i] = f(in[i]...);
    }
  }
}

template <typename Out, typename F, typename... In>
__global__ void __launch_bounds__(kThreads) strided_kernel(int64_t n, OffsetCalc<1 + sizeof...(In)> oc, F f, Out* out,
                                                            const In*... in) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    int64_t off[1 + sizeof...(In)];
    oc.get(i, off);
    [&]<size_t... K>(std::index_sequence<K...>) { out[off[0]] = f(in[off[K + 1]]...); }(std::index_sequence_for<In...>{});
  }
}

// out[...] = f(ins[...]...) with the inputs broadcast to out's shape. Out and In are the C++
// element types of out and the inputs (the caller has dispatched on the dtypes). Launches on
// the current stream of out's device; on the CPU emulator (tests/simt/simt.h), where out and the
// inputs are host tensors, the same kernels run there over a few blocks.
template <typename Out, typename... In, typename F>
void elementwise(const Tensor& out, const std::array<Tensor, sizeof...(In)>& ins, F f) {
  const int64_t n = out.numel();
  if (n == 0) return;
#if defined(TRIDENT_SIMT)
#define TRIDENT_ELEMENTWISE_LAUNCH(kernel, work, ...) ::simt::launch({dim3(3), dim3(kThreads)}, [&] { kernel(__VA_ARGS__); })
#else
  DeviceGuard guard(out.device().index);
  const cudaStream_t stream = current_stream(out.device().index).handle();
#define TRIDENT_ELEMENTWISE_LAUNCH(kernel, work, ...) kernel<<<grid_size(work), kThreads, 0, stream>>>(__VA_ARGS__)
#endif
  constexpr int V = vec_width<Out, In...>();
  bool contiguous = out.is_contiguous();
  bool aligned = reinterpret_cast<uintptr_t>(out.data_ptr()) % (sizeof(Out) * V) == 0;
  for (const Tensor& t : ins) {
    contiguous = contiguous && t.sizes() == out.sizes() && t.is_contiguous();
    aligned = aligned && reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0;
  }
  Out* o = static_cast<Out*>(out.data_ptr());
  if (contiguous && aligned) {
    [&]<size_t... K>(std::index_sequence<K...>) {
      TRIDENT_ELEMENTWISE_LAUNCH(vectorized_kernel<V>, (n + V - 1) / V, n, f, o, static_cast<const In*>(ins[K].data_ptr())...);
    }(std::index_sequence_for<In...>{});
  } else {
    std::array<Shape, 1 + sizeof...(In)> strides;
    strides[0] = out.strides();
    [&]<size_t... K>(std::index_sequence<K...>) {
      ((strides[K + 1] = broadcast_strides(ins[K].sizes(), ins[K].strides(), out.sizes())), ...);
    }(std::index_sequence_for<In...>{});
    const auto oc = make_offset_calc<1 + sizeof...(In)>(out.sizes(), strides);
    [&]<size_t... K>(std::index_sequence<K...>) {
      TRIDENT_ELEMENTWISE_LAUNCH(strided_kernel, n, n, oc, f, o, static_cast<const In*>(ins[K].data_ptr())...);
    }(std::index_sequence_for<In...>{});
  }
#undef TRIDENT_ELEMENTWISE_LAUNCH
#if !defined(TRIDENT_SIMT)
  TRIDENT_CUDA_KERNEL_CHECK();
#endif
}

}  // namespace trident::cuda
