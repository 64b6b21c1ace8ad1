// Block-wide reductions shared by the CUDA kernels of the index and loss families.
//
// NOTE [Deterministic device totals]: a total the host needs (a loss sum, the first bad index)
// is reduced in two fixed stages: a grid whose size depends only on the element count (never on
// the device's multiprocessor count or on timing) writes one partial per block, then a single
// block combines the partials in order. No atomics, so a sum is bit-identical from run to run and
// from GPU to GPU. The host copies the one result back, which synchronizes the stream: callers
// say so where their contract needs a host value.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace trident::cuda {

constexpr int kReduceThreads = 256;
// Stage one uses at most this many blocks (each walks its share with a grid stride).
constexpr int64_t kMaxPartials = 512;

// Blocks for stage one over n elements: one per 4096 elements, at most kMaxPartials.
inline int partial_blocks(int64_t n) {
  const int64_t b = (n + 4095) / 4096;
  return static_cast<int>(b < 1 ? 1 : (b > kMaxPartials ? kMaxPartials : b));
}

// Combines v over the kReduceThreads threads of a block; every thread gets the result. Every
// thread of the block must call it (it synchronizes). `smem` holds kReduceThreads / 32 values;
// `identity` is op's neutral element (0 for a sum), which fills the lanes past the warp count.
template <typename T, typename Op>
__device__ __forceinline__ T block_reduce(T v, Op op, T identity, T* smem) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  __syncthreads();  // smem may still be read by a previous call
  if (lane == 0) smem[warp] = v;
  __syncthreads();
  v = lane < kReduceThreads / 32 ? smem[lane] : identity;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

struct SumOp {
  template <typename T>
  __device__ __forceinline__ T operator()(T a, T b) const { return a + b; }
};
struct MinOp {
  template <typename T>
  __device__ __forceinline__ T operator()(T a, T b) const { return b < a ? b : a; }
};
struct MaxOp {
  template <typename T>
  __device__ __forceinline__ T operator()(T a, T b) const { return b > a ? b : a; }
};

}  // namespace trident::cuda
