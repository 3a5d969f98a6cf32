// Deferred parameters: modules built inside a DeferredInit scope get parameters with their
// shape and dtype but no bytes (a CPU storage with a null data pointer). fully_shard then
// materializes them unit by unit from a ParamSource, keeping only this rank's shard, so a
// model larger than one rank's memory never exists whole (the role of PyTorch's meta device,
// whose tensors cannot be turned into CPU tensors in place from C++).
#pragma once

#include <ATen/ATen.h>

namespace zeroshard::nn {

// While alive (on this thread), new_parameter() returns deferred tensors.
class DeferredInit {
 public:
  DeferredInit();
  ~DeferredInit();
  DeferredInit(const DeferredInit&) = delete;
  DeferredInit& operator=(const DeferredInit&) = delete;
  static bool active();

 private:
  bool previous_;
};

// A float32 tensor of `shape`: deferred inside a DeferredInit scope, else zero-filled.
at::Tensor new_parameter(at::IntArrayRef shape);

// A tensor with shape and dtype but no bytes; reading its data is a bug (null pointer).
at::Tensor deferred_empty(at::IntArrayRef shape, at::ScalarType dtype = at::kFloat);
bool is_deferred(const at::Tensor& t);

}  // namespace zeroshard::nn
