// A small model that exercises every awkward case for the engine: tied weights (embedding
// reused as the output head, both in the root), a parameter that never gets a gradient
// (`unused` in every block), frozen parameters inside a trainable block (`frozen_scale`), a
// wholly frozen unit (block 1), and sizes that no world size divides.
#pragma once

#include "nn/init.h"
#include "zeroshard/nn/hookable.h"

#include <torch/torch.h>

namespace zeroshard::testing {

struct ToyBlockImpl : public nn::HookableModule {
  ToyBlockImpl(int64_t d, bool frozen_block) {
    fc = register_module("fc", torch::nn::Linear(d, d));
    unused = register_module("unused", torch::nn::Linear(d, d));
    frozen_scale = register_parameter("frozen_scale", torch::ones({d}), /*requires_grad=*/false);
    if (frozen_block) {
      for (auto& p : parameters()) p.set_requires_grad(false);
    }
  }
  torch::Tensor forward(const torch::Tensor& x) {
    return call_hooked(x, [this](const torch::Tensor& in) { return in + torch::tanh(fc(in)) * frozen_scale; });
  }
  torch::nn::Linear fc{nullptr}, unused{nullptr};
  torch::Tensor frozen_scale;
};
TORCH_MODULE(ToyBlock);

struct ToyModelImpl : public nn::HookableModule {
  static constexpr int64_t kVocab = 29, kDim = 13, kSeq = 6, kMicroBatch = 2;
  ToyModelImpl() {
    embed = register_module("embed", torch::nn::Embedding(kVocab, kDim));
    blocks = register_module("blocks", torch::nn::ModuleList());
    for (int i = 0; i < 3; ++i) blocks->push_back(ToyBlock(kDim, /*frozen_block=*/i == 1));
    out_bias = register_parameter("out_bias", torch::zeros({kVocab}));
  }
  torch::Tensor forward(const torch::Tensor& tokens) {
    return call_hooked(tokens, [this](const torch::Tensor& t) {
      auto h = embed(t);
      for (const auto& b : *blocks) h = b->as<ToyBlockImpl>()->forward(h);
      return torch::matmul(h, embed->weight.t()) + out_bias;  // tied output head
    });
  }
  void reset(uint64_t seed) {
    for (auto& item : named_parameters(true)) {
      if (item.key().find("frozen_scale") != std::string::npos) {
        nn::init_normal(item.value(), seed, item.key(), 0.5);
        torch::NoGradGuard g;
        item.value().add_(1.0);
      } else {
        nn::init_normal(item.value(), seed, item.key(), 0.3);
      }
    }
  }
  torch::nn::Embedding embed{nullptr};
  torch::nn::ModuleList blocks{nullptr};
  torch::Tensor out_bias;
};
TORCH_MODULE(ToyModel);

// Tokens [kMicroBatch, kSeq + 1] of global sample j of optimizer step `step`.
inline torch::Tensor toy_batch(int64_t step, int64_t first_sample) {
  auto t = torch::empty({ToyModelImpl::kMicroBatch, ToyModelImpl::kSeq + 1}, torch::kLong);
  for (int64_t b = 0; b < t.size(0); ++b) {
    const int64_t j = first_sample + b;
    for (int64_t k = 0; k < t.size(1); ++k) {
      t[b][k] = (step * 131 + j * 17 + k * 7 + (j * k) % 5) % ToyModelImpl::kVocab;
    }
  }
  return t;
}

struct ToyRun {
  static constexpr int kSteps = 6, kAccum = 2;
  static constexpr double kLr = 0.05, kWeightDecay = 0.1, kClip = 0.8;
  static double lr_at(int step) { return kLr * (1.0 - 0.1 * step); }
};

}  // namespace zeroshard::testing
