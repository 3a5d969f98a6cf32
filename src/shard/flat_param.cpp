#include "shard/flat_param.h"

#include "shard/torch_internals.h"

#include <ATen/record_function.h>

#include <stdexcept>

namespace zeroshard::shard {

FlatParam::FlatParam(std::string unit_name, bool trainable, std::vector<ParamSlot> slots, int rank, int world_size,
                     bool shard_params, bool full_master, at::ScalarType compute_dtype, bool cast_on_use)
    : unit_name_(std::move(unit_name)), trainable_(trainable), slots_(std::move(slots)), rank_(rank),
      shard_params_(shard_params), keep_full_master_(full_master && !shard_params),
      cast_on_use_(cast_on_use && keep_full_master_ && trainable_ && compute_dtype != at::kFloat),
      compute_dtype_(compute_dtype), storage_dtype_(trainable_ ? at::kFloat : compute_dtype) {
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
}

void FlatParam::read_from_files(std::unique_ptr<FileBacked> files, bool on_use) {
  if (trainable_ || shard_params_ || keep_full_master_) {
    throw std::logic_error("FlatParam: only a replicated frozen buffer reads its parameters from files ('" +
                           unit_name_ + "')");
  }
  files_ = std::move(files);
  files_on_use_ = on_use;
}

void FlatParam::materialize(ParamSource* source, Communicator& comm) {
  if (files_) {
    // Nothing stored: in-place parameters view the mapping, converted ones a buffer loaded for
    // each use (or once, without hooks to load it).
    full_ = at::empty({files_->converted_numel()}, compute_dtype_);
    files_->bind(slots_, full_);
    gathered_ = true;
    if (files_on_use_) {
      drop_layout_bytes();
    } else {
      files_->load(slots_, full_);
    }
    return;
  }
  const int64_t begin = layout_.shard_begin(rank_);
  // Frozen under mixed precision: stored in the compute dtype. Each range is read in fp32 (what
  // sources deliver) and rounded once, as the cast of an fp32 master before a gather would.
  const bool rounded = storage_dtype_ != at::kFloat;
  at::Tensor shard = at::zeros({layout_.shard_size}, storage_dtype_);  // padding stays zero
  {
    at::NoGradGuard no_grad;
    for (const auto& s : slots_) {
      int64_t lo = 0, hi = 0;
      layout_.intersect(rank_, s.offset, s.offset + s.numel, &lo, &hi);
      if (lo >= hi) continue;
      at::Tensor dst = shard.narrow(0, lo - begin, hi - lo);
      at::Tensor values = rounded ? at::empty({hi - lo}, at::kFloat) : dst;  // one parameter's range at most
      if (source != nullptr) {
        source->read(s, lo - s.offset, hi - s.offset, values);
      } else {
        values.copy_(s.param.detach().reshape({-1}).narrow(0, lo - s.offset, hi - lo));
      }
      if (rounded) dst.copy_(values);
    }
  }
  full_ = at::empty({layout_.padded}, compute_dtype_);  // under optim_grads_params its bytes go at once
  if (shard_params_) {
    shard_ = shard;
  } else if (!mixed() || rounded) {
    // The full buffer in the stored dtype is both the stored values and the compute copy.
    comm.all_gather(shard, full_);
    if (!mixed()) master_full_ = full_;
    shard_ = full_.narrow(0, begin, layout_.shard_size);
  } else {
    at::Tensor master = at::empty({layout_.padded}, at::kFloat);
    comm.all_gather(shard, master);
    if (!cast_on_use_) full_.copy_(master);  // else cast at each use
    if (keep_full_master_) {
      master_full_ = master;
      shard_ = master.narrow(0, begin, layout_.shard_size);
    } else {
      shard_ = shard;  // optim / optim_grads: the optimizer only needs this rank's masters
    }
  }
  {
    at::NoGradGuard no_grad;
    // The parameter becomes a view into the flat buffer; autograd metadata is kept.
    for (auto& s : slots_) s.param.set_data(full_.narrow(0, s.offset, s.numel).view(s.shape));
  }
  gathered_ = true;
  if (transient()) drop_layout_bytes();
}

void FlatParam::drop_layout_bytes() {
  // Bytes allocated only to lay out the views (never written, so never resident): back to the
  // system, not into the pool, which would otherwise start with one block per unit, hand them
  // out in turn and make every unit's buffer resident over the steps (FLUX.1 [dev]: 6.95 GB
  // pooled per rank, 12 GB private on one rank).
  release_storage_bytes(full_);
  gathered_ = false;
}

void FlatParam::load_from_files() {
  if (!files_) throw std::logic_error("FlatParam::load_from_files: buffer of '" + unit_name_ + "' is not file-backed");
  if (gathered_) return;
  allocate_full();
  files_->load(slots_, full_);
}

at::Tensor FlatParam::shard_values() const {
  if (!files_) return shard_;
  const int64_t begin = layout_.shard_begin(rank_);
  return files_->read_flat(slots_, begin, begin + layout_.shard_size);
}

int64_t FlatParam::resident_bytes() const {
  if (files_) return files_on_use_ ? 0 : full_bytes();  // the mapped bytes are the page cache's
  if (shard_params_) return shard_bytes();
  if (cast_on_use_) return layout_.padded * static_cast<int64_t>(sizeof(float));  // the full master only
  if (!mixed() || storage_dtype_ != at::kFloat) return full_bytes();  // shard_ views full_
  return full_bytes() + (master_full_.defined() ? layout_.padded * static_cast<int64_t>(sizeof(float)) : shard_bytes());
}

bool FlatParam::refresh_compute_from_master() {
  if (!master_full_.defined() || master_full_.is_same(full_)) return master_full_.defined();
  if (!gathered_) return true;  // cast on use: the next use casts the updated masters
  RECORD_FUNCTION("zs::param_cast", std::vector<c10::IValue>());
  at::NoGradGuard no_grad;
  full_.copy_(master_full_);
  return true;
}

void FlatParam::cast_from_master() {
  if (!cast_on_use_) throw std::logic_error("FlatParam::cast_from_master: buffer of '" + unit_name_ + "' is not cast on use");
  if (gathered_) return;
  allocate_full();
  RECORD_FUNCTION("zs::param_cast", std::vector<c10::IValue>());  // train/op_profile.h
  at::NoGradGuard no_grad;
  full_.copy_(master_full_);
}

void FlatParam::allocate_full() {
  if (gathered_) return;
  if (bytes_pool_ != nullptr) {
    bytes_pool_->allocate(full_, static_cast<size_t>(full_bytes()));
  } else {
    allocate_storage_bytes(full_, static_cast<size_t>(full_bytes()));
  }
  gathered_ = true;
}

void FlatParam::free_full() {
  if (!gathered_) return;
  if (bytes_pool_ != nullptr) {
    bytes_pool_->release(full_);
  } else {
    release_storage_bytes(full_);
  }
  gathered_ = false;
  if (files_) files_->done();
}

void FlatParam::take_grads_into(const at::Tensor& flat) {
  // Every element is written exactly once: a gradient, or zero (no gradient, padding).
  RECORD_FUNCTION("zs::grad_copy", std::vector<c10::IValue>());  // train/op_profile.h
  for (auto& s : slots_) {
    at::Tensor& g = s.param.mutable_grad();
    at::Tensor dst = flat.narrow(0, s.offset, s.numel);
    if (g.defined() && g.is_sparse()) {  // the rows of an embedding used without its tied head
      dst.zero_();
      const at::Tensor rows = g._values().reshape({g._values().size(0), -1});
      dst.view({s.shape[0], -1}).index_add_(0, g._indices()[0], rows.to(dst.scalar_type()));
      g.reset();
    } else if (g.defined()) {
      dst.copy_(g.reshape({-1}));
      g.reset();
    } else {
      dst.zero_();
    }
  }
  flat.narrow(0, layout_.numel, layout_.padded - layout_.numel).zero_();
}

}  // namespace zeroshard::shard
