#include "nn/init.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

namespace zeroshard::nn {

at::Generator generator_for(uint64_t seed, const std::string& name) {
  uint64_t h = 1469598103934665603ULL;
  for (unsigned char c : name) {
    h ^= c;
    h *= 1099511628211ULL;
  }
  uint64_t z = h ^ (seed + 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  z ^= z >> 31;
  return at::make_generator<at::CPUGeneratorImpl>(z);
}

void init_normal(at::Tensor param, uint64_t seed, const std::string& name, double std) {
  torch::NoGradGuard no_grad;
  auto gen = generator_for(seed, name);
  param.copy_(at::normal(0.0, std, param.sizes(), gen, param.options().requires_grad(false)));
}

void init_constant(at::Tensor param, double value) {
  torch::NoGradGuard no_grad;
  param.fill_(value);
}

}  // namespace zeroshard::nn
