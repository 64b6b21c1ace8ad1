// CUDA op throughput: GEMMs through cuBLASLt, convolutions through cuDNN and the bandwidth-bound kernels, each timed with CUDA
// events over many back-to-back calls on the current stream (launch overhead included, as a
// training step sees it). Prints one JSON object per case (name, dtype, shape, ms, flops, bytes);
// benchmarks/cuda_ops_torch.py times the same cases in PyTorch on the same GPU and prints the
// table with the ratio (scripts/gpu-check.sh runs both).
//   cuda_ops_bench [--filter SUBSTRING] [--iters N]
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "core/cuda/stream.h"
#include "trident.h"

using namespace trident;

namespace {

struct Case {
  std::string name;  // the op, as cuda_ops_torch.py knows it
  DType dtype;
  std::vector<Shape> shapes;  // input shapes
  double flops = 0, bytes = 0;
  std::function<Tensor(const std::vector<Tensor>&)> fn;
};

double time_ms(const std::function<void()>& f, int iters) {
  for (int i = 0; i < 3; ++i) f();
  cuda::synchronize();
  cuda::Event start(true), stop(true);
  start.record();
  for (int i = 0; i < iters; ++i) f();
  stop.record();
  stop.synchronize();
  return static_cast<double>(start.elapsed_ms(stop)) / iters;
}

std::string shape_json(const std::vector<Shape>& shapes) {
  std::ostringstream s;
  s << "[";
  for (size_t i = 0; i < shapes.size(); ++i) {
    s << (i ? ",[" : "[");
    for (size_t j = 0; j < shapes[i].size(); ++j) s << (j ? "," : "") << shapes[i][j];
    s << "]";
  }
  s << "]";
  return s.str();
}

double elem_size(DType dt) { return static_cast<double>(itemsize(dt)); }

std::vector<Case> cases() {
  using V = std::vector<Tensor>;
  std::vector<Case> c;
  const auto gemm = [&](const std::string& name, DType dt, int64_t m, int64_t k, int64_t n) {
    c.push_back({name, dt, {{m, k}, {k, n}}, 2.0 * m * n * k, elem_size(dt) * (m * k + k * n + m * n),
                 [](const V& x) { return matmul(x[0], x[1]); }});
  };
  gemm("matmul", kBF16, 8192, 8192, 8192);
  gemm("matmul", kF16, 8192, 8192, 8192);
  gemm("matmul", kF32, 4096, 4096, 4096);
  gemm("matmul_tf32", kF32, 4096, 4096, 4096);
  // GPT-2 small's MLP at batch 8 x 1024 tokens: up- and down-projection with bias.
  for (auto [in, out] : {std::pair<int64_t, int64_t>{768, 3072}, {3072, 768}}) {
    const int64_t rows = 8192;
    c.push_back({"linear", kBF16, {{rows, in}, {out, in}, {out}}, 2.0 * rows * in * out,
                 2.0 * (rows * in + in * out + rows * out), [](const V& x) { return linear(x[0], x[1], x[2]); }});
  }
  // Attention scores of GPT-2 small (96 = 8 x 12 heads, T = 1024, head dim 64).
  c.push_back({"bmm", kBF16, {{96, 1024, 64}, {96, 64, 1024}}, 2.0 * 96 * 1024 * 1024 * 64,
               2.0 * 96 * (2 * 1024 * 64 + 1024 * 1024), [](const V& x) { return bmm(x[0], x[1]); }});
  // Bandwidth-bound: bytes are those read plus written once.
  const int64_t n = int64_t{1} << 26;
  for (DType dt : {kF32, kBF16}) {
    c.push_back({"add", dt, {{n}, {n}}, double(n), 3 * elem_size(dt) * n, [](const V& x) { return add(x[0], x[1]); }});
    c.push_back({"gelu_tanh", dt, {{8192, 3072}}, 0, 2 * elem_size(dt) * 8192 * 3072,
                 [](const V& x) { return gelu(x[0], GeluApproximation::Tanh); }});
    c.push_back({"softmax", dt, {{8192 * 12, 1024}}, 0, 2 * elem_size(dt) * 8192 * 12 * 1024,
                 [](const V& x) { return softmax(x[0], -1); }});
    c.push_back({"sum_rows", dt, {{8192, 8192}}, 0, elem_size(dt) * 8192 * 8192,
                 [](const V& x) { return sum(x[0], {1}); }});
    c.push_back({"sum_cols", dt, {{8192, 8192}}, 0, elem_size(dt) * 8192 * 8192,
                 [](const V& x) { return sum(x[0], {0}); }});
  }
  c.push_back({"layer_norm", kBF16, {{8192, 768}, {768}, {768}}, 0, 2 * 2.0 * 8192 * 768,
               [](const V& x) { return layer_norm(x[0], {768}, x[1], x[2]); }});
  // GPT-2's h = x + attn_out; ln_2(h) (NOTE [Fused residual layer norm]): x and the residual
  // read, the sum and the normalized output written. PyTorch's peer is add then layer_norm.
  c.push_back({"add_layer_norm", kBF16, {{8192, 768}, {8192, 768}, {768}, {768}}, 0, 4 * 2.0 * 8192 * 768,
               [](const V& x) { return add_layer_norm(x[0], x[1], {768}, x[2], x[3]).out; }});
  c.push_back({"transpose_copy", kBF16, {{8192, 8192}}, 0, 2 * 2.0 * 8192 * 8192,
               [](const V& x) { return transpose(x[0], 0, 1).contiguous(); }});
  // Convolution (cuDNN) at ResNet/AmoebaNet sizes: 3x3 64 -> 64 on 56 x 56, batch 32, forward
  // alone and forward + both backward passes (3x the FLOPs; gy is the third input); a depthwise
  // 3x3 forward + backward; pooling (own kernels; bytes read plus written).
  const int64_t cn = 32, cc = 64, hw = 56;
  const double conv_flops = 2.0 * cn * cc * hw * hw * cc * 9;
  const double act = elem_size(kBF16) * cn * cc * hw * hw;
  c.push_back({"conv2d_3x3", kBF16, {{cn, cc, hw, hw}, {cc, cc, 3, 3}}, conv_flops, 2 * act,
               [](const V& x) { return conv2d(x[0], x[1], Tensor(), {1, 1}, {1, 1}); }});
  c.push_back({"conv2d_3x3_fwdbwd", kBF16, {{cn, cc, hw, hw}, {cc, cc, 3, 3}, {cn, cc, hw, hw}}, 3 * conv_flops, 5 * act,
               [](const V& x) {
                 autograd::EnableGradGuard grad;
                 const Tensor a = x[0].detach().set_requires_grad(true), w = x[1].detach().set_requires_grad(true);
                 conv2d(a, w, Tensor(), {1, 1}, {1, 1}).backward(x[2]);
                 return a.grad();
               }});
  const int64_t dc = 128, dhw = 28;
  const double dact = elem_size(kBF16) * cn * dc * dhw * dhw;
  c.push_back({"conv2d_dw3x3_fwdbwd", kBF16, {{cn, dc, dhw, dhw}, {dc, 1, 3, 3}, {cn, dc, dhw, dhw}},
               3 * 2.0 * cn * dc * dhw * dhw * 9, 5 * dact, [dc](const V& x) {
                 autograd::EnableGradGuard grad;
                 const Tensor a = x[0].detach().set_requires_grad(true), w = x[1].detach().set_requires_grad(true);
                 conv2d(a, w, Tensor(), {1, 1}, {1, 1}, {1, 1}, dc).backward(x[2]);
                 return a.grad();
               }});
  const double pin = elem_size(kBF16) * cn * cc * 112 * 112;
  c.push_back({"max_pool2d_3x3s2", kBF16, {{cn, cc, 112, 112}}, 0, 1.25 * pin,
               [](const V& x) { return max_pool2d(x[0], {3, 3}, Int2{2, 2}, {1, 1}); }});
  c.push_back({"avg_pool2d_3x3s1", kBF16, {{cn, cc, hw, hw}}, 0, 2 * act,
               [](const V& x) { return avg_pool2d(x[0], {3, 3}, Int2{1, 1}, {1, 1}, false, false); }});
  // Fused softmax + cross-entropy over GPT-2's padded vocabulary, batch 8 x 1024 tokens, bf16
  // logits (targets drawn once, from a fixed seed): the forward pass reads the logits once; forward
  // and backward read them twice and write their gradient.
  {
    const int64_t rows = 8192, vocab = 50304;
    const double logits = elem_size(kBF16) * rows * vocab;
    auto target = std::make_shared<Tensor>();
    const auto targets = [target, rows, vocab] {
      if (!target->defined()) {
        Generator tg(1);
        *target = randint(0, vocab, {rows}, TensorOptions(kI64).device(Device::cuda(0)), &tg);
      }
      return *target;
    };
    c.push_back({"cross_entropy", kBF16, {{rows, vocab}}, 0, logits,
                 [targets](const V& x) { return cross_entropy(x[0], targets()); }});
    c.push_back({"cross_entropy_fwdbwd", kBF16, {{rows, vocab}}, 0, 3 * logits, [targets](const V& x) {
                   autograd::EnableGradGuard grad;
                   const Tensor a = x[0].detach().set_requires_grad(true);
                   cross_entropy(a, targets()).backward();
                   return a.grad();
                 }});
  }
  // The copy bandwidth the bandwidth-bound rows are measured against (cuda_ops_torch.py's
  // "of copy" column).
  c.push_back({"copy", kF32, {{n}}, 0, 2 * 4.0 * n, [](const V& x) { return x[0].clone(); }});
  // One AdamW step over GPT-2 small's 148 parameter tensors (124M f32 elements): the multi-tensor
  // kernels (NOTE [Multi-tensor launches]). Bytes: p, g, m, v read and p, m, v written.
  {
    std::vector<Shape> shapes = {{50257, 768}, {1024, 768}};
    for (int l = 0; l < 12; ++l) {
      for (Shape s : std::vector<Shape>{{768}, {768}, {2304, 768}, {2304}, {768, 768}, {768},
                                        {768}, {768}, {3072, 768}, {3072}, {768, 3072}, {768}})
        shapes.push_back(s);
    }
    shapes.push_back({768});
    shapes.push_back({768});
    double elems = 0;
    for (const Shape& s : shapes) elems += static_cast<double>(shape_numel(s));
    auto opt = std::make_shared<std::unique_ptr<nn::optim::AdamW>>();
    c.push_back({"adamw_gpt2", kF32, shapes, 0, 7 * 4.0 * elems, [opt](const V& x) {
                   if (!*opt) {  // the first call builds the optimizer over the inputs
                     for (Tensor p : x) {
                       p.set_requires_grad(true);
                       p.set_grad(full(p.sizes(), 1e-3, TensorOptions(kF32).device(p.device())));
                     }
                     *opt = std::make_unique<nn::optim::AdamW>(x, nn::optim::AdamWOptions{.lr = 6e-4, .weight_decay = 0.1});
                   }
                   (*opt)->step();
                   return Tensor();
                 }});
  }
  return c;
}

}  // namespace

int main(int argc, char** argv) {
  std::string filter;
  int iters = 20;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--filter") && i + 1 < argc) {
      filter = argv[++i];
    } else if (!std::strcmp(argv[i], "--iters") && i + 1 < argc) {
      iters = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: %s [--filter SUBSTRING] [--iters N]\n", argv[0]);
      return 2;
    }
  }
  if (!cuda_is_available()) {
    std::fprintf(stderr, "cuda_ops_bench: no CUDA device\n");
    return 1;
  }
  autograd::NoGradGuard no_grad;
  Generator g(0);
  // A case that throws is reported on stderr and the next one runs: one broken op (cuDNN missing,
  // say) must not hide the measurements of the others. Any failure makes the exit status 1.
  int failed = 0;
  std::vector<Case> all;
  try {
    all = cases();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cuda_ops_bench: %s\n", e.what());
    return 1;
  }
  for (const Case& c : all) {
    if (!filter.empty() && c.name.find(filter) == std::string::npos) continue;
    try {
      if (c.name == "matmul_tf32") set_matmul_allow_tf32(true);
      std::vector<Tensor> in;
      for (const Shape& s : c.shapes) in.push_back(randn(s, TensorOptions(c.dtype).device(Device::cuda(0)), &g));
      const double ms = time_ms([&] { (void)c.fn(in); }, iters);
      set_matmul_allow_tf32(false);
      std::printf("{\"name\": \"%s\", \"dtype\": \"%s\", \"shapes\": %s, \"ms\": %.5f, \"flops\": %.6g, \"bytes\": %.6g}\n",
                  c.name.c_str(), std::string(dtype_name(c.dtype)).c_str(), shape_json(c.shapes).c_str(), ms, c.flops,
                  c.bytes);
      std::fflush(stdout);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "cuda_ops_bench: %s %s: %s\n", c.name.c_str(), std::string(dtype_name(c.dtype)).c_str(),
                   e.what());
      ++failed;
      set_matmul_allow_tf32(false);
    }
  }
  return failed ? 1 : 0;
}
