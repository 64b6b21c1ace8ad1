#include "ops/cpu/reduce.h"

#include <cmath>
#include <limits>

#include "ops/cpu/reduce_loop.h"
#include "ops/math/reduce.h"
#include "ops/reduce.h"

namespace trident::cpu {

namespace {

int64_t reduced_count(const Tensor& x, const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= x.size(d);
  return n;
}

// op folded over p[0, n) with kLanes independent accumulators (each starting at init), combined
// with merge at the end: no loop-carried dependency, so max/min compile to packed compares.
template <typename In, typename F, typename M>
compute_t<In> fold_lanes(const In* p, int64_t n, compute_t<In> init, const F& op, const M& merge) {
  using C = compute_t<In>;
  constexpr int kL = reduce_detail::kLanes;
  C lanes[kL];
  for (int j = 0; j < kL; ++j) lanes[j] = init;
  int64_t i = 0;
  for (; i + kL <= n; i += kL)
    for (int j = 0; j < kL; ++j) lanes[j] = op(lanes[j], static_cast<C>(p[i + j]));
  for (; i < n; ++i) lanes[0] = op(lanes[0], static_cast<C>(p[i]));
  C m = lanes[0];
  for (int j = 1; j < kL; ++j) m = merge(m, lanes[j]);
  return m;
}

// Sum of f(v, o) over the reduced elements, in acc_t<In> (NOTE [Reduction accumulation]);
// finish(o, acc) writes output o.
template <typename In, typename F, typename Fin>
struct SumOf {
  using Acc = acc_t<In>;
  F f;
  Fin fin;
  Acc init() const { return Acc(0); }
  Acc combine(Acc a, compute_t<In> v, int64_t o, int64_t) const { return a + f(v, o); }
  Acc merge(Acc a, Acc b) const { return a + b; }
  void finish(int64_t o, Acc a) const { fin(o, a); }
};
template <typename In, typename F, typename Fin>
SumOf<In, F, Fin> sum_of(F f, Fin fin) {
  return {f, fin};
}

// Max or min of f(v) (v itself, or |v| for the inf-norms), NaN propagating.
template <typename In, bool IsMax, typename F, typename Fin>
struct ExtremeOf {
  using C = compute_t<In>;
  using Acc = C;
  F f;
  Fin fin;
  Acc init() const {
    if constexpr (std::numeric_limits<C>::has_infinity) {
      return IsMax ? -std::numeric_limits<C>::infinity() : std::numeric_limits<C>::infinity();
    } else {
      return IsMax ? std::numeric_limits<C>::lowest() : std::numeric_limits<C>::max();
    }
  }
  Acc merge(Acc a, Acc b) const {
    if constexpr (IsMax) {
      return math::MaxOp{}(a, b);
    } else {
      return math::MinOp{}(a, b);
    }
  }
  Acc combine(Acc a, C v, int64_t, int64_t) const { return merge(a, f(v)); }
  Acc fold_run(Acc a, const In* p, int64_t n, int64_t, int64_t) const {
    const auto m = [this](C x, C y) { return merge(x, y); };
    return merge(a, fold_lanes(p, n, init(), [this](C x, C v) { return merge(x, f(v)); }, m));
  }
  void finish(int64_t o, Acc a) const { fin(o, a); }
};
template <typename In, bool IsMax, typename F, typename Fin>
ExtremeOf<In, IsMax, F, Fin> extreme_of(F f, Fin fin) {
  return {f, fin};
}

// Max or min with its index (the first on ties).
template <typename In, bool IsMax>
struct ArgExtreme {
  using C = compute_t<In>;
  using Acc = math::ValueIndex<C>;
  In* values;
  int64_t* indices;
  Acc init() const { return Acc{}; }
  Acc combine(Acc a, C v, int64_t, int64_t k) const {
    const Acc cand{v, k};
    return math::ArgBetter<IsMax>{}(cand, a) ? cand : a;
  }
  Acc merge(Acc a, Acc b) const { return math::ArgBetter<IsMax>{}(b, a) ? b : a; }
  // A run in two passes: its extreme value by independent lanes (vectorized; there is no index
  // to carry), then the first position holding that value (or the first NaN).
  Acc fold_run(Acc a, const In* p, int64_t n, int64_t, int64_t k0) const {
    if (n == 0) return a;
    const auto op = [](C x, C v) { return pick(x, v); };
    const C m = fold_lanes(p, n, static_cast<C>(p[0]), op, op);
    const bool nan = math::is_nan(m);
    int64_t pos = 0;
    while (!(nan ? math::is_nan(static_cast<C>(p[pos])) : static_cast<C>(p[pos]) == m)) ++pos;
    return merge(a, Acc{static_cast<C>(p[pos]), k0 + pos});  // p[pos], not m: -0.0 == +0.0
  }
  static C pick(C a, C v) {
    if constexpr (IsMax) {
      return math::MaxOp{}(a, v);
    } else {
      return math::MinOp{}(a, v);
    }
  }
  void finish(int64_t o, Acc a) const {
    values[o] = static_cast<In>(a.v);
    indices[o] = a.k;
  }
};

template <typename T>
T* ptr(const Tensor& t) {
  return static_cast<T*>(t.data_ptr());
}

// out = f(x, a, b) element-wise over x's shape, with a and b broadcast to it (the keepdim-shaped
// per-output values of a backward). Computes in compute_t<T>.
template <typename T, typename F>
Tensor map3(const Tensor& x, const Tensor& a, const Tensor& b, const F& f) {
  using C = compute_t<T>;
  Tensor out = empty(x.sizes(), x.dtype());
  const Shape ast = broadcast_strides(a.sizes(), a.strides(), x.sizes());
  const Shape bst = broadcast_strides(b.sizes(), b.strides(), x.sizes());
  StridedLoop<4> loop(x.sizes(), {out.strides(), x.strides(), ast, bst});
  T* o = ptr<T>(out);
  const T* xp = ptr<const T>(x);
  const T* ap = ptr<const T>(a);
  const T* bp = ptr<const T>(b);
  loop.run([&](const std::array<int64_t, 4>& off, int64_t n, const std::array<int64_t, 4>& st) {
    T* op = o + off[0];
    const T* xq = xp + off[1];
    const T* aq = ap + off[2];
    const T* bq = bp + off[3];
    if (st[0] == 1 && st[1] == 1 && st[2] == 0 && st[3] == 0) {  // reduced dims innermost
      const C av = static_cast<C>(*aq), bv = static_cast<C>(*bq);
      for (int64_t i = 0; i < n; ++i) op[i] = static_cast<T>(f(static_cast<C>(xq[i]), av, bv));
    } else if (st[0] == 1 && st[1] == 1 && st[2] == 1 && st[3] == 1) {  // reduced dims outer
      for (int64_t i = 0; i < n; ++i)
        op[i] = static_cast<T>(f(static_cast<C>(xq[i]), static_cast<C>(aq[i]), static_cast<C>(bq[i])));
    } else {
      for (int64_t i = 0; i < n; ++i)
        op[i * st[0]] = static_cast<T>(
            f(static_cast<C>(xq[i * st[1]]), static_cast<C>(aq[i * st[2]]), static_cast<C>(bq[i * st[3]])));
    }
  });
  return out;
}

}  // namespace

// ---- sum and mean ----

Tensor reduce(ReduceKind kind, const Tensor& x, const std::vector<int64_t>& dims, bool keepdim, DType out_dtype) {
  Tensor out = empty(reduced_shape(x.sizes(), dims, keepdim), out_dtype);
  const int64_t count = reduced_count(x, dims);
  TRIDENT_DISPATCH_ALL(x.dtype(), "sum", [&] {
    using In = scalar_t;
    using A = acc_t<In>;
    using C = compute_t<In>;
    // Floats keep their dtype; integers and bool sum to i64.
    using Out = std::conditional_t<std::is_floating_point_v<C>, In, int64_t>;
    TRIDENT_ASSERT(out.dtype() == dtype_of<Out>, "sum of ", x.dtype(), " into ", out.dtype());
    Out* o = ptr<Out>(out);
    const auto id = [](C v, int64_t) { return static_cast<A>(v); };
    if (kind == ReduceKind::Sum) {
      reduce_with<In>(x, dims, sum_of<In>(id, [o](int64_t i, A acc) { o[i] = static_cast<Out>(acc); }));
    } else {
      // 0 / 0 = NaN for an empty mean, as in PyTorch.
      const double n = static_cast<double>(count);
      reduce_with<In>(x, dims,
                      sum_of<In>(id, [o, n](int64_t i, A acc) { o[i] = static_cast<Out>(static_cast<double>(acc) / n); }));
    }
  });
  return out;
}

// ---- max and min ----

Tensor extreme(bool is_max, const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  Tensor out = empty(reduced_shape(x.sizes(), dims, keepdim), x.dtype());
  TRIDENT_DISPATCH_NUMERIC(x.dtype(), is_max ? "max" : "min", [&] {
    using C = compute_t<scalar_t>;
    scalar_t* o = ptr<scalar_t>(out);
    const auto id = [](C v) { return v; };
    const auto fin = [o](int64_t i, C a) { o[i] = static_cast<scalar_t>(a); };
    if (is_max) {
      reduce_with<scalar_t>(x, dims, extreme_of<scalar_t, true>(id, fin));
    } else {
      reduce_with<scalar_t>(x, dims, extreme_of<scalar_t, false>(id, fin));
    }
  });
  return out;
}

std::pair<Tensor, Tensor> extreme_index(bool is_max, const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  const Shape shape = reduced_shape(x.sizes(), dims, keepdim);
  Tensor values = empty(shape, x.dtype());
  Tensor indices = empty(shape, kI64);
  TRIDENT_DISPATCH_NUMERIC(x.dtype(), is_max ? "max" : "min", [&] {
    if (is_max) {
      reduce_with<scalar_t>(x, dims, ArgExtreme<scalar_t, true>{ptr<scalar_t>(values), ptr<int64_t>(indices)});
    } else {
      reduce_with<scalar_t>(x, dims, ArgExtreme<scalar_t, false>{ptr<scalar_t>(values), ptr<int64_t>(indices)});
    }
  });
  return {values, indices};
}

Tensor distribute_backward(const Tensor& x, const Tensor& value_k, const Tensor& g_k, const std::vector<int64_t>& dims,
                           bool abs_sign) {
  const Tensor value = value_k.contiguous();
  Tensor scaled = empty(value.sizes(), x.dtype());
  TRIDENT_DISPATCH_FLOATING(x.dtype(), "max_backward", [&] {
    using C = compute_t<scalar_t>;
    const scalar_t* v = ptr<const scalar_t>(value);
    // How many elements tie for each result; the gradient is divided among them.
    std::vector<int64_t> ties(static_cast<size_t>(value.numel()), 0);
    const auto fin = [&ties](int64_t o, int64_t n) { ties[static_cast<size_t>(o)] = n; };
    auto count = [&](auto is_hit) {
      reduce_with<scalar_t>(x, dims, sum_of<scalar_t>([v, is_hit](C e, int64_t o) -> int64_t {
        return is_hit(e, static_cast<C>(v[o])) ? 1 : 0;
      }, fin));
    };
    // (SumOf counts in acc_t, f64 for float inputs: exact below 2^53 elements.)
    if (abs_sign) {
      count(math::IsExtreme<true>{});
    } else {
      count(math::IsExtreme<false>{});
    }
    const Tensor g = g_k.contiguous();
    const scalar_t* gp = ptr<const scalar_t>(g);
    scalar_t* sp = ptr<scalar_t>(scaled);
    for (int64_t o = 0; o < value.numel(); ++o)
      sp[o] = static_cast<scalar_t>(static_cast<C>(gp[o]) / static_cast<C>(ties[static_cast<size_t>(o)]));
  });
  return TRIDENT_DISPATCH_FLOATING(x.dtype(), "max_backward", [&] {
    return abs_sign ? map3<scalar_t>(x, value, scaled, math::DistributeBackward<true>{})
                    : map3<scalar_t>(x, value, scaled, math::DistributeBackward<false>{});
  });
}

// ---- var and std ----

Tensor var(const Tensor& x, const std::vector<int64_t>& dims, double correction, bool keepdim, bool take_sqrt) {
  Tensor out = empty(reduced_shape(x.sizes(), dims, keepdim), x.dtype());
  const int64_t n = reduced_count(x, dims);
  // PyTorch's divisor: N - correction, clamped at 0 (so N <= correction gives inf, or NaN for 0/0).
  const double denom = std::max(0.0, static_cast<double>(n) - correction);
  TRIDENT_DISPATCH_FLOATING(x.dtype(), "var", [&] {
    using A = acc_t<scalar_t>;
    using C = compute_t<scalar_t>;
    std::vector<A> means(static_cast<size_t>(out.numel()));
    A* m = means.data();
    const A count = static_cast<A>(n);
    reduce_with<scalar_t>(x, dims, sum_of<scalar_t>([](C v, int64_t) { return static_cast<A>(v); },
                                                     [m, count](int64_t o, A s) { m[o] = s / count; }));
    scalar_t* op = ptr<scalar_t>(out);
    reduce_with<scalar_t>(x, dims, sum_of<scalar_t>(
                                       [m](C v, int64_t o) {
                                         const A d = static_cast<A>(v) - m[o];
                                         return d * d;
                                       },
                                       [op, denom, take_sqrt](int64_t o, A s) {
                                         const A r = s / static_cast<A>(denom);
                                         op[o] = static_cast<scalar_t>(take_sqrt ? std::sqrt(r) : r);
                                       }));
  });
  return out;
}

Tensor var_backward(const Tensor& x, const Tensor& g_k, const Tensor& out_k, const std::vector<int64_t>& dims,
                    double correction, bool is_std) {
  const int64_t n = reduced_count(x, dims);
  const double denom = std::max(0.0, static_cast<double>(n) - correction);
  const Tensor mean_k = reduce(ReduceKind::Mean, x, dims, /*keepdim=*/true, x.dtype());
  const Tensor g = g_k.contiguous(), r = out_k.contiguous();
  Tensor scale = empty(g.sizes(), x.dtype());
  return TRIDENT_DISPATCH_FLOATING(x.dtype(), "var_backward", [&] {
    using C = compute_t<scalar_t>;
    const scalar_t* gp = ptr<const scalar_t>(g);
    const scalar_t* rp = ptr<const scalar_t>(r);
    scalar_t* sp = ptr<scalar_t>(scale);
    for (int64_t o = 0; o < g.numel(); ++o) {
      const C gv = static_cast<C>(gp[o]);
      if (is_std) {
        // d std = d var / (2 std); 0 where std = 0, as PyTorch does.
        const C s = static_cast<C>(rp[o]);
        sp[o] = static_cast<scalar_t>(s == C(0) ? C(0) : gv / (static_cast<C>(denom) * s));
      } else {
        sp[o] = static_cast<scalar_t>(C(2) * gv / static_cast<C>(denom));
      }
    }
    return map3<scalar_t>(x, mean_k, scale, math::VarBackward{});
  });
}

// ---- logsumexp ----

Tensor logsumexp(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  Tensor out = empty(reduced_shape(x.sizes(), dims, keepdim), x.dtype());
  TRIDENT_DISPATCH_FLOATING(x.dtype(), "logsumexp", [&] {
    using A = acc_t<scalar_t>;
    using C = compute_t<scalar_t>;
    std::vector<C> shift(static_cast<size_t>(out.numel()));
    C* m = shift.data();
    // The max, replaced by 0 where it is infinite (all -inf: the result is log 0 = -inf; a +inf:
    // the result is +inf; NaN stays NaN).
    reduce_with<scalar_t>(x, dims, extreme_of<scalar_t, true>([](C v) { return v; }, [m](int64_t o, C a) {
                            m[o] = std::isinf(a) ? C(0) : a;
                          }));
    scalar_t* op = ptr<scalar_t>(out);
    reduce_with<scalar_t>(x, dims, sum_of<scalar_t>([m](C v, int64_t o) { return static_cast<A>(std::exp(v - m[o])); },
                                                     [op, m](int64_t o, A s) {
                                                       op[o] = static_cast<scalar_t>(std::log(s) + static_cast<A>(m[o]));
                                                     }));
  });
  return out;
}

Tensor logsumexp_backward(const Tensor& x, const Tensor& g_k, const Tensor& out_k) {
  return TRIDENT_DISPATCH_FLOATING(x.dtype(), "logsumexp_backward",
                                   [&] { return map3<scalar_t>(x, out_k, g_k, math::LogSumExpBackward{}); });
}

// ---- norm ----

Tensor norm(const Tensor& x, double p, const std::vector<int64_t>& dims, bool keepdim) {
  Tensor out = empty(reduced_shape(x.sizes(), dims, keepdim), x.dtype());
  TRIDENT_DISPATCH_FLOATING(x.dtype(), "norm", [&] {
    using A = acc_t<scalar_t>;
    using C = compute_t<scalar_t>;
    scalar_t* op = ptr<scalar_t>(out);
    const auto put = [op](int64_t o, A s) { op[o] = static_cast<scalar_t>(s); };
    const auto abs_c = [](C v) { return v < C(0) ? -v : v; };
    const auto put_c = [op](int64_t o, C s) { op[o] = static_cast<scalar_t>(s); };
    if (p == 2.0) {
      reduce_with<scalar_t>(x, dims, sum_of<scalar_t>([](C v, int64_t) { return static_cast<A>(v) * static_cast<A>(v); },
                                                       [op](int64_t o, A s) { op[o] = static_cast<scalar_t>(std::sqrt(s)); }));
    } else if (p == 1.0) {
      reduce_with<scalar_t>(x, dims, sum_of<scalar_t>([](C v, int64_t) { return static_cast<A>(v < C(0) ? -v : v); }, put));
    } else if (std::isinf(p) && p > 0) {
      reduce_with<scalar_t>(x, dims, extreme_of<scalar_t, true>(abs_c, put_c));
    } else if (std::isinf(p)) {
      reduce_with<scalar_t>(x, dims, extreme_of<scalar_t, false>(abs_c, put_c));
    } else if (p == 0.0) {
      // NaN counts as non-zero (NaN != 0), as in PyTorch.
      reduce_with<scalar_t>(x, dims, sum_of<scalar_t>([](C v, int64_t) { return static_cast<A>(v != C(0) ? 1 : 0); }, put));
    } else {
      const A pa = static_cast<A>(p), inv = static_cast<A>(1.0 / p);
      reduce_with<scalar_t>(x, dims, sum_of<scalar_t>([pa](C v, int64_t) { return std::pow(static_cast<A>(v < C(0) ? -v : v), pa); },
                                                       [op, inv](int64_t o, A s) { op[o] = static_cast<scalar_t>(std::pow(s, inv)); }));
    }
  });
  return out;
}

Tensor norm_backward(const Tensor& x, const Tensor& g_k, const Tensor& norm_k, double p) {
  return TRIDENT_DISPATCH_FLOATING(x.dtype(), "norm_backward",
                                   [&] { return map3<scalar_t>(x, norm_k, g_k, math::NormBackward{p}); });
}

}  // namespace trident::cpu
