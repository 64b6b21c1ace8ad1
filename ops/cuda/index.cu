#include "ops/cuda/index.h"

#if !defined(TRIDENT_SIMT)  // the host side's sort; the CPU emulator (tests/simt) sorts on the host
#include <cub/device/device_radix_sort.cuh>
#endif

#include <climits>
#include <cstdint>
#include <type_traits>

#include "ops/cpu/index.h"
#include "ops/cuda/block_reduce.cuh"
#include "ops/cuda/common.cuh"

namespace trident::cuda {

namespace {

// Moving data needs only the element size (or a wider unit that divides a whole row).
template <typename F>
void dispatch_by_bytes(size_t bytes, const F& f) {
  switch (bytes) {
    case 1: f(std::type_identity<uint8_t>{}); return;
    case 2: f(std::type_identity<uint16_t>{}); return;
    case 4: f(std::type_identity<uint32_t>{}); return;
    case 8: f(std::type_identity<uint2>{}); return;
    case 16: f(std::type_identity<uint4>{}); return;
    default: TRIDENT_ASSERT(false, "no CUDA unit of ", bytes, " bytes");
  }
}

// ============================================================================================
// check_index_range and max_index: a two-stage reduction (NOTE [Deterministic device totals]).
// ============================================================================================

enum class IndexReduce : int { FirstBad, Max };

// Stage one: per block, the first position holding an entry outside [0, limit) (n when none),
// or the largest entry.
__global__ void __launch_bounds__(kReduceThreads) index_partials_kernel(const int64_t* __restrict__ p, int64_t n,
                                                                         int64_t limit, IndexReduce kind,
                                                                         int64_t* __restrict__ partial) {
  __shared__ int64_t smem[kReduceThreads / 32];
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  int64_t v;
  if (kind == IndexReduce::FirstBad) {
    // A thread's positions ascend, so its first hit is its smallest; the minimum over threads is
    // then the first bad position overall.
    v = n;
    for (int64_t i = first; i < n; i += step)
      if (static_cast<uint64_t>(p[i]) >= static_cast<uint64_t>(limit)) {
        v = i;
        break;
      }
    v = block_reduce(v, MinOp{}, n, smem);
  } else {
    v = LLONG_MIN;
    for (int64_t i = first; i < n; i += step) v = p[i] > v ? p[i] : v;
    v = block_reduce(v, MaxOp{}, static_cast<int64_t>(LLONG_MIN), smem);
  }
  if (threadIdx.x == 0) partial[blockIdx.x] = v;
}

// Stage two: one block combines the partials.
__global__ void __launch_bounds__(kReduceThreads) index_combine_kernel(const int64_t* __restrict__ partial, int nb,
                                                                        IndexReduce kind, int64_t n,
                                                                        int64_t* __restrict__ out) {
  __shared__ int64_t smem[kReduceThreads / 32];
  const bool is_min = kind == IndexReduce::FirstBad;
  const int64_t identity = is_min ? n : static_cast<int64_t>(LLONG_MIN);
  int64_t v = identity;
  for (int i = static_cast<int>(threadIdx.x); i < nb; i += kReduceThreads)
    v = is_min ? (partial[i] < v ? partial[i] : v) : (partial[i] > v ? partial[i] : v);
  v = is_min ? block_reduce(v, MinOp{}, identity, smem) : block_reduce(v, MaxOp{}, identity, smem);
  if (threadIdx.x == 0) *out = v;
}

// ============================================================================================
// index_select: rows copied in the widest unit (up to 16 bytes) that divides a row and both
// base addresses.
// ============================================================================================

// The widest unit (16, 8, 4, 2 or 1 bytes) that divides a row and both base addresses.
inline size_t copy_unit(uint64_t row_bytes, uintptr_t a, uintptr_t b) {
  size_t unit = 16;
  while (unit > 1 && (row_bytes % unit != 0 || a % unit != 0 || b % unit != 0)) unit /= 2;
  return unit;
}

template <typename U>
__global__ void __launch_bounds__(kThreads) index_select_kernel(const U* __restrict__ x, const int64_t* __restrict__ idx,
                                                                U* __restrict__ out, int64_t total, int64_t n,
                                                                int64_t rows, int64_t units_per_row) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += step) {
    const int64_t r = i / units_per_row, k = i - r * units_per_row;  // output row r = (o, j)
    const int64_t o = r / n, j = r - o * n;
    out[i] = x[(o * rows + idx[j]) * units_per_row + k];
  }
}

// ============================================================================================
// index_add_ (NOTE [Deterministic index_add_] in ops/cuda/index.h).
// ============================================================================================

// Sort keys (the destination row, `rows` for skipped entries so they sort last) and the
// entries' positions.
__global__ void __launch_bounds__(kThreads) index_add_keys_kernel(const int64_t* __restrict__ idx, int64_t n, int64_t rows,
                                                                  int64_t skip, uint64_t* __restrict__ keys,
                                                                  uint64_t* __restrict__ pos) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    keys[i] = static_cast<uint64_t>(idx[i] == skip ? rows : idx[i]);
    pos[i] = static_cast<uint64_t>(i);
  }
}

// Block x = sorted entry t. The block of the first entry of each destination row sums the row's
// entries (in ascending position: the sort is stable) onto the row, for every outer slice.
template <typename T>
__global__ void index_add_rows_kernel(T* __restrict__ dest, const T* __restrict__ src, const uint64_t* __restrict__ keys,
                                      const uint64_t* __restrict__ pos, int64_t n, int64_t rows, int64_t inner,
                                      int64_t outer) {
  const int64_t t = blockIdx.x;
  const uint64_t key = keys[t];
  if (key >= static_cast<uint64_t>(rows)) return;  // skipped entries
  if (t > 0 && keys[t - 1] == key) return;         // not the first entry of its row
  int64_t end = t + 1;
  while (end < n && keys[end] == key) ++end;
  const auto r = static_cast<int64_t>(key);
  for (int64_t o = blockIdx.y; o < outer; o += gridDim.y) {
    T* drow = dest + (o * rows + r) * inner;
    const T* sbase = src + o * n * inner;
    for (int64_t c = threadIdx.x; c < inner; c += blockDim.x) {
      float acc = static_cast<float>(drow[c]);
      for (int64_t e = t; e < end; ++e) acc += static_cast<float>(sbase[static_cast<int64_t>(pos[e]) * inner + c]);
      drow[c] = static_cast<T>(acc);
    }
  }
}

// ============================================================================================
// gather and scatter_add_: one thread per position (gather) or per line along dim (scatter).
// ============================================================================================

// index's shape, and strides (in elements) of the tensors read or written at its positions.
struct IndexGeom {
  int ndim = 0, dim = 0;
  int64_t limit = 0;  // the size of dim in x (gather) or out (scatter)
  int64_t sizes[kMaxDims] = {};
  int64_t a[kMaxDims] = {};  // x's strides (gather), out's (scatter)
  int64_t b[kMaxDims] = {};  // src's strides (scatter)
};

IndexGeom index_geom(const char* op, const Tensor& index, int64_t dim, int64_t limit, const Tensor& a, const Tensor* b) {
  TRIDENT_CHECK(index.dim() <= kMaxDims, op, " (CUDA): at most ", kMaxDims, " dims are supported, got index of shape ",
                index.sizes());
  IndexGeom g;
  g.ndim = static_cast<int>(index.dim());
  g.dim = static_cast<int>(dim);
  g.limit = limit;
  for (int d = 0; d < g.ndim; ++d) {
    g.sizes[d] = index.size(d);
    g.a[d] = a.stride(d);
    g.b[d] = b ? b->stride(d) : 0;
  }
  return g;
}

template <typename U>
__global__ void __launch_bounds__(kThreads) gather_kernel(const U* __restrict__ x, const int64_t* __restrict__ idx,
                                                          U* __restrict__ out, int64_t total, IndexGeom g,
                                                          int* __restrict__ bad) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t p = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; p < total; p += step) {
    int64_t rem = p, off = 0;
    for (int d = g.ndim - 1; d >= 0; --d) {
      const int64_t c = rem % g.sizes[d];
      rem /= g.sizes[d];
      if (d != g.dim) off += c * g.a[d];
    }
    const int64_t ix = idx[p];
    if (static_cast<uint64_t>(ix) < static_cast<uint64_t>(g.limit)) {
      out[p] = x[off + ix * g.a[g.dim]];
    } else {  // reported through the flag; the entry is garbage by contract
      *bad = 1;
      out[p] = U{};
    }
  }
}

template <typename T>
__device__ __forceinline__ T add_values(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    return static_cast<T>(a + b);
  } else {
    return static_cast<T>(static_cast<float>(a) + static_cast<float>(b));
  }
}

// Thread l owns the line of positions (o, *, k) of index: positions off that line never share
// its destinations, so it walks dim in order with no atomics (deterministic).
template <typename T>
__global__ void __launch_bounds__(kThreads) scatter_add_kernel(T* __restrict__ out, const T* __restrict__ src,
                                                               const int64_t* __restrict__ idx, int64_t lines,
                                                               int64_t inner, IndexGeom g, int* __restrict__ bad) {
  const int64_t n = g.sizes[g.dim];
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t l = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; l < lines; l += step) {
    const int64_t o = l / inner, k = l - o * inner;
    const int64_t p0 = o * n * inner + k;
    int64_t rem = p0, oo = 0, so = 0;
    for (int d = g.ndim - 1; d >= 0; --d) {
      const int64_t c = rem % g.sizes[d];
      rem /= g.sizes[d];
      if (d != g.dim) {
        oo += c * g.a[d];
        so += c * g.b[d];
      }
    }
    bool miss = false;
    for (int64_t j = 0; j < n; ++j) {
      const int64_t ix = idx[p0 + j * inner];
      if (static_cast<uint64_t>(ix) >= static_cast<uint64_t>(g.limit)) {
        miss = true;
        continue;
      }
      T& dst = out[oo + ix * g.a[g.dim]];
      dst = add_values(dst, src[so + j * g.b[g.dim]]);
    }
    if (miss) *bad = 1;
  }
}

// ============================================================================================
// one_hot
// ============================================================================================

__global__ void __launch_bounds__(kThreads) one_hot_kernel(const int64_t* __restrict__ idx, int64_t* __restrict__ out,
                                                           int64_t total, int64_t classes) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += step) {
    const int64_t p = e / classes;
    out[e] = idx[p] == e - p * classes ? 1 : 0;
  }
}

}  // namespace

// The host side: not compiled by the CPU emulator (tests/simt/simt.h), whose tests launch the
// kernels above themselves.
#if !defined(TRIDENT_SIMT)
namespace {

int64_t prod(const Shape& s, size_t first, size_t last) {
  int64_t n = 1;
  for (size_t d = first; d < last; ++d) n *= s[d];
  return n;
}

cudaStream_t stream_of(const Tensor& t) { return current_stream(t.device().index).handle(); }

// The reduction of a non-empty contiguous i64 device tensor, copied back to the host: the copy
// synchronizes the stream (the contract asks for a host value).
int64_t reduce_index(const Tensor& index, int64_t limit, IndexReduce kind) {
  const int64_t n = index.numel();
  DeviceGuard guard(index.device().index);
  const cudaStream_t s = stream_of(index);
  const int nb = partial_blocks(n);
  const Tensor partial = empty_on({nb}, kI64, index.device());
  const Tensor result = empty_on({1}, kI64, index.device());
  index_partials_kernel<<<nb, kReduceThreads, 0, s>>>(index.data<int64_t>(), n, limit, kind, partial.data<int64_t>());
  TRIDENT_CUDA_KERNEL_CHECK();
  index_combine_kernel<<<1, kReduceThreads, 0, s>>>(partial.data<int64_t>(), nb, kind, n, result.data<int64_t>());
  TRIDENT_CUDA_KERNEL_CHECK();
  return result.item<int64_t>();
}

// A device flag (0) a kernel sets to 1 when it meets an index out of range.
Tensor zero_flag(const Tensor& like) { return zeros({1}, TensorOptions(kI32).device(like.device())); }

}  // namespace

void check_index_range(const char* op, const Tensor& index, int64_t limit, const std::string& range_of) {
  const int64_t n = index.numel();
  if (n == 0) return;
  // One device reduction and one 8-byte copy back (a stream synchronization): the contract
  // throws on the host. Only on failure is the index copied to the host, where the CPU check
  // finds the same entry and words the error exactly as on the CPU.
  if (reduce_index(index, limit, IndexReduce::FirstBad) == n) return;
  cpu::check_index_range(op, index.to(Device::cpu()), limit, range_of);
  TRIDENT_ASSERT(false, op, ": the device found an index out of [0, ", limit, ") but the host did not");
}

int64_t max_index(const Tensor& index) {
  TRIDENT_ASSERT(index.numel() > 0, "max_index of an empty tensor");
  return reduce_index(index, 0, IndexReduce::Max);  // synchronizes: a host value
}

Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index) {
  Shape osz = x.sizes();
  const auto d = static_cast<size_t>(dim);
  const int64_t n = index.numel();
  osz[d] = n;
  Tensor out = empty_on(osz, x.dtype(), x.device());
  if (out.numel() == 0) return out;
  const Tensor xc = x.contiguous();
  const int64_t rows = xc.size(dim), inner = prod(xc.sizes(), d + 1, xc.sizes().size());
  const auto row_bytes = static_cast<uint64_t>(inner) * xc.element_size();
  const auto xa = reinterpret_cast<uintptr_t>(xc.data_ptr()), oa = reinterpret_cast<uintptr_t>(out.data_ptr());
  const size_t unit = copy_unit(row_bytes, xa, oa);
  const auto upr = static_cast<int64_t>(row_bytes / unit);
  const int64_t total = out.numel() * static_cast<int64_t>(xc.element_size()) / static_cast<int64_t>(unit);
  DeviceGuard guard(x.device().index);
  dispatch_by_bytes(unit, [&](auto tag) {
    using U = typename decltype(tag)::type;
    index_select_kernel<U><<<grid_size(total), kThreads, 0, stream_of(x)>>>(
        static_cast<const U*>(xc.data_ptr()), index.data<int64_t>(), static_cast<U*>(out.data_ptr()), total, n, rows, upr);
  });
  TRIDENT_CUDA_KERNEL_CHECK();
  return out;
}

void index_add_(const Tensor& dest, int64_t dim, const Tensor& index, const Tensor& src, int64_t skip) {
  TRIDENT_ASSERT(dest.is_contiguous() && src.is_contiguous(), "index_add_ needs contiguous dest and src");
  const auto d = static_cast<size_t>(dim);
  const int64_t rows = dest.size(dim), n = index.numel();
  const int64_t outer = prod(dest.sizes(), 0, d), inner = prod(dest.sizes(), d + 1, dest.sizes().size());
  if (n == 0 || outer == 0 || inner == 0) return;
  TRIDENT_CHECK(n <= INT_MAX, "index_add_ (CUDA): at most ", INT_MAX, " index entries are supported, got ", n);
  DeviceGuard guard(dest.device().index);
  const cudaStream_t s = stream_of(dest);
  const Device dev = dest.device();
  // Keys and positions in, sorted keys and positions out (u64 stored in i64 tensors).
  const Tensor buf = empty_on({4, n}, kI64, dev);
  auto* keys_in = reinterpret_cast<uint64_t*>(buf.data<int64_t>());
  uint64_t* pos_in = keys_in + n;
  uint64_t* keys = keys_in + 2 * n;
  uint64_t* pos = keys_in + 3 * n;
  index_add_keys_kernel<<<grid_size(n), kThreads, 0, s>>>(index.data<int64_t>(), n, rows, skip, keys_in, pos_in);
  TRIDENT_CUDA_KERNEL_CHECK();
  int end_bit = 1;  // keys are at most `rows`: sort only the bits that can differ
  while (end_bit < 64 && (uint64_t{1} << end_bit) <= static_cast<uint64_t>(rows)) ++end_bit;
  size_t temp_bytes = 0;
  TRIDENT_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, keys_in, keys, pos_in, pos, static_cast<int>(n),
                                                     0, end_bit, s));
  const Tensor temp = empty_on({static_cast<int64_t>(temp_bytes) + 1}, kU8, dev);
  TRIDENT_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp.data_ptr(), temp_bytes, keys_in, keys, pos_in, pos,
                                                     static_cast<int>(n), 0, end_bit, s));
  const int threads = inner >= 256 ? 256 : static_cast<int>((inner + 31) / 32 * 32);
  const dim3 grid(static_cast<unsigned>(n), static_cast<unsigned>(outer < 65535 ? outer : 65535));
  TRIDENT_DISPATCH_CUDA_FLOATING(dest.dtype(), "index_add_", [&] {
    using T = scalar_t;
    index_add_rows_kernel<T><<<grid, threads, 0, s>>>(dest.data<T>(), src.data<T>(), keys, pos, n, rows, inner, outer);
  });
  TRIDENT_CUDA_KERNEL_CHECK();
  dest.bump_version();
}

Tensor gather(const Tensor& x, int64_t dim, const Tensor& index, bool* in_range) {
  *in_range = true;
  Tensor out = empty_on(index.sizes(), x.dtype(), x.device());
  if (out.numel() == 0) return out;
  const IndexGeom g = index_geom("gather", index, dim, x.size(dim), x, nullptr);
  const Tensor bad = zero_flag(x);
  DeviceGuard guard(x.device().index);
  const int64_t total = out.numel();
  dispatch_by_bytes(x.element_size(), [&](auto tag) {
    using U = typename decltype(tag)::type;
    gather_kernel<U><<<grid_size(total), kThreads, 0, stream_of(x)>>>(
        static_cast<const U*>(x.data_ptr()), index.data<int64_t>(), static_cast<U*>(out.data_ptr()), total, g,
        bad.data<int32_t>());
  });
  TRIDENT_CUDA_KERNEL_CHECK();
  *in_range = bad.item<int32_t>() == 0;  // a host value by contract: synchronizes the stream
  return out;
}

bool scatter_add_(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src) {
  if (index.numel() == 0) return true;
  const IndexGeom g = index_geom("scatter_add", index, dim, out.size(dim), out, &src);
  const Shape& is = index.sizes();
  const auto d = static_cast<size_t>(dim);
  const int64_t inner = prod(is, d + 1, is.size());
  const int64_t lines = index.numel() / is[d];
  const Tensor bad = zero_flag(out);
  DeviceGuard guard(out.device().index);
  const cudaStream_t s = stream_of(out);
  auto launch = [&]<typename T>() {
    scatter_add_kernel<T><<<grid_size(lines), kThreads, 0, s>>>(out.data<T>(), src.data<T>(), index.data<int64_t>(), lines,
                                                                inner, g, bad.data<int32_t>());
  };
  switch (out.dtype()) {
    case DType::F32: launch.template operator()<float>(); break;
    case DType::F16: launch.template operator()<Half>(); break;
    case DType::BF16: launch.template operator()<BFloat16>(); break;
    case DType::I32: launch.template operator()<int32_t>(); break;
    case DType::I64: launch.template operator()<int64_t>(); break;
    default:
      TRIDENT_FAIL("scatter_add (CUDA): no kernel for dtype ", out.dtype(), " (supported: f32, f16, bf16, i32, i64)");
  }
  TRIDENT_CUDA_KERNEL_CHECK();
  out.bump_version();
  return bad.item<int32_t>() == 0;  // a host value by contract: synchronizes the stream
}

Tensor one_hot(const Tensor& index, int64_t num_classes) {
  Shape s = index.sizes();
  s.push_back(num_classes);
  Tensor out = empty_on(s, kI64, index.device());
  const int64_t total = out.numel();
  if (total == 0) return out;
  DeviceGuard guard(index.device().index);
  one_hot_kernel<<<grid_size(total), kThreads, 0, stream_of(index)>>>(index.data<int64_t>(), out.data<int64_t>(), total,
                                                                      num_classes);
  TRIDENT_CUDA_KERNEL_CHECK();
  return out;
}

#endif  // !TRIDENT_SIMT

}  // namespace trident::cuda
