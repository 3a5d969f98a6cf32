// The engine's only contact with libtorch internals (see torch_internals.h, docs/porting.md).
#include "shard/torch_internals.h"

#include <c10/core/CPUAllocator.h>
#include <c10/core/StorageImpl.h>
#include <torch/autograd.h>

namespace zeroshard::shard {

void release_storage_bytes(const at::Tensor& t) {
  c10::StorageImpl* storage = t.storage().unsafeGetStorageImpl();
  storage->set_data_ptr_noswap(c10::GetCPUAllocator()->allocate(0));
  storage->set_nbytes(0);
}

void allocate_storage_bytes(const at::Tensor& t, size_t nbytes) {
  c10::StorageImpl* storage = t.storage().unsafeGetStorageImpl();
  storage->set_data_ptr_noswap(c10::GetCPUAllocator()->allocate(nbytes));
  storage->set_nbytes(nbytes);
}

void StorageBytesPool::allocate(const at::Tensor& t, size_t nbytes) {
  if (nbytes >= min_bytes_) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = free_.find(nbytes);
    if (it != free_.end() && !it->second.empty()) {
      c10::StorageImpl* storage = t.storage().unsafeGetStorageImpl();
      storage->set_data_ptr_noswap(std::move(it->second.back()));
      storage->set_nbytes(nbytes);
      it->second.pop_back();
      pooled_bytes_ -= nbytes;
      return;
    }
  }
  allocate_storage_bytes(t, nbytes);
}

void StorageBytesPool::release(const at::Tensor& t) {
  c10::StorageImpl* storage = t.storage().unsafeGetStorageImpl();
  const size_t nbytes = storage->nbytes();
  if (nbytes == 0 || nbytes < min_bytes_) {
    release_storage_bytes(t);
    return;
  }
  c10::DataPtr bytes = storage->set_data_ptr(c10::GetCPUAllocator()->allocate(0));
  storage->set_nbytes(0);
  std::lock_guard<std::mutex> lock(mutex_);
  free_[nbytes].push_back(std::move(bytes));
  pooled_bytes_ += nbytes;
}

size_t StorageBytesPool::pooled_bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return pooled_bytes_;
}

namespace {

// Identity in forward; in backward calls the unit's post-backward callback. The engine runs
// it after the unit's parameter gradients: every node of the unit was created after this
// one, and the CPU engine runs ready nodes (and AccumulateGrad first) by that order.
struct PostBackwardNode : public torch::autograd::Function<PostBackwardNode> {
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx,
                                                at::TensorList inputs, int64_t callback) {
    ctx->saved_data["callback"] = callback;
    torch::autograd::variable_list out;
    out.reserve(inputs.size());
    for (auto& x : inputs) out.push_back(x.view_as(x));
    return out;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto* cb = reinterpret_cast<std::function<void()>*>(ctx->saved_data["callback"].toInt());
    (*cb)();
    torch::autograd::variable_list out(grads.begin(), grads.end());
    out.emplace_back();  // no gradient for the callback argument
    return out;
  }
};

}  // namespace

bool attach_post_backward(std::vector<at::Tensor>& inputs, std::function<void()>* callback) {
  std::vector<size_t> idx;
  torch::autograd::variable_list needing;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i].defined() && inputs[i].requires_grad()) {
      idx.push_back(i);
      needing.push_back(inputs[i]);
    }
  }
  if (needing.empty()) return false;
  // Passed as a TensorList: apply() only sees tensors given as Tensor or TensorList (a
  // std::vector would be taken for a non-tensor argument and cut the graph).
  auto out = PostBackwardNode::apply(at::TensorList(needing), reinterpret_cast<int64_t>(callback));
  for (size_t k = 0; k < idx.size(); ++k) inputs[idx[k]] = out[k];
  return true;
}

bool attach_pre_backward(const std::vector<at::Tensor>& outputs, const std::function<void()>& callback) {
  bool any = false;
  for (const auto& y : outputs) {
    if (y.defined() && y.requires_grad()) {
      // Through TensorBase: an output whose gradient never arrives (a video VAE's cache frames
      // after the last chunk) calls the hook with an undefined tensor, which at::Tensor's
      // register_hook wrapper asserts against.
      const at::TensorBase& hooked = y;
      hooked.register_hook([callback](const at::TensorBase&) { callback(); });
      any = true;
    }
  }
  return any;
}

}  // namespace zeroshard::shard
