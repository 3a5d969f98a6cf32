// Comparing a computed tensor with its reference in the tests.
#pragma once

#include <torch/torch.h>

#include <algorithm>

namespace zeroshard::testing {

// max |a - b| / max |b|, in float64 whatever the dtypes (0 when both are all zeros).
inline double rel_diff(const torch::Tensor& a, const torch::Tensor& b) {
  const auto af = a.to(torch::kDouble), bf = b.to(torch::kDouble);
  return (af - bf).abs().max().item<double>() / std::max(1e-300, bf.abs().max().item<double>());
}

}  // namespace zeroshard::testing
