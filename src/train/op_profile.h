// Where one training step's CPU time went (`run.profile_step`), from libtorch's operator profiler:
// each operator's self time (its time less its children's) on this rank's threads, put in a
// class by the innermost zeroshard scope around it — "zs::attention" (nn::attention's kernels,
// forward and backward), "zs::optimizer" (the optimizer step), "zs::grad_copy" and
// "zs::param_cast" ("engine": the sharding engine's copies of gradients into its flat fp32
// buffers and its casts of fp32 masters to the compute dtype) — or else by its name: GEMM
// (aten::mm, addmm, bmm, baddbmm, addmv, mv, dot), other aten operators (elementwise, norms,
// reductions, copies: "elementwise"), and the self time of the autograd nodes and other
// non-aten scopes ("autograd"). The trainer adds the communication it waited for and calls the
// rest of the step's wall time overhead (engine hooks, data, Python-free glue between operators).
#pragma once

#include <nlohmann/json.hpp>

#include <string>

namespace zeroshard::train {

class OpProfile {
 public:
  OpProfile();  // starts recording (one at a time per process)
  ~OpProfile();
  OpProfile(const OpProfile&) = delete;
  OpProfile& operator=(const OpProfile&) = delete;
  // Stops recording, given the step's wall time and waited-for communication: {"step_s",
  // "gemm_s", "attention_s", "optimizer_s", "engine_s", "elementwise_s", "autograd_s",
  // "comm_exposed_s", "overhead_s" (the step's rest), "top_ops": [[name, self seconds], ...]
  // (the 12 largest), "copy_callers": [[the innermost (up to) three ranges around it, self
  // seconds], ...] (where aten::copy_'s time went: casts, contiguous copies, gradient copies;
  // the 12 largest)}.
  // Input shapes are not recorded: at real size their records cost gigabytes.
  nlohmann::json finish(double step_s, double comm_exposed_s);
  // One line: each kind's seconds and share of the step.
  static std::string summary(const nlohmann::json& profile);

 private:
  bool running_ = false;
};

}  // namespace zeroshard::train
