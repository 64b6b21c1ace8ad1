// Which cuDNN convolution algorithms to try, in which order and under which math type, from the
// candidates cuDNN's heuristics return (NOTE [cuDNN convolutions] in ops/cuda/conv.h). Plain C++
// with no cuDNN types, so the CPU tests check the rules on made-up candidate lists; conv.cpp
// converts cudnnConvolution*AlgoPerf_t into ConvAlgoCandidate and runs the first try cuDNN
// accepts.
#pragma once

#include <cstddef>
#include <vector>

namespace trident::cuda {

// cudnnMathType_t, same values (conv.cpp checks them with static_asserts).
enum class ConvMath : int { Default = 0, TensorOp = 1, TensorOpAllowConversion = 2, Fma = 3 };

// What the caller's dtype and precision setting allow.
enum class ConvPrecision {
  F32Strict,  // f32 without TF32: FMA kernels only (Default math would permit TF32 on sm_80+)
  F32Tf32,    // f32 with TF32 allowed: FMA or TF32 tensor cores, never a down-conversion to 16 bits
  Half,       // f16 / bf16: any math (the data is already 16-bit)
};

// One entry of cuDNN's ranked list (fastest first).
struct ConvAlgoCandidate {
  int algo = -1;
  bool supported = false;  // status == CUDNN_STATUS_SUCCESS
  ConvMath math = ConvMath::Default;
  bool deterministic = false;
  size_t workspace = 0;
};

// An algorithm to try and the math type to set on the descriptor for it. workspace: cuDNN's
// figure for the candidate (0 when the math was changed: the caller asks cuDNN again anyway).
struct ConvAlgoTry {
  int algo = -1;
  ConvMath math = ConvMath::Default;
  size_t workspace = 0;
  bool operator==(const ConvAlgoTry& o) const { return algo == o.algo && math == o.math; }
};

// The math type a precision asks for on the descriptor before the heuristics are queried, and
// the one a candidate of a math it does not allow is run under.
inline ConvMath requested_math(ConvPrecision p) {
  switch (p) {
    case ConvPrecision::F32Strict: return ConvMath::Fma;
    case ConvPrecision::F32Tf32: return ConvMath::Default;
    case ConvPrecision::Half: return ConvMath::TensorOp;
  }
  return ConvMath::Default;
}

inline bool conv_math_allowed(ConvMath m, ConvPrecision p) {
  switch (p) {
    case ConvPrecision::F32Strict: return m == ConvMath::Fma;
    case ConvPrecision::F32Tf32: return m != ConvMath::TensorOpAllowConversion;
    case ConvPrecision::Half: return true;
  }
  return false;
}

// The tries, best first: the supported candidates whose workspace fits max_workspace, in cuDNN's
// order, (1) deterministic (when asked) with an allowed math, under their own math; (2)
// deterministic with another math, under requested_math(p) (cuDNN may report a math other than
// the descriptor's for the same algorithm, so a filter on the reported math alone can drop every
// fast algorithm; the precision setting is kept by the math set on the descriptor, not by the
// report); then, when `deterministic`, (3) and (4): the same for the non-deterministic ones.
// Each (algo, math) pair once. Empty only when cuDNN returned no usable candidate.
inline std::vector<ConvAlgoTry> rank_conv_algorithms(const std::vector<ConvAlgoCandidate>& perf, ConvPrecision p,
                                                     bool deterministic, size_t max_workspace) {
  std::vector<ConvAlgoTry> tries;
  const auto add = [&](const ConvAlgoTry& t) {
    for (const ConvAlgoTry& x : tries)
      if (x == t) return;
    tries.push_back(t);
  };
  for (int det_round = deterministic ? 0 : 1; det_round < 2; ++det_round) {
    for (int forced = 0; forced < 2; ++forced) {
      for (const ConvAlgoCandidate& c : perf) {
        if (!c.supported || c.algo < 0 || c.workspace > max_workspace) continue;
        if (det_round == 0 && !c.deterministic) continue;
        if (det_round == 1 && deterministic && c.deterministic) continue;  // tried in round 0
        const bool allowed = conv_math_allowed(c.math, p);
        if (forced == 0 && allowed) add({c.algo, c.math, c.workspace});
        if (forced == 1 && !allowed) add({c.algo, requested_math(p), 0});
      }
    }
  }
  return tries;
}

}  // namespace trident::cuda
