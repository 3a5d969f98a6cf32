// Initialization keyed by (seed, parameter name): every world size, strategy and
// construction order starts from the same weights.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <string>

namespace zeroshard::nn {

// A CPU generator seeded from (seed, name) through FNV-1a + splitmix64.
at::Generator generator_for(uint64_t seed, const std::string& name);

// In-place fills, without autograd.
void init_normal(at::Tensor param, uint64_t seed, const std::string& name, double std);
void init_constant(at::Tensor param, double value);

}  // namespace zeroshard::nn
