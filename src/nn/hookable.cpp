#include "zeroshard/nn/hookable.h"

namespace zeroshard::nn {

std::vector<at::Tensor> HookableModule::call_hooked(std::vector<at::Tensor> inputs, const Body& body) {
  auto hooks = hooks_;  // keep alive for the call even if replaced meanwhile
  if (hooks && hooks->pre) hooks->pre(inputs);
  std::vector<at::Tensor> outputs = body(inputs);
  if (hooks && hooks->post) hooks->post(outputs);
  return outputs;
}

at::Tensor HookableModule::call_hooked(const at::Tensor& input,
                                       const std::function<at::Tensor(const at::Tensor&)>& body) {
  auto out = call_hooked(std::vector<at::Tensor>{input},
                         [&](const std::vector<at::Tensor>& in) { return std::vector<at::Tensor>{body(in[0])}; });
  return out[0];
}

}  // namespace zeroshard::nn
