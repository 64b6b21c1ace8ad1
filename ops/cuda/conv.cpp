#include "ops/cuda/conv.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <climits>
#include <memory>
#include <unordered_map>
#include <vector>

#include "core/cuda/stream.h"
#include "core/factory.h"
#include "ops/cuda/conv_algo.h"
#include "ops/cuda/cudnn_util.h"
#include "ops/cuda/linalg.h"
#include "ops/cuda/plan_key.h"

namespace trident::cuda {
namespace {

constexpr size_t kMaxWorkspaceBytes = size_t{512} << 20;

std::atomic<int64_t> g_queries{0};

enum class Pass { Forward = 0, BackwardData = 1, BackwardFilter = 2 };

// An algorithm of one pass and the math type it runs under (set on the descriptor before each call).
struct Choice {
  int algo = -1;  // a cudnnConvolution{Fwd,BwdData,BwdFilter}Algo_t; -1 until chosen
  cudnnMathType_t math = CUDNN_DEFAULT_MATH;
  size_t workspace = 0;
};

// Descriptors of one convolution and its algorithms per pass (NOTE [cuDNN convolutions]).
struct ConvPlan {
  TensorDescriptor x, y;
  FilterDescriptor w;
  ConvolutionDescriptor conv;
  ConvPrecision precision = ConvPrecision::Half;
  std::array<Choice, 3> choice;
};

using Key = PlanKey<19>;
using KeyHash = PlanKeyHash<19>;

using PlanMap = std::unordered_map<Key, std::unique_ptr<ConvPlan>, KeyHash>;
PlanMap& plans() {
  thread_local PlanMap m;
  return m;
}

int to_int(int64_t v, const char* what, const Conv2dGeometry& g) {
  TRIDENT_CHECK(v >= 0 && v <= INT_MAX, "conv2d (CUDA): ", what, " = ", v,
                " does not fit cuDNN's 32-bit sizes (input [", g.N, ", ", g.C, ", ", g.H, ", ", g.W, "], weight [", g.O,
                ", ", g.in_per_group(), ", ", g.kH, ", ", g.kW, "])");
  return static_cast<int>(v);
}

void check_numel(int64_t numel, const char* what, const Conv2dGeometry& g) {
  TRIDENT_CHECK(numel < INT_MAX, "conv2d (CUDA): the ", what, " has ", numel,
                " elements; cuDNN's legacy convolutions take fewer than 2^31 (input [", g.N, ", ", g.C, ", ", g.H, ", ",
                g.W, "], output [", g.N, ", ", g.O, ", ", g.OH, ", ", g.OW, "]); split the batch");
}

ConvPlan& plan_for(int device, DType dt, const Conv2dGeometry& g) {
  const bool tf32 = dt == DType::F32 && allow_tf32();
  Key key;
  key.v = {device, static_cast<int64_t>(dt), tf32, g.N, g.C, g.H, g.W, g.O, g.kH, g.kW,
           g.sh, g.sw, g.ph, g.pw, g.dh, g.dw, g.groups, g.OH, g.OW};
  std::unique_ptr<ConvPlan>& slot = plans()[key];
  if (slot) return *slot;
  check_numel(g.N * g.C * g.H * g.W, "input", g);
  check_numel(g.N * g.O * g.OH * g.OW, "output", g);
  check_numel(g.O * g.in_per_group() * g.kH * g.kW, "weight", g);
  auto p = std::make_unique<ConvPlan>();
  const cudnnDataType_t t = cudnn_dtype(dt, "conv2d");
  p->x.set_nchw(t, to_int(g.N, "N", g), to_int(g.C, "C", g), to_int(g.H, "H", g), to_int(g.W, "W", g));
  p->y.set_nchw(t, to_int(g.N, "N", g), to_int(g.O, "O", g), to_int(g.OH, "OH", g), to_int(g.OW, "OW", g));
  p->w.set_kchw(t, to_int(g.O, "O", g), to_int(g.in_per_group(), "C / groups", g), to_int(g.kH, "kH", g),
                to_int(g.kW, "kW", g));
  TRIDENT_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(
      p->conv.get(), to_int(g.ph, "padding", g), to_int(g.pw, "padding", g), to_int(g.sh, "stride", g),
      to_int(g.sw, "stride", g), to_int(g.dh, "dilation", g), to_int(g.dw, "dilation", g), CUDNN_CROSS_CORRELATION,
      CUDNN_DATA_FLOAT));
  TRIDENT_CUDNN_CHECK(cudnnSetConvolutionGroupCount(p->conv.get(), to_int(g.groups, "groups", g)));
  // DEFAULT math lets cuDNN use TF32 tensor cores for f32 on Ampere and later; FMA does not.
  p->precision = dt != DType::F32 ? ConvPrecision::Half : tf32 ? ConvPrecision::F32Tf32 : ConvPrecision::F32Strict;
  // The geometry ops/conv.cpp computed is the one cuDNN computes.
  int n = 0, c = 0, h = 0, w = 0;
  TRIDENT_CUDNN_CHECK(cudnnGetConvolution2dForwardOutputDim(p->conv.get(), p->x.get(), p->w.get(), &n, &c, &h, &w));
  TRIDENT_CHECK(n == g.N && c == g.O && h == g.OH && w == g.OW, "conv2d (CUDA): cuDNN sizes the output [", n, ", ", c,
                ", ", h, ", ", w, "], the geometry [", g.N, ", ", g.O, ", ", g.OH, ", ", g.OW, "]");
  slot = std::move(p);
  return *slot;
}

static_assert(static_cast<int>(ConvMath::Default) == CUDNN_DEFAULT_MATH &&
              static_cast<int>(ConvMath::TensorOp) == CUDNN_TENSOR_OP_MATH &&
              static_cast<int>(ConvMath::TensorOpAllowConversion) == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION &&
              static_cast<int>(ConvMath::Fma) == CUDNN_FMA_MATH,
              "ConvMath mirrors cudnnMathType_t");

template <typename Perf>
std::vector<ConvAlgoCandidate> candidates(const std::vector<Perf>& perf, int count) {
  std::vector<ConvAlgoCandidate> out;
  for (int i = 0; i < count && i < static_cast<int>(perf.size()); ++i) {
    const Perf& r = perf[static_cast<size_t>(i)];
    out.push_back({static_cast<int>(r.algo), r.status == CUDNN_STATUS_SUCCESS, static_cast<ConvMath>(r.mathType),
                   r.determinism == CUDNN_DETERMINISTIC, r.memory});
  }
  return out;
}

// cuDNN's workspace for `algo` of `pass` under the math type now set on p.conv; false when cuDNN
// does not take that pair.
bool workspace_size(cudnnHandle_t h, ConvPlan& p, Pass pass, int algo, size_t* ws) {
  cudnnStatus_t st = CUDNN_STATUS_SUCCESS;
  switch (pass) {
    case Pass::Forward:
      st = cudnnGetConvolutionForwardWorkspaceSize(h, p.x.get(), p.w.get(), p.conv.get(), p.y.get(),
                                                   static_cast<cudnnConvolutionFwdAlgo_t>(algo), ws);
      break;
    case Pass::BackwardData:
      st = cudnnGetConvolutionBackwardDataWorkspaceSize(h, p.w.get(), p.y.get(), p.conv.get(), p.x.get(),
                                                        static_cast<cudnnConvolutionBwdDataAlgo_t>(algo), ws);
      break;
    case Pass::BackwardFilter:
      st = cudnnGetConvolutionBackwardFilterWorkspaceSize(h, p.x.get(), p.y.get(), p.conv.get(), p.w.get(),
                                                          static_cast<cudnnConvolutionBwdFilterAlgo_t>(algo), ws);
      break;
  }
  return st == CUDNN_STATUS_SUCCESS;
}

const Choice& choose(cudnnHandle_t h, ConvPlan& p, Pass pass) {
  Choice& c = p.choice[static_cast<size_t>(pass)];
  if (c.algo >= 0) return c;
  g_queries.fetch_add(1, std::memory_order_relaxed);
  const cudnnMathType_t requested = static_cast<cudnnMathType_t>(requested_math(p.precision));
  TRIDENT_CUDNN_CHECK(cudnnSetConvolutionMathType(p.conv.get(), requested));
  int count = 0;
  std::vector<ConvAlgoCandidate> cands;
  int general = 0;  // always supported, under any math type
  switch (pass) {
    case Pass::Forward: {
      std::vector<cudnnConvolutionFwdAlgoPerf_t> perf(CUDNN_CONVOLUTION_FWD_ALGO_COUNT);
      TRIDENT_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(h, p.x.get(), p.w.get(), p.conv.get(), p.y.get(),
                                                                 static_cast<int>(perf.size()), &count, perf.data()));
      cands = candidates(perf, count);
      general = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM;
      break;
    }
    case Pass::BackwardData: {
      std::vector<cudnnConvolutionBwdDataAlgoPerf_t> perf(CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT);
      TRIDENT_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(h, p.w.get(), p.y.get(), p.conv.get(), p.x.get(),
                                                                      static_cast<int>(perf.size()), &count, perf.data()));
      cands = candidates(perf, count);
      general = CUDNN_CONVOLUTION_BWD_DATA_ALGO_1;
      break;
    }
    case Pass::BackwardFilter: {
      std::vector<cudnnConvolutionBwdFilterAlgoPerf_t> perf(CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT);
      TRIDENT_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(
          h, p.x.get(), p.y.get(), p.conv.get(), p.w.get(), static_cast<int>(perf.size()), &count, perf.data()));
      cands = candidates(perf, count);
      general = CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1;
      break;
    }
  }
  // Both backward passes prefer deterministic algorithms (NOTE [cuDNN convolutions]). The first
  // try whose (algorithm, math) cuDNN sizes a workspace for, within the limit, is kept; its math
  // type is what every call sets on the descriptor before running.
  for (const ConvAlgoTry& t : rank_conv_algorithms(cands, p.precision, pass != Pass::Forward, kMaxWorkspaceBytes)) {
    TRIDENT_CUDNN_CHECK(cudnnSetConvolutionMathType(p.conv.get(), static_cast<cudnnMathType_t>(t.math)));
    size_t ws = 0;
    if (!workspace_size(h, p, pass, t.algo, &ws) || ws > kMaxWorkspaceBytes) continue;
    c = Choice{t.algo, static_cast<cudnnMathType_t>(t.math), std::max(t.workspace, ws)};
    return c;
  }
  // No candidate cuDNN returned is usable: the general algorithm under the requested math.
  TRIDENT_CUDNN_CHECK(cudnnSetConvolutionMathType(p.conv.get(), requested));
  size_t ws = 0;
  TRIDENT_CHECK(workspace_size(h, p, pass, general, &ws), "conv2d (CUDA): cuDNN returned no usable algorithm for pass ",
                static_cast<int>(pass), " and refuses its general algorithm ", general, " under math type ",
                static_cast<int>(requested));
  c = Choice{general, requested, ws};
  return c;
}

// Contiguous, and 16-byte aligned (a contiguous view at an odd offset is copied): some cuDNN
// kernels load 16 bytes at a time, and the heuristics cannot see the pointers.
Tensor prepared(const Tensor& t, DType dt) {
  Tensor r = t.detach().to(dt).contiguous();
  if (reinterpret_cast<uintptr_t>(r.data_ptr()) % 16 != 0) r = r.clone();
  return r;
}

Tensor workspace_for(size_t bytes, Device d) {
  return bytes == 0 ? Tensor() : empty({static_cast<int64_t>(bytes)}, TensorOptions(DType::U8).device(d));
}

void* ws_ptr(const Tensor& ws) { return ws.defined() ? ws.data_ptr() : nullptr; }

// Every cuDNN dtype takes float alpha and beta with an f32 compute type.
const float kOne = 1.0f, kZero = 0.0f;

}  // namespace

Tensor conv2d_forward(const Tensor& input, const Tensor& weight, const Tensor& bias, const Conv2dGeometry& g) {
  const Device dev = input.device();
  const DType dt = input.dtype();
  cudnn_dtype(dt, "conv2d");
  const TensorOptions opts = TensorOptions(dt).device(dev);
  const Tensor b = bias.defined() ? prepared(bias, dt) : Tensor();
  Tensor y;
  if (g.N * g.O * g.OH * g.OW == 0 || g.C == 0) {
    // Nothing to convolve (no samples, channels or weights): the bias alone, or zeros.
    y = zeros({g.N, g.O, g.OH, g.OW}, opts);
  } else {
    const Tensor x = prepared(input, dt), w = prepared(weight, dt);
    DeviceGuard guard(dev.index);
    cudnnHandle_t h = cudnn_handle(dev.index);
    ConvPlan& p = plan_for(dev.index, dt, g);
    const Choice& c = choose(h, p, Pass::Forward);
    TRIDENT_CUDNN_CHECK(cudnnSetConvolutionMathType(p.conv.get(), c.math));
    y = empty({g.N, g.O, g.OH, g.OW}, opts);
    const Tensor ws = workspace_for(c.workspace, dev);
    // beta = 0: y is written, never read (it may hold anything, NaN included).
    TRIDENT_CUDNN_CHECK(cudnnConvolutionForward(h, &kOne, p.x.get(), x.data_ptr(), p.w.get(), w.data_ptr(),
                                                p.conv.get(), static_cast<cudnnConvolutionFwdAlgo_t>(c.algo),
                                                ws_ptr(ws), c.workspace, &kZero, p.y.get(), y.data_ptr()));
  }
  if (b.defined() && y.numel() > 0) add_channel_bias_(y, b);
  return y;
}

Tensor conv2d_backward_input(const Tensor& grad_out, const Tensor& weight, const Conv2dGeometry& g) {
  const Device dev = grad_out.device();
  const DType dt = weight.dtype();
  cudnn_dtype(dt, "conv2d_backward_input");
  const TensorOptions opts = TensorOptions(dt).device(dev);
  if (g.N * g.C * g.H * g.W == 0 || g.O == 0 || g.OH * g.OW == 0) return zeros({g.N, g.C, g.H, g.W}, opts);
  const Tensor gy = prepared(grad_out, dt), w = prepared(weight, dt);
  DeviceGuard guard(dev.index);
  cudnnHandle_t h = cudnn_handle(dev.index);
  ConvPlan& p = plan_for(dev.index, dt, g);
  const Choice& c = choose(h, p, Pass::BackwardData);
  TRIDENT_CUDNN_CHECK(cudnnSetConvolutionMathType(p.conv.get(), c.math));
  Tensor dx = empty({g.N, g.C, g.H, g.W}, opts);
  const Tensor ws = workspace_for(c.workspace, dev);
  TRIDENT_CUDNN_CHECK(cudnnConvolutionBackwardData(h, &kOne, p.w.get(), w.data_ptr(), p.y.get(), gy.data_ptr(),
                                                   p.conv.get(), static_cast<cudnnConvolutionBwdDataAlgo_t>(c.algo),
                                                   ws_ptr(ws), c.workspace, &kZero, p.x.get(), dx.data_ptr()));
  return dx;
}

Tensor conv2d_backward_weight(const Tensor& grad_out, const Tensor& input, const Conv2dGeometry& g) {
  const Device dev = grad_out.device();
  const DType dt = input.dtype();
  cudnn_dtype(dt, "conv2d_backward_weight");
  const TensorOptions opts = TensorOptions(dt).device(dev);
  const Shape wshape = {g.O, g.in_per_group(), g.kH, g.kW};
  if (g.N * g.C * g.H * g.W == 0 || g.O == 0 || g.OH * g.OW == 0) return zeros(wshape, opts);
  const Tensor gy = prepared(grad_out, dt), x = prepared(input, dt);
  DeviceGuard guard(dev.index);
  cudnnHandle_t h = cudnn_handle(dev.index);
  ConvPlan& p = plan_for(dev.index, dt, g);
  const Choice& c = choose(h, p, Pass::BackwardFilter);
  TRIDENT_CUDNN_CHECK(cudnnSetConvolutionMathType(p.conv.get(), c.math));
  Tensor dw = empty(wshape, opts);
  const Tensor ws = workspace_for(c.workspace, dev);
  TRIDENT_CUDNN_CHECK(cudnnConvolutionBackwardFilter(h, &kOne, p.x.get(), x.data_ptr(), p.y.get(), gy.data_ptr(),
                                                     p.conv.get(), static_cast<cudnnConvolutionBwdFilterAlgo_t>(c.algo),
                                                     ws_ptr(ws), c.workspace, &kZero, p.w.get(), dw.data_ptr()));
  return dw;
}

int64_t conv_algorithm_queries() { return g_queries.load(std::memory_order_relaxed); }

void clear_conv_algorithm_cache() { plans().clear(); }

}  // namespace trident::cuda
