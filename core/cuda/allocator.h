// The CUDA device allocator (a CachingAllocator per device over cudaMalloc, NOTE [Caching
// device allocator]) and pinned host memory. CUDA builds only.
#pragma once

#include "core/allocator.h"
#include "core/cuda/caching_allocator.h"
#include "core/cuda/stream.h"
#include "core/tensor.h"

namespace trident::cuda {

// The caching allocator of cuda:index (created on first use, never destroyed). Storages on the
// device get their memory here, on the current stream (NOTE [Current stream]).
CachingAllocator& caching_allocator(int index);
// The trident::Allocator of cuda:index, which get_allocator(Device::cuda(index)) returns.
Allocator* device_allocator(int index);

// Tells the allocator that t's memory is used on `s` too, so it is not reused before the work
// queued on s when t is freed has finished (NOTE [Stream pools]).
void record_stream(const Tensor& t, const Stream& s);

// Debugging and tests: when on, every device allocation is filled with 0xFF bytes (NaN in every
// floating dtype) before it is handed out, so a kernel that leaves an output element unwritten
// shows up as NaN. Off by default; TRIDENT_CUDA_POISON=1 turns it on at start.
void set_poison_allocations(bool on);
bool poison_allocations();

// Page-locked host memory (cudaHostAlloc): copies from and to it run at full bus speed and can
// be asynchronous. Tensors on the CPU device, not counted in memory_stats(kCPU).
Tensor empty_pinned(const Shape& sizes, DType dtype);
// A pinned copy of a CPU tensor.
Tensor pin_memory(const Tensor& t);
// Whether a CPU tensor's memory is page-locked.
bool is_pinned(const Tensor& t);

}  // namespace trident::cuda
