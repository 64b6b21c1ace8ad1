#include <cmath>
#include <string>
#include <type_traits>

#include "ops/cpu/bgemm_amx.h"
#include "ops/cpu/conv_blocked.h"
#include "ops/cpu/conv_direct.h"
#include "ops/cpu/conv_narrow.h"
#include "ops/cpu/conv_simd.h"
#include "ops/cpu/conv_winograd.h"
#include "ops/cpu/isa.h"
#include "ops/conv_reference.h"
#include "test_util.h"

using namespace trident;
using namespace trident::testing;
using namespace trident::testing::conv_ref;
using autograd::TensorList;

namespace {

// NOTE [Blocked or GEMM]: on a machine whose OpenBLAS runs AVX-512 kernels the f32 convolutions
// the blocked kernels serve elsewhere go through im2col + GEMM. Every test of this file runs the
// AVX2 machines' choice, whatever the machine, so that the blocked kernels and F(2, 7) are tested
// everywhere; Conv2d.GemmRouteOfAvx512MachinesMatchesNestedLoops runs the other.
const int kBlockedOnEveryMachine = cpu::set_conv_blocked_preference_for_testing(1);

// The error bound of Winograd F(4x4, 3x3) (NOTE [Conv2d Winograd] in ops/cpu/conv_winograd.cpp),
// computed here from the operands with the transform matrices written out again: for output
// (oh, ow) at position (i, j) = (oh % 4, ow % 4) of its 4x4 tile (tiles start at output (0, 0)),
//   |A^T| [ sum_c (|G| |g_c| |G^T|) (.) (|B^T| |d_c| |B|) ] |A|  at (i, j),  plus |b|,
// d_c the tile's 6x6 window of the zero-padded input channel c, g_c the kernel. Every step of
// the algorithm (two G passes, two B^T passes, the channel sum, two A^T passes) rounds each
// result once per operation on its path, at most a few u of the sum of its terms' absolute
// values, so the f32 error is at most about (C/groups + 24) u times this magnitude: the
// channel sum contributes C/groups, the transforms at most 10 (U) + 6 (V) + 6 (output) + 1
// (bias), and the check allows twice that, like within_rounding's bound for dot products.
Tensor winograd_magnitude(const Tensor& x, const Tensor& w, const Tensor& b, int64_t ph, int64_t pw, int64_t groups) {
  static const double BT[6][6] = {{4, 0, 5, 0, 1, 0}, {0, 4, 4, 1, 1, 0}, {0, 4, 4, 1, 1, 0},
                                  {0, 2, 1, 2, 1, 0}, {0, 2, 1, 2, 1, 0}, {0, 4, 0, 5, 0, 1}};
  static const double G[6][3] = {{1.0 / 4, 0, 0},          {1.0 / 6, 1.0 / 6, 1.0 / 6},   {1.0 / 6, 1.0 / 6, 1.0 / 6},
                                 {1.0 / 24, 1.0 / 12, 1.0 / 6}, {1.0 / 24, 1.0 / 12, 1.0 / 6}, {0, 0, 1}};
  static const double AT[4][6] = {{1, 1, 1, 1, 1, 0}, {0, 1, 1, 2, 2, 0}, {0, 1, 1, 4, 4, 0}, {0, 1, 1, 8, 8, 1}};
  const int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3), O = w.size(0), Cg = w.size(1);
  const int64_t Og = O / groups, OH = H + 2 * ph - 2, OW = W + 2 * pw - 2, TH = (OH + 3) / 4, TW = (OW + 3) / 4;
  const std::vector<double> xv = x.to_vector<double>(), wv = w.to_vector<double>();
  std::vector<double> mag(static_cast<size_t>(N * O * OH * OW));
  // |G| |g| |G^T| for every (output, input) channel pair.
  std::vector<double> um(static_cast<size_t>(O * Cg * 36));
  for (int64_t o = 0; o < O; ++o)
    for (int64_t c = 0; c < Cg; ++c)
      for (int k = 0; k < 6; ++k)
        for (int l = 0; l < 6; ++l) {
          double s = 0;
          for (int a = 0; a < 3; ++a)
            for (int q = 0; q < 3; ++q) s += G[k][a] * std::fabs(wv[static_cast<size_t>(((o * Cg + c) * 3 + a) * 3 + q)]) * G[l][q];
          um[static_cast<size_t>((o * Cg + c) * 36 + k * 6 + l)] = s;
        }
  std::vector<double> vm(static_cast<size_t>(Cg * 36));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t gi = 0; gi < groups; ++gi)
      for (int64_t th = 0; th < TH; ++th)
        for (int64_t tw = 0; tw < TW; ++tw) {
          // |B^T| |d_c| |B| for the tile's window of every input channel of the group.
          for (int64_t c = 0; c < Cg; ++c)
            for (int k = 0; k < 6; ++k)
              for (int l = 0; l < 6; ++l) {
                double s = 0;
                for (int r = 0; r < 6; ++r)
                  for (int q = 0; q < 6; ++q) {
                    const int64_t h = 4 * th - ph + r, ww = 4 * tw - pw + q;
                    if (h < 0 || h >= H || ww < 0 || ww >= W) continue;
                    s += BT[k][r] * std::fabs(xv[static_cast<size_t>(((n * C + gi * Cg + c) * H + h) * W + ww)]) * BT[l][q];
                  }
                vm[static_cast<size_t>(c * 36 + k * 6 + l)] = s;
              }
          for (int64_t o = gi * Og; o < (gi + 1) * Og; ++o) {
            double P[6][6] = {};
            for (int64_t c = 0; c < Cg; ++c)
              for (int kl = 0; kl < 36; ++kl) P[kl / 6][kl % 6] += um[static_cast<size_t>((o * Cg + c) * 36 + kl)] * vm[static_cast<size_t>(c * 36 + kl)];
            const double bias = b.defined() ? std::fabs(b.to_vector<double>()[static_cast<size_t>(o)]) : 0.0;
            for (int i = 0; i < 4 && 4 * th + i < OH; ++i)
              for (int j = 0; j < 4 && 4 * tw + j < OW; ++j) {
                double s = bias;
                for (int k = 0; k < 6; ++k)
                  for (int l = 0; l < 6; ++l) s += AT[i][k] * P[k][l] * AT[j][l];
                mag[static_cast<size_t>(((n * O + o) * OH + 4 * th + i) * OW + 4 * tw + j)] = s;
              }
          }
        }
  return from_vector<double>(mag, {N, O, OH, OW});
}

// The bound of NOTE [Conv2d Winograd F(2,7)] for a 7x1 or 1x7 kernel (w [O, Cg, 7, 1] or
// [O, Cg, 1, 7]): outputs paired along the kernel's axis, output i of pair t bounded by
// |bias| + sum_xi |A^T[i][xi]| sum_c (|G| |g_c|)[xi] (|B^T| |d_c|)[xi], d_c the 8 inputs of
// channel c at positions 2t - p ... 2t - p + 7 along that axis (zero outside the input). The
// matrices are typed in here from the note's table, as absolute values.
Tensor winograd7_magnitude(const Tensor& x, const Tensor& w, const Tensor& b, int64_t ph, int64_t pw, int64_t groups) {
  static const double BT[8][8] = {{4, 0, 21, 0, 21, 0, 4, 0},   {0, 4, 4, 17, 17, 4, 4, 0}, {0, 4, 4, 17, 17, 4, 4, 0},
                                  {0, 2, 1, 10, 5, 8, 4, 0},    {0, 2, 1, 10, 5, 8, 4, 0},  {0, 4, 8, 5, 10, 1, 2, 0},
                                  {0, 4, 8, 5, 10, 1, 2, 0},    {0, 4, 0, 21, 0, 21, 0, 4}};
  static const double G[8][7] = {{1.0 / 4, 0, 0, 0, 0, 0, 0},
                                 {1.0 / 18, 1.0 / 18, 1.0 / 18, 1.0 / 18, 1.0 / 18, 1.0 / 18, 1.0 / 18},
                                 {1.0 / 18, 1.0 / 18, 1.0 / 18, 1.0 / 18, 1.0 / 18, 1.0 / 18, 1.0 / 18},
                                 {1.0 / 360, 1.0 / 180, 1.0 / 90, 1.0 / 45, 2.0 / 45, 4.0 / 45, 8.0 / 45},
                                 {1.0 / 360, 1.0 / 180, 1.0 / 90, 1.0 / 45, 2.0 / 45, 4.0 / 45, 8.0 / 45},
                                 {16.0 / 45, 8.0 / 45, 4.0 / 45, 2.0 / 45, 1.0 / 45, 1.0 / 90, 1.0 / 180},
                                 {16.0 / 45, 8.0 / 45, 4.0 / 45, 2.0 / 45, 1.0 / 45, 1.0 / 90, 1.0 / 180},
                                 {0, 0, 0, 0, 0, 0, 1.0 / 4}};
  static const double AT[2][8] = {{1, 1, 1, 1, 1, 1, 1, 0}, {0, 1, 1, 2, 2, 0.5, 0.5, 1}};
  const bool vertical = w.size(2) == 7;
  const int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3), O = w.size(0), Cg = w.size(1);
  const int64_t Og = O / groups, OH = H + 2 * ph - (vertical ? 6 : 0), OW = W + 2 * pw - (vertical ? 0 : 6);
  const std::vector<double> xv = x.to_vector<double>(), wv = w.to_vector<double>();
  const std::vector<double> bv = b.defined() ? b.to_vector<double>() : std::vector<double>(static_cast<size_t>(O), 0.0);
  std::vector<double> um(static_cast<size_t>(O * Cg * 8));  // |G| |g| per (output, input) channel pair
  for (int64_t o = 0; o < O; ++o)
    for (int64_t c = 0; c < Cg; ++c)
      for (int k = 0; k < 8; ++k) {
        double s = 0;
        for (int t = 0; t < 7; ++t) s += G[k][t] * std::fabs(wv[static_cast<size_t>((o * Cg + c) * 7 + t)]);
        um[static_cast<size_t>((o * Cg + c) * 8 + k)] = s;
      }
  std::vector<double> mag(static_cast<size_t>(N * O * OH * OW));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t oh = 0; oh < OH; ++oh)
      for (int64_t ow = 0; ow < OW; ++ow) {
        const int64_t along = vertical ? oh : ow, t = along / 2, i = along % 2;
        for (int64_t gi = 0; gi < groups; ++gi) {
          std::vector<double> vm(static_cast<size_t>(Cg * 8), 0.0);  // |B^T| |d_c|
          for (int64_t c = 0; c < Cg; ++c)
            for (int e = 0; e < 8; ++e) {
              const int64_t h = vertical ? 2 * t - ph + e : oh - ph, ww = vertical ? ow - pw : 2 * t - pw + e;
              if (h < 0 || h >= H || ww < 0 || ww >= W) continue;
              const double d = std::fabs(xv[static_cast<size_t>(((n * C + gi * Cg + c) * H + h) * W + ww)]);
              for (int k = 0; k < 8; ++k) vm[static_cast<size_t>(c * 8 + k)] += BT[k][e] * d;
            }
          for (int64_t o = gi * Og; o < (gi + 1) * Og; ++o) {
            double s = std::fabs(bv[static_cast<size_t>(o)]);
            for (int k = 0; k < 8; ++k) {
              double sum = 0;
              for (int64_t c = 0; c < Cg; ++c) sum += um[static_cast<size_t>((o * Cg + c) * 8 + k)] * vm[static_cast<size_t>(c * 8 + k)];
              s += AT[i][k] * sum;
            }
            mag[static_cast<size_t>(((n * O + o) * OH + oh) * OW + ow)] = s;
          }
        }
      }
  return from_vector<double>(mag, {N, O, OH, OW});
}

// The same for the F(2,7) weight gradient: dg[o][c][k] is bounded by sum_xi |G[xi][k]| sum over
// images and output pairs of (|A| |gy_pair|)[xi] (|B^T| |d_pair|)[xi] (|A| = |A^T|^T), a sum
// whose inner dimension is the pairs: the error is at most about (pairs + 24) u times it.
Tensor winograd7_weight_magnitude(const Tensor& x, const Tensor& gy, const Shape& wshape, int64_t ph, int64_t pw, int64_t groups) {
  static const double BT[8][8] = {{4, 0, 21, 0, 21, 0, 4, 0},   {0, 4, 4, 17, 17, 4, 4, 0}, {0, 4, 4, 17, 17, 4, 4, 0},
                                  {0, 2, 1, 10, 5, 8, 4, 0},    {0, 2, 1, 10, 5, 8, 4, 0},  {0, 4, 8, 5, 10, 1, 2, 0},
                                  {0, 4, 8, 5, 10, 1, 2, 0},    {0, 4, 0, 21, 0, 21, 0, 4}};
  static const double G[8][7] = {{1.0 / 4, 0, 0, 0, 0, 0, 0},
                                 {1.0 / 18, 1.0 / 18, 1.0 / 18, 1.0 / 18, 1.0 / 18, 1.0 / 18, 1.0 / 18},
                                 {1.0 / 18, 1.0 / 18, 1.0 / 18, 1.0 / 18, 1.0 / 18, 1.0 / 18, 1.0 / 18},
                                 {1.0 / 360, 1.0 / 180, 1.0 / 90, 1.0 / 45, 2.0 / 45, 4.0 / 45, 8.0 / 45},
                                 {1.0 / 360, 1.0 / 180, 1.0 / 90, 1.0 / 45, 2.0 / 45, 4.0 / 45, 8.0 / 45},
                                 {16.0 / 45, 8.0 / 45, 4.0 / 45, 2.0 / 45, 1.0 / 45, 1.0 / 90, 1.0 / 180},
                                 {16.0 / 45, 8.0 / 45, 4.0 / 45, 2.0 / 45, 1.0 / 45, 1.0 / 90, 1.0 / 180},
                                 {0, 0, 0, 0, 0, 0, 1.0 / 4}};
  static const double AT[2][8] = {{1, 1, 1, 1, 1, 1, 1, 0}, {0, 1, 1, 2, 2, 0.5, 0.5, 1}};
  const bool vertical = wshape[2] == 7;
  const int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3), O = gy.size(1), OH = gy.size(2), OW = gy.size(3);
  const int64_t Cg = C / groups, Og = O / groups, pairs_along = ((vertical ? OH : OW) + 1) / 2, across = vertical ? OW : OH;
  const std::vector<double> xv = x.to_vector<double>(), gv = gy.to_vector<double>();
  std::vector<double> P(static_cast<size_t>(O * Cg * 8), 0.0);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t t = 0; t < pairs_along; ++t)
      for (int64_t a = 0; a < across; ++a) {
        std::vector<double> vm(static_cast<size_t>(C * 8), 0.0), zm(static_cast<size_t>(O * 8), 0.0);
        for (int64_t c = 0; c < C; ++c)
          for (int e = 0; e < 8; ++e) {
            const int64_t h = vertical ? 2 * t - ph + e : a - ph, ww = vertical ? a - pw : 2 * t - pw + e;
            if (h < 0 || h >= H || ww < 0 || ww >= W) continue;
            const double d = std::fabs(xv[static_cast<size_t>(((n * C + c) * H + h) * W + ww)]);
            for (int k = 0; k < 8; ++k) vm[static_cast<size_t>(c * 8 + k)] += BT[k][e] * d;
          }
        for (int64_t o = 0; o < O; ++o)
          for (int i = 0; i < 2 && 2 * t + i < (vertical ? OH : OW); ++i) {
            const int64_t oh = vertical ? 2 * t + i : a, ow = vertical ? a : 2 * t + i;
            const double g = std::fabs(gv[static_cast<size_t>(((n * O + o) * OH + oh) * OW + ow)]);
            for (int k = 0; k < 8; ++k) zm[static_cast<size_t>(o * 8 + k)] += AT[i][k] * g;
          }
        for (int64_t o = 0; o < O; ++o) {
          const int64_t gi = o / Og;
          for (int64_t c = 0; c < Cg; ++c)
            for (int k = 0; k < 8; ++k)
              P[static_cast<size_t>((o * Cg + c) * 8 + k)] += zm[static_cast<size_t>(o * 8 + k)] * vm[static_cast<size_t>((gi * Cg + c) * 8 + k)];
        }
      }
  std::vector<double> mag(static_cast<size_t>(O * Cg * 7), 0.0);
  for (int64_t oc = 0; oc < O * Cg; ++oc)
    for (int t = 0; t < 7; ++t)
      for (int k = 0; k < 8; ++k) mag[static_cast<size_t>(oc * 7 + t)] += G[k][t] * P[static_cast<size_t>(oc * 8 + k)];
  return from_vector<double>(mag, wshape);
}

// The same bound for the Winograd weight gradient, d g = G^T [sum over images and tiles of
// (A gy_tile A^T) (.) (B^T d_tile B)] G (gy_tile the tile's 4x4 output gradient, zero past
// the output's edge): |G^T| [sum (|A| |gy_tile| |A^T|) (.) (|B^T| |d_tile| |B|)] |G| for every
// weight. The sum over tiles is a GEMM's inner dimension, so the error is at most about
// (N TH TW + 24) u times this.
Tensor winograd_weight_magnitude(const Tensor& x, const Tensor& gy, int64_t ph, int64_t pw, int64_t groups) {
  static const double BT[6][6] = {{4, 0, 5, 0, 1, 0}, {0, 4, 4, 1, 1, 0}, {0, 4, 4, 1, 1, 0},
                                  {0, 2, 1, 2, 1, 0}, {0, 2, 1, 2, 1, 0}, {0, 4, 0, 5, 0, 1}};
  static const double G[6][3] = {{1.0 / 4, 0, 0},          {1.0 / 6, 1.0 / 6, 1.0 / 6},   {1.0 / 6, 1.0 / 6, 1.0 / 6},
                                 {1.0 / 24, 1.0 / 12, 1.0 / 6}, {1.0 / 24, 1.0 / 12, 1.0 / 6}, {0, 0, 1}};
  static const double AT[4][6] = {{1, 1, 1, 1, 1, 0}, {0, 1, 1, 2, 2, 0}, {0, 1, 1, 4, 4, 0}, {0, 1, 1, 8, 8, 1}};
  const int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3), O = gy.size(1), OH = gy.size(2), OW = gy.size(3);
  const int64_t Cg = C / groups, Og = O / groups, TH = (OH + 3) / 4, TW = (OW + 3) / 4;
  const std::vector<double> xv = x.to_vector<double>(), gv = gy.to_vector<double>();
  std::vector<double> P(static_cast<size_t>(O * Cg * 36), 0.0), vm(static_cast<size_t>(C * 36)), zm(static_cast<size_t>(O * 36));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t th = 0; th < TH; ++th)
      for (int64_t tw = 0; tw < TW; ++tw) {
        for (int64_t c = 0; c < C; ++c)
          for (int k = 0; k < 36; ++k) {
            double s = 0;
            for (int r = 0; r < 6; ++r)
              for (int q = 0; q < 6; ++q) {
                const int64_t h = 4 * th - ph + r, ww = 4 * tw - pw + q;
                if (h < 0 || h >= H || ww < 0 || ww >= W) continue;
                s += BT[k / 6][r] * std::fabs(xv[static_cast<size_t>(((n * C + c) * H + h) * W + ww)]) * BT[k % 6][q];
              }
            vm[static_cast<size_t>(c * 36 + k)] = s;
          }
        for (int64_t o = 0; o < O; ++o)
          for (int k = 0; k < 36; ++k) {
            double s = 0;
            for (int i = 0; i < 4 && 4 * th + i < OH; ++i)
              for (int j = 0; j < 4 && 4 * tw + j < OW; ++j)
                s += AT[i][k / 6] * std::fabs(gv[static_cast<size_t>(((n * O + o) * OH + 4 * th + i) * OW + 4 * tw + j)]) * AT[j][k % 6];
            zm[static_cast<size_t>(o * 36 + k)] = s;
          }
        for (int64_t o = 0; o < O; ++o)
          for (int64_t c = 0; c < Cg; ++c)
            for (int k = 0; k < 36; ++k)
              P[static_cast<size_t>((o * Cg + c) * 36 + k)] +=
                  zm[static_cast<size_t>(o * 36 + k)] * vm[static_cast<size_t>(((o / Og) * Cg + c) * 36 + k)];
      }
  std::vector<double> mag(static_cast<size_t>(O * Cg * 9));
  for (int64_t oc = 0; oc < O * Cg; ++oc)
    for (int a = 0; a < 3; ++a)
      for (int b = 0; b < 3; ++b) {
        double s = 0;
        for (int k = 0; k < 36; ++k) s += G[k / 6][a] * P[static_cast<size_t>(oc * 36 + k)] * G[k % 6][b];
        mag[static_cast<size_t>(oc * 9 + a * 3 + b)] = s;
      }
  return from_vector<double>(mag, {O, Cg, 3, 3});
}

// w [O, C/g, 3, 3] -> w' [C, O/g, 3, 3], w'[g C/g + c][o] = w[g O/g + o][c] rotated by 180
// degrees: the kernel of the input gradient as a convolution of gy.
Tensor flipped_transposed(const Tensor& w, int64_t groups) {
  const int64_t O = w.size(0), Cg = w.size(1), Og = O / groups, taps = w.size(2) * w.size(3);
  const std::vector<double> wv = w.to_vector<double>();
  std::vector<double> out(wv.size());
  for (int64_t gi = 0; gi < groups; ++gi)
    for (int64_t o = 0; o < Og; ++o)
      for (int64_t c = 0; c < Cg; ++c)
        for (int64_t k = 0; k < taps; ++k)
          out[static_cast<size_t>(((gi * Cg + c) * Og + o) * taps + k)] =
              wv[static_cast<size_t>(((gi * Og + o) * Cg + c) * taps + taps - 1 - k)];
  return from_vector<double>(out, {groups * Cg, Og, w.size(2), w.size(3)});
}

// Forward in f64 and f32 and all three f64 gradients against the reference.
void check_against_reference(const ConvCase& c, uint64_t seed) {
  Generator gen(seed);
  const Tensor x = randn(c.x, kF64, &gen), w = randn(c.w, kF64, &gen);
  const Tensor b = c.bias ? randn({c.w[0]}, kF64, &gen) : Tensor();
  const std::string what = detail::str(describe(c.p, c.x, c.w), c.bias ? " with bias" : " without bias");
  const double terms = static_cast<double>(c.w[1] * c.w[2] * c.w[3] + 1);

  // f64 forward and backward (upstream gradient random, so every gradient entry is weighted).
  Tensor xl = x.clone().set_requires_grad(), wl = w.clone().set_requires_grad();
  Tensor bl = c.bias ? b.clone().set_requires_grad() : Tensor();
  Tensor out = conv2d(xl, wl, bl, c.p.stride, c.p.padding, c.p.dilation, c.p.groups);
  const Tensor gy = randn(out.sizes(), kF64, &gen);
  const ConvReference ref = reference_conv2d(x, w, b, c.p, gy);
  ASSERT_EQ(out.sizes(), ref.out.sizes()) << what;
  EXPECT_TRUE(within_rounding(out, ref.out, ref.magnitude, terms, kU64)) << what;
  out.backward(gy);
  // Each gradient entry is a sum too: bound it by the same reference run on |x|, |w|, |gy|.
  const ConvReference mags = reference_conv2d(abs_of(x), abs_of(w), Tensor(), c.p, abs_of(gy));
  const double per_weight = static_cast<double>(out.numel() / c.w[0]);  // N OH OW terms
  EXPECT_TRUE(within_rounding(xl.grad(), ref.gx, mags.gx, static_cast<double>(c.w[0]) * terms, kU64)) << what << " (d input)";
  EXPECT_TRUE(within_rounding(wl.grad(), ref.gw, mags.gw, per_weight, kU64)) << what << " (d weight)";
  if (c.bias) {
    EXPECT_TRUE(within_rounding(bl.grad(), ref.gb, mags.gb, per_weight, kU64)) << what << " (d bias)";
  }

  // f32: the inputs rounded to f32 and the reference recomputed in f64 from those same
  // rounded values, so the only difference left is f32 accumulation, bounded as above: the
  // forward and each gradient entry by its number of terms (O/groups kH kW for d input, N OH
  // OW for d weight), or by the Winograd bounds where the f32 3x3 stride-1 paths apply.
  const cpu::Conv2dGeometry geo = geometry_of(c.x, c.w, c.p);
  const Tensor x32 = x.to(kF32), w32 = w.to(kF32), b32 = c.bias ? b.to(kF32) : Tensor(), gy32 = gy.to(kF32);
  const Tensor xd = x32.to(kF64), wd = w32.to(kF64), bd = c.bias ? b32.to(kF64) : Tensor(), gyd = gy32.to(kF64);
  const ConvReference ref32 = reference_conv2d(xd, wd, bd, c.p, gyd);
  const ConvReference mags32 = reference_conv2d(abs_of(xd), abs_of(wd), Tensor(), c.p, abs_of(gyd));
  Tensor x32l = x32.clone().set_requires_grad(), w32l = w32.clone().set_requires_grad();
  const Tensor out32 = conv2d(x32l, w32l, b32, c.p.stride, c.p.padding, c.p.dilation, c.p.groups);
  EXPECT_EQ(out32.dtype(), kF32);
  out32.backward(gy32);
  const int64_t ph = c.p.padding[0], pw = c.p.padding[1], groups = c.p.groups;
  // NOTE [Narrow weight gradients]: few channels take the narrow kernel's plain sums.
  const bool narrow = cpu::narrow_backward_weight_applies(geo, false);
  if (narrow) {
    EXPECT_TRUE(within_rounding(w32l.grad(), ref32.gw, mags32.gw, per_weight, kU32)) << what << " (f32 narrow d weight)";
  }
  if (cpu::winograd_forward_applies(geo)) {
    EXPECT_TRUE(within_rounding(out32, ref32.out, winograd_magnitude(xd, wd, bd, ph, pw, groups), static_cast<double>(c.w[1] + 24),
                                kU32))
        << what << " (f32 Winograd)";
    const double tiles = static_cast<double>(c.x[0] * ((geo.OH + 3) / 4) * ((geo.OW + 3) / 4));
    if (!narrow) {
      EXPECT_TRUE(within_rounding(w32l.grad(), ref32.gw, winograd_weight_magnitude(xd, gyd, ph, pw, groups), tiles + 24, kU32))
          << what << " (f32 Winograd d weight)";
    }
  } else {
    if (cpu::winograd7_forward_applies(geo)) {
      EXPECT_TRUE(within_rounding(out32, ref32.out, winograd7_magnitude(xd, wd, bd, ph, pw, groups),
                                  static_cast<double>(c.w[1] + 24), kU32))
          << what << " (f32 Winograd F(2,7))";
      const bool vertical = c.w[2] == 7;
      const double pairs = static_cast<double>(c.x[0] * ((vertical ? geo.OH : geo.OW) + 1) / 2 * (vertical ? geo.OW : geo.OH));
      if (!narrow) {
        EXPECT_TRUE(within_rounding(w32l.grad(), ref32.gw, winograd7_weight_magnitude(xd, gyd, c.w, ph, pw, groups), pairs + 24, kU32))
            << what << " (f32 Winograd F(2,7) d weight)";
      }
    } else {
      EXPECT_TRUE(within_rounding(out32, ref32.out, ref32.magnitude, terms, kU32)) << what << " (f32)";
      if (!narrow) {
        EXPECT_TRUE(within_rounding(w32l.grad(), ref32.gw, mags32.gw, per_weight, kU32)) << what << " (f32 d weight)";
      }
    }
  }
  if (cpu::winograd_backward_input_applies(geo)) {
    const Tensor mag = winograd_magnitude(gyd, flipped_transposed(wd, groups), Tensor(), 2 - ph, 2 - pw, groups);
    EXPECT_TRUE(within_rounding(x32l.grad(), ref32.gx, mag, static_cast<double>(c.w[0] / groups + 24), kU32))
        << what << " (f32 Winograd d input)";
  } else if (cpu::winograd7_backward_input_applies(geo)) {
    // The input gradient's padding is (k - 1) - p along the kernel and 0 across it.
    const Tensor mag = winograd7_magnitude(gyd, flipped_transposed(wd, groups), Tensor(), c.w[2] - 1 - ph, c.w[3] - 1 - pw, groups);
    EXPECT_TRUE(within_rounding(x32l.grad(), ref32.gx, mag, static_cast<double>(c.w[0] / groups + 24), kU32))
        << what << " (f32 Winograd F(2,7) d input)";
  } else {
    const double gx_terms = static_cast<double>(c.w[0] / groups * c.w[2] * c.w[3]);
    EXPECT_TRUE(within_rounding(x32l.grad(), ref32.gx, mags32.gx, gx_terms, kU32)) << what << " (f32 d input)";
  }
}

}  // namespace

// stride x padding x dilation x groups, every combination, 3x3 kernels; groups == C is the
// depthwise kernel, the others the im2col + GEMM path.
TEST(Conv2d, EveryStridePaddingDilationGroupsMatchesNestedLoops) {
  const int64_t C = 4;
  uint64_t seed = 1000;
  int cases = 0;
  for (int64_t s : {1, 2})
    for (int64_t pad : {0, 1, 2})
      for (int64_t d : {1, 2})
        for (int64_t groups : {int64_t{1}, int64_t{2}, C}) {
          const int64_t O = groups == C ? C : 6;
          ConvCase c{{2, C, 7, 6}, {O, C / groups, 3, 3}, {{s, s}, {pad, pad}, {d, d}, groups}, true};
          SCOPED_TRACE(describe(c.p, c.x, c.w));
          check_against_reference(c, seed++);
          ++cases;
        }
  EXPECT_EQ(cases, 36);
}

TEST(Conv2d, OneByOneOneBySevenSevenByOneAndChannelMultiplierKernels) {
  const std::vector<ConvCase> cases = {
      // 1x1, stride 1, no padding: the pointwise fast path (one GEMM, no im2col), with and without groups.
      {{2, 6, 5, 4}, {8, 6, 1, 1}, {}, true},
      {{2, 6, 5, 4}, {4, 3, 1, 1}, {{1, 1}, {0, 0}, {1, 1}, 2}, false},
      {{3, 5, 1, 1}, {7, 5, 1, 1}, {}, true},
      // 1x1 that is not pointwise: strided, padded.
      {{2, 6, 5, 4}, {8, 6, 1, 1}, {{2, 2}, {0, 0}, {1, 1}, 1}, true},
      {{1, 3, 4, 4}, {2, 3, 1, 1}, {{1, 1}, {1, 1}, {1, 1}, 1}, true},
      // 1x7 and 7x1 with "same" padding (AmoebaNet's factorized 7x7), dense and depthwise.
      {{2, 4, 9, 9}, {6, 4, 1, 7}, {{1, 1}, {0, 3}, {1, 1}, 1}, true},
      {{2, 4, 9, 9}, {6, 4, 7, 1}, {{1, 1}, {3, 0}, {1, 1}, 1}, true},
      {{2, 4, 9, 8}, {4, 1, 1, 7}, {{1, 1}, {0, 3}, {1, 1}, 4}, true},
      // 1 x k, stride 1, no vertical padding: the blocked f32 kernel runs on transposed planes
      // (NOTE [Conv2d blocked im2col]); dilated, grouped, unpadded.
      {{2, 4, 8, 11}, {6, 2, 1, 3}, {{1, 1}, {0, 2}, {1, 2}, 2}, true},
      {{1, 3, 5, 12}, {4, 3, 1, 5}, {{1, 1}, {0, 0}, {1, 1}, 1}, false},
      {{2, 3, 6, 7}, {5, 3, 1, 2}, {{2, 1}, {0, 1}, {1, 1}, 1}, true},  // strided rows: not transposed
      {{2, 4, 9, 8}, {4, 1, 7, 1}, {{2, 1}, {3, 0}, {1, 1}, 4}, false},
      // Depthwise-separable pieces: 3x3, 5x5, 7x7 depthwise, strided, and a channel multiplier.
      {{2, 3, 11, 10}, {3, 1, 5, 5}, {{2, 2}, {2, 2}, {1, 1}, 3}, true},
      {{1, 3, 11, 10}, {3, 1, 7, 7}, {{1, 1}, {3, 3}, {1, 1}, 3}, true},
      {{2, 3, 7, 7}, {6, 1, 3, 3}, {{1, 1}, {1, 1}, {1, 1}, 3}, true},
      {{2, 3, 9, 8}, {9, 1, 5, 5}, {{2, 2}, {2, 2}, {2, 1}, 3}, true},
      {{2, 1, 6, 6}, {4, 1, 3, 3}, {{1, 1}, {1, 1}, {1, 1}, 1}, true},  // one input channel: depthwise with multiplier 4
      // Depthwise with uneven strides and dilations (several stride phases per kernel row).
      {{2, 3, 10, 11}, {3, 1, 3, 3}, {{1, 3}, {1, 1}, {1, 1}, 3}, true},
      {{1, 2, 9, 9}, {4, 1, 3, 2}, {{3, 2}, {0, 1}, {2, 3}, 2}, true},
      {{1, 2, 12, 12}, {2, 1, 9, 9}, {{2, 2}, {4, 4}, {1, 1}, 2}, true},  // 9 taps a row: more than one unrolled pass
      // Unequal strides, paddings and dilations per axis.
      {{2, 4, 8, 9}, {4, 2, 3, 2}, {{2, 1}, {1, 0}, {1, 2}, 2}, true},
      // Kernel exactly as large as the padded input: a 1x1 output.
      {{1, 2, 3, 3}, {2, 2, 5, 5}, {{1, 1}, {1, 1}, {1, 1}, 1}, true},
      // Planes of many 24-output blocks (29 and 14 per image): the blocked weight gradient's items
      // of 4 blocks, and a shorter last item (NOTE [Conv2d blocked im2col]).
      {{2, 3, 20, 31}, {5, 3, 3, 5}, {{1, 1}, {1, 2}, {1, 1}, 1}, true},
      {{2, 3, 40, 30}, {4, 3, 3, 3}, {{2, 2}, {1, 1}, {1, 1}, 1}, false},
  };
  uint64_t seed = 2000;
  for (const ConvCase& c : cases) {
    SCOPED_TRACE(describe(c.p, c.x, c.w));
    check_against_reference(c, seed++);
  }
}

TEST(Conv2d, LargeGemmsRunOnBlasThreadsAndAgree) {
  // Og x OH OW x C kH kW = 32 x 256 x 288, well above OpenBLAS's single-thread size: the
  // (sample, group) units run in order with threaded GEMMs and parallel im2col/col2im
  // (NOTE [Conv2d threads]); the small cases above take the batch-parallel branch.
  check_against_reference({{2, 32, 16, 16}, {32, 32, 3, 3}, {{1, 1}, {1, 1}, {1, 1}, 1}, true}, 3000);
  check_against_reference({{2, 32, 16, 16}, {32, 16, 3, 3}, {{2, 2}, {1, 1}, {1, 1}, 2}, true}, 3001);
  check_against_reference({{2, 64, 16, 16}, {64, 64, 1, 1}, {}, true}, 3002);
  // Pointwise GEMMs above OpenBLAS's threading size: one GEMM per sample straight on the tensors.
  check_against_reference({{2, 16, 32, 40}, {24, 16, 1, 1}, {}, true}, 3005);
  check_against_reference({{2, 16, 32, 40}, {24, 8, 1, 1}, {{1, 1}, {0, 0}, {1, 1}, 2}, false}, 3006);
  // A depthwise conv with many planes spreads over threads.
  check_against_reference({{4, 32, 20, 20}, {32, 1, 3, 3}, {{1, 1}, {1, 1}, {1, 1}, 32}, true}, 3003);
  // f64 im2col matrices of 11.5 MB per sample: the 32 MiB workspace takes two samples at a
  // time, so this runs as a chunk of two and a chunk of one.
  check_against_reference({{3, 16, 100, 100}, {16, 16, 3, 3}, {{1, 1}, {1, 1}, {1, 1}, 1}, true}, 3004);
}


TEST(Conv2d, EveryThreadScheduleMatchesNestedLoops) {
  // NOTE [Conv2d threads]: with one thread every GEMM convolution runs in chunks with batched
  // columns (or per-sample pointwise GEMMs); with several, small GEMMs run as parallel
  // (sample, group) units. Each TEST is its own process, so the thread count can be changed.
  const std::vector<ConvCase> cases = {
      // 16 x 100 x 144 per unit: just under OpenBLAS's threading size, so with 3 threads the
      // 8 (sample, group) units spread over them (and their weight gradients are summed).
      {{4, 32, 10, 10}, {32, 16, 3, 3}, {{1, 1}, {1, 1}, {1, 1}, 2}, true},
      {{4, 4, 7, 6}, {6, 2, 3, 3}, {{2, 1}, {1, 2}, {2, 1}, 2}, true},
      {{3, 6, 5, 5}, {4, 6, 1, 1}, {}, true},
      {{2, 16, 32, 40}, {8, 16, 1, 1}, {}, false},  // pointwise
      {{3, 4, 9, 9}, {8, 1, 3, 3}, {{2, 2}, {1, 1}, {1, 1}, 4}, true},  // depthwise: no BLAS either way
  };
  on_one_and_three_threads(cases, 3500, check_against_reference);
}

TEST(Conv2d, StridedInputGradientsSumByPhaseMatchNestedLoops) {
  // col2im with a stride sums into the plane split by stride phase and interleaves it into d
  // input at the end (col2im_phases in ops/cpu/conv.cpp): odd widths under column stride 2
  // with even and odd padding, groups, stride 3, strides differing per axis with dilation, and
  // a 1x1 stride 2 kernel whose odd rows and columns receive nothing; on 1 and 3 threads
  // (batched columns and parallel units).
  const std::vector<ConvCase> cases = {
      {{2, 3, 9, 11}, {4, 3, 3, 3}, {{2, 2}, {1, 1}, {1, 1}, 1}, true},
      {{1, 4, 10, 9}, {4, 2, 3, 2}, {{2, 2}, {0, 1}, {1, 1}, 2}, true},
      {{1, 3, 13, 14}, {2, 3, 5, 3}, {{3, 3}, {2, 1}, {1, 1}, 1}, false},
      {{1, 3, 12, 13}, {2, 3, 3, 3}, {{1, 2}, {1, 0}, {2, 2}, 1}, true},
      {{2, 2, 8, 8}, {3, 2, 1, 1}, {{2, 2}, {0, 0}, {1, 1}, 1}, false},
  };
  on_one_and_three_threads(cases, 8200, check_against_reference);
}

TEST(Conv2d, EveryMicroKernelOfThisCpuMatchesF64Products) {
  // NOTE [AVX-512 micro-kernel]: the register-blocked kernel of the Winograd and blocked
  // convolutions, 4 x 8 NV blocks for NV = 1, 2, 3 and runs of blocks for NV = 2, 3, 4, 6
  // (8-row blocks with the AVX-512 kernel), overwriting and accumulating, against f64 sums of
  // the same products: the AVX2 kernel always, the AVX-512 one where the CPU has it.
  Generator gen(8800);
  with_and_without_avx512([&](bool avx512) {
    for (int64_t K : {1, 7, 64, 300}) {
      const auto check = [&](auto nv, auto accumulate) {
        constexpr int NV = decltype(nv)::value, NR = 8 * NV;
        constexpr bool Acc = decltype(accumulate)::value;
        SCOPED_TRACE(detail::str(avx512 ? "AVX-512" : "AVX2", " kernel, NV ", NV, ", K ", K, Acc ? ", accumulating" : ""));
        const std::vector<float> up = randn({K * cpu::conv_simd::kMR}, kF32, &gen).to_vector<float>();
        const std::vector<float> vp = randn({K * NR}, kF32, &gen).to_vector<float>();
        const std::vector<float> m0 = randn({cpu::conv_simd::kMR * NR}, kF32, &gen).to_vector<float>();
        std::vector<float> mp = m0;
        cpu::conv_simd::gemm_kernel<NV, Acc>(up.data(), vp.data(), K, mp.data());
        for (int r = 0; r < cpu::conv_simd::kMR; ++r)
          for (int j = 0; j < NR; ++j) {
            double sum = Acc ? m0[static_cast<size_t>(r * NR + j)] : 0.0, mag = std::fabs(sum);
            for (int64_t k = 0; k < K; ++k) {
              const double t = static_cast<double>(up[static_cast<size_t>(k * cpu::conv_simd::kMR + r)]) * vp[static_cast<size_t>(k * NR + j)];
              sum += t;
              mag += std::fabs(t);
            }
            ASSERT_NEAR(mp[static_cast<size_t>(r * NR + j)], sum, (static_cast<double>(K) + 2) * 0x1p-24 * mag) << "row " << r << " column " << j;
          }
      };
      check(std::integral_constant<int, 1>{}, std::false_type{});
      check(std::integral_constant<int, 2>{}, std::false_type{});
      check(std::integral_constant<int, 3>{}, std::false_type{});
      check(std::integral_constant<int, 2>{}, std::true_type{});
      check(std::integral_constant<int, 3>{}, std::true_type{});
      // Three blocks of 4 rows through gemm_rows (two at a time with the AVX-512 kernel, then
      // the third alone), each with its own A panel and result block, at the block widths the
      // Winograd and blocked kernels use (6: the AVX-512 kernel's 48).
      const auto check_rows = [&](auto nv, auto accumulate) {
        constexpr int NV = decltype(nv)::value, NR = 8 * NV, MR = cpu::conv_simd::kMR;
        constexpr bool Acc = decltype(accumulate)::value;
        SCOPED_TRACE(detail::str(avx512 ? "AVX-512" : "AVX2", " kernel, 3 x 4 rows, NV ", NV, ", K ", K, Acc ? ", accumulating" : ""));
        const std::vector<float> up = randn({3 * K * MR}, kF32, &gen).to_vector<float>();
        const std::vector<float> vp = randn({K * NR}, kF32, &gen).to_vector<float>();
        const std::vector<float> m0 = randn({3 * 2 * MR * NR}, kF32, &gen).to_vector<float>();  // blocks 2 MR NR apart
        std::vector<float> mp = m0;
        cpu::conv_simd::gemm_rows<NV, Acc>(
            0, 3, vp.data(), K, [&](int64_t ob) { return up.data() + ob * K * MR; },
            [&](int64_t ob) { return mp.data() + ob * 2 * MR * NR; });
        for (int64_t ob = 0; ob < 3; ++ob)
          for (int r = 0; r < MR; ++r)
            for (int j = 0; j < NR; ++j) {
              const size_t at = static_cast<size_t>((ob * 2 * MR + r) * NR + j);
              double sum = Acc ? m0[at] : 0.0, mag = std::fabs(sum);
              for (int64_t k = 0; k < K; ++k) {
                const double t = static_cast<double>(up[static_cast<size_t>((ob * K + k) * MR + r)]) * vp[static_cast<size_t>(k * NR + j)];
                sum += t;
                mag += std::fabs(t);
              }
              ASSERT_NEAR(mp[at], sum, (static_cast<double>(K) + 2) * 0x1p-24 * mag) << "block " << ob << " row " << r << " column " << j;
            }
        // The rows between the blocks are not written.
        for (int64_t ob = 0; ob < 3; ++ob)
          for (int64_t e = MR * NR; e < 2 * MR * NR; ++e)
            ASSERT_EQ(mp[static_cast<size_t>(ob * 2 * MR * NR + e)], m0[static_cast<size_t>(ob * 2 * MR * NR + e)]);
      };
      check_rows(std::integral_constant<int, 2>{}, std::false_type{});
      check_rows(std::integral_constant<int, 3>{}, std::true_type{});
      check_rows(std::integral_constant<int, 4>{}, std::false_type{});
      check_rows(std::integral_constant<int, 6>{}, std::false_type{});
      check_rows(std::integral_constant<int, 6>{}, std::true_type{});
    }
  });
  // And whole convolutions (Winograd blocks of 8, 16 and 24 tiles, the blocked kernel, F(2, 7))
  // with the AVX2 kernel, where the default is the AVX-512 one.
  if (cpu::cpu_avx512_kernels_available()) {
    const std::vector<ConvCase> cases = {
        {{1, 16, 8, 8}, {16, 16, 3, 3}, {{1, 1}, {1, 1}, {1, 1}, 1}, true},
        {{2, 16, 12, 12}, {24, 16, 3, 3}, {{1, 1}, {1, 1}, {1, 1}, 1}, true},
        {{2, 8, 13, 12}, {16, 8, 3, 3}, {{2, 2}, {1, 1}, {1, 1}, 1}, true},
        {{2, 16, 9, 11}, {16, 16, 1, 7}, {{1, 1}, {0, 3}, {1, 1}, 1}, true},
    };
    const bool was = cpu::set_cpu_avx512_kernels_enabled_for_testing(false);
    on_one_and_three_threads(cases, 8900, check_against_reference);
    cpu::set_cpu_avx512_kernels_enabled_for_testing(was);
  }
}

TEST(Conv2d, DenseBlocksAndPhasePlanesMatchNestedLoops) {
  // NOTE [Conv2d dense blocks]: the blocked forward pass with its tiles gathered from the input
  // (dense blocks) and from phase planes, each forced for every case: output rows wider than a
  // block (pieces crossing rows), output channels not a multiple of 4, column strides 2 and 3
  // (vector and scalar gathers), row stride 1 under column stride 2 with dilation and groups,
  // padding wider than the input (whole pieces of padding), K in two slices that split a
  // channel's taps, and a 1x1 stride-2 kernel; both micro-kernels, 1 and 3 threads.
  const std::vector<ConvCase> cases = {
      {{2, 5, 13, 11}, {7, 5, 3, 3}, {{2, 2}, {1, 1}, {1, 1}, 1}, true},
      {{1, 3, 40, 61}, {8, 3, 3, 3}, {{2, 2}, {1, 1}, {1, 1}, 1}, true},
      {{2, 4, 9, 40}, {12, 2, 3, 5}, {{1, 2}, {2, 0}, {1, 2}, 2}, true},
      {{2, 6, 17, 17}, {6, 2, 3, 3}, {{3, 3}, {0, 2}, {2, 1}, 3}, true},
      {{1, 4, 5, 3}, {4, 4, 5, 5}, {{1, 1}, {4, 4}, {1, 1}, 1}, true},
      {{2, 33, 12, 12}, {8, 33, 3, 3}, {{2, 2}, {1, 1}, {1, 1}, 1}, true},
      {{2, 6, 9, 10}, {5, 6, 1, 1}, {{2, 2}, {0, 0}, {1, 1}, 1}, true},
  };
  for (int dense : {1, 0}) {
    SCOPED_TRACE(dense ? "dense blocks" : "phase planes");
    const int was = cpu::set_conv_dense_blocks_for_testing(dense);
    with_and_without_avx512([&](bool avx512) { on_one_and_three_threads(cases, avx512 ? 9300 : 9100, check_against_reference); });
    cpu::set_conv_dense_blocks_for_testing(was);
  }
  // The two layouts feed the micro-kernel the same tile rows in the same order, so their
  // outputs are the same floats, to the last bit.
  Generator gen(9500);
  with_and_without_avx512([&](bool avx512) {
    for (const ConvCase& c : cases) {
      SCOPED_TRACE(detail::str(describe(c.p, c.x, c.w), avx512 ? ", AVX-512" : ", AVX2"));
      const Tensor x = randn(c.x, kF32, &gen), w = randn(c.w, kF32, &gen), b = randn({c.w[0]}, kF32, &gen);
      std::vector<float> y[2];
      for (int dense : {0, 1}) {
        const int was = cpu::set_conv_dense_blocks_for_testing(dense);
        y[dense] = conv2d(x, w, b, c.p.stride, c.p.padding, c.p.dilation, c.p.groups).to_vector<float>();
        cpu::set_conv_dense_blocks_for_testing(was);
      }
      ASSERT_EQ(y[0].size(), y[1].size());
      for (size_t e = 0; e < y[0].size(); ++e) ASSERT_EQ(y[0][e], y[1][e]) << "output " << e;
    }
  });
}

TEST(Conv2d, GemmRouteOfAvx512MachinesMatchesNestedLoops) {
  // NOTE [Blocked or GEMM]: with the blocked kernels set aside, f32 forward passes, weight and
  // input gradients of the shapes they serve outside F(2, 7) (3x3 stride 2, 5x3 padded, 1x3
  // dilated and grouped, 1x7 with too few channels for F(2, 7), 7x1 stride 2) run as im2col +
  // GEMM; F(2, 7) and Winograd F(4x4, 3x3) stay.
  (void)kBlockedOnEveryMachine;
  const std::vector<ConvCase> cases = {
      {{2, 8, 13, 12}, {16, 8, 3, 3}, {{2, 2}, {1, 1}, {1, 1}, 1}, true},
      {{2, 3, 20, 31}, {5, 3, 3, 5}, {{1, 1}, {1, 2}, {1, 1}, 1}, true},
      {{2, 4, 8, 11}, {6, 2, 1, 3}, {{1, 1}, {0, 2}, {1, 2}, 2}, true},
      {{2, 4, 9, 11}, {6, 4, 1, 7}, {{1, 1}, {0, 3}, {1, 1}, 1}, false},
      {{2, 8, 11, 9}, {8, 8, 7, 1}, {{2, 1}, {3, 0}, {1, 1}, 1}, true},
  };
  const int was = cpu::set_conv_blocked_preference_for_testing(0);
  const bool direct_was = cpu::set_conv_direct_enabled_for_testing(false);  // the first case's stride-2 passes
  EXPECT_FALSE(cpu::blocked_kernels_preferred());
  for (const ConvCase& c : cases) EXPECT_FALSE(cpu::winograd7_forward_applies(geometry_of(c.x, c.w, c.p))) << describe(c.p, c.x, c.w);
  on_one_and_three_threads(cases, 8600, check_against_reference);
  cpu::set_conv_direct_enabled_for_testing(direct_was);
  cpu::set_conv_blocked_preference_for_testing(was);
}

namespace {
// Every case through check_against_reference (1 and 3 threads) with the direct kernels on, each
// of `applies` saying it takes the case (asked with one thread: the weight gradient wants 2
// items per thread, so with 3 some cases go to the blocked kernels), again with channel ranges
// of one block, then with them off, each saying it does not.
void check_direct_on_and_off(const std::vector<ConvCase>& cases, const std::vector<bool (*)(const cpu::Conv2dGeometry&)>& applies,
                             uint64_t seed) {
  const int threads = get_num_threads();
  set_num_threads(1);
  for (const ConvCase& c : cases)
    for (const auto& f : applies) EXPECT_TRUE(f(geometry_of(c.x, c.w, c.p))) << describe(c.p, c.x, c.w);
  set_num_threads(threads);
  on_one_and_three_threads(cases, seed, check_against_reference);
  // Every range of channels one block: rows of several ranges, the last one 16 wide.
  cpu::set_conv_direct_range_floats_for_testing(1);
  on_one_and_three_threads(cases, seed + 50, check_against_reference);
  cpu::set_conv_direct_range_floats_for_testing(0);
  const bool was = cpu::set_conv_direct_enabled_for_testing(false);
  for (const ConvCase& c : cases)
    for (const auto& f : applies) EXPECT_FALSE(f(geometry_of(c.x, c.w, c.p))) << describe(c.p, c.x, c.w);
  on_one_and_three_threads(cases, seed + 100, check_against_reference);
  cpu::set_conv_direct_enabled_for_testing(was);
}
}  // namespace

TEST(Conv2d, DirectKernelOfAvx512MachinesMatchesNestedLoops) {
  // NOTE [Conv2d direct]: f32 forward passes with column stride 1 or 2 and a multiple of 16
  // output channels per group (Winograd's and F(2, 7)'s shapes, pointwise and depthwise aside)
  // run with output channels in the vector lanes on AVX-512 CPUs, and so do
  // their weight gradients (NOTE [Conv2d direct weight gradient]: 5x5 in blocks of 8, 8 and 9
  // taps; 48 channels in one block, 64 in 48 + 16). Cases: one
  // block with edges on both sides; 31 columns in three blocks and 48 channels (a block of 32,
  // then one of 16); groups with row stride 1 and a 5x5 kernel; dilation with unequal padding;
  // 1x1 stride 2 padded (unpadded it is a pointwise convolution of the sampled pixels, NOTE
  // [Strided pointwise convolutions]); 1x7 and 7x1 (row stride 3); 100 input channels in chunks over 60 columns (5
  // blocks); padding past the kernel's reach (output rows and columns with no tap inside);
  // without bias. Then the same cases with the direct kernel off (the blocked kernels).
  if (!cpu::cpu_avx512_kernels()) GTEST_SKIP() << "no AVX-512 kernels here (the CPU has none, or TRIDENT_CPU_AVX512=off): the direct kernel never runs";
  const std::vector<ConvCase> cases = {
      {{2, 8, 13, 12}, {16, 8, 3, 3}, {{2, 2}, {1, 1}, {1, 1}, 1}, true},
      {{1, 5, 9, 61}, {48, 5, 3, 3}, {{2, 2}, {1, 1}, {1, 1}, 1}, true},
      {{2, 4, 11, 40}, {32, 2, 5, 5}, {{1, 2}, {2, 2}, {1, 1}, 2}, true},
      {{1, 6, 15, 33}, {16, 6, 3, 3}, {{2, 2}, {2, 3}, {2, 2}, 1}, true},
      {{2, 24, 10, 10}, {32, 24, 1, 1}, {{2, 2}, {1, 1}, {1, 1}, 1}, true},
      {{1, 8, 17, 30}, {16, 8, 1, 7}, {{2, 2}, {0, 3}, {1, 1}, 1}, true},
      {{1, 8, 30, 17}, {16, 8, 7, 1}, {{3, 2}, {3, 0}, {1, 1}, 1}, true},
      {{1, 100, 7, 120}, {16, 100, 3, 3}, {{2, 2}, {1, 1}, {1, 1}, 1}, true},
      {{1, 4, 5, 6}, {16, 4, 3, 3}, {{2, 2}, {3, 3}, {1, 1}, 1}, true},
      {{2, 16, 14, 28}, {64, 16, 3, 3}, {{2, 2}, {1, 1}, {1, 1}, 1}, false},
      // Column stride 1 outside Winograd and F(2, 7): 5x5; 3x3 dilated; 1x5; 3x3 on 4 input
      // channels (Winograd wants 8); 7x1 with row stride 2; 1x7 on 4 input channels.
      {{2, 8, 12, 13}, {16, 8, 5, 5}, {{1, 1}, {2, 2}, {1, 1}, 1}, true},
      {{1, 8, 14, 15}, {32, 8, 3, 3}, {{1, 1}, {2, 2}, {2, 2}, 1}, true},
      {{2, 6, 9, 20}, {16, 6, 1, 5}, {{1, 1}, {0, 2}, {1, 1}, 1}, true},
      {{2, 4, 16, 17}, {32, 4, 3, 3}, {{1, 1}, {1, 1}, {1, 1}, 1}, true},
      {{1, 8, 17, 12}, {16, 8, 7, 1}, {{2, 1}, {3, 0}, {1, 1}, 1}, false},
      {{2, 4, 9, 12}, {16, 4, 1, 7}, {{1, 1}, {0, 3}, {1, 1}, 1}, true},
      // More taps than the kernel lists at a time (NOTE [Direct kernel taps]: 64): 9x9 with
      // column stride 2 and 9x8 with stride 1, wide enough for blocks inside the row (81 and 72
      // taps in one call).
      {{1, 3, 21, 60}, {16, 3, 9, 9}, {{2, 2}, {4, 4}, {1, 1}, 1}, true},
      {{2, 2, 12, 40}, {16, 2, 9, 8}, {{1, 1}, {4, 3}, {1, 1}, 1}, true},
  };
  check_direct_on_and_off(cases, {cpu::direct_forward_applies, cpu::direct_backward_weight_applies}, 9100);
}

TEST(Conv2d, DirectInputGradientOfAvx512MachinesMatchesNestedLoops) {
  // NOTE [Conv2d direct input gradient]: with column stride 1 or 2 and a multiple of 16 input
  // channels per group (Winograd's and F(2, 7)'s shapes, pointwise and depthwise aside), f32
  // input gradients on AVX-512 CPUs run the direct kernel over gy, one stride phase of gx's
  // columns at a time. Cases: 3x3 (kernel columns {1} for one phase, {0, 2}
  // for the other); 48 channels (blocks of 32 and 16) on 61 columns (3 blocks per phase); 5x5
  // with groups and row stride 1; dilation 2 (every kernel column or none per phase) with
  // unequal padding; 1x1 padded (odd rows and columns get nothing); 1x7; 7x1 with row stride 3; 100
  // output channels in chunks; padding 3 (gy read past its edges); a 4x4 kernel; dilation 3
  // (kernel rows 2 apart). Then the same cases with the direct kernel off (im2col + GEMM; the
  // blocked kernels for some of column stride 1).
  if (!cpu::cpu_avx512_kernels()) GTEST_SKIP() << "no AVX-512 kernels here (the CPU has none, or TRIDENT_CPU_AVX512=off): the direct kernel never runs";
  const std::vector<ConvCase> cases = {
      {{2, 16, 13, 12}, {8, 16, 3, 3}, {{2, 2}, {1, 1}, {1, 1}, 1}, true},
      {{1, 48, 9, 61}, {20, 48, 3, 3}, {{2, 2}, {1, 1}, {1, 1}, 1}, true},
      {{2, 32, 11, 40}, {16, 16, 5, 5}, {{1, 2}, {2, 2}, {1, 1}, 2}, true},
      {{1, 16, 15, 33}, {8, 16, 3, 3}, {{2, 2}, {2, 3}, {2, 2}, 1}, true},
      {{2, 16, 10, 11}, {12, 16, 1, 1}, {{2, 2}, {1, 1}, {1, 1}, 1}, false},
      {{1, 16, 17, 30}, {16, 16, 1, 7}, {{2, 2}, {0, 3}, {1, 1}, 1}, true},
      {{1, 16, 30, 17}, {8, 16, 7, 1}, {{3, 2}, {3, 0}, {1, 1}, 1}, true},
      {{1, 32, 7, 60}, {100, 32, 3, 3}, {{2, 2}, {1, 1}, {1, 1}, 1}, true},
      {{1, 16, 5, 6}, {16, 16, 3, 3}, {{2, 2}, {3, 3}, {1, 1}, 1}, true},
      {{2, 16, 9, 9}, {16, 16, 4, 4}, {{2, 2}, {1, 1}, {1, 1}, 1}, true},
      {{1, 16, 8, 8}, {16, 16, 3, 3}, {{2, 2}, {1, 1}, {3, 3}, 1}, false},
      // Column stride 1 (one phase, every kernel column): 5x5; 3x3 dilated; 1x5; 7x1 with row
      // stride 2; 3x3 onto 4 output channels (Winograd wants 8); 3x3 with padding 3, past the
      // kernel's reach.
      {{2, 16, 12, 13}, {8, 16, 5, 5}, {{1, 1}, {2, 2}, {1, 1}, 1}, true},
      {{1, 32, 14, 15}, {8, 32, 3, 3}, {{1, 1}, {2, 2}, {2, 2}, 1}, true},
      {{2, 16, 9, 20}, {6, 16, 1, 5}, {{1, 1}, {0, 2}, {1, 1}, 1}, true},
      {{1, 16, 17, 12}, {8, 16, 7, 1}, {{2, 1}, {3, 0}, {1, 1}, 1}, false},
      {{1, 16, 9, 9}, {4, 16, 3, 3}, {{1, 1}, {1, 1}, {1, 1}, 1}, true},
      {{1, 16, 6, 7}, {8, 16, 3, 3}, {{1, 1}, {3, 3}, {1, 1}, 1}, true},
      // More taps than the kernel lists at a time (64): 9x9 with stride 1 (one phase, 81 taps).
      {{1, 16, 13, 18}, {4, 16, 9, 9}, {{1, 1}, {4, 4}, {1, 1}, 1}, true},
  };
  check_direct_on_and_off(cases, {cpu::direct_backward_input_applies}, 9300);
}

namespace {
// A case that takes the Winograd paths in f32 (forward, input and weight gradients), checked
// by check_against_reference within the Winograd bounds (winograd_magnitude,
// winograd_weight_magnitude).
void check_winograd_f32(const ConvCase& c, uint64_t seed) {
  const cpu::Conv2dGeometry geo = geometry_of(c.x, c.w, c.p);
  ASSERT_TRUE(cpu::winograd_forward_applies(geo)) << describe(c.p, c.x, c.w);
  ASSERT_TRUE(cpu::winograd_backward_input_applies(geo)) << describe(c.p, c.x, c.w);
  check_against_reference(c, seed);
}

}  // namespace

TEST(Conv2d, WinogradF32MatchesNestedLoopsWithinItsBound) {
  // NOTE [Conv2d Winograd]: every f32 3x3 stride-1 convolution with >= 8 channels per group and
  // an output of at least about 3x3 runs forward, input gradient and weight gradient as
  // F(4x4, 3x3). The cases
  // cover odd sizes (tiles sticking out at the bottom and right), every padding 0..2 and
  // unequal ones (the input gradient's padding is 2 - p), odd channel counts, output channels
  // not a multiple of the 4-row micro-kernel or of the 16-channel output chunks, groups, batch
  // 1, tiles numbered across images, and each of the 8/16/24-tile block widths; with 1 and 3
  // threads (3 splits the output channels of the few blocks of the small cases).
  const std::vector<ConvCase> cases = {
      {{2, 16, 13, 11}, {20, 16, 3, 3}, {{1, 1}, {1, 1}, {1, 1}, 1}, true},
      {{1, 9, 8, 8}, {12, 9, 3, 3}, {{1, 1}, {0, 0}, {1, 1}, 1}, false},
      {{3, 8, 10, 17}, {8, 8, 3, 3}, {{1, 1}, {2, 1}, {1, 1}, 1}, true},
      {{2, 16, 9, 9}, {18, 8, 3, 3}, {{1, 1}, {1, 1}, {1, 1}, 2}, true},
      {{4, 24, 20, 20}, {32, 24, 3, 3}, {{1, 1}, {1, 1}, {1, 1}, 1}, true},
      {{1, 40, 7, 7}, {36, 40, 3, 3}, {{1, 1}, {1, 1}, {1, 1}, 1}, true},
      {{2, 8, 6, 6}, {9, 8, 3, 3}, {{1, 1}, {2, 2}, {1, 1}, 1}, false},
      {{2, 12, 9, 9}, {16, 12, 3, 3}, {{1, 1}, {0, 1}, {1, 1}, 1}, true},
      {{5, 8, 4, 4}, {8, 8, 3, 3}, {{1, 1}, {1, 1}, {1, 1}, 1}, true},  // 5 images of one tile each
  };
  on_one_and_three_threads(cases, 6000, check_winograd_f32);
}

TEST(Conv2d, WinogradF27MatchesNestedLoopsWithinItsBound) {
  // NOTE [Conv2d Winograd F(2,7)]: f32 7x1 and 1x7 kernels, stride 1, dilation 1, >= 8 input
  // and output channels per group, forward, input gradient and weight gradient. The cases cover
  // "same" and no padding, unequal padding (the input gradient's is 6 - p), an odd output length (the last
  // pair's second row dropped), the shortest output (2), padding across the kernel (a 7x1 with
  // column padding), groups, output channels not a multiple of 4 (also in a 1x7 with an odd
  // transposed output length), more than 256 input channels (two channel slices), many blocks
  // per image, batch 1; with 1 and 3 threads (3 splits the output channels of the small cases);
  // with the AVX-512 kernels off and on.
  const std::vector<ConvCase> cases = {
      {{2, 16, 13, 11}, {20, 16, 7, 1}, {{1, 1}, {3, 0}, {1, 1}, 1}, true},
      {{2, 16, 11, 13}, {20, 16, 1, 7}, {{1, 1}, {0, 3}, {1, 1}, 1}, true},
      {{1, 9, 12, 9}, {12, 9, 7, 1}, {{1, 1}, {0, 0}, {1, 1}, 1}, false},
      {{3, 8, 10, 17}, {8, 8, 1, 7}, {{1, 1}, {0, 2}, {1, 1}, 1}, false},
      {{2, 16, 9, 9}, {18, 8, 7, 1}, {{1, 1}, {3, 0}, {1, 1}, 2}, true},
      {{1, 300, 8, 4}, {8, 300, 7, 1}, {{1, 1}, {3, 0}, {1, 1}, 1}, true},
      {{2, 8, 10, 6}, {8, 8, 7, 1}, {{1, 1}, {3, 1}, {1, 1}, 1}, true},
      {{1, 8, 8, 5}, {9, 8, 7, 1}, {{1, 1}, {0, 0}, {1, 1}, 1}, true},
      {{2, 8, 28, 28}, {8, 8, 1, 7}, {{1, 1}, {0, 3}, {1, 1}, 1}, true},
      {{2, 8, 9, 11}, {13, 8, 1, 7}, {{1, 1}, {0, 3}, {1, 1}, 1}, true},
      {{1, 8, 5, 12}, {8, 8, 1, 7}, {{1, 1}, {0, 3}, {1, 1}, 1}, true},  // planes under 8 wide:
      {{1, 8, 12, 6}, {8, 8, 1, 7}, {{1, 1}, {0, 3}, {1, 1}, 1}, false},  // the scalar transposes
  };
  // The forward's transforms run on 16 lanes where the AVX-512 kernels do, on 8 elsewhere.
  with_and_without_avx512([&](bool avx512) {
    on_one_and_three_threads(cases, avx512 ? 6700 : 6500, [](const ConvCase& c, uint64_t seed) {
      ASSERT_TRUE(cpu::winograd7_forward_applies(geometry_of(c.x, c.w, c.p)));
      check_against_reference(c, seed);
    });
  });
  // The direct blocked kernel that F(2,7) replaces for these shapes still runs them right.
  const bool was = cpu::set_conv_winograd7_enabled_for_testing(false);
  for (size_t k : {0, 1, 5}) {
    const ConvCase& c = cases[k];
    SCOPED_TRACE(detail::str(describe(c.p, c.x, c.w), ", F(2,7) off"));
    EXPECT_FALSE(cpu::winograd7_forward_applies(geometry_of(c.x, c.w, c.p)));
    check_against_reference(c, 6600 + k);
  }
  cpu::set_conv_winograd7_enabled_for_testing(was);
}

TEST(Conv2d, DepthwiseF32RegisterBlocksMatchNestedLoops) {
  // NOTE [Depthwise register blocks]: f32 depthwise forward runs in blocks of 4 rows x 16
  // columns (up to 5 kernel rows per stride phase) or 8 rows x 8 columns (6 or 7) with 8
  // lanes, and of 7 or 8 rows x 16 or 32 columns with 16 (NOTE [Depthwise AVX-512], checked
  // here both ways where the CPU has AVX-512), the last column block moved left to end at the
  // edge when the row is at least a block wide, a narrower row's last vector stored in part,
  // rows past the output computed and dropped; dilated kernels and more than 7 rows per phase
  // take the flat kernel. Widths below, at and above a block, heights not a multiple of the
  // rows, heights of 7 and 14 rows (7-row blocks), strides 1 and 2 (phases with different row
  // counts), every kernel height 1..7, 9, channel multipliers, batch 1, with and without bias.
  // The weight gradient sums up to 16 taps a pass over a plane (NOTE [Depthwise weight-gradient
  // blocks]): 7x7 and 9x9 take several passes, one tap alone the last. check_against_reference
  // checks f32 against the dot-product bound and f64 (the old per-kernel-row passes) and all
  // gradients.
  const std::vector<ConvCase> cases = {
      {{2, 3, 28, 28}, {3, 1, 5, 5}, {{1, 1}, {2, 2}, {1, 1}, 3}, false},   // 28 = 16 + 12: the shifted block
      {{1, 2, 13, 21}, {2, 1, 3, 3}, {{1, 1}, {1, 1}, {1, 1}, 2}, true},    // 21 columns, 13 rows
      {{2, 2, 30, 17}, {2, 1, 7, 7}, {{1, 1}, {3, 3}, {1, 1}, 2}, true},    // 8 x 8 blocks, 30 rows
      {{1, 2, 9, 7}, {2, 1, 7, 7}, {{1, 1}, {3, 3}, {1, 1}, 2}, true},      // narrower than a block
      {{2, 2, 27, 40}, {4, 1, 5, 5}, {{2, 2}, {2, 2}, {1, 1}, 2}, true},    // stride 2: 3- and 2-row phases, multiplier 2
      {{1, 3, 29, 33}, {3, 1, 3, 3}, {{2, 2}, {1, 1}, {1, 1}, 3}, false},   // stride 2, odd sizes
      {{2, 2, 20, 19}, {2, 1, 6, 6}, {{1, 1}, {2, 3}, {1, 1}, 2}, true},    // 6 rows, unequal padding
      {{1, 2, 18, 18}, {2, 1, 4, 2}, {{1, 1}, {1, 0}, {1, 1}, 2}, true},
      {{2, 4, 17, 23}, {4, 1, 1, 7}, {{1, 1}, {0, 3}, {1, 1}, 4}, true},    // 1x7
      {{2, 4, 23, 17}, {4, 1, 7, 1}, {{1, 1}, {3, 0}, {1, 1}, 4}, true},    // 7x1
      {{1, 2, 30, 30}, {2, 1, 9, 9}, {{1, 1}, {4, 4}, {1, 1}, 2}, true},    // 9 rows: the flat kernel
      {{1, 2, 30, 30}, {2, 1, 3, 3}, {{1, 1}, {2, 2}, {2, 2}, 2}, true},    // dilated: the flat kernel
      {{1, 2, 40, 40}, {2, 1, 9, 9}, {{2, 2}, {4, 4}, {1, 1}, 2}, false},   // 9 taps, stride 2: 5-row phases
      // Column stride 2 splits each input row into its even and odd columns in one pass
      // (8 lanes: deinterleave2, 16 columns at a time, then 8, then one by one; 16 lanes:
      // deinterleave2_vec, 32 at a time, then masked moves of the last 1 to 31): one column
      // (no odd ones), fewer than 8, 8 + 2, 8 + 5, 16 + 1, 16 + 8, 32 (no tail), 32 + 16,
      // 32 + 24 (AmoebaNet's 56 columns), 32 + 31, 64 + 3, even and odd left padding, row
      // stride 1; stride 3 the general copy.
      {{1, 2, 9, 1}, {2, 1, 3, 3}, {{2, 2}, {1, 1}, {1, 1}, 2}, true},
      {{2, 2, 11, 5}, {2, 1, 3, 3}, {{2, 2}, {0, 0}, {1, 1}, 2}, true},
      {{1, 2, 7, 10}, {2, 1, 3, 3}, {{2, 2}, {1, 1}, {1, 1}, 2}, true},
      {{1, 2, 9, 13}, {2, 1, 5, 5}, {{2, 2}, {2, 2}, {1, 1}, 2}, false},
      {{2, 2, 8, 24}, {2, 1, 3, 3}, {{2, 2}, {0, 0}, {1, 1}, 2}, true},
      {{1, 2, 12, 17}, {2, 1, 5, 5}, {{2, 2}, {1, 1}, {1, 1}, 2}, true},
      {{1, 2, 10, 32}, {2, 1, 3, 3}, {{1, 2}, {1, 0}, {1, 1}, 2}, false},
      {{1, 2, 6, 32}, {2, 1, 3, 3}, {{2, 2}, {1, 1}, {1, 1}, 2}, true},
      {{1, 2, 7, 48}, {2, 1, 5, 5}, {{2, 2}, {2, 2}, {1, 1}, 2}, true},
      {{2, 2, 12, 56}, {2, 1, 5, 5}, {{2, 2}, {2, 2}, {1, 1}, 2}, false},
      {{1, 2, 9, 63}, {2, 1, 3, 3}, {{2, 2}, {1, 1}, {1, 1}, 2}, true},
      {{1, 2, 5, 67}, {2, 1, 3, 3}, {{2, 2}, {0, 0}, {1, 1}, 2}, false},
      {{1, 2, 16, 10}, {2, 1, 3, 3}, {{2, 1}, {1, 1}, {1, 1}, 2}, true},
      {{1, 2, 14, 14}, {2, 1, 3, 3}, {{3, 3}, {1, 1}, {1, 1}, 2}, true},
      // AmoebaNet's planes: 14 x 14 (one 16-lane vector, stored in part; two 7-row blocks),
      // 28 x 28 (four 7-row blocks of 16 + 12 columns), 56 x 56 (8-row blocks, the last column
      // block moved left), a 7 x 7 plane, and 33 columns (a third 16-lane vector: moved left).
      {{1, 3, 14, 14}, {3, 1, 7, 7}, {{1, 1}, {3, 3}, {1, 1}, 3}, true},
      {{1, 2, 28, 28}, {2, 1, 3, 3}, {{1, 1}, {1, 1}, {1, 1}, 2}, true},
      {{1, 2, 56, 56}, {2, 1, 5, 5}, {{1, 1}, {2, 2}, {1, 1}, 2}, false},
      {{2, 2, 7, 7}, {2, 1, 5, 5}, {{1, 1}, {2, 2}, {1, 1}, 2}, true},
      {{1, 2, 21, 33}, {2, 1, 3, 3}, {{1, 1}, {1, 1}, {1, 1}, 2}, true},
      {{1, 2, 28, 28}, {4, 1, 7, 7}, {{2, 2}, {3, 3}, {1, 1}, 2}, true},  // stride 2: 14 x 14 out, 4- and 3-row phases
  };
  with_and_without_avx512([&](bool) {
    uint64_t seed = 7000;
    for (const ConvCase& c : cases) {
      SCOPED_TRACE(describe(c.p, c.x, c.w));
      check_against_reference(c, seed++);
    }
  });
}

TEST(Conv2d, ChunksOfImagesMatchNestedLoops) {
  // The Winograd and blocked im2col kernels copy the padded input of at most 32 MiB worth of
  // images at a time; with the budget at one byte every image is its own chunk (and the
  // Winograd and blocked weight gradients accumulate across chunks), on 1 and 3 threads.
  const std::vector<ConvCase> cases = {
      {{3, 8, 10, 9}, {12, 8, 3, 3}, {{1, 1}, {1, 1}, {1, 1}, 1}, true},   // Winograd, all three passes
      {{2, 8, 98, 100}, {8, 8, 3, 3}, {{1, 1}, {1, 1}, {1, 1}, 1}, false},  // 625 tiles: two weight-gradient slices per image
      {{3, 6, 11, 10}, {8, 3, 3, 3}, {{2, 2}, {1, 1}, {1, 1}, 2}, true},   // blocked forward, strided
      {{3, 4, 9, 12}, {6, 4, 1, 7}, {{1, 1}, {0, 3}, {1, 1}, 1}, true},    // blocked forward and input gradient
      {{3, 8, 9, 12}, {8, 8, 1, 7}, {{1, 1}, {0, 3}, {1, 1}, 1}, true},    // F(2,7), all three passes (transposed)
      {{3, 8, 11, 6}, {9, 8, 7, 1}, {{1, 1}, {3, 0}, {1, 1}, 1}, false},   // F(2,7), all three passes
  };
  cpu::set_conv_copy_budget_bytes_for_testing(1);
  on_one_and_three_threads(cases, 7500, check_against_reference);
  cpu::set_conv_copy_budget_bytes_for_testing(0);
}

TEST(Conv2d, StridedPointwiseMatchesNestedLoops) {
  // NOTE [Strided pointwise convolutions]: 1x1 convolutions with a stride and no padding run as
  // the pointwise convolution of the sampled pixels (gradient scattered among zeros): strides
  // 2, 3 x 2, 1 x 2 and 2 x 1 (odd sizes: the last row or column sampled or not), groups, a
  // dilation (which a 1x1 kernel ignores), through check_against_reference (f64 and f32, 1 and
  // 3 threads); then an input that is a transposed view, in f32, bf16 and f16, against the
  // same values made contiguous.
  const std::vector<ConvCase> cases = {
      {{2, 8, 11, 12}, {16, 8, 1, 1}, {{2, 2}, {0, 0}, {1, 1}, 1}, true},
      {{2, 6, 13, 10}, {5, 6, 1, 1}, {{3, 2}, {0, 0}, {1, 1}, 1}, false},
      {{1, 4, 7, 9}, {6, 4, 1, 1}, {{1, 2}, {0, 0}, {1, 1}, 1}, true},
      {{2, 8, 9, 6}, {12, 4, 1, 1}, {{2, 1}, {0, 0}, {2, 3}, 2}, true},
  };
  for (const ConvCase& c : cases) EXPECT_TRUE(geometry_of(c.x, c.w, c.p).sampled_pointwise());
  on_one_and_three_threads(cases, 8650, check_against_reference);
  Generator gen(8690);
  for (DType dt : {kF32, kBF16, kF16}) {
    SCOPED_TRACE(dtype_name(dt));
    Tensor base = randn({2, 8, 11, 12}, kF32, &gen).to(dt).set_requires_grad();
    const Tensor w = randn({16, 8, 1, 1}, kF32, &gen).to(dt), gy = randn({2, 16, 6, 4}, kF32, &gen).to(dt);
    const Tensor a = transpose(base, 2, 3);  // [2, 8, 12, 11], not contiguous
    ASSERT_FALSE(a.is_contiguous());
    Tensor b = a.contiguous().detach().set_requires_grad();
    Tensor wa = w.clone().set_requires_grad(), wb = w.clone().set_requires_grad();
    Tensor ya = conv2d(a, wa, Tensor(), {2, 3}), yb = conv2d(b, wb, Tensor(), {2, 3});
    ya.backward(gy);
    yb.backward(gy);
    EXPECT_EQ(ya.to_vector<float>(), yb.to_vector<float>());
    EXPECT_EQ(transpose(base.grad(), 2, 3).to_vector<float>(), b.grad().to_vector<float>());
    EXPECT_EQ(wa.grad().to_vector<float>(), wb.grad().to_vector<float>());
  }
}

TEST(Conv2d, NarrowWeightGradientMatchesNestedLoops) {
  // NOTE [Narrow weight gradients]: the kernel forced on for every stride-1 convolution of one
  // group (and off again), through check_against_reference on 1 and 3 threads (f64 reference,
  // f32 within the plain bound of N OH OW terms), both vector widths, with the items' partial
  // sums one item at a time; then bit for bit the same on 1 and 3 threads.
  const std::vector<ConvCase> cases = {
      {{3, 5, 9, 30}, {7, 5, 1, 7}, {{1, 1}, {0, 3}, {1, 1}, 1}, false},   // 1x7: 7 outputs, 35 pairs (blocks' tails)
      {{2, 8, 30, 7}, {8, 8, 7, 1}, {{1, 1}, {3, 0}, {1, 1}, 1}, true},    // 7x1
      {{2, 3, 70, 61}, {4, 3, 3, 3}, {{1, 1}, {1, 1}, {1, 1}, 1}, true},   // three bands of rows per image
      {{2, 4, 40, 60}, {6, 4, 3, 5}, {{1, 1}, {2, 4}, {2, 2}, 1}, false},  // dilated, padded, two bands
      {{2, 6, 11, 13}, {5, 6, 3, 2}, {{1, 1}, {4, 3}, {1, 1}, 1}, false},  // padding past the kernel's reach
      {{1, 9, 5, 6}, {3, 9, 1, 1}, {}, true},                              // pointwise
      {{2, 2, 6, 5}, {2, 2, 5, 4}, {}, false},                             // the kernel as tall as the input
  };
  const int mode = cpu::set_narrow_backward_weight_for_testing(1);
  for (const ConvCase& c : cases) EXPECT_TRUE(cpu::narrow_backward_weight_applies(geometry_of(c.x, c.w, c.p), false));
  on_one_and_three_threads(cases, 8700, check_against_reference);
  const bool avx512 = cpu::set_cpu_avx512_kernels_enabled_for_testing(false);
  on_one_and_three_threads(cases, 8750, check_against_reference);
  cpu::set_cpu_avx512_kernels_enabled_for_testing(avx512);
  cpu::set_conv_copy_budget_bytes_for_testing(1);
  on_one_and_three_threads(cases, 8800, check_against_reference);
  cpu::set_conv_copy_budget_bytes_for_testing(0);
  const int threads = get_num_threads();
  uint64_t seed = 8850;
  for (const ConvCase& c : cases) {
    SCOPED_TRACE(describe(c.p, c.x, c.w));
    Generator gen(seed++);
    const Tensor x = randn(c.x, kF32, &gen), w = randn(c.w, kF32, &gen);
    const cpu::Conv2dGeometry geo = geometry_of(c.x, c.w, c.p);
    const Tensor gy = randn({geo.N, geo.O, geo.OH, geo.OW}, kF32, &gen);
    set_num_threads(1);
    const std::vector<float> one = cpu::conv2d_backward_weight(gy, x, geo).to_vector<float>();
    set_num_threads(3);
    EXPECT_EQ(cpu::conv2d_backward_weight(gy, x, geo).to_vector<float>(), one);
  }
  set_num_threads(threads);
  cpu::set_narrow_backward_weight_for_testing(0);
  for (const ConvCase& c : cases) EXPECT_FALSE(cpu::narrow_backward_weight_applies(geometry_of(c.x, c.w, c.p), false));
  on_one_and_three_threads(cases, 8900, check_against_reference);
  cpu::set_narrow_backward_weight_for_testing(mode);
  // The rule: f32 with taps and few channels, not pointwise or wide; bf16 (on a bf16 GEMM kernel)
  // with fewer channels still, pointwise too.
  EXPECT_TRUE(cpu::narrow_backward_weight_applies(geometry_of({32, 8, 30, 30}, {8, 8, 1, 7}, {{1, 1}, {0, 3}, {1, 1}, 1}), false));
  EXPECT_FALSE(cpu::narrow_backward_weight_applies(geometry_of({32, 32, 8, 8}, {32, 32, 1, 7}, {{1, 1}, {0, 3}, {1, 1}, 1}), false));
  EXPECT_FALSE(cpu::narrow_backward_weight_applies(geometry_of({32, 8, 30, 30}, {8, 8, 1, 1}, {}), false));
  EXPECT_TRUE(cpu::narrow_backward_weight_applies(geometry_of({32, 8, 30, 30}, {8, 8, 1, 1}, {}), true));
  EXPECT_FALSE(cpu::narrow_backward_weight_applies(geometry_of({32, 16, 15, 15}, {16, 16, 1, 7}, {{1, 1}, {0, 3}, {1, 1}, 1}), true));
  EXPECT_FALSE(cpu::narrow_backward_weight_applies(geometry_of({32, 8, 30, 30}, {8, 8, 3, 3}, {{2, 2}, {1, 1}, {1, 1}, 1}), false));
}

TEST(Conv2d, KnownValues) {
  // 1 x 1 x 3 x 3 input 1..9, 2x2 all-ones kernel: each output sums a 2x2 block.
  Tensor x = reshape(arange(1, 10, 1, kF32), {1, 1, 3, 3});
  Tensor w = ones({1, 1, 2, 2});
  EXPECT_EQ(conv2d(x, w).to_vector<float>(), (std::vector<float>{12, 16, 24, 28}));
  EXPECT_EQ(conv2d(x, w, from_vector<float>({0.5f}, {1})).to_vector<float>(), (std::vector<float>{12.5, 16.5, 24.5, 28.5}));
  // Padding 1, stride 2: windows at (-1,-1), (-1,1), (1,-1), (1,1).
  EXPECT_EQ(conv2d(x, w, Tensor(), {2, 2}, {1, 1}).to_vector<float>(), (std::vector<float>{1, 5, 11, 28}));
  // Dilation 2 on a 3x3 input with a 2x2 kernel: the four corners.
  EXPECT_EQ(conv2d(x, w, Tensor(), {1, 1}, {0, 0}, {2, 2}).to_vector<float>(), (std::vector<float>{20}));
}

// NOTE [bf16 depthwise convolutions]: bf16 depthwise passes run the f32 kernels a plane at a
// time; every output and gradient is bit for bit what converting to f32 first gives (the same
// f32 arithmetic, rounded once), for the register kernels (strides 1, 2 and 3, kernels up to
// 7x7, rows narrower than a vector and with tails, a channel multiplier), the dilated and
// larger kernels' flat path, with and without bias, and both kernel widths.
TEST(Conv2d, Bf16DepthwiseIsTheF32DepthwiseRoundedOnce) {
  struct Case {
    Shape x;
    int64_t mult, k;
    Int2 stride, padding, dilation;
    bool bias;
  };
  const std::vector<Case> cases = {
      {{2, 5, 30, 30}, 1, 3, {1, 1}, {1, 1}, {1, 1}, false},  // AmoebaNet-B's separable 3x3
      {{2, 4, 15, 15}, 1, 5, {1, 1}, {2, 2}, {1, 1}, true},   // 5x5, rows of 15
      {{3, 3, 17, 35}, 2, 3, {2, 2}, {1, 1}, {1, 1}, true},   // stride 2, a multiplier, tails
      {{2, 4, 13, 11}, 1, 7, {3, 2}, {3, 3}, {1, 1}, false},  // 7x7, strides 3 x 2
      {{2, 3, 9, 10}, 1, 5, {1, 1}, {4, 4}, {2, 2}, true},    // dilated: the flat path
      {{1, 2, 12, 12}, 1, 9, {1, 1}, {4, 4}, {1, 1}, false},  // 9 taps a row: the flat path
  };
  Generator gen(77);
  for (const bool avx512 : {true, false}) {
    const bool was = cpu::set_cpu_avx512_kernels_enabled_for_testing(avx512);
    for (const Case& c : cases) {
      SCOPED_TRACE(::testing::Message() << "x " << shape_str(c.x) << " k " << c.k << " stride " << c.stride[0] << "x"
                                        << c.stride[1] << (avx512 ? "" : ", AVX-512 off"));
      const int64_t C = c.x[1], O = C * c.mult;
      const Tensor x = mul(randn(c.x, kF32, &gen), 2.0).to(kBF16), w = randn({O, 1, c.k, c.k}, kF32, &gen).to(kBF16);
      const Tensor b = c.bias ? randn({O}, kF32, &gen).to(kBF16) : Tensor();
      std::vector<std::vector<float>> got, want;
      for (int route = 0; route < 2; ++route) {  // 0: bf16 as it is; 1: converted to f32 first
        Tensor xl = (route == 0 ? x : x.to(kF32)).detach().set_requires_grad();
        Tensor wl = (route == 0 ? w : w.to(kF32)).detach().set_requires_grad();
        Tensor bl = c.bias ? (route == 0 ? b : b.to(kF32)).detach().set_requires_grad() : Tensor();
        const Tensor y = conv2d(xl, wl, bl, c.stride, c.padding, c.dilation, C);
        EXPECT_EQ(y.dtype(), route == 0 ? kBF16 : kF32);
        Generator gg(5);
        const Tensor gy = randn(y.sizes(), kF32, &gg).to(kBF16);
        y.backward(route == 0 ? gy : gy.to(kF32));
        auto& out = route == 0 ? got : want;
        for (const Tensor& t : {y, xl.grad(), wl.grad()}) out.push_back(t.to(kBF16).to(kF32).to_vector<float>());
        if (c.bias) out.push_back(bl.grad().to(kBF16).to(kF32).to_vector<float>());
      }
      for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], want[i]) << "result " << i;
    }
    cpu::set_cpu_avx512_kernels_enabled_for_testing(was);
  }
  // A larger batch (19 MB of f32 planes): the same bits, and no f32 copy of the input or output
  // (9.6 MB each) or of any part of them on the way; what a pass holds beyond its result is a few
  // f32 planes per thread (12.5 KB each here) and the weights.
  const Tensor x = randn({24, 32, 56, 56}, kF32, &gen).to(kBF16), w = randn({32, 1, 3, 3}, kF32, &gen).to(kBF16);
  const Tensor gy = randn({24, 32, 56, 56}, kF32, &gen).to(kBF16);
  Tensor xl = x.detach().set_requires_grad(), wl = w.detach().set_requires_grad();
  reset_peak_memory_stats(Device::cpu());
  const int64_t before = memory_stats(Device::cpu()).current_bytes;
  const Tensor y = conv2d(xl, wl, Tensor(), {1, 1}, {1, 1}, {1, 1}, 32);
  const int64_t bound = static_cast<int64_t>(y.nbytes()) + (int64_t{1} << 20);
  EXPECT_LT(memory_stats(Device::cpu()).peak_bytes - before, bound) << "forward";
  reset_peak_memory_stats(Device::cpu());
  const int64_t before_backward = memory_stats(Device::cpu()).current_bytes;
  y.backward(gy);
  EXPECT_LT(memory_stats(Device::cpu()).peak_bytes - before_backward, bound) << "backward";
  Tensor xf = x.to(kF32).set_requires_grad(), wf = w.to(kF32).set_requires_grad();
  const Tensor yf = conv2d(xf, wf, Tensor(), {1, 1}, {1, 1}, {1, 1}, 32);
  yf.backward(gy.to(kF32));
  EXPECT_EQ(y.to(kF32).to_vector<float>(), yf.to(kBF16).to(kF32).to_vector<float>());
  EXPECT_EQ(xl.grad().to(kF32).to_vector<float>(), xf.grad().to(kBF16).to(kF32).to_vector<float>());
  EXPECT_EQ(wl.grad().to(kF32).to_vector<float>(), wf.grad().to(kBF16).to(kF32).to_vector<float>());
}

TEST(Conv2d, UnbatchedNonContiguousHalfAndEmptyInputs) {
  Generator gen(4000);
  const Tensor x = randn({2, 4, 6, 5}, kF64, &gen), w = randn({6, 2, 3, 3}, kF64, &gen), b = randn({6}, kF64, &gen);
  const Tensor ref = conv2d(x, w, b, {1, 2}, {1, 1}, {1, 1}, 2);
  // [C, H, W] gives the [O, OH, OW] result of the batch of one.
  const Tensor x1 = randn({1, 4, 6, 5}, kF64, &gen);
  const Tensor one = conv2d(reshape(x1, {4, 6, 5}), w, b, {1, 2}, {1, 1}, {1, 1}, 2);
  ASSERT_EQ(one.sizes(), (Shape{6, 6, 3}));
  EXPECT_TRUE(all_close(one, reshape(conv2d(x1, w, b, {1, 2}, {1, 1}, {1, 1}, 2), {6, 6, 3}), 0, 0));
  // A channels-last view of the same values (non-contiguous) gives the same result.
  const Tensor xt = permute(contiguous(permute(x, {0, 2, 3, 1})), {0, 3, 1, 2});
  ASSERT_FALSE(xt.is_contiguous());
  EXPECT_TRUE(all_close(conv2d(xt, w, b, {1, 2}, {1, 1}, {1, 1}, 2), ref, 0, 0));
  // f16/bf16 compute in f32 and round once: exactly the f32 result of the rounded inputs (bf16
  // on the bf16 GEMM kernels sums in another order: Conv2d.Bf16OnTheBf16GemmKernels).
  const cpu::Bf16Gemm kernel_before = cpu::set_bf16_gemm_kernel_for_testing(cpu::Bf16Gemm::None);
  for (DType dt : {kBF16, kF16}) {
    const Tensor xh = x.to(dt), wh = w.to(dt), bh = b.to(dt);
    const Tensor out = conv2d(xh, wh, bh, {1, 2}, {1, 1}, {1, 1}, 2);
    EXPECT_EQ(out.dtype(), dt);
    const Tensor expect = conv2d(xh.to(kF32), wh.to(kF32), bh.to(kF32), {1, 2}, {1, 1}, {1, 1}, 2).to(dt);
    EXPECT_EQ(out.to_vector<float>(), expect.to_vector<float>());
    const Tensor dw = conv2d(xh, wh.to(kF32).to(dt), Tensor(), {1, 1}, {1, 1}, {1, 1}, 2);  // runs in f32 too
    EXPECT_EQ(dw.dtype(), dt);
  }
  cpu::set_bf16_gemm_kernel_for_testing(kernel_before);
  // An empty batch gives an empty result; its backward gives zero weight and bias gradients.
  Tensor e = zeros({0, 4, 6, 5}, kF64).set_requires_grad();
  Tensor wl = w.clone().set_requires_grad(), bl = b.clone().set_requires_grad();
  Tensor out = conv2d(e, wl, bl, {1, 1}, {1, 1}, {1, 1}, 2);
  EXPECT_EQ(out.sizes(), (Shape{0, 6, 6, 5}));
  sum(out).backward();
  EXPECT_EQ(wl.grad().to_vector<double>(), std::vector<double>(static_cast<size_t>(w.numel()), 0.0));
  EXPECT_EQ(bl.grad().to_vector<double>(), std::vector<double>(6, 0.0));
}

TEST(Conv2d, BackwardThroughABroadcastGradient) {
  // sum()'s backward hands conv2d an expanded (stride 0) gradient: every gradient entry is
  // then the plain sum of the terms that reach it.
  Generator gen(4100);
  const Tensor x0 = randn({2, 3, 5, 5}, kF64, &gen), w0 = randn({4, 3, 3, 3}, kF64, &gen);
  Tensor x = x0.clone().set_requires_grad(), w = w0.clone().set_requires_grad(), b = zeros({4}, kF64).set_requires_grad();
  sum(conv2d(x, w, b, {1, 1}, {1, 1})).backward();
  const ConvReference ref = reference_conv2d(x0, w0, Tensor(), {{1, 1}, {1, 1}, {1, 1}, 1});
  EXPECT_TRUE(all_close(x.grad(), ref.gx, 1e-12, 1e-12));
  EXPECT_TRUE(all_close(w.grad(), ref.gw, 1e-12, 1e-12));
  EXPECT_EQ(b.grad().to_vector<double>(), std::vector<double>(4, 2.0 * 5 * 5));
}

TEST(Conv2dGradcheck, RepresentativeCombinations) {
  struct Case {
    Shape x, w;
    ConvParams p;
  };
  const std::vector<Case> cases = {
      {{2, 4, 5, 5}, {3, 4, 3, 3}, {}},
      {{2, 4, 6, 5}, {4, 2, 3, 3}, {{2, 2}, {1, 1}, {1, 1}, 2}},
      {{1, 4, 6, 6}, {4, 2, 3, 3}, {{1, 2}, {2, 1}, {2, 2}, 2}},
      {{2, 3, 6, 5}, {3, 1, 3, 3}, {{1, 1}, {1, 1}, {1, 1}, 3}},   // depthwise
      {{1, 3, 7, 6}, {6, 1, 3, 3}, {{2, 2}, {2, 2}, {2, 2}, 3}},   // depthwise, multiplier 2, dilated
      {{2, 3, 7, 7}, {3, 1, 5, 5}, {{2, 2}, {2, 2}, {1, 1}, 3}},   // depthwise 5x5
      {{2, 4, 4, 3}, {5, 4, 1, 1}, {}},                            // pointwise
      {{1, 2, 7, 7}, {3, 2, 1, 7}, {{1, 1}, {0, 3}, {1, 1}, 1}},   // 1x7
      {{1, 2, 7, 7}, {3, 2, 7, 1}, {{2, 1}, {3, 0}, {1, 1}, 1}},   // 7x1
      {{2, 4, 7, 7}, {4, 4, 3, 3}, {{1, 1}, {0, 0}, {2, 2}, 1}},   // dilated, unpadded
  };
  uint64_t seed = 5000;
  for (const Case& c : cases) {
    Tensor x = rand_leaf(c.x, seed++), w = rand_leaf(c.w, seed++), b = rand_leaf({c.w[0]}, seed++);
    const ConvParams p = c.p;
    EXPECT_TRUE(grad_ok(gradcheck(
        [&](const TensorList& in) { return conv2d(in[0], in[1], in[2], p.stride, p.padding, p.dilation, p.groups); }, {x, w, b})))
        << describe(p, c.x, c.w);
  }
  // Non-contiguous input and weight; no bias; only some inputs requiring grad.
  Tensor xt = rand_leaf_transposed({2, 3, 5, 4}, 5100), wt = rand_leaf_transposed({2, 3, 3, 3}, 5101);
  EXPECT_TRUE(grad_ok(gradcheck([](const TensorList& in) { return conv2d(in[0], in[1], Tensor(), {1, 1}, {1, 1}); }, {xt, wt})));
  Tensor x = rand_leaf({1, 2, 4, 4}, 5102);
  Tensor w = rand_leaf({2, 2, 3, 3}, 5103).detach();
  EXPECT_TRUE(grad_ok(gradcheck([&](const TensorList& in) { return conv2d(in[0], w); }, {x})));
  Tensor xu = rand_leaf({3, 5, 5}, 5104), wu = rand_leaf({2, 3, 3, 3}, 5105);  // unbatched
  EXPECT_TRUE(grad_ok(gradcheck([](const TensorList& in) { return conv2d(in[0], in[1], Tensor(), {2, 2}, {1, 1}); }, {xu, wu})));
}


TEST(Conv2d, ErrorsNameTheShapesAndTheParameter) {
  const Tensor x = zeros({2, 6, 5, 5}), w = zeros({4, 3, 3, 3});
  // Input channels != weight.size(1) * groups.
  expect_error([&] { conv2d(x, zeros({4, 2, 3, 3}), Tensor(), {1, 1}, {0, 0}, {1, 1}, 2); },
               {"[2, 6, 5, 5]", "[4, 2, 3, 3]", "groups = 2", "weight.size(1) * groups = 4"});
  expect_error([&] { conv2d(x, w); }, {"[2, 6, 5, 5]", "[4, 3, 3, 3]", "groups = 1", "weight.size(1) * groups = 3"});
  // groups not dividing the input or output channels.
  expect_error([&] { conv2d(zeros({2, 5, 5, 5}), zeros({4, 1, 3, 3}), Tensor(), {1, 1}, {0, 0}, {1, 1}, 2); },
               {"groups = 2", "5 channels", "[2, 5, 5, 5]", "[4, 1, 3, 3]"});
  expect_error([&] { conv2d(x, zeros({3, 3, 3, 3}), Tensor(), {1, 1}, {0, 0}, {1, 1}, 2); },
               {"groups = 2", "3 output channels", "[3, 3, 3, 3]", "[2, 6, 5, 5]"});
  expect_error([&] { conv2d(x, w, Tensor(), {1, 1}, {0, 0}, {1, 1}, 0); }, {"groups", "0", "[2, 6, 5, 5]", "[4, 3, 3, 3]"});
  // Kernel larger than the padded input, with and without dilation.
  expect_error([&] { conv2d(zeros({1, 1, 4, 4}), zeros({1, 1, 5, 5})); },
               {"kernel size [5, 5]", "padded input size [4, 4]", "[1, 1, 4, 4]", "[1, 1, 5, 5]", "padding [0, 0]"});
  expect_error([&] { conv2d(zeros({1, 1, 4, 4}), zeros({1, 1, 3, 3}), Tensor(), {1, 1}, {1, 1}, {3, 3}); },
               {"kernel size [7, 7]", "dilation [3, 3]", "padded input size [6, 6]", "[1, 1, 4, 4]", "[1, 1, 3, 3]"});
  // Non-positive stride and dilation, negative padding.
  expect_error([&] { conv2d(zeros({1, 3, 5, 5}), w, Tensor(), {0, 1}); }, {"stride", "[0, 1]", "[1, 3, 5, 5]", "[4, 3, 3, 3]"});
  expect_error([&] { conv2d(zeros({1, 3, 5, 5}), w, Tensor(), {1, 1}, {0, 0}, {1, -1}); },
               {"dilation", "[1, -1]", "[1, 3, 5, 5]", "[4, 3, 3, 3]"});
  expect_error([&] { conv2d(zeros({1, 3, 5, 5}), w, Tensor(), {1, 1}, {-1, 0}); }, {"padding", "[-1, 0]", "[1, 3, 5, 5]"});
  // Wrong ranks and bias shapes.
  expect_error([&] { conv2d(zeros({3, 5}), w); }, {"3-D", "4-D", "[3, 5]", "[4, 3, 3, 3]"});
  expect_error([&] { conv2d(zeros({1, 1, 3, 5, 5}), w); }, {"[1, 1, 3, 5, 5]"});
  expect_error([&] { conv2d(zeros({1, 3, 5, 5}), zeros({4, 3, 3})); }, {"4-D weight", "[4, 3, 3]", "[1, 3, 5, 5]"});
  expect_error([&] { conv2d(zeros({1, 3, 5, 5}), w, zeros({3})); }, {"bias", "[4]", "[3]", "[4, 3, 3, 3]"});
  expect_error([&] { conv2d(zeros({1, 3, 5, 5}), w, zeros({4, 1})); }, {"bias", "[4, 1]"});
  // Dtypes.
  expect_error([&] { conv2d(zeros({1, 3, 5, 5}, kF64), w); }, {"f64", "f32"});
  expect_error([&] { conv2d(zeros({1, 3, 5, 5}, kI64), zeros({4, 3, 3, 3}, kI64)); }, {"floating"});
}
