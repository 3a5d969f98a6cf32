#include "nn/init.h"

#include "util/hash.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

namespace zeroshard::nn {

at::Generator generator_for(uint64_t seed, const std::string& name) {
  return at::make_generator<at::CPUGeneratorImpl>(util::splitmix64(util::fnv1a64(name) ^ seed));
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
