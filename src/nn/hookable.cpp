#include "zeroshard/nn/hookable.h"

#include "util/crc32.h"

#include <torch/autograd.h>
#include <torch/custom_class.h>

#include <sstream>
#include <stdexcept>

namespace zeroshard::nn {

namespace {

using Body = std::function<std::vector<at::Tensor>(const std::vector<at::Tensor>&)>;

// What a checkpointed call keeps for its backward: the body, and what the forward produced
// (for the recompute check). The inputs are saved by autograd itself.
struct Recompute : torch::CustomClassHolder {
  Body body;
  RecomputeCheck check = RecomputeCheck::Off;
  std::string name;
  std::vector<std::vector<int64_t>> shapes;
  std::vector<at::ScalarType> dtypes;
  std::vector<uint32_t> crcs;
};

uint32_t crc_of(const at::Tensor& t) {
  const at::Tensor c = t.contiguous();
  return util::crc32(c.data_ptr(), c.nbytes());
}

void verify(const Recompute& r, const std::vector<at::Tensor>& out) {
  auto fail = [&](size_t i, const std::string& what) {
    throw std::runtime_error("activation checkpointing: the recompute of '" + r.name + "' in backward gave output " +
                             std::to_string(i) + " " + what +
                             " than its forward: the module is not deterministic (random ops without a restored "
                             "generator, or state changed between forward and backward)");
  };
  if (out.size() != r.shapes.size()) fail(0, "count " + std::to_string(out.size()) + ", another count");
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i].sizes().vec() != r.shapes[i] || out[i].scalar_type() != r.dtypes[i]) {
      std::ostringstream s;
      s << "shape " << out[i].sizes() << " / " << out[i].scalar_type() << ", another shape or dtype";
      fail(i, s.str());
    }
    if (r.check == RecomputeCheck::Bitwise && crc_of(out[i]) != r.crcs[i]) fail(i, "other values");
  }
}

// Runs the body without a graph in forward; in backward rebuilds the graph by running it
// again on the saved inputs and back-propagates through it (reentrant checkpointing).
struct CheckpointFunction : public torch::autograd::Function<CheckpointFunction> {
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, at::TensorList inputs,
                                                c10::intrusive_ptr<Recompute> r) {
    ctx->save_for_backward(inputs.vec());
    ctx->saved_data["recompute"] = c10::IValue::make_capsule(r);
    // The last input is a marker that requires grad (see checkpointed_call), not the body's.
    std::vector<at::Tensor> body_inputs(inputs.begin(), inputs.end() - 1);
    std::vector<at::Tensor> out = r->body(body_inputs);
    if (r->check != RecomputeCheck::Off) {
      for (const auto& y : out) {
        r->shapes.push_back(y.sizes().vec());
        r->dtypes.push_back(y.scalar_type());
        if (r->check == RecomputeCheck::Bitwise) r->crcs.push_back(crc_of(y));
      }
    }
    return out;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto r = c10::static_intrusive_pointer_cast<Recompute>(ctx->saved_data["recompute"].toCapsule());
    const auto saved = ctx->get_saved_variables();
    std::vector<at::Tensor> inputs;
    for (size_t i = 0; i + 1 < saved.size(); ++i) {
      inputs.push_back(saved[i].detach().requires_grad_(saved[i].requires_grad()));
    }
    std::vector<at::Tensor> out;
    {
      torch::AutoGradMode grad_on(true);
      out = r->body(inputs);
    }
    if (r->check != RecomputeCheck::Off) verify(*r, out);
    torch::autograd::variable_list roots, root_grads;
    for (size_t i = 0; i < out.size() && i < grads.size(); ++i) {
      if (out[i].requires_grad() && grads[i].defined()) {
        roots.push_back(out[i]);
        root_grads.push_back(grads[i]);
      }
    }
    if (!roots.empty()) torch::autograd::backward(roots, root_grads);  // parameter grads accumulate here
    torch::autograd::variable_list result;
    for (const auto& x : inputs) result.push_back(x.requires_grad() ? x.grad() : at::Tensor());
    result.emplace_back();  // the marker
    result.emplace_back();  // the Recompute argument
    return result;
  }
};

std::vector<at::Tensor> checkpointed_call(const std::vector<at::Tensor>& inputs, const Body& body,
                                          const ForwardHooks& hooks) {
  auto r = c10::make_intrusive<Recompute>();
  r->body = body;
  r->check = hooks.recompute_check;
  r->name = hooks.name;
  std::vector<at::Tensor> all(inputs);
  // A marker input that requires grad: without it, a module whose inputs need no gradient
  // (a first block after a frozen embedding) would give outputs without a graph, and its
  // own parameters would silently get no gradient.
  all.push_back(at::empty({0}).requires_grad_(true));
  return CheckpointFunction::apply(at::TensorList(all), r);
}

}  // namespace

std::vector<at::Tensor> HookableModule::call_hooked(std::vector<at::Tensor> inputs, const Body& body) {
  auto hooks = hooks_;  // keep alive for the call even if replaced meanwhile
  if (hooks && hooks->pre) hooks->pre(inputs);
  const bool checkpoint = hooks && hooks->checkpoint && torch::autograd::GradMode::is_enabled();
  std::vector<at::Tensor> outputs = checkpoint ? checkpointed_call(inputs, body, *hooks) : body(inputs);
  if (hooks && hooks->post) hooks->post(outputs);
  return outputs;
}

at::Tensor HookableModule::call_hooked(const at::Tensor& input,
                                       const std::function<at::Tensor(const at::Tensor&)>& body) {
  auto out = call_hooked(std::vector<at::Tensor>{input},
                         // By value: a checkpointed body runs again in backward, after this returns.
                         [body](const std::vector<at::Tensor>& in) { return std::vector<at::Tensor>{body(in[0])}; });
  return out[0];
}

}  // namespace zeroshard::nn
