#include "ops/cpu/unary.h"

#include <algorithm>
#include <limits>
#include <type_traits>

#include "core/copy.h"
#include "core/factory.h"
#include "ops/cpu/isa.h"
#include "ops/cpu/loops.h"
#include "ops/math/unary.h"

// The f32 loops below are ISA clones (NOTE [ISA clones] in ops/cpu/isa.h). Every f32 element of
// these ops goes through the same clone, contiguous or not (strided runs are gathered into a
// small buffer), so on one machine the bits do not depend on the layout; across machines they
// may differ in the last place (FMA).

namespace trident::cpu {

namespace {

// The loops, as ISA clones and (NOTE [AVX-512 kernels]) for AVX-512.
TRIDENT_CPU_KERNEL_TEMPLATE(template <typename Op>, map1_kernel,
                            (const float* __restrict x, float* __restrict y, int64_t n, Op op), {
                              for (int64_t i = 0; i < n; ++i) y[i] = op(x[i]);
                            })
TRIDENT_CPU_KERNEL_TEMPLATE(template <typename Op>, map2_kernel,
                            (const float* __restrict a, const float* __restrict b, float* __restrict y, int64_t n, Op op), {
                              for (int64_t i = 0; i < n; ++i) y[i] = op(a[i], b[i]);
                            })

// NOTE [Relu into a narrower dtype] (ops/cpu/unary.h), f32 -> bf16 in one vectorized pass: a relu
// output is never NaN, so the rounding is f32_to_bf16_bits' ties-to-even add without its NaN
// branch, and the compiler vectorizes it (16 lanes in the AVX-512 version). The f32 relu and
// then the general conversion, through a buffer, took longer than an f32 relu alone.
TRIDENT_CPU_KERNEL(relu_bf16_kernel, (const float* __restrict x, uint16_t* __restrict y, int64_t n), {
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t b = detail::f32_bits(math::Relu{}(x[i]));
    y[i] = static_cast<uint16_t>((b + 0x7fffu + ((b >> 16) & 1u)) >> 16);
  }
})
// Its gradient: g where y > 0 (y's bits as an integer: a relu output is +0 or positive), widened.
TRIDENT_CPU_KERNEL(relu_bf16_backward_kernel,
                   (const uint16_t* __restrict g, const uint16_t* __restrict y, float* __restrict gx, int64_t n), {
                     for (int64_t i = 0; i < n; ++i)
                       gx[i] = y[i] != 0 ? detail::f32_from_bits(static_cast<uint32_t>(g[i]) << 16) : 0.0f;
                   })

template <typename Op>
inline void map1_f32(const float* x, float* y, int64_t n, Op op) {
#ifdef TRIDENT_CPU_HAS_AVX512_KERNELS
  if (cpu_avx512_kernels()) return map1_kernel_avx512(x, y, n, op);
#endif
  map1_kernel(x, y, n, op);
}

template <typename Op>
inline void map2_f32(const float* a, const float* b, float* y, int64_t n, Op op) {
#ifdef TRIDENT_CPU_HAS_AVX512_KERNELS
  if (cpu_avx512_kernels()) return map2_kernel_avx512(a, b, y, n, op);
#endif
  map2_kernel(a, b, y, n, op);
}

constexpr int64_t kBuf = 256;

// dst[i * stride] = T(src[i]) for i < n: contiguous bf16 runs through the vectorized rounding
// (the same bits as the scalar conversion; per element it was a third of a bf16 GELU's time).
template <typename T>
void store_rounded(const float* src, T* dst, int64_t stride, int64_t n) {
  if constexpr (std::is_same_v<T, BFloat16>) {
    if (stride == 1) return convert_f32_to_bf16(src, dst, n);
  }
  for (int64_t i = 0; i < n; ++i) dst[i * stride] = T(src[i]);
}

// out = op(x) in f32 through map1_f32; out is fresh and has x's shape. T is f32, or f16/bf16:
// runs of kBuf elements converted to f32, through the same loops, and the results rounded back
// (autocast's GELU and its backward run there: on one thread and without the vectorized math,
// GPT-2's [1024, 1024] GELU backward took 8.5 ms in bf16 against 1.1 in f32).
template <typename T, typename Op>
void unary_f32(const Tensor& out, const Tensor& x, const Op& op) {
  const StridedLoop<2> loop(out.sizes(), {out.strides(), x.strides()});
  T* o = static_cast<T*>(out.data_ptr());
  const T* xp = static_cast<const T*>(x.data_ptr());
  loop.run([&](const std::array<int64_t, 2>& off, int64_t n, const std::array<int64_t, 2>& st) {
    if constexpr (std::is_same_v<T, float>) {
      if (st[0] == 1 && st[1] == 1) return map1_f32(xp + off[1], o + off[0], n, op);
    }
    float in[kBuf], res[kBuf];
    for (int64_t b = 0; b < n; b += kBuf) {
      const int64_t len = std::min(kBuf, n - b);
      for (int64_t i = 0; i < len; ++i) in[i] = static_cast<float>(xp[off[1] + (b + i) * st[1]]);
      map1_f32(in, res, len, op);
      store_rounded(res, o + off[0] + b * st[0], st[0], len);
    }
  });
}

// out = op(a, b) in f32 through map2_f32; a and b broadcast to out's shape. T as unary_f32.
template <typename T, typename Op>
void binary_f32(const Tensor& out, const Tensor& a, const Tensor& b, const Op& op) {
  const StridedLoop<3> loop(out.sizes(), {out.strides(), broadcast_strides(a.sizes(), a.strides(), out.sizes()),
                                          broadcast_strides(b.sizes(), b.strides(), out.sizes())});
  T* o = static_cast<T*>(out.data_ptr());
  const T* ap = static_cast<const T*>(a.data_ptr());
  const T* bp = static_cast<const T*>(b.data_ptr());
  loop.run([&](const std::array<int64_t, 3>& off, int64_t n, const std::array<int64_t, 3>& st) {
    if constexpr (std::is_same_v<T, float>) {
      if (st[0] == 1 && st[1] == 1 && st[2] == 1) return map2_f32(ap + off[1], bp + off[2], o + off[0], n, op);
    }
    float in_a[kBuf], in_b[kBuf], res[kBuf];
    for (int64_t s = 0; s < n; s += kBuf) {
      const int64_t len = std::min(kBuf, n - s);
      for (int64_t i = 0; i < len; ++i) {
        in_a[i] = static_cast<float>(ap[off[1] + (s + i) * st[1]]);
        in_b[i] = static_cast<float>(bp[off[2] + (s + i) * st[2]]);
      }
      map2_f32(in_a, in_b, res, len, op);
      store_rounded(res, o + off[0] + s * st[0], st[0], len);
    }
  });
}

// A floating kernel: f32 through the clones, f16/bf16 through them in f32 runs, f64 through the
// generic loop.
template <typename Op>
Tensor map_unary(const Tensor& x, const char* name, const Op& op) {
  Tensor out = empty(x.sizes(), x.dtype());
  TRIDENT_DISPATCH_FLOATING(x.dtype(), name, [&] {
    if constexpr (std::is_same_v<scalar_t, double>) {
      unary_loop<scalar_t, scalar_t>(out, x, op);
    } else {
      unary_f32<scalar_t>(out, x, op);
    }
  });
  return out;
}

template <typename Op>
Tensor map_binary(const Tensor& g, const Tensor& saved, const char* name, const Op& op) {
  Tensor out = empty(saved.sizes(), saved.dtype());
  TRIDENT_DISPATCH_FLOATING(saved.dtype(), name, [&] {
    if constexpr (std::is_same_v<scalar_t, double>) {
      binary_loop<scalar_t, scalar_t>(out, g, saved, op);
    } else {
      binary_f32<scalar_t>(out, g, saved, op);
    }
  });
  return out;
}

// |x| for integers without the overflow of -INT_MIN (which stays INT_MIN, as in PyTorch).
struct IntAbs {
  template <typename T> T operator()(T x) const {
    if constexpr (!std::is_integral_v<T> || std::is_unsigned_v<T>) {
      return x;  // floating types never get here (math::Abs); unsigned ones are their own |x|
    } else {
      using U = std::make_unsigned_t<T>;
      return x < 0 ? static_cast<T>(U(0) - static_cast<U>(x)) : x;
    }
  }
};

// A clamp bound in the compute type: integers saturate at their limits (+-inf included).
template <typename C>
C bound_as(double v) {
  if constexpr (std::is_integral_v<C>) {
    constexpr C lo = std::numeric_limits<C>::lowest(), hi = std::numeric_limits<C>::max();
    if (v <= static_cast<double>(lo)) return lo;
    if (v >= static_cast<double>(hi)) return hi;
    return static_cast<C>(v);
  } else {
    return static_cast<C>(v);
  }
}

}  // namespace

const char* unary_op_name(UnaryOp op) {
  switch (op) {
    case UnaryOp::Relu: return "relu";
    case UnaryOp::Tanh: return "tanh";
    case UnaryOp::Abs: return "abs";
    case UnaryOp::Exp: return "exp";
    case UnaryOp::Log: return "log";
    case UnaryOp::Sqrt: return "sqrt";
    case UnaryOp::Rsqrt: return "rsqrt";
    case UnaryOp::Sigmoid: return "sigmoid";
    case UnaryOp::Gelu: return "gelu";
    case UnaryOp::GeluTanh: return "gelu(approximate='tanh')";
  }
  return "?";
}

bool unary_backward_uses_output(UnaryOp op) {
  switch (op) {
    // Relu: the output serves as well as the input (ReluBackward), and a conv after a relu saves
    // that output anyway, so saving it lets the relu's input be freed (convnets keep ~20% less).
    case UnaryOp::Relu:
    case UnaryOp::Tanh:
    case UnaryOp::Exp:
    case UnaryOp::Sqrt:
    case UnaryOp::Rsqrt:
    case UnaryOp::Sigmoid: return true;
    case UnaryOp::Abs:
    case UnaryOp::Log:
    case UnaryOp::Gelu:
    case UnaryOp::GeluTanh: return false;
  }
  return false;
}

Tensor unary(UnaryOp op, const Tensor& x) {
  const char* name = unary_op_name(op);
  switch (op) {
    case UnaryOp::Relu: return map_unary(x, name, math::Relu{});
    case UnaryOp::Tanh: return map_unary(x, name, math::Tanh{});
    case UnaryOp::Abs:
      if (is_integral(x.dtype())) {
        Tensor out = empty(x.sizes(), x.dtype());
        TRIDENT_DISPATCH_NUMERIC(x.dtype(), name, [&] { unary_loop<scalar_t, scalar_t>(out, x, IntAbs{}); });
        return out;
      }
      return map_unary(x, name, math::Abs{});
    case UnaryOp::Exp: return map_unary(x, name, math::Exp{});
    case UnaryOp::Log: return map_unary(x, name, math::Log{});
    case UnaryOp::Sqrt: return map_unary(x, name, math::Sqrt{});
    case UnaryOp::Rsqrt: return map_unary(x, name, math::Rsqrt{});
    case UnaryOp::Sigmoid: return map_unary(x, name, math::Sigmoid{});
    case UnaryOp::Gelu: return map_unary(x, name, math::Gelu{});
    case UnaryOp::GeluTanh: return map_unary(x, name, math::GeluTanh{});
  }
  TRIDENT_FAIL("unary: no kernel for op ", static_cast<int>(op));
}

Tensor unary_backward(UnaryOp op, const Tensor& g, const Tensor& saved) {
  const char* name = unary_op_name(op);
  switch (op) {
    case UnaryOp::Relu: return map_binary(g, saved, name, math::ReluBackward{});
    case UnaryOp::Tanh: return map_binary(g, saved, name, math::TanhBackward{});
    case UnaryOp::Abs: return map_binary(g, saved, name, math::AbsBackward{});
    case UnaryOp::Exp: return map_binary(g, saved, name, math::ExpBackward{});
    case UnaryOp::Log: return map_binary(g, saved, name, math::LogBackward{});
    case UnaryOp::Sqrt: return map_binary(g, saved, name, math::SqrtBackward{});
    case UnaryOp::Rsqrt: return map_binary(g, saved, name, math::RsqrtBackward{});
    case UnaryOp::Sigmoid: return map_binary(g, saved, name, math::SigmoidBackward{});
    case UnaryOp::Gelu: return map_binary(g, saved, name, math::GeluBackward{});
    case UnaryOp::GeluTanh: return map_binary(g, saved, name, math::GeluTanhBackward{});
  }
  TRIDENT_FAIL("unary_backward: no kernel for op ", static_cast<int>(op));
}

Tensor relu_to(const Tensor& x, DType dtype) {
  Tensor out = empty(x.sizes(), dtype);
  if (x.dtype() == DType::F32 && dtype == DType::BF16) {  // NOTE [Relu into a narrower dtype]
    const StridedLoop<2> loop(out.sizes(), {out.strides(), x.strides()});
    BFloat16* o = out.data<BFloat16>();
    const float* xp = x.data<float>();
    loop.run([&](const std::array<int64_t, 2>& off, int64_t n, const std::array<int64_t, 2>& st) {
      if (st[0] == 1 && st[1] == 1)
        return TRIDENT_CPU_PICK(relu_bf16_kernel)(xp + off[1], reinterpret_cast<uint16_t*>(o + off[0]), n);
      float in[kBuf], res[kBuf];
      for (int64_t b = 0; b < n; b += kBuf) {
        const int64_t len = std::min(kBuf, n - b);
        const float* src = xp + off[1] + b * st[1];
        if (st[1] != 1) {
          for (int64_t i = 0; i < len; ++i) in[i] = src[i * st[1]];
          src = in;
        }
        map1_f32(src, res, len, math::Relu{});
        store_rounded(res, o + off[0] + b * st[0], st[0], len);
      }
    });
    return out;
  }
  TRIDENT_DISPATCH_FLOATING(x.dtype(), "relu", [&] {
    using In = scalar_t;
    TRIDENT_DISPATCH_FLOATING(dtype, "relu", [&] { unary_loop<In, scalar_t>(out, x, math::Relu{}); });
  });
  return out;
}

Tensor relu_to_backward(const Tensor& g_in, const Tensor& y, DType dtype) {
  const Tensor g = g_in.dtype() == y.dtype() ? g_in : g_in.to(y.dtype());
  Tensor out = empty(y.sizes(), dtype);
  if (y.dtype() == DType::BF16 && dtype == DType::F32) {
    const StridedLoop<3> loop(out.sizes(), {out.strides(), broadcast_strides(g.sizes(), g.strides(), out.sizes()), y.strides()});
    float* o = out.data<float>();
    const BFloat16* gp = g.data<BFloat16>();
    const BFloat16* yp = y.data<BFloat16>();
    loop.run([&](const std::array<int64_t, 3>& off, int64_t n, const std::array<int64_t, 3>& st) {
      if (st[0] == 1 && st[1] == 1 && st[2] == 1)
        return TRIDENT_CPU_PICK(relu_bf16_backward_kernel)(reinterpret_cast<const uint16_t*>(gp + off[1]),
                                                           reinterpret_cast<const uint16_t*>(yp + off[2]), o + off[0], n);
      float in_g[kBuf], in_y[kBuf], res[kBuf];
      for (int64_t b = 0; b < n; b += kBuf) {
        const int64_t len = std::min(kBuf, n - b);
        for (int64_t i = 0; i < len; ++i) {  // exact widenings
          in_g[i] = static_cast<float>(gp[off[1] + (b + i) * st[1]]);
          in_y[i] = static_cast<float>(yp[off[2] + (b + i) * st[2]]);
        }
        float* dst = st[0] == 1 ? o + off[0] + b : res;
        map2_f32(in_g, in_y, dst, len, math::ReluBackward{});
        if (st[0] != 1)
          for (int64_t i = 0; i < len; ++i) o[off[0] + (b + i) * st[0]] = res[i];
      }
    });
    return out;
  }
  TRIDENT_DISPATCH_FLOATING(y.dtype(), "relu_backward", [&] {
    using In = scalar_t;
    TRIDENT_DISPATCH_FLOATING(dtype, "relu_backward", [&] { binary_loop<In, scalar_t>(out, g, y, math::ReluBackward{}); });
  });
  return out;
}

Tensor pow(const Tensor& x, double p) {
  return math::with_pow(p, [&](auto f) { return map_unary(x, "pow", f); });
}

Tensor pow_backward(const Tensor& g, const Tensor& x, double p) {
  if (p == 0.0) return zeros(x.sizes(), x.dtype());
  return math::with_pow(p - 1.0, [&](auto f) {
    return map_binary(g, x, "pow_backward", math::PowBackward<decltype(f)>{f, p});
  });
}

Tensor clamp(const Tensor& x, double lo, double hi) {
  Tensor out = empty(x.sizes(), x.dtype());
  TRIDENT_DISPATCH_NUMERIC(x.dtype(), "clamp", [&] {
    using C = compute_t<scalar_t>;
    const math::Clamp<C> f{bound_as<C>(lo), bound_as<C>(hi)};
    if constexpr (std::is_same_v<scalar_t, float>) {
      unary_f32<float>(out, x, f);
    } else {
      unary_loop<scalar_t, scalar_t>(out, x, f);
    }
  });
  return out;
}

Tensor clamp_backward(const Tensor& g, const Tensor& x, double lo, double hi) {
  Tensor out;
  TRIDENT_DISPATCH_FLOATING(x.dtype(), "clamp_backward", [&] {
    using C = compute_t<scalar_t>;
    out = map_binary(g, x, "clamp_backward", math::ClampBackward<C>{static_cast<C>(lo), static_cast<C>(hi)});
  });
  return out;
}

}  // namespace trident::cpu
