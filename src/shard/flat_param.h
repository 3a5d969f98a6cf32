// One unit's parameters of one kind (trainable or frozen), flattened into a contiguous fp32
// buffer. Module parameters become views into `full`; under optim_grads_params the bytes of
// `full` are released between uses while the storage object (and thus every view autograd
// saved) stays the same.
#pragma once

#include "shard/layout.h"
#include "zeroshard/comm.h"
#include "zeroshard/shard.h"

#include <ATen/ATen.h>

#include <string>
#include <vector>

namespace zeroshard {

struct ParamSlot : ParamInfo {
  at::Tensor param;  // the module's parameter (shares its TensorImpl)
};

class FlatParam {
 public:
  // Lays the slots out; no values yet (see materialize).
  FlatParam(std::string unit_name, bool trainable, std::vector<ParamSlot> slots, int rank, int world_size,
            bool shard_params);

  // Fills this rank's shard from `source` (or, when null, from the parameters' current
  // values), gathers the full buffer when parameters are replicated, and turns every
  // parameter into a view of the full buffer. Memory: the shard plus, while replicated, the
  // full buffer; under optim_grads_params never more than the shard. Collective when the
  // parameters are replicated.
  void materialize(ParamSource* source, Communicator& comm);

  const std::string& unit_name() const { return unit_name_; }
  bool trainable() const { return trainable_; }
  const std::vector<ParamSlot>& slots() const { return slots_; }
  const ShardLayout& layout() const { return layout_; }
  int64_t full_bytes() const { return layout_.padded * static_cast<int64_t>(sizeof(float)); }
  int64_t shard_bytes() const { return layout_.shard_size * static_cast<int64_t>(sizeof(float)); }

  // The full buffer (padded). Its bytes exist only while gathered under optim_grads_params.
  const at::Tensor& full() const { return full_; }
  // This rank's slice: a view into full() when params are replicated, own storage otherwise.
  const at::Tensor& shard() const { return shard_; }
  bool gathered() const { return gathered_; }

  // Re-allocates the full buffer's bytes (contents undefined) / frees them.
  void allocate_full();
  void free_full();

  // Copies each parameter's .grad into `flat` (zeros where a parameter has no gradient) and
  // clears the .grad fields.
  void take_grads_into(const at::Tensor& flat);

 private:
  std::string unit_name_;
  bool trainable_;
  std::vector<ParamSlot> slots_;
  ShardLayout layout_;
  int rank_;
  bool shard_params_;
  at::Tensor full_;
  at::Tensor shard_;
  bool gathered_ = true;
};

}  // namespace zeroshard
