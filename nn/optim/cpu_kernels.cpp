#include "nn/optim/cpu_kernels.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/parallel.h"

namespace trident::nn::optim::cpu {

namespace {

// Updates are memory-bound (Adam moves 28 bytes per f32 element): below this many elements a
// second thread costs more than it saves.
constexpr int64_t kGrain = int64_t{1} << 15;
// LAMB's norms: partial sums per block of this many elements, in block order.
constexpr int64_t kNormBlock = int64_t{1} << 13;
constexpr int kLanes = 8;  // independent accumulators, so the sums vectorize without reassociation

template <typename T>
T* ptr(const Tensor& t) {
  return t.defined() ? static_cast<T*>(t.data_ptr()) : nullptr;
}

template <typename F>
void for_ranges(int64_t n, const F& f) {
  parallel_for(0, n, kGrain, f);
}

}  // namespace

void sgd(const Tensor& p, const Tensor& g, const Tensor& buf, const math::SGDUpdate<double>& fd) {
  TRIDENT_DISPATCH_F32_F64(p.dtype(), "SGD", [&] {
    using T = scalar_t;
    const math::SGDUpdate<T> f = fd.template cast<T>();
    T* const P = ptr<T>(p);
    const T* const G = ptr<T>(g);
    T* const B = ptr<T>(buf);
    for_ranges(p.numel(), [&](int64_t b, int64_t e) {
      // Local copies: the loop keeps the functor's fields in registers and knows the arrays
      // do not overlap.
      const auto fn = f;
      T* __restrict pp = P;
      const T* __restrict gp = G;
      T* __restrict bp = B;
      if (bp) {
        for (int64_t i = b; i < e; ++i) fn(pp[i], gp[i], bp[i]);
      } else {
        for (int64_t i = b; i < e; ++i) fn(pp[i], gp[i]);
      }
    });
  });
}

void adam(const Tensor& p, const Tensor& g, const Tensor& m, const Tensor& v, const Tensor& vmax,
          const math::AdamUpdate<double>& fd) {
  TRIDENT_DISPATCH_F32_F64(p.dtype(), "Adam", [&] {
    using T = scalar_t;
    const math::AdamUpdate<T> f = fd.template cast<T>();
    T* const P = ptr<T>(p);
    const T* const G = ptr<T>(g);
    T* const M = ptr<T>(m);
    T* const V = ptr<T>(v);
    T* const X = ptr<T>(vmax);
    for_ranges(p.numel(), [&](int64_t b, int64_t e) {
      const auto fn = f;
      T* __restrict pp = P;
      const T* __restrict gp = G;
      T* __restrict mp = M;
      T* __restrict vp = V;
      T* __restrict xp = X;
      if (xp) {
        for (int64_t i = b; i < e; ++i) fn(pp[i], gp[i], mp[i], vp[i], xp[i]);
      } else {
        for (int64_t i = b; i < e; ++i) fn(pp[i], gp[i], mp[i], vp[i]);
      }
    });
  });
}

namespace {
template <typename T, bool kCentered, bool kMomentum>
void rmsprop_loop(int64_t n, T* P, const T* G, T* S, T* A, T* B, const math::RMSPropUpdate<T>& f) {
  for_ranges(n, [&](int64_t b, int64_t e) {
    const auto fn = f;
    T* __restrict pp = P;
    const T* __restrict gp = G;
    T* __restrict sp = S;
    T* __restrict ap = A;
    T* __restrict bp = B;
    T unused = 0;  // stands in for the buffers this variant does not have; never touched
    for (int64_t i = b; i < e; ++i)
      fn.template apply<kCentered, kMomentum>(pp[i], gp[i], sp[i], kCentered ? ap[i] : unused,
                                              kMomentum ? bp[i] : unused);
  });
}
}  // namespace

void rmsprop(const Tensor& p, const Tensor& g, const Tensor& square_avg, const Tensor& grad_avg, const Tensor& buf,
             const math::RMSPropUpdate<double>& fd) {
  TRIDENT_DISPATCH_F32_F64(p.dtype(), "RMSProp", [&] {
    using T = scalar_t;
    const math::RMSPropUpdate<T> f = fd.template cast<T>();
    const int64_t n = p.numel();
    T* pp = ptr<T>(p);
    const T* gp = ptr<T>(g);
    T* sp = ptr<T>(square_avg);
    T* ap = ptr<T>(grad_avg);
    T* bp = ptr<T>(buf);
    if (ap && bp) {
      rmsprop_loop<T, true, true>(n, pp, gp, sp, ap, bp, f);
    } else if (ap) {
      rmsprop_loop<T, true, false>(n, pp, gp, sp, ap, bp, f);
    } else if (bp) {
      rmsprop_loop<T, false, true>(n, pp, gp, sp, ap, bp, f);
    } else {
      rmsprop_loop<T, false, false>(n, pp, gp, sp, ap, bp, f);
    }
  });
}

LambNorms lamb_moments(const Tensor& p, const Tensor& g, const Tensor& m, const Tensor& v,
                       const math::LambUpdate<double>& fd) {
  return TRIDENT_DISPATCH_F32_F64(p.dtype(), "LAMB", [&] {
    using T = scalar_t;
    const math::LambUpdate<T> f = fd.template cast<T>();
    const T* const P = ptr<T>(p);
    const T* const G = ptr<T>(g);
    T* const M = ptr<T>(m);
    T* const V = ptr<T>(v);
    const int64_t n = p.numel();
    const int64_t nblocks = (n + kNormBlock - 1) / kNormBlock;
    // Squares of f32 values summed in f64 (NOTE [Accumulation] in core/dtype.h): the norms of
    // million-element matrices stay accurate to f32 precision whatever their length.
    std::vector<double> psq(static_cast<size_t>(nblocks)), rsq(static_cast<size_t>(nblocks));
    parallel_for(0, nblocks, kGrain / kNormBlock, [&](int64_t bb, int64_t be) {
      const auto fn = f;
      const T* __restrict pp = P;
      const T* __restrict gp = G;
      T* __restrict mp = M;
      T* __restrict vp = V;
      for (int64_t blk = bb; blk < be; ++blk) {
        const int64_t b = blk * kNormBlock;
        const int64_t e = std::min(n, b + kNormBlock);
        double ps[kLanes] = {}, rs[kLanes] = {};
        int64_t i = b;
        for (; i + kLanes <= e; i += kLanes) {
          for (int k = 0; k < kLanes; ++k) {
            const T x = pp[i + k];
            const T r = fn.moments(x, gp[i + k], mp[i + k], vp[i + k]);
            ps[k] += double(x) * double(x);
            rs[k] += double(r) * double(r);
          }
        }
        for (int k = 0; i < e; ++i, ++k) {
          const T x = pp[i];
          const T r = fn.moments(x, gp[i], mp[i], vp[i]);
          ps[k] += double(x) * double(x);
          rs[k] += double(r) * double(r);
        }
        double pt = 0, rt = 0;
        for (int k = 0; k < kLanes; ++k) {
          pt += ps[k];
          rt += rs[k];
        }
        psq[static_cast<size_t>(blk)] = pt;
        rsq[static_cast<size_t>(blk)] = rt;
      }
    });
    double pt = 0, rt = 0;
    for (int64_t blk = 0; blk < nblocks; ++blk) {
      pt += psq[static_cast<size_t>(blk)];
      rt += rsq[static_cast<size_t>(blk)];
    }
    return LambNorms{std::sqrt(pt), std::sqrt(rt)};
  });
}

void lamb_apply(const Tensor& p, const Tensor& m, const Tensor& v, const math::LambUpdate<double>& fd, double scale) {
  TRIDENT_DISPATCH_F32_F64(p.dtype(), "LAMB", [&] {
    using T = scalar_t;
    const math::LambUpdate<T> f = fd.template cast<T>();
    const T s = T(scale);
    T* const P = ptr<T>(p);
    const T* const M = ptr<T>(m);
    const T* const V = ptr<T>(v);
    for_ranges(p.numel(), [&](int64_t b, int64_t e) {
      const auto fn = f;
      const T sc = s;
      T* __restrict pp = P;
      const T* __restrict mp = M;
      const T* __restrict vp = V;
      for (int64_t i = b; i < e; ++i) pp[i] = pp[i] - sc * fn.direction(pp[i], mp[i], vp[i]);
    });
  });
}

}  // namespace trident::nn::optim::cpu
