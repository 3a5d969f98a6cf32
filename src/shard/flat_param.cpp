#include "shard/flat_param.h"

#include <c10/core/CPUAllocator.h>
#include <c10/core/StorageImpl.h>

#include <stdexcept>

namespace zeroshard {

FlatParam::FlatParam(std::string unit_name, bool trainable, std::vector<ParamSlot> slots, int rank, int world_size,
                     bool shard_params)
    : unit_name_(std::move(unit_name)), trainable_(trainable), slots_(std::move(slots)), rank_(rank),
      shard_params_(shard_params) {
  int64_t total = 0;
  for (auto& s : slots_) {
    if (s.param.scalar_type() != at::kFloat) {
      throw std::invalid_argument("fully_shard: parameter '" + s.name + "' has dtype " +
                                  std::string(c10::toString(s.param.scalar_type())) +
                                  "; the engine keeps float32 parameters (mixed precision is a policy on top)");
    }
    s.offset = total;
    s.numel = s.param.numel();
    s.shape = s.param.sizes().vec();
    total += s.numel;
  }
  layout_ = ShardLayout(total, world_size);
  full_ = at::zeros({layout_.padded}, at::kFloat);
  {
    at::NoGradGuard no_grad;
    for (auto& s : slots_) {
      full_.narrow(0, s.offset, s.numel).copy_(s.param.detach().reshape({-1}));
      // The parameter becomes a view into the flat buffer; autograd metadata is kept.
      s.param.set_data(full_.narrow(0, s.offset, s.numel).view(s.shape));
    }
  }
  if (shard_params_) {
    shard_ = full_.narrow(0, layout_.shard_begin(rank_), layout_.shard_size).clone();
    free_full();
  } else {
    shard_ = full_.narrow(0, layout_.shard_begin(rank_), layout_.shard_size);
  }
}

void FlatParam::allocate_full() {
  if (gathered_) return;
  c10::StorageImpl* storage = full_.storage().unsafeGetStorageImpl();
  const size_t nbytes = static_cast<size_t>(full_bytes());
  storage->set_data_ptr_noswap(c10::GetCPUAllocator()->allocate(nbytes));
  storage->set_nbytes(nbytes);
  gathered_ = true;
}

void FlatParam::free_full() {
  if (!gathered_) return;
  c10::StorageImpl* storage = full_.storage().unsafeGetStorageImpl();
  storage->set_data_ptr_noswap(c10::GetCPUAllocator()->allocate(0));
  storage->set_nbytes(0);
  gathered_ = false;
}

void FlatParam::take_grads_into(const at::Tensor& flat) {
  // Every element is written exactly once: a gradient, or zero (no gradient, padding).
  for (auto& s : slots_) {
    at::Tensor& g = s.param.mutable_grad();
    at::Tensor dst = flat.narrow(0, s.offset, s.numel);
    if (g.defined()) {
      dst.copy_(g.reshape({-1}));
      g.reset();
    } else {
      dst.zero_();
    }
  }
  flat.narrow(0, layout_.numel, layout_.padded - layout_.numel).zero_();
}

}  // namespace zeroshard
