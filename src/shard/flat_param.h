// One unit's parameters of one kind (trainable or frozen), flattened into a contiguous
// buffer (fp32; a frozen buffer under bf16 mixed precision is stored in bf16, see FlatParam). Module parameters become views into `full`; under optim_grads_params the bytes of
// `full` are released between uses while the storage object (and thus every view autograd
// saved) stays the same.
#pragma once

#include "shard/file_backed.h"
#include "shard/layout.h"
#include "zeroshard/comm.h"
#include "zeroshard/shard.h"

#include <ATen/ATen.h>

#include <memory>
#include <string>
#include <vector>

namespace zeroshard::shard {

class StorageBytesPool;  // shard/torch_internals.h

struct ParamSlot : ParamInfo {
  at::Tensor param;  // the module's parameter (shares its TensorImpl)
};

// Mixed precision (compute dtype bf16): the module's parameters view a bf16 `full` buffer,
// while the fp32 master values live in `shard` (and, under no_shard, in a full fp32 master the
// optimizer updates). Gathers move bf16; gradients arrive in bf16 and are reduced in fp32.
//
// no_shard under mixed precision keeps the whole fp32 master, so a persistent bf16 copy of it would
// be 2 more bytes per parameter for nothing (18 instead of 16): the compute buffer is cast from
// the master when the unit is used (its pre-forward, its pre-backward: `cast_on_use`) and freed
// after, like a gathered unit under optim_grads_params. The cast rounds the same fp32 values once,
// so what forward sees is bitwise what a persistent copy refreshed after each step held.
//
// A frozen buffer never updates, so under mixed precision it keeps no fp32 master: `shard` is
// the bf16 rounding of the source's fp32 values (2 bytes per element; replicated strategies keep
// only the bf16 `full` buffer, `shard` a view into it). What forward sees is the same bf16
// rounding an fp32 master would have been gathered as, so results do not change.
class FlatParam {
 public:
  // Lays the slots out; no values yet (see materialize). full_master: keep the whole buffer's
  // fp32 master values (no_shard, whose optimizer updates all of them). cast_on_use: with a
  // full master and a compute dtype other than fp32, keep no compute copy between uses (the
  // engine casts it in the unit's hooks; a unit without hooks must keep it: pass false).
  FlatParam(std::string unit_name, bool trainable, std::vector<ParamSlot> slots, int rank, int world_size,
            bool shard_params, bool full_master, at::ScalarType compute_dtype, bool cast_on_use = false);

  // Fills this rank's shard from `source` (or, when null, from the parameters' current
  // values), gathers the full buffer when parameters are replicated, and turns every
  // parameter into a view of the full buffer. Memory: the shard plus, while replicated, the
  // full buffer; under optim_grads_params never more than the shard. Collective when the
  // parameters are replicated.
  void materialize(ParamSource* source, Communicator& comm);
  // FrozenStorage::File, before materialize (a frozen buffer, neither sharded nor with a
  // master): the parameters are read where they lie in the files `files` maps, never stored or
  // gathered (shard/file_backed.h). on_use: the converted parameters' buffer exists only while
  // the unit is gathered (load_from_files in its hooks); false: loaded once and kept.
  void read_from_files(std::unique_ptr<FileBacked> files, bool on_use);
  bool file_backed() const { return files_ != nullptr; }
  const FileBacked* files() const { return files_.get(); }
  // FrozenStorage::File: before the unit runs (allocates the converted buffer; FileBacked::load).
  void load_from_files();
  // This rank's slice in storage_dtype(): shard(), or for a file-backed buffer the same values
  // read from its files.
  at::Tensor shard_values() const;

  const std::string& unit_name() const { return unit_name_; }
  bool trainable() const { return trainable_; }
  const std::vector<ParamSlot>& slots() const { return slots_; }
  const ShardLayout& layout() const { return layout_; }
  at::ScalarType compute_dtype() const { return compute_dtype_; }
  bool mixed() const { return compute_dtype_ != at::kFloat; }
  // The dtype of `shard`: fp32 masters, or the compute dtype for a frozen buffer under mixed
  // precision (nothing to update, so no fp32 copy).
  at::ScalarType storage_dtype() const { return storage_dtype_; }
  // Bytes of the full compute buffer (what a gather materializes) and of this rank's shard.
  // A file-backed buffer: the converted parameters' buffer, and no shard.
  int64_t full_bytes() const {
    return (files_ ? files_->converted_numel() : layout_.padded) * static_cast<int64_t>(c10::elementSize(compute_dtype_));
  }
  int64_t shard_bytes() const {
    return files_ ? 0 : layout_.shard_size * static_cast<int64_t>(c10::elementSize(storage_dtype_));
  }
  // Parameter bytes this rank keeps between steps (masters or frozen values + a replicated
  // compute copy).
  int64_t resident_bytes() const;

  // The full compute buffer (padded) the parameters view. Its bytes exist only while
  // gathered under optim_grads_params.
  const at::Tensor& full() const { return full_; }
  // This rank's slice in storage_dtype(): the fp32 masters (a view into the fp32 full master
  // when there is one), or a frozen buffer's bf16 values (a view into `full` when replicated).
  const at::Tensor& shard() const { return shard_; }
  // The fp32 master values of the whole buffer, when this rank keeps them (replicated fp32
  // parameters, or no_shard); undefined otherwise.
  const at::Tensor& master_full() const { return master_full_; }
  bool gathered() const { return gathered_; }
  // Sharded (gathered for use, freed after) rather than replicated on every rank.
  bool shards_params() const { return shard_params_; }
  // The compute buffer is cast from the full fp32 master for each use and freed after.
  bool casts_on_use() const { return cast_on_use_; }
  // The compute buffer exists only while in use (gathered, or cast), not between uses.
  bool transient() const { return shard_params_ || cast_on_use_ || (files_ && files_on_use_); }

  // Re-allocates the full buffer's bytes (contents undefined) / frees them: through `pool`
  // when one is set (the engine's, which outlives its buffers), else from and to malloc.
  void allocate_full();
  void free_full();
  // After materialize: the transient buffer's first bytes go back without entering the pool.
  void drop_layout_bytes();
  void use_bytes_pool(StorageBytesPool* pool) { bytes_pool_ = pool; }
  // After the fp32 masters changed: the compute buffer from this rank's master values (the
  // whole buffer with a full master; otherwise fills nothing and returns false). A cast-on-use
  // buffer that is not in use has nothing to refresh: its next use casts the new masters.
  bool refresh_compute_from_master();
  // cast_on_use: allocates the compute buffer and casts the full master into it (no-op while
  // it is already there).
  void cast_from_master();

  // Copies each parameter's .grad into `flat` (fp32; zeros where a parameter has no gradient)
  // and clears the .grad fields.
  void take_grads_into(const at::Tensor& flat);

 private:
  std::string unit_name_;
  bool trainable_;
  std::vector<ParamSlot> slots_;
  ShardLayout layout_;
  int rank_;
  bool shard_params_;
  bool keep_full_master_;
  bool cast_on_use_;
  at::ScalarType compute_dtype_;
  at::ScalarType storage_dtype_;
  at::Tensor full_;
  at::Tensor master_full_;
  at::Tensor shard_;
  bool gathered_ = true;
  std::unique_ptr<FileBacked> files_;
  bool files_on_use_ = false;
  StorageBytesPool* bytes_pool_ = nullptr;
};

}  // namespace zeroshard::shard
