#include "core/factory.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "core/copy.h"
#include "core/strided.h"

namespace trident {

namespace {
Tensor finish(Tensor t, const TensorOptions& opts) {
  if (opts.requires_grad_) t.set_requires_grad(true);
  return t;
}
// Draws are generated on the CPU and moved to the device (the CUDA backend has its own
// kernels for large draws; the numbers are the same, NOTE [Philox streams]).
Tensor cpu_then_move(Tensor t, const TensorOptions& opts) {
  if (!opts.device_.is_cpu()) t = t.to(opts.device_);
  return finish(t, opts);
}
}  // namespace

Tensor empty(const Shape& sizes, TensorOptions opts) {
  const int64_t n = shape_numel(sizes);
  auto storage = std::make_shared<Storage>(static_cast<size_t>(n) * itemsize(opts.dtype_), opts.device_);
  return finish(make_tensor(std::move(storage), opts.dtype_, sizes, contiguous_strides(sizes), 0), opts);
}

Tensor full(const Shape& sizes, double value, TensorOptions opts) {
  Tensor t = empty(sizes, opts.requires_grad(false));
  fill_(t, value);
  return finish(t, opts);
}
Tensor zeros(const Shape& sizes, TensorOptions opts) { return full(sizes, 0.0, opts); }
Tensor ones(const Shape& sizes, TensorOptions opts) { return full(sizes, 1.0, opts); }
Tensor scalar_tensor(double value, TensorOptions opts) { return full({}, value, opts); }
Tensor broadcast_scalar(const Shape& sizes, double value, TensorOptions opts) {
  return finish(full({}, value, opts.requires_grad(false)).as_strided(sizes, Shape(sizes.size(), 0), 0), opts);
}
bool is_broadcast_scalar(const Tensor& t) {
  if (t.numel() <= 1) return false;
  for (int64_t s : t.strides())
    if (s != 0) return false;
  return true;
}

int64_t release_to_placeholder(Tensor& t) {
  if (t.numel() <= 1 || is_broadcast_scalar(t)) return 0;
  const int64_t bytes = t.numel() * static_cast<int64_t>(itemsize(t.dtype()));
  t.set_data(broadcast_scalar(t.sizes(), is_floating(t.dtype()) ? std::numeric_limits<double>::quiet_NaN() : 0.0,
                              TensorOptions(t.dtype()).device(t.device())));
  return bytes;
}

Tensor arange(double start, double end, double step, TensorOptions opts) {
  TRIDENT_CHECK(step != 0, "arange: step must be non-zero");
  TRIDENT_CHECK(std::isfinite(start) && std::isfinite(end) && std::isfinite(step), "arange: start ", start, ", end ", end,
                ", step ", step, " must be finite");
  TRIDENT_CHECK((end - start) / step >= 0, "arange: start ", start, " and end ", end, " are inconsistent with step ", step);
  const auto n = static_cast<int64_t>(std::ceil((end - start) / step));
  Tensor t = empty({n}, opts.device(kCPU).requires_grad(false));
  TRIDENT_DISPATCH_NUMERIC(t.dtype(), "arange", [&] {
    scalar_t* p = t.data<scalar_t>();
    for (int64_t i = 0; i < n; ++i) p[i] = static_cast<scalar_t>(start + static_cast<double>(i) * step);
  });
  return cpu_then_move(t, opts);
}

void skip_random(int64_t numel, DType dtype, Generator* gen) {
  TRIDENT_CHECK(is_floating(dtype), "skip_random: needs a floating dtype, got ", dtype);
  Generator& g = gen ? *gen : default_generator();
  g.reserve(philox::blocks_for(static_cast<uint64_t>(numel), dtype == DType::F64));  // as rand and randn reserve
}

namespace {
// p[i] for i in [b, e) from block(blk, out[L]), the values of elements blk L .. blk L + L - 1
// (core/rng.h): each block computed once, its lanes outside [b, e) dropped.
template <int L, typename T, typename V, typename Block>
void fill_by_blocks(T* p, int64_t b, int64_t e, const Block& block) {
  for (int64_t k = b / L; k * L < e; ++k) {
    V out[L];
    block(static_cast<uint64_t>(k), out);
    for (int64_t i = std::max(b, k * L); i < std::min(e, k * L + L); ++i) p[i] = static_cast<T>(out[i - k * L]);
  }
}

// Fills the contiguous CPU tensor t with values drawn from g (NOTE [Philox streams]): uniform in
// [0, 1), or standard normal.
void fill_random(const Tensor& t, Generator& g, bool normal) {
  const bool wide = t.dtype() == DType::F64;
  const PhiloxState s = g.reserve(philox::blocks_for(static_cast<uint64_t>(t.numel()), wide));
  TRIDENT_DISPATCH_FLOATING(t.dtype(), normal ? "randn" : "rand", [&] {
    scalar_t* p = t.data<scalar_t>();
    parallel_for(0, t.numel(), 16384, [&](int64_t b, int64_t e) {
      using namespace philox;
      if constexpr (std::is_same_v<scalar_t, double>) {
        fill_by_blocks<2, scalar_t, double>(p, b, e, [&](uint64_t k, double* o) {
          normal ? normal_f64_block(s.seed, s.offset, k, o) : uniform_f64_block(s.seed, s.offset, k, o);
        });
      } else {
        fill_by_blocks<4, scalar_t, float>(p, b, e, [&](uint64_t k, float* o) {
          normal ? normal_f32_block(s.seed, s.offset, k, o) : uniform_f32_block(s.seed, s.offset, k, o);
        });
      }
    });
  });
}

Tensor random_tensor(const Shape& sizes, TensorOptions opts, Generator* gen, bool normal) {
  TRIDENT_CHECK(is_floating(opts.dtype_), normal ? "randn" : "rand", ": needs a floating dtype, got ", opts.dtype_);
  Tensor t = empty(sizes, opts.device(kCPU).requires_grad(false));
  fill_random(t, gen ? *gen : default_generator(), normal);
  return cpu_then_move(t, opts);
}

void random_in_place(const Tensor& t, Generator* gen, bool normal) {
  TRIDENT_CHECK(t.defined() && is_floating(t.dtype()) && t.device().is_cpu() && t.is_contiguous(), normal ? "randn_" : "rand_",
                ": needs a contiguous floating-point CPU tensor, got ", t.defined() ? t.dtype() : DType::F32, " of shape ",
                t.defined() ? t.sizes() : Shape{}, t.defined() && !t.is_contiguous() ? " (not contiguous)" : "");
  fill_random(t, gen ? *gen : default_generator(), normal);
}
}  // namespace

Tensor rand(const Shape& sizes, TensorOptions opts, Generator* gen) { return random_tensor(sizes, opts, gen, false); }
Tensor randn(const Shape& sizes, TensorOptions opts, Generator* gen) { return random_tensor(sizes, opts, gen, true); }
void rand_(const Tensor& t, Generator* gen) { random_in_place(t, gen, false); }
void randn_(const Tensor& t, Generator* gen) { random_in_place(t, gen, true); }

Tensor randint(int64_t low, int64_t high, const Shape& sizes, TensorOptions opts, Generator* gen) {
  TRIDENT_CHECK(high > low, "randint: need low < high, got [", low, ", ", high, ")");
  TRIDENT_CHECK(opts.dtype_ != DType::Bool, "randint: bool dtype is not supported");
  Generator& g = gen ? *gen : default_generator();
  Tensor t = empty(sizes, opts.device(kCPU).requires_grad(false));
  const uint64_t range = static_cast<uint64_t>(high - low);
  const PhiloxState s = g.reserve(philox::blocks_for(static_cast<uint64_t>(t.numel()), true));
  TRIDENT_DISPATCH_NUMERIC(t.dtype(), "randint", [&] {
    scalar_t* p = t.data<scalar_t>();
    for (int64_t i = 0; i < t.numel(); ++i) {
      uint32_t o[4];
      philox::block(s.seed, s.offset, static_cast<uint64_t>(i) / 2, o);
      const int l = static_cast<int>(i % 2) * 2;
      const uint64_t v = (static_cast<uint64_t>(o[l]) << 32) | o[l + 1];
      // Modulo bias is below 2^-32 for ranges under 2^32: negligible for sampling indices.
      p[i] = static_cast<scalar_t>(static_cast<double>(low + static_cast<int64_t>(v % range)));
    }
  });
  return cpu_then_move(t, opts);
}

template <typename T>
Tensor from_vector(const std::vector<T>& values, const Shape& sizes_in, TensorOptions opts) {
  Shape sizes = sizes_in;
  if (sizes.empty() && values.size() != 1) sizes = {static_cast<int64_t>(values.size())};
  TRIDENT_CHECK(shape_numel(sizes) == static_cast<int64_t>(values.size()), "from_vector: ", values.size(),
                " values do not fill shape ", sizes);
  Tensor src = empty(sizes, TensorOptions(dtype_of<T>));
  if (!values.empty()) {
    if constexpr (std::is_same_v<T, bool>) {
      bool* p = src.data<bool>();
      for (size_t i = 0; i < values.size(); ++i) p[i] = values[i];
    } else {
      std::memcpy(src.data_ptr(), values.data(), values.size() * sizeof(T));
    }
  }
  Tensor out = src;
  if (opts.dtype_ != dtype_of<T>) {
    out = empty(sizes, TensorOptions(opts.dtype_));
    copy_(out, src);
  }
  return cpu_then_move(out, opts);
}

template Tensor from_vector<float>(const std::vector<float>&, const Shape&, TensorOptions);
template Tensor from_vector<double>(const std::vector<double>&, const Shape&, TensorOptions);
template Tensor from_vector<Half>(const std::vector<Half>&, const Shape&, TensorOptions);
template Tensor from_vector<BFloat16>(const std::vector<BFloat16>&, const Shape&, TensorOptions);
template Tensor from_vector<int32_t>(const std::vector<int32_t>&, const Shape&, TensorOptions);
template Tensor from_vector<int64_t>(const std::vector<int64_t>&, const Shape&, TensorOptions);
template Tensor from_vector<uint8_t>(const std::vector<uint8_t>&, const Shape&, TensorOptions);
template Tensor from_vector<bool>(const std::vector<bool>&, const Shape&, TensorOptions);

Tensor empty_like(const Tensor& t, std::optional<DType> dtype) {
  return empty(t.sizes(), TensorOptions(dtype.value_or(t.dtype())).device(t.device()));
}
Tensor zeros_like(const Tensor& t, std::optional<DType> dtype) { return full_like(t, 0.0, dtype); }
Tensor ones_like(const Tensor& t, std::optional<DType> dtype) { return full_like(t, 1.0, dtype); }
Tensor full_like(const Tensor& t, double value, std::optional<DType> dtype) {
  return full(t.sizes(), value, TensorOptions(dtype.value_or(t.dtype())).device(t.device()));
}
Tensor rand_like(const Tensor& t, Generator* gen) { return rand(t.sizes(), TensorOptions(t.dtype()).device(t.device()), gen); }
Tensor randn_like(const Tensor& t, Generator* gen) { return randn(t.sizes(), TensorOptions(t.dtype()).device(t.device()), gen); }

}  // namespace trident
