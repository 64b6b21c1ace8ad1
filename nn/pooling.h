// Pooling modules over NCHW input (see ops/pool.h for the semantics).
#pragma once

#include <optional>

#include "nn/module.h"
#include "ops/pool.h"

namespace trident::nn {

class MaxPool2d : public UnaryModule {
 public:
  explicit MaxPool2d(Int2 kernel, std::optional<Int2> stride = std::nullopt, Int2 padding = {0, 0}, Int2 dilation = {1, 1},
                     bool ceil_mode = false)
      : UnaryModule("MaxPool2d"), kernel(kernel), stride(stride), padding(padding), dilation(dilation), ceil_mode(ceil_mode) {}
  Tensor forward(const Tensor& x) override { return max_pool2d(x, kernel, stride, padding, dilation, ceil_mode); }
  Int2 kernel;
  std::optional<Int2> stride;
  Int2 padding, dilation;
  bool ceil_mode;
};

class AvgPool2d : public UnaryModule {
 public:
  explicit AvgPool2d(Int2 kernel, std::optional<Int2> stride = std::nullopt, Int2 padding = {0, 0}, bool ceil_mode = false,
                     bool count_include_pad = true)
      : UnaryModule("AvgPool2d"), kernel(kernel), stride(stride), padding(padding), ceil_mode(ceil_mode),
        count_include_pad(count_include_pad) {}
  Tensor forward(const Tensor& x) override { return avg_pool2d(x, kernel, stride, padding, ceil_mode, count_include_pad); }
  Int2 kernel;
  std::optional<Int2> stride;
  Int2 padding;
  bool ceil_mode, count_include_pad;
};

class AdaptiveAvgPool2d : public UnaryModule {
 public:
  explicit AdaptiveAvgPool2d(Int2 output_size) : UnaryModule("AdaptiveAvgPool2d"), output_size(output_size) {}
  Tensor forward(const Tensor& x) override { return adaptive_avg_pool2d(x, output_size); }
  Int2 output_size;
};

}  // namespace trident::nn
