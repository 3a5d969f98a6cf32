// The engine's glue to autograd: the one place that builds custom autograd nodes.
#pragma once

#include <ATen/ATen.h>

#include <functional>
#include <vector>

namespace zeroshard {

// Routes the inputs that require grad through an identity node whose backward calls
// *callback once the unit's parameter gradients are accumulated (post-backward). The
// callback must outlive the autograd graph. Returns false when no input requires grad.
bool attach_post_backward(std::vector<at::Tensor>& inputs, std::function<void()>* callback);

// Registers callback on every output that requires grad: it runs when that output's
// gradient is ready, before the unit's backward (pre-backward). Returns false if none does.
bool attach_pre_backward(const std::vector<at::Tensor>& outputs, const std::function<void()>& callback);

}  // namespace zeroshard
