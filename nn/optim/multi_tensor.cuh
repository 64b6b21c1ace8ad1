// The multi-tensor launcher (NOTE [Multi-tensor launches] in nn/optim/multi_tensor.h), for .cu
// files:
//
//   struct ScaleOp {                    // one block: one chunk of one tensor
//     float s;
//     __device__ void operator()(const TensorListMeta<1>& m, const ChunkRange& r) const {
//       float* x = list_ptr<float>(m, 0, r.local);
//       for (int64_t i = r.begin + threadIdx.x; i < r.end; i += kMultiTensorThreads) x[i] *= s;
//     }
//   };
//   multi_tensor_apply<1>({&grads}, stream, ScaleOp{0.5f});
//
// The op runs with kMultiTensorThreads threads per block; all threads of a block see the same
// ChunkRange, so block-wide reductions (mt_block_sum) are safe inside it.
#pragma once

#include <cuda_runtime.h>

#include <array>
#include <cstdint>
#include <vector>

#include "core/cuda/check.h"
#include "core/error.h"
#include "core/tensor.h"
#include "nn/optim/multi_tensor.h"

namespace trident::nn::optim::cuda {

namespace detail {
void count_multi_tensor_launch();  // multi_tensor.cpp
}  // namespace detail

// The kernel argument: K lists' pointers for up to kMaxTensors tensors, and the (tensor, chunk)
// pair of every block.
template <int K>
struct TensorListMeta {
  static constexpr int kMaxTensors = multi_tensor_max_tensors(K);
  void* ptrs[K][kMaxTensors];
  int64_t numel[kMaxTensors];
  int32_t tensor_index[kMaxTensors];  // index in the lists
  int32_t chunk_base[kMaxTensors];    // index of the tensor's chunk 0 among all chunks of the lists
  int32_t block_chunk[kMultiTensorMaxBlocks];
  uint8_t block_tensor[kMultiTensorMaxBlocks];  // slot in this struct
};
static_assert(multi_tensor_max_tensors(5) <= 255, "block_tensor is a uint8_t");
// 4 KB is the kernel-parameter limit on every toolkit and GPU; 256 bytes stay for the op.
static_assert(sizeof(TensorListMeta<1>) <= 4096 - 256 && sizeof(TensorListMeta<2>) <= 4096 - 256 &&
                  sizeof(TensorListMeta<3>) <= 4096 - 256 && sizeof(TensorListMeta<4>) <= 4096 - 256 &&
                  sizeof(TensorListMeta<5>) <= 4096 - 256,
              "a multi-tensor launch's argument must fit the 4 KB kernel-parameter limit");

// What one block works on.
struct ChunkRange {
  int local;             // the tensor's slot in the TensorListMeta
  int64_t tensor;        // its index in the lists
  int64_t chunk;         // the chunk's index within the tensor
  int64_t global_chunk;  // the chunk's index among all chunks of the lists
  int64_t begin, end;    // its elements [begin, end) of the tensor
  int64_t numel;         // the tensor's element count
};

template <typename T, int K>
__device__ __forceinline__ T* list_ptr(const TensorListMeta<K>& m, int list, int local) {
  return static_cast<T*>(m.ptrs[list][local]);
}

// The sum of v over the block's kMultiTensorThreads threads, in a fixed order (so the same
// inputs give the same bits); every thread gets it. Every thread of the block must call it.
// smem holds kMultiTensorThreads / 32 values.
template <typename T>
__device__ __forceinline__ T mt_block_sum(T v, T* smem) {
  constexpr int kWarps = kMultiTensorThreads / 32;
  static_assert(kWarps <= 32, "one warp combines the warps' sums");
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  __syncthreads();  // smem may still be read by a previous call
  if (lane == 0) smem[warp] = v;
  __syncthreads();
  v = lane < kWarps ? smem[lane] : T(0);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

template <int K, typename Op>
__global__ void __launch_bounds__(kMultiTensorThreads)
    multi_tensor_kernel(const __grid_constant__ TensorListMeta<K> meta, Op op) {
  const int local = meta.block_tensor[blockIdx.x];
  ChunkRange r;
  r.local = local;
  r.tensor = meta.tensor_index[local];
  r.chunk = meta.block_chunk[blockIdx.x];
  r.global_chunk = meta.chunk_base[local] + r.chunk;
  r.numel = meta.numel[local];
  r.begin = r.chunk * kMultiTensorChunk;
  r.end = r.begin + kMultiTensorChunk < r.numel ? r.begin + kMultiTensorChunk : r.numel;
  op(meta, r);
}

// The number of chunks of a tensor of n elements.
__host__ __device__ inline int64_t mt_chunks(int64_t n) { return (n + kMultiTensorChunk - 1) / kMultiTensorChunk; }

// Runs op over every chunk of every tensor of the K lists (lists[k]->at(i) is operand k of
// tensor i: contiguous, on the current device, all with lists[0]->at(i)'s element count), on
// `stream`, launching as NOTE [Multi-tensor launches] says. Returns the total chunk count (the
// size of a per-chunk partials array). Zero-element tensors take no block.
template <int K, typename Op>
int64_t multi_tensor_apply(const std::array<const std::vector<Tensor>*, K>& lists, cudaStream_t stream, const Op& op) {
  using Meta = TensorListMeta<K>;
  const size_t n = lists[0]->size();
  for (int k = 1; k < K; ++k)
    TRIDENT_ASSERT(lists[static_cast<size_t>(k)]->size() == n, "multi_tensor_apply: list ", k, " has ",
                   lists[static_cast<size_t>(k)]->size(), " tensors, list 0 has ", n);
  TRIDENT_CHECK(n < (size_t{1} << 31), "multi_tensor_apply: ", n, " tensors in one call (at most 2^31 - 1)");
  Meta meta;
  int nt = 0, nb = 0;
  int64_t chunk_total = 0;
  auto launch = [&] {
#if defined(TRIDENT_SIMT)  // the CPU emulator (tests/simt/simt.h) runs the blocks
    ::simt::launch({dim3(static_cast<unsigned>(nb)), dim3(kMultiTensorThreads)},
                   [&] { multi_tensor_kernel<K, Op>(meta, op); });
#else
    multi_tensor_kernel<K, Op><<<static_cast<unsigned>(nb), kMultiTensorThreads, 0, stream>>>(meta, op);
    TRIDENT_CUDA_KERNEL_CHECK();
#endif
    detail::count_multi_tensor_launch();
  };
  for (size_t t = 0; t < n; ++t) {
    const int64_t numel = (*lists[0])[t].numel();
    if (numel == 0) continue;
    for (int k = 0; k < K; ++k) {
      const Tensor& x = (*lists[static_cast<size_t>(k)])[t];
      TRIDENT_ASSERT(x.numel() == numel && x.is_contiguous(), "multi_tensor_apply: operand ", k, " of tensor ", t,
                     " has shape ", x.sizes(), ", operand 0 has ", numel, " elements");
      meta.ptrs[k][nt] = x.data_ptr();
    }
    meta.numel[nt] = numel;
    meta.tensor_index[nt] = static_cast<int32_t>(t);
    meta.chunk_base[nt] = static_cast<int32_t>(chunk_total);
    const int64_t chunks = mt_chunks(numel);
    TRIDENT_CHECK(chunk_total + chunks < (int64_t{1} << 31), "multi_tensor_apply: more than 2^31 chunks in one call");
    for (int64_t c = 0; c < chunks; ++c) {
      meta.block_tensor[nb] = static_cast<uint8_t>(nt);
      meta.block_chunk[nb] = static_cast<int32_t>(c);
      ++nb;
      const bool tensor_done = c == chunks - 1;
      if (nb == kMultiTensorMaxBlocks || (tensor_done && nt + 1 == Meta::kMaxTensors)) {
        launch();
        nb = 0;
        if (tensor_done) {
          nt = -1;  // the next tensor takes slot 0
        } else {
          // The rest of this tensor's chunks go to the next launch, as its slot 0.
          for (int k = 0; k < K; ++k) meta.ptrs[k][0] = meta.ptrs[k][nt];
          meta.numel[0] = meta.numel[nt];
          meta.tensor_index[0] = meta.tensor_index[nt];
          meta.chunk_base[0] = meta.chunk_base[nt];
          nt = 0;
        }
      }
    }
    chunk_total += chunks;
    ++nt;
  }
  if (nb > 0) launch();
  return chunk_total;
}

}  // namespace trident::nn::optim::cuda
