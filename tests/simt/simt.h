// A SIMT emulator: runs CUDA kernels' device code on the CPU, one fiber per GPU thread, so that a
// kernel that has never met a GPU can still be compared with the CPU reference on a machine
// without one (most of this project's machines).
//
// NOTE [Kernels on the CPU emulator]: a test defines nothing itself; it includes this header
// first and then the .cu file whose kernels it runs. This header defines TRIDENT_SIMT, under
// which a .cu file compiles only its kernels (its host launchers sit under
// `#if !defined(TRIDENT_SIMT)`: g++ cannot parse `<<<...>>>`; two host helpers launch through
// simt::launch instead and so run here whole: cuda::elementwise in core/cuda/loops.cuh and
// multi_tensor_apply in nn/optim/multi_tensor.cuh), and replaces what nvcc provides:
//   - threadIdx, blockIdx, blockDim and gridDim read the running fiber's coordinates;
//   - `__shared__` variables become function statics in one section of the program, one copy
//     for the block that runs (blocks run one after another), the whole section filled with 0xff
//     bytes (NaN in f32, f16 and bf16, -1 in integers) before each block; dynamic shared memory
//     (TRIDENT_DYNAMIC_SHARED) is a buffer of the launch's size, filled the same way, with a
//     guard zone behind it that must still hold them when the block ends;
//   - __syncthreads, __syncwarp, the shuffles, votes, mma.sync m16n8k16 and ldmatrix (through
//     simt::mma_m16n8k16 and simt::ldmatrix, which ops/cuda/attention_mma.cuh calls in place of
//     its inline PTX) are collectives: a fiber runs until it reaches one and waits there until
//     every thread it names has arrived at the same one. A collective that can never complete (a
//     thread of the mask exited or waits at another one, __syncthreads reached by part of the
//     block) is an error naming the threads and what each waits on, never a hang;
//   - cp.async (simt::cp_async16, commit and wait) copies 16 bytes into shared memory whose
//     landing the order decides: at once (Order::Forward) or only at the issuing thread's wait
//     (Order::Reverse), the two ends of what a GPU may do;
//   - a fiber runs without interruption between collectives, so atomics are plain
//     read-modify-writes; arithmetic is the host's (expf is not __expf to the last bit).
// Races: the threads of a block run in the order the launch names (Order). A kernel that reads
// shared or global memory another thread wrote without a barrier in between gives different
// results for different orders, so the tests run each kernel in two orders and compare the
// outputs bit for bit.
// What this does not check: timing, occupancy, bank conflicts, the real instruction results of
// fast-math intrinsics, resource limits, and races that happen to give the same bits in both
// orders. It is a check of a kernel's indexing and synchronization, not a GPU.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <type_traits>

#define TRIDENT_SIMT 1

namespace simt {

// The order in which the warps of a block, and the lanes of a warp, run between collectives.
enum class Order { Forward, Reverse };

// The order of launches that do not name one (those made by host code under test, such as the
// multi-tensor launcher); Forward unless a ScopedOrder says otherwise.
Order default_order();
class ScopedOrder {
 public:
  explicit ScopedOrder(Order o);
  ~ScopedOrder();
  ScopedOrder(const ScopedOrder&) = delete;
  ScopedOrder& operator=(const ScopedOrder&) = delete;

 private:
  Order saved_;
};

struct Launch {
  dim3 grid;
  dim3 block;
  size_t shared_bytes = 0;  // dynamic shared memory
  Order order = default_order();
};

// Runs body once in every thread of every block (blocks in order, x fastest); throws a
// std::runtime_error for a collective that cannot complete, an exception thrown by a thread, a
// write past the dynamic shared memory or __trap.
void launch(const Launch& cfg, const std::function<void()>& body);

const uint3& thread_idx();
const uint3& block_idx();
const dim3& block_dim();
const dim3& grid_dim();
void* dynamic_shared();
template <typename T>
T* dynamic_shared_as() {
  return static_cast<T*>(dynamic_shared());
}

// The collectives (called by the intrinsics below).
enum class Shuffle { Index, Xor, Down, Up };
void sync_threads();
void sync_warp(unsigned mask);
uint64_t shuffle(unsigned mask, uint64_t bits, Shuffle kind, int arg, int width);
unsigned ballot(unsigned mask, bool pred);
// d = a b + d for the warp, fragments as the PTX ISA lays them out for mma.m16n8k16 with f16 or
// bf16 inputs and f32 accumulators.
void mma_m16n8k16(bool bf16, float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1);
// ldmatrix.sync.aligned.m8n8.x{count}{.trans}.shared.b16 (count 1, 2 or 4): lane 8 i + r gives the
// address of row r of matrix i (16 bytes, 16-byte aligned, in shared memory; for count < 4 the
// other lanes' addresses are ignored, as on a GPU); lane 4 r + c receives in regs[i] elements 2c
// and 2c + 1 of row r of matrix i, or with trans, element r of rows 2c and 2c + 1 (the low half
// holds the first). A warp collective of the whole warp.
void ldmatrix(int count, bool trans, uint32_t* regs, const void* row);
// cp.async.cg.shared.global of 16 bytes from src (16-byte aligned, global) to dst (16-byte
// aligned, shared): src_bytes (0..16) of them read, the rest zeros. Where the bytes land: in a
// launch of Order::Forward at once, in one of Order::Reverse only when the issuing thread waits
// for their group; so a read of them before the wait and the barrier behind it, or a copy issued
// into a buffer other warps still read, gives different results in the two orders.
void cp_async16(void* dst, const void* src, int src_bytes);
void cp_async_commit();             // cp.async.commit_group: the copies issued since the last one
void cp_async_wait(int pending);    // cp.async.wait_group: every committed group but the newest `pending`
[[noreturn]] void trap(const char* what);

template <typename T>
T shuffle_as(unsigned mask, T v, Shuffle kind, int arg, int width) {
  static_assert(std::is_trivially_copyable_v<T> && sizeof(T) <= 8, "simt: shuffles move values of up to 8 bytes");
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof(T));
  bits = shuffle(mask, bits, kind, arg, width);
  T out;
  std::memcpy(&out, &bits, sizeof(T));
  return out;
}

}  // namespace simt

// ---- what nvcc would provide ----

#undef __shared__
#define __shared__ __attribute__((section("simt_shared"))) static
#ifndef __launch_bounds__
#define __launch_bounds__(...)
#endif
#undef __grid_constant__
#define __grid_constant__
#define threadIdx (::simt::thread_idx())
#define blockIdx (::simt::block_idx())
#define blockDim (::simt::block_dim())
#define gridDim (::simt::grid_dim())
#define TRIDENT_DYNAMIC_SHARED(T, name) T* name = ::simt::dynamic_shared_as<T>()

inline void __syncthreads() { simt::sync_threads(); }
inline void __syncwarp(unsigned mask = 0xffffffffu) { simt::sync_warp(mask); }
template <typename T>
T __shfl_sync(unsigned mask, T v, int src, int width = 32) {
  return simt::shuffle_as(mask, v, simt::Shuffle::Index, src, width);
}
template <typename T>
T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
  return simt::shuffle_as(mask, v, simt::Shuffle::Xor, lane_mask, width);
}
template <typename T>
T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  return simt::shuffle_as(mask, v, simt::Shuffle::Down, static_cast<int>(delta), width);
}
template <typename T>
T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  return simt::shuffle_as(mask, v, simt::Shuffle::Up, static_cast<int>(delta), width);
}
inline unsigned __ballot_sync(unsigned mask, int pred) { return simt::ballot(mask, pred != 0); }
inline int __any_sync(unsigned mask, int pred) { return simt::ballot(mask, pred != 0) != 0; }
inline int __all_sync(unsigned mask, int pred) { return simt::ballot(mask, pred != 0) == mask; }
[[noreturn]] inline void __trap() { simt::trap("__trap()"); }

template <typename T>
T atomicAdd(T* p, T v) {
  const T old = *p;
  *p = old + v;
  return old;
}
template <typename T>
T atomicMax(T* p, T v) {
  const T old = *p;
  if (v > old) *p = v;
  return old;
}
template <typename T>
T __ldg(const T* p) {
  return *p;
}

using std::isfinite;
using std::isinf;
using std::isnan;
inline float __expf(float x) { return std::exp(x); }
inline float __logf(float x) { return std::log(x); }
inline float __fdividef(float a, float b) { return a / b; }
inline float rsqrtf(float x) { return 1.f / std::sqrt(x); }
inline double __dadd_rn(double a, double b) { return a + b; }
inline double __dmul_rn(double a, double b) { return a * b; }

// The device's min and max take mixed integer types.
template <typename A, typename B>
constexpr std::common_type_t<A, B> min(A a, B b) {
  using C = std::common_type_t<A, B>;
  return static_cast<C>(a) < static_cast<C>(b) ? static_cast<C>(a) : static_cast<C>(b);
}
template <typename A, typename B>
constexpr std::common_type_t<A, B> max(A a, B b) {
  using C = std::common_type_t<A, B>;
  return static_cast<C>(a) < static_cast<C>(b) ? static_cast<C>(b) : static_cast<C>(a);
}
