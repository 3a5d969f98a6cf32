// Forward hook points for torch::nn modules. libtorch's C++ modules have no forward hooks;
// a module that derives from HookableModule and runs its forward through call_hooked()
// lets an engine (e.g. the sharding engine) act before and after it, without the module
// knowing anything about that engine.
#pragma once

#include <torch/nn/module.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace zeroshard::nn {

// What activation checkpointing verifies when it recomputes a module in backward.
enum class RecomputeCheck {
  Off,      // nothing
  Shape,    // each output's shape and dtype
  Bitwise,  // and its bytes (a CRC-32 of each output kept from the forward)
};

struct ForwardHooks {
  // Called with the module's tensor inputs; may replace them (same count).
  std::function<void(std::vector<at::Tensor>& inputs)> pre;
  // Called with the module's tensor outputs; may replace them (same count).
  std::function<void(std::vector<at::Tensor>& outputs)> post;

  // Activation checkpointing: when training, the body runs without keeping its activations
  // and runs again in backward to rebuild them (between pre and post, so an engine's
  // gather for backward serves the recompute). `name` is for error messages.
  bool checkpoint = false;
  RecomputeCheck recompute_check = RecomputeCheck::Off;
  std::string name;
};

class HookableModule : public torch::nn::Module {
 public:
  using torch::nn::Module::Module;

  void set_forward_hooks(std::shared_ptr<ForwardHooks> hooks) { hooks_ = std::move(hooks); }
  const std::shared_ptr<ForwardHooks>& forward_hooks() const { return hooks_; }

 protected:
  using Body = std::function<std::vector<at::Tensor>(const std::vector<at::Tensor>&)>;
  std::vector<at::Tensor> call_hooked(std::vector<at::Tensor> inputs, const Body& body);
  at::Tensor call_hooked(const at::Tensor& input, const std::function<at::Tensor(const at::Tensor&)>& body);

 private:
  std::shared_ptr<ForwardHooks> hooks_;
};

}  // namespace zeroshard::nn
