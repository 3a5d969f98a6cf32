// debug.fail_*: the faults tests inject into a run, in one place. At step debug.fail_at_step,
// rank debug.fail_rank throws ("exception"), issues a collective the others do not ("desync"),
// SIGKILLs itself ("sigkill"), SIGKILLs itself halfway through writing its checkpoint of that
// step ("sigkill_in_save"), or makes its loss NaN ("nan").
#pragma once

#include "train/config.h"
#include "zeroshard/comm.h"

#include <ATen/ATen.h>

namespace zeroshard::train {

class FaultInjector {
 public:
  FaultInjector(const DebugSection& debug, int rank) : debug_(debug), rank_(rank) {}
  // At the start of a step: exception, desync (an extra barrier on `comm`), sigkill.
  void before_step(int64_t step, Communicator& comm) const;
  // A micro-batch's loss, made NaN for "nan".
  at::Tensor on_loss(int64_t step, const at::Tensor& loss) const;
  // The rank that dies while saving step `step` ("sigkill_in_save"), or -1.
  int kill_rank_in_save(int64_t step) const;

 private:
  bool here(int64_t step, FailKind kind) const {
    return debug_.fail_at_step == step && debug_.fail_kind == kind && debug_.fail_rank == rank_;
  }
  DebugSection debug_;
  int rank_;
};

}  // namespace zeroshard::train
