// The CUDA multi-tensor optimizer kernels (nn/optim/cuda_kernels.cu) and their launcher
// (multi_tensor_apply in nn/optim/multi_tensor.cuh), which no GPU has run yet, on the SIMT
// emulator (NOTE [Kernels on the CPU emulator] in tests/simt/simt.h) against the CPU loops
// (nn/optim/cpu_kernels.h) on the same values: SGD, Adam (amsgrad too), RMSProp, LAMB with its
// two passes and per-chunk norms, GradScaler's unscale and found_inf, clip_grad_norm_'s norm of
// mixed f32/f64 gradients and its scaling. The lists have more tensors than one launch holds,
// empty tensors, sizes around the 65536-element chunk, and one tensor whose chunks straddle two
// launches. The launcher itself runs as it does on a GPU (only its <<<...>>> is the emulator's);
// what the host functions of cuda_kernels.cu do between launches (LAMB's sums buffer,
// clip_grad_norm_'s per-dtype offsets) is repeated here, a few lines each. Each case runs in both
// thread orders; the results must agree bit for bit.
#include "tests/simt/simt.h"  // first: it defines what the kernels below take from nvcc

#include "nn/optim/cuda_kernels.cu"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <vector>

#include "nn/optim/cpu_kernels.h"
#include "nn/optim/multi_tensor.h"
#include "test_util.h"

using namespace trident;
namespace oc = trident::nn::optim::cuda;
namespace om = trident::nn::optim::math;
using nn::optim::kMultiTensorChunk;
using TensorVec = std::vector<Tensor>;

namespace {

// Sizes around the chunk, empty ones, and more tensors than a launch of any list count holds.
std::vector<int64_t> sizes(uint32_t seed, int n) {
  std::mt19937 rng(seed);
  const int64_t special[] = {0, 1, 7, kMultiTensorChunk - 1, kMultiTensorChunk, kMultiTensorChunk + 1,
                             3 * kMultiTensorChunk + 513};
  std::vector<int64_t> s;
  for (int i = 0; i < n; ++i)
    s.push_back(i % 5 == 0 ? special[(i / 5) % 7] : static_cast<int64_t>(rng() % 3000));
  return s;
}

TensorVec random_list(const std::vector<int64_t>& s, DType dt, Generator& g, double lo = -1, double hi = 1) {
  TensorVec out;
  for (int64_t n : s) out.push_back(add(mul(rand({n}, dt, &g), hi - lo), lo));
  return out;
}
TensorVec clone_list(const TensorVec& l) {
  TensorVec out;
  for (const Tensor& t : l) out.push_back(t.clone());
  return out;
}

// max |a - b| / (|b| + tiny) over every element of every tensor: the updates are the CPU's
// functors, so only the compilers' contractions differ; a missed, doubled or misplaced element
// is off by far more.
double max_rel(const TensorVec& a, const TensorVec& b) {
  double m = 0;
  for (size_t t = 0; t < a.size(); ++t) {
    const std::vector<double> x = a[t].to_vector<double>(), y = b[t].to_vector<double>();
    EXPECT_EQ(x.size(), y.size());
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (x[i] == y[i]) continue;
      if (!std::isfinite(x[i]) || !std::isfinite(y[i])) return INFINITY;
      m = std::max(m, std::abs(x[i] - y[i]) / (std::abs(y[i]) + 1e-30));
    }
  }
  return m;
}
double tol(DType dt) { return dt == DType::F32 ? 2e-6 : 1e-14; }

bool same_bits(const TensorVec& a, const TensorVec& b) {
  for (size_t t = 0; t < a.size(); ++t)
    if (a[t].to_vector<double>() != b[t].to_vector<double>()) return false;
  return true;
}

// Runs `step` on fresh copies of `state` in both thread orders; the results must agree bit for
// bit. Returns the forward-order result.
std::vector<TensorVec> in_both_orders(const std::vector<TensorVec>& state,
                                      const std::function<void(std::vector<TensorVec>&)>& step) {
  std::vector<TensorVec> r[2];
  for (int o = 0; o < 2; ++o) {
    simt::ScopedOrder order(o == 0 ? simt::Order::Forward : simt::Order::Reverse);
    for (const TensorVec& l : state) r[o].push_back(clone_list(l));
    step(r[o]);
  }
  for (size_t k = 0; k < state.size(); ++k) EXPECT_TRUE(same_bits(r[0][k], r[1][k])) << "list " << k << " depends on the thread order";
  return r[0];
}

template <typename T>
void adam_case(DType dt, bool amsgrad) {
  SCOPED_TRACE(std::string(dtype_name(dt)) + (amsgrad ? " amsgrad" : ""));
  Generator g(11);
  const std::vector<int64_t> s = sizes(5, 45);  // 45 > 40 and 36 tensors per launch
  const TensorVec p = random_list(s, dt, g), m = random_list(s, dt, g), v = random_list(s, dt, g, 0, 1),
                  vmax = random_list(s, dt, g, 0, 1);
  std::vector<TensorVec> grads;
  for (int k = 0; k < 3; ++k) grads.push_back(random_list(s, dt, g));
  const auto update = [](int k) {
    om::AdamUpdate<double> f;
    f.beta1 = 0.9;
    f.beta2 = 0.999;
    f.eps = 1e-8;
    f.weight_decay = k == 1 ? 0.01 : 0.0;
    f.decay = k == 2 ? 1 - 1e-3 * 0.1 : 1.0;
    f.step_size = 1e-3 / (1 - std::pow(0.9, k + 1));
    f.bias_correction2_sqrt = std::sqrt(1 - std::pow(0.999, k + 1));
    return f;
  };
  std::vector<TensorVec> base = {p, m, v};
  if (amsgrad) base.push_back(vmax);
  const std::vector<TensorVec> got = in_both_orders(base, [&](std::vector<TensorVec>& st) {
    for (int k = 0; k < 3; ++k) {
      const om::AdamUpdate<T> f = update(k).template cast<T>();
      if (amsgrad)
        oc::multi_tensor_apply<5>({&st[0], &grads[static_cast<size_t>(k)], &st[1], &st[2], &st[3]}, nullptr,
                                  oc::AdamOp<T, true>{f});
      else
        oc::multi_tensor_apply<4>({&st[0], &grads[static_cast<size_t>(k)], &st[1], &st[2]}, nullptr,
                                  oc::AdamOp<T, false>{f});
    }
  });
  std::vector<TensorVec> ref;
  for (const TensorVec& l : base) ref.push_back(clone_list(l));
  for (int k = 0; k < 3; ++k)
    for (size_t i = 0; i < s.size(); ++i)
      nn::optim::cpu::adam(ref[0][i], grads[static_cast<size_t>(k)][i], ref[1][i], ref[2][i],
                           amsgrad ? ref[3][i] : Tensor(), update(k));
  for (size_t l = 0; l < ref.size(); ++l) EXPECT_LE(max_rel(got[l], ref[l]), tol(dt)) << "list " << l;
}

TEST(SimtMultiTensor, AdamMatchesTheCpuOverManyTensorsAndLaunches) {
  const int64_t before = nn::optim::multi_tensor_launches();
  adam_case<float>(DType::F32, false);
  // 45 tensors, 40 per launch with 4 lists: 2 launches a step, 3 steps, 2 orders.
  EXPECT_EQ(nn::optim::multi_tensor_launches() - before, 12);
  adam_case<float>(DType::F32, true);
  adam_case<double>(DType::F64, true);
}

TEST(SimtMultiTensor, SgdAndRmspropMatchTheCpu) {
  for (DType dt : {DType::F32, DType::F64}) {
    SCOPED_TRACE(dtype_name(dt));
    Generator g(12);
    const std::vector<int64_t> s = sizes(6, 70);
    const TensorVec p = random_list(s, dt, g), gr = random_list(s, dt, g), buf = random_list(s, dt, g),
                    sq = random_list(s, dt, g, 0.5, 1), ga = random_list(s, dt, g, -0.1, 0.1);
    om::SGDUpdate<double> sf{0.1, 0.01, 0.9, 0.1, true, false};
    om::RMSPropUpdate<double> rf{0.01, 0.99, 1e-8, 0.001, 0.9};
    const std::vector<TensorVec> got = in_both_orders({p, buf, sq, ga}, [&](std::vector<TensorVec>& st) {
      if (dt == DType::F32) {
        oc::multi_tensor_apply<3>({&st[0], &gr, &st[1]}, nullptr, oc::SGDOp<float, true>{sf.cast<float>()});
        oc::multi_tensor_apply<5>({&st[0], &gr, &st[2], &st[3], &st[1]}, nullptr,
                                  oc::RMSPropOp<float, true, true>{rf.cast<float>()});
      } else {
        oc::multi_tensor_apply<3>({&st[0], &gr, &st[1]}, nullptr, oc::SGDOp<double, true>{sf});
        oc::multi_tensor_apply<5>({&st[0], &gr, &st[2], &st[3], &st[1]}, nullptr, oc::RMSPropOp<double, true, true>{rf});
      }
    });
    const TensorVec rp = clone_list(p), rbuf = clone_list(buf), rsq = clone_list(sq), rga = clone_list(ga);
    for (size_t i = 0; i < s.size(); ++i) {
      nn::optim::cpu::sgd(rp[i], gr[i], rbuf[i], sf);
      nn::optim::cpu::rmsprop(rp[i], gr[i], rsq[i], rga[i], rbuf[i], rf);
    }
    EXPECT_LE(max_rel(got[0], rp), tol(dt)) << "p";
    EXPECT_LE(max_rel(got[1], rbuf), tol(dt)) << "buf";
    EXPECT_LE(max_rel(got[2], rsq), tol(dt)) << "square_avg";
    EXPECT_LE(max_rel(got[3], rga), tol(dt)) << "grad_avg";
  }
}

TEST(SimtMultiTensor, LambWithLayerAdaptationMatchesTheCpu) {
  using T = float;
  const DType dt = DType::F32;
  Generator g(13);
  const std::vector<int64_t> s = sizes(7, 50);
  const TensorVec p = random_list(s, dt, g), gr = random_list(s, dt, g), m = random_list(s, dt, g, -0.1, 0.1),
                  v = random_list(s, dt, g, 0, 0.1);
  om::LambUpdate<double> f{0.9, 0.999, 1e-6, 0.01, 1 - 0.9 * 0.9, 1 - 0.999 * 0.999};
  const double lr = 1e-3;
  const int64_t chunks = oc::total_chunks(p);
  Tensor ratios_got;
  const std::vector<TensorVec> got = in_both_orders({p, m, v}, [&](std::vector<TensorVec>& st) {
    // As oc::lamb: per-chunk sums of p^2 and r^2, then the trust ratios and the update.
    const Tensor sums = full({2, chunks}, NAN, DType::F64);
    double* psq = static_cast<double*>(sums.data_ptr());
    const Tensor ratios = full({static_cast<int64_t>(s.size())}, NAN, DType::F64);
    oc::multi_tensor_apply<4>({&st[0], &gr, &st[1], &st[2]}, nullptr, oc::LambMomentsOp<T>{f.cast<T>(), psq, psq + chunks});
    oc::multi_tensor_apply<3>({&st[0], &st[1], &st[2]}, nullptr,
                              oc::LambApplyOp<T>{f.cast<T>(), lr, psq, psq + chunks, static_cast<double*>(ratios.data_ptr())});
    ratios_got = ratios;
  });
  const TensorVec rp = clone_list(p), rm = clone_list(m), rv = clone_list(v);
  std::vector<double> rr(s.size(), NAN);
  for (size_t i = 0; i < s.size(); ++i) {
    const nn::optim::cpu::LambNorms nrm = nn::optim::cpu::lamb_moments(rp[i], gr[i], rm[i], rv[i], f);
    rr[i] = om::lamb_trust_ratio(nrm.param, nrm.update);
    nn::optim::cpu::lamb_apply(rp[i], rm[i], rv[i], f, lr * rr[i]);
  }
  EXPECT_LE(max_rel(got[0], rp), 1e-5) << "p";  // the ratio's f64 sums come in another order
  EXPECT_LE(max_rel(got[1], rm), tol(dt)) << "m";
  EXPECT_LE(max_rel(got[2], rv), tol(dt)) << "v";
  const std::vector<double> ratios = ratios_got.to_vector<double>();
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == 0) continue;  // an empty parameter takes no block
    EXPECT_NEAR(ratios[i], rr[i], 1e-12 * rr[i]) << "tensor " << i;
  }
}

TEST(SimtMultiTensor, LambWithoutLayerAdaptationMatchesTheCpu) {
  // One fused pass (trust ratio 1): the moments, then p = p - lr * r.
  Generator g(16);
  const std::vector<int64_t> s = sizes(10, 45);
  const TensorVec p = random_list(s, kF32, g), gr = random_list(s, kF32, g), m = random_list(s, kF32, g, -0.1, 0.1),
                  v = random_list(s, kF32, g, 0, 0.1);
  const om::LambUpdate<double> f{0.9, 0.999, 1e-6, 0.01, 1 - 0.9, 1 - 0.999};
  const double lr = 1e-3;
  const std::vector<TensorVec> got = in_both_orders({p, m, v}, [&](std::vector<TensorVec>& st) {
    oc::multi_tensor_apply<4>({&st[0], &gr, &st[1], &st[2]}, nullptr,
                              oc::LambFusedOp<float>{f.cast<float>(), static_cast<float>(lr)});
  });
  const TensorVec rp = clone_list(p), rm = clone_list(m), rv = clone_list(v);
  for (size_t i = 0; i < s.size(); ++i) {
    nn::optim::cpu::lamb_moments(rp[i], gr[i], rm[i], rv[i], f);
    nn::optim::cpu::lamb_apply(rp[i], rm[i], rv[i], f, lr);
  }
  EXPECT_LE(max_rel(got[0], rp), tol(kF32)) << "p";
  EXPECT_LE(max_rel(got[1], rm), tol(kF32)) << "m";
  EXPECT_LE(max_rel(got[2], rv), tol(kF32)) << "v";
}

TEST(SimtMultiTensor, UnscaleFindsAnInfInATensorThatStraddlesTwoLaunches) {
  // 300 chunks, then 50: the second tensor's chunks 0-19 end the first launch (320 blocks), the
  // other 30 start the next as its slot 0.
  const std::vector<int64_t> s = {300 * kMultiTensorChunk - 5, 50 * kMultiTensorChunk + 7};
  Generator g(14);
  const TensorVec grads = random_list(s, DType::F32, g);
  for (int bad : {-1, 0, 1}) {
    SCOPED_TRACE(bad);
    TensorVec x = clone_list(grads);
    // An inf in a chunk of the second launch (bad = 1), of the first (bad = 0), or none.
    if (bad >= 0) {
      const int64_t at = bad == 1 ? 45 * kMultiTensorChunk + 3 : 20 * kMultiTensorChunk + 3;
      static_cast<float*>(x[1].data_ptr())[at] = INFINITY;
    }
    const Tensor found = zeros({1}, DType::F32);
    const int64_t before = nn::optim::multi_tensor_launches();
    oc::multi_tensor_apply<1>({&x}, nullptr, oc::UnscaleOp<float>{0.25f, static_cast<float*>(found.data_ptr())});
    EXPECT_EQ(nn::optim::multi_tensor_launches() - before, 2);
    EXPECT_EQ(found.item<float>(), bad >= 0 ? 1.f : 0.f);
    for (size_t t = 0; t < 2; ++t) {
      const float* a = static_cast<const float*>(x[t].data_ptr());
      const float* b = static_cast<const float*>(grads[t].data_ptr());
      int64_t wrong = 0;
      for (int64_t i = 0; i < s[t]; ++i)
        if (!(a[i] == b[i] * 0.25f) && !std::isinf(a[i])) ++wrong;
      EXPECT_EQ(wrong, 0) << "tensor " << t;
    }
  }
}

TEST(SimtMultiTensor, ClipGradNormOfMixedDtypesMatchesTheCpu) {
  Generator g(15);
  const std::vector<int64_t> s32 = sizes(8, 100), s64 = sizes(9, 30);
  TensorVec f32l, f64l;
  for (int64_t n : s32)
    if (n > 0) f32l.push_back(add(mul(rand({n}, DType::F32, &g), 2.0), -1.0));
  for (int64_t n : s64)
    if (n > 0) f64l.push_back(add(mul(rand({n}, DType::F64, &g), 2.0), -1.0));
  const int64_t n = static_cast<int64_t>(f32l.size() + f64l.size());
  // The CPU's definition: each norm in f64, rounded to its dtype; the total from their squares.
  double total_sq = 0;
  for (const TensorVec* l : {&f32l, &f64l})
    for (const Tensor& t : *l) {
      double ss = 0;
      for (double x : t.to_vector<double>()) ss += x * x;
      double nrm = std::sqrt(ss);
      if (t.dtype() == DType::F32) nrm = static_cast<float>(nrm);
      total_sq += nrm * nrm;
    }
  const double total = std::sqrt(total_sq), max_norm = 0.5 * total;
  const std::vector<TensorVec> got = in_both_orders({f32l, f64l}, [&](std::vector<TensorVec>& st) {
    // As oc::grad_norm_and_clip_coef and oc::scale_by_clip_coef.
    const int64_t chunks = oc::total_chunks(st[0]) + oc::total_chunks(st[1]);
    const Tensor partials = full({chunks}, NAN, DType::F64), tensor_sq = full({n}, NAN, DType::F64);
    const Tensor seg = full({3 * n}, -1, DType::I32), out = full({2}, NAN, DType::F64);
    auto* part = static_cast<double*>(partials.data_ptr());
    auto* segp = static_cast<int32_t*>(seg.data_ptr());
    const int32_t chunks32 = static_cast<int32_t>(oc::total_chunks(st[0]));
    oc::multi_tensor_apply<1>({&st[0]}, nullptr, oc::SumSquaresOp<float>{part, 0, 0, segp});
    oc::multi_tensor_apply<1>({&st[1]}, nullptr,
                              oc::SumSquaresOp<double>{part + chunks32, chunks32, static_cast<int32_t>(st[0].size()), segp});
    simt::launch({dim3(1), dim3(oc::kThreads)}, [&] {
      oc::norm_finish_kernel(static_cast<int32_t>(n), part, segp, static_cast<double*>(tensor_sq.data_ptr()), max_norm,
                             static_cast<double*>(out.data_ptr()));
    });
    const std::vector<double> o = out.to_vector<double>();
    EXPECT_NEAR(o[0], total, 1e-12 * total);
    EXPECT_NEAR(o[1], max_norm / (total + 1e-6), 1e-12);
    const auto* coef = static_cast<const double*>(out.data_ptr());
    oc::multi_tensor_apply<1>({&st[0]}, nullptr, oc::ClipScaleOp<float>{coef});
    oc::multi_tensor_apply<1>({&st[1]}, nullptr, oc::ClipScaleOp<double>{coef});
  });
  const double c = max_norm / (total + 1e-6);
  for (size_t k = 0; k < 2; ++k) {
    const TensorVec& src = k == 0 ? f32l : f64l;
    for (size_t t = 0; t < src.size(); ++t) {
      const std::vector<double> a = got[k][t].to_vector<double>(), b = src[t].to_vector<double>();
      for (size_t i = 0; i < a.size(); ++i) {
        const double want = k == 0 ? static_cast<double>(static_cast<float>(b[i]) * static_cast<float>(c)) : b[i] * c;
        ASSERT_NEAR(a[i], want, std::abs(want) * 1e-6) << "list " << k << " tensor " << t << " element " << i;
      }
    }
  }
}

}  // namespace
