#include "zeroshard/nn/deferred.h"

#include <c10/core/Storage.h>
#include <c10/core/TensorImpl.h>

namespace zeroshard::nn {

namespace {
thread_local bool g_deferred = false;
}

DeferredInit::DeferredInit() : previous_(g_deferred) { g_deferred = true; }
DeferredInit::~DeferredInit() { g_deferred = previous_; }
bool DeferredInit::active() { return g_deferred; }

at::Tensor deferred_empty(at::IntArrayRef shape, at::ScalarType dtype) {
  int64_t numel = 1;
  for (int64_t d : shape) numel *= d;
  const size_t nbytes = static_cast<size_t>(numel) * c10::elementSize(dtype);
  c10::Storage storage(c10::Storage::use_byte_size_t(), nbytes, c10::DataPtr(nullptr, c10::Device(c10::kCPU)),
                       /*allocator=*/nullptr, /*resizable=*/false);
  auto t = at::detail::make_tensor<c10::TensorImpl>(std::move(storage), c10::DispatchKeySet(c10::DispatchKey::CPU),
                                                    c10::scalarTypeToTypeMeta(dtype));
  t.unsafeGetTensorImpl()->set_sizes_contiguous(shape);
  return t;
}

bool is_deferred(const at::Tensor& t) {
  return t.defined() && t.numel() > 0 && t.has_storage() && t.storage().data() == nullptr;
}

at::Tensor new_parameter(at::IntArrayRef shape) {
  return DeferredInit::active() ? deferred_empty(shape) : at::zeros(shape, at::kFloat);
}

}  // namespace zeroshard::nn
