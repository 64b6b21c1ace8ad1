// Helpers shared by the test suites.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "ops/cpu/bgemm_amx.h"
#include "ops/cpu/isa.h"
#include "trident.h"

namespace trident::testing {

// A command line's exit status (-1 when it did not exit normally) and its stdout and stderr
// together.
struct RunResult {
  int status;
  std::string output;
};
inline RunResult run(const std::string& cmd) {
  RunResult r{-1, {}};
  FILE* p = ::popen((cmd + " 2>&1").c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.output.append(buf, n);
  const int st = ::pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

// Writes `tensors` to a scratch safetensors file, runs `/usr/bin/python3 script args FILE` on it
// (the tests with PyTorch as their oracle), removes the file and expects exit status 0; the
// script's report goes to the test's log either way.
inline void expect_python_accepts(const std::string& script, const std::string& args, const std::map<std::string, Tensor>& tensors,
                                  const std::string& tag) {
  const std::filesystem::path file =
      std::filesystem::temp_directory_path() / ("trident_" + tag + "_" + std::to_string(::getpid()) + ".safetensors");
  nn::save_safetensors(file.string(), tensors);
  const RunResult r = run("/usr/bin/python3 " + script + " " + args + (args.empty() ? "" : " ") + file.string());
  std::filesystem::remove(file);
  EXPECT_EQ(r.status, 0) << r.output;
  if (r.status == 0) std::cout << r.output;  // the differences, for the log
}

// Why /usr/bin/python3 with PyTorch (Debian's python3-torch) cannot serve as a test's oracle, or
// "" when it can.
inline std::string torch_missing() {
  const RunResult r = run("/usr/bin/python3 -c 'import torch'");
  return r.status == 0 ? "" : "/usr/bin/python3 cannot import torch (scripts/setup.sh python3-torch installs it): " + r.output;
}

// A fresh f64 tensor of standard normal values, requiring grad (a gradcheck input).
inline Tensor rand_leaf(const Shape& s, uint64_t seed, double scale = 1.0) {
  Generator g(seed);
  Tensor t = randn(s, kF64, &g);
  if (scale != 1.0) t = mul(t, scale);
  return t.detach().set_requires_grad();
}

// A non-contiguous f64 leaf with the given (logical) shape: the transpose of a contiguous
// tensor of the reversed shape, so every element is distinct memory.
inline Tensor rand_leaf_transposed(const Shape& s, uint64_t seed) {
  Shape rev(s.rbegin(), s.rend());
  Generator g(seed);
  Tensor base = randn(rev, kF64, &g);
  std::vector<int64_t> perm;
  for (int64_t d = static_cast<int64_t>(s.size()) - 1; d >= 0; --d) perm.push_back(d);
  Tensor t = permute(base, perm);
  t.set_requires_grad();
  return t;
}

// Runs f(false) with the CPU's AVX-512 kernels off (the ISA clones and AVX2 kernels), then
// f(true) with them on where this build and CPU have them (NOTE [AVX-512 kernels] in
// ops/cpu/isa.h), each under a trace naming the setting; the setting is restored after.
inline void with_and_without_avx512(const std::function<void(bool)>& f) {
  const bool was = cpu::set_cpu_avx512_kernels_enabled_for_testing(false);
  for (bool avx512 : {false, true}) {
    if (avx512 && !cpu::cpu_avx512_kernels_available()) continue;
    cpu::set_cpu_avx512_kernels_enabled_for_testing(avx512);
    SCOPED_TRACE(avx512 ? "AVX-512 kernels" : "AVX2 kernels and ISA clones");
    f(avx512);
  }
  cpu::set_cpu_avx512_kernels_enabled_for_testing(was);
}

// The bf16 GEMM kernels this CPU and build can run (NOTE [AMX bf16 GEMM], NOTE [AVX512-BF16
// GEMM]), and why a test that needs one skips when there is none.
inline std::vector<cpu::Bf16Gemm> bf16_kernels() {
  std::vector<cpu::Bf16Gemm> k;
  if (cpu::amx_bf16_available()) k.push_back(cpu::Bf16Gemm::Amx);
  if (cpu::avx512_bf16_available()) k.push_back(cpu::Bf16Gemm::Avx512Bf16);
  return k;
}
inline constexpr const char* kNoBf16Kernel =
    "this CPU, kernel or build has neither AMX-BF16 nor AVX512-BF16 (NOTE [AMX bf16 GEMM])";

// |a - b| <= atol + rtol * |b| element-wise; the message names the first failing element.
inline ::testing::AssertionResult all_close(const Tensor& a, const Tensor& b, double rtol = 1e-6, double atol = 1e-8) {
  if (a.sizes() != b.sizes())
    return ::testing::AssertionFailure() << "shapes differ: " << shape_str(a.sizes()) << " vs " << shape_str(b.sizes());
  const std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  for (size_t i = 0; i < x.size(); ++i) {
    const bool both_nan = std::isnan(x[i]) && std::isnan(y[i]);
    if (both_nan || x[i] == y[i]) continue;
    if (!(std::fabs(x[i] - y[i]) <= atol + rtol * std::fabs(y[i])))
      return ::testing::AssertionFailure() << "element " << i << ": " << x[i] << " vs " << y[i] << " (atol " << atol
                                           << ", rtol " << rtol << ")";
  }
  return ::testing::AssertionSuccess();
}

// ||got - ref|| / ||ref|| over all elements (got brought to the CPU first); equal values, equal
// infinities included, count as equal, and so does NaN where the reference is NaN; any other
// non-finite value, or a size that differs, is an infinite error. The measure of the CUDA
// suites' and the emulator's comparisons with the CPU in f64.
inline double relative_error(const Tensor& got, const Tensor& ref) {
  const std::vector<double> a = got.to(Device::cpu()).to_vector<double>(), b = ref.to(Device::cpu()).to_vector<double>();
  if (a.size() != b.size()) {
    ADD_FAILURE() << "relative_error: " << a.size() << " elements against " << b.size();
    return INFINITY;
  }
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(b[i])) {
      if (!std::isnan(a[i])) return INFINITY;
      continue;
    }
    if (a[i] == b[i]) continue;  // equal infinities included
    if (!std::isfinite(a[i]) || !std::isfinite(b[i])) return INFINITY;
    num += (a[i] - b[i]) * (a[i] - b[i]);
    den += b[i] * b[i];
  }
  return num == 0 ? 0.0 : std::sqrt(num / std::max(den, 1e-300));
}

// Tolerances on relative_error for CUDA kernels (or their emulation) against the CPU in f64 on
// the same rounded inputs: f16 and bf16 differ mostly by the final rounding of each output
// (2^-11, 2^-8); f32 by f32 sums over up to ~1000 terms, plus cancellations in gradients.
inline double f64_reference_tolerance(DType dt, bool backward) {
  switch (dt) {
    case DType::F32: return backward ? 5e-5 : 2e-5;
    case DType::F16: return backward ? 4e-3 : 2e-3;
    case DType::BF16: return backward ? 3e-2 : 1.6e-2;
    default: return 0;
  }
}

// The message of the trident::Error that f throws ("(no error)" when it throws none).
inline std::string error_message(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.message();
  }
  return "(no error)";
}

// Runs f, expects a trident::Error, and checks that its message contains every part.
template <typename F>
void expect_error(const F& f, const std::vector<std::string>& parts) {
  try {
    f();
    ADD_FAILURE() << "no error thrown; expected one mentioning " << parts.front();
  } catch (const Error& e) {
    for (const std::string& p : parts)
      EXPECT_NE(e.message().find(p), std::string::npos) << "missing \"" << p << "\" in: " << e.message();
  }
}

inline ::testing::AssertionResult grad_ok(const GradcheckResult& r) {
  if (r.ok) return ::testing::AssertionSuccess() << r.compared << " entries compared";
  return ::testing::AssertionFailure() << r.report;
}

}  // namespace trident::testing
