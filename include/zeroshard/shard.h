// The sharding engine's public API: wrap any torch::nn::Module, train it with one of the
// four ZeRO strategies (Megatron-FSDP names), with bitwise-identical results across them.
//
//   auto comm = zeroshard::make_communicator(zeroshard::RendezvousInfo::from_env());
//   auto sharded = zeroshard::fully_shard(model, comm, {zeroshard::Strategy::OptimGradsParams});
//   zeroshard::ShardedAdamW optim(sharded, {/*lr*/ 3e-4});
//   for each step: for each micro-batch: sharded->backward(loss_fn(model->forward(x)));
//                  double norm = sharded->finish_gradients(/*max_norm*/ 1.0);
//                  optim.step(lr);
//
// The engine's internals live under src/shard (docs/architecture.md, "The engine").
#pragma once

#include "zeroshard/comm.h"
#include "zeroshard/nn/hookable.h"
#include "zeroshard/param_source.h"

#include <torch/nn/module.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace zeroshard {

// Where frozen parameters (requires_grad = false: a LoRA base, a frozen tower) live.
enum class FrozenStorage {
  Memory,  // this rank's shard in memory, gathered like any buffer (bf16 under bf16 param_dtype)
  // Read where they lie in the files the param_source reads (ParamSource::locate), memory-mapped
  // read-only and shared by every rank of a host through the page cache: never sharded, never
  // all-gathered, no private copy. A parameter stored whole in the compute dtype is used in place;
  // any other (another dtype, pieces concatenated) is converted into a buffer of its unit's when
  // the unit is gathered and freed with it. Computed ones (seeded init) stay in memory.
  File,
};

enum class Strategy {
  NoShard = 0,           // zero 0 / DDP: everything replicated, gradients all-reduced
  Optim = 1,             // zero 1: optimizer state sharded
  OptimGrads = 2,        // zero 2: + gradients sharded
  OptimGradsParams = 3,  // zero 3 / FSDP: + parameters sharded, gathered per unit
};

// Accepts "no_shard", "optim", "optim_grads", "optim_grads_params" and the zero-stage
// aliases "0".."3"; throws std::invalid_argument listing the valid names otherwise.
Strategy parse_strategy(const std::string& name);
Strategy strategy_from_zero_stage(int stage);
std::string strategy_name(Strategy s);

// Decides which submodules become units (one flat buffer, gathered and freed together).
// Called for every HookableModule below the root, in pre-order; a module inside a chosen
// unit is not offered. The root's remaining parameters always form the root unit.
using WrapPolicy = std::function<bool(const std::string& qualified_name, const torch::nn::Module& module)>;
WrapPolicy wrap_every_hookable();  // the default

struct ShardOptions {
  ShardOptions() = default;
  ShardOptions(Strategy s) : strategy(s) {}  // NOLINT: implicit, so {Strategy::Optim} reads naturally
  Strategy strategy = Strategy::OptimGradsParams;
  WrapPolicy wrap_policy;  // empty: wrap_every_hookable()
  // Hybrid sharding (HSDP): 0 shards over every rank. Otherwise consecutive groups of this
  // many ranks each hold one sharded copy of the model; gradients are reduce-scattered inside
  // a group, then all-reduced across the copies. Must divide the world size.
  int shard_group_size = 0;
  // optim_grads_params: gather the units the last forward ran next (in backward: before)
  // while one runs, and the next forward's first units after the optimizer step. At most
  // max_live_units units besides the root are gathered at once, the running one included.
  bool prefetch = true;
  int max_live_units = 2;
  // optim_grads_params: a flat buffer of at most this many elements stays gathered (one
  // all-gather after each step instead of two per micro-batch); its gradient and optimizer
  // state stay sharded. 0: every buffer is sharded.
  int64_t persistence_threshold = 0;
  // Consecutive units whose gradients are smaller than this many bytes share one
  // reduce-scatter (bitwise equal to one per unit). 0: one reduce-scatter per unit.
  int64_t reduce_bucket_bytes = 0;
  // Mixed precision: parameters are gathered and computed in param_dtype (kFloat or
  // kBFloat16); masters and optimizer state stay fp32 in the shards. Frozen parameters
  // (requires_grad = false) have no master: under kBFloat16 they are stored as the bf16
  // rounding of their source values (2 bytes each). Gradients are reduce-scattered in
  // reduce_dtype (kFloat or kBFloat16) and accumulated in fp32.
  at::ScalarType param_dtype = at::kFloat;
  at::ScalarType reduce_dtype = at::kFloat;
  // Activation checkpointing of every unit but the root: activations are recomputed in
  // backward, inside the gather done for backward. Exact; recompute_check verifies each
  // recompute against its forward and names the unit that differs.
  bool activation_checkpointing = false;
  nn::RecomputeCheck recompute_check = nn::RecomputeCheck::Off;
  // Values for every parameter; required when the model was built inside nn::DeferredInit.
  // Empty: the module's current parameter values (rank r's values of its own shard win).
  std::shared_ptr<ParamSource> param_source;
  // FrozenStorage::File keeps param_source for the run (it serves the converted parameters)
  // and maps its files; the results are bitwise those of Memory.
  FrozenStorage frozen_storage = FrozenStorage::Memory;
  // FrozenStorage::File: where the frozen parameters the files hold in another dtype or layout are
  // written once, converted, and then used in place (shard/converted_copy.h). Empty: they are
  // converted into a transient buffer at each gather instead.
  std::string converted_copy_dir;
};

// One unit's flat buffer of one kind, as laid out at this world size.
struct FlatBufferInfo {
  std::string unit;    // qualified module name; "<root>" for the root remainder
  bool trainable = true;
  int64_t numel = 0;   // real elements
  int64_t padded = 0;  // numel rounded up to a multiple of the world size
  int64_t shard_size = 0;
  // The dtype of the stored shard (local_shards()): float32 masters, or bfloat16 for a frozen
  // buffer under bf16 param_dtype (it never updates, so it keeps no fp32 copy).
  at::ScalarType dtype = at::kFloat;
  // Frozen and read from the model's files (FrozenStorage::File): local_shards() reads this
  // rank's slice from them, the same bits a Memory buffer stores.
  bool file_backed = false;
  std::vector<ParamInfo> params;
  std::string key() const { return unit + (trainable ? "/trainable" : file_backed ? "/frozen_file" : "/frozen"); }
};

// Per-rank bytes of model state (fp32), as the ZeRO paper counts them.
struct MemoryStats {
  int64_t num_params = 0;            // Ψ: parameters of the model (trainable + frozen)
  int64_t num_trainable = 0;
  int64_t params_bytes = 0;          // resident parameter storage (full or shard; frozen bf16: 2 bytes each)
  int64_t grads_bytes = 0;           // persistent gradient storage (full or shard)
  int64_t optim_bytes = 0;           // optimizer state (exp_avg + exp_avg_sq), set by the optimizer
  int64_t gathered_bytes = 0;        // currently gathered unit parameters (optim_grads_params)
  int64_t gathered_peak_bytes = 0;   // peak of the above since the last reset
  int64_t largest_unit_bytes = 0;    // largest unit's gathered size
  // Tensors the engine holds only for the moment (gathered units, the bf16 copies gathers
  // send, gradients on their way through a reduce-scatter): tells a count of live bytes the
  // model's own tensors (activations) from the engine's.
  int64_t transient_bytes = 0;
  // FrozenStorage::File: frozen bytes used in place from memory-mapped files (page cache shared
  // by the host's ranks, not counted in params_bytes), and those converted into a unit's buffer
  // at each gather (counted in gathered_bytes while gathered).
  int64_t mapped_bytes = 0;
  int64_t converted_bytes = 0;
  // Bytes of freed gathered / cast / converted buffers the engine keeps for the next buffer of
  // their size (resident, private).
  int64_t pooled_bytes = 0;
  int64_t model_state_bytes() const { return params_bytes + grads_bytes + optim_bytes; }
};

class ShardedModel {
 public:
  ShardedModel(std::shared_ptr<torch::nn::Module> module, std::shared_ptr<Communicator> comm,
               ShardOptions options);
  ~ShardedModel();
  ShardedModel(const ShardedModel&) = delete;
  ShardedModel& operator=(const ShardedModel&) = delete;

  // Runs loss.backward() and completes this micro-batch's gradient reduction: every unit's
  // gradient is reduce-scattered (summed over ranks) and accumulated into its shard.
  // last_micro_batch = false on earlier micro-batches saves no_shard / optim the all-gathers
  // of the full gradient (any value is correct).
  void backward(const at::Tensor& loss, bool last_micro_batch = true);
  // After the last micro-batch of a step: the global L2 norm of the mean gradient (the value
  // a single process gets), before clipping to max_norm (when > 0). The optimizer applies
  // the mean and the clip factor in its own pass.
  double finish_gradients(double max_norm);
  // Instead of an optimizer step (a step skipped for a non-finite loss): drops the
  // accumulated gradients; parameters stay as they are.
  void discard_gradients();

  Strategy strategy() const;
  const std::shared_ptr<torch::nn::Module>& module() const;
  // Every rank of the job.
  Communicator& comm() const;
  // The ranks that share one copy of the model (its layouts, gathers, reduce-scatters): the
  // same as comm() unless sharding is hybrid. replica(): this rank's copy, of num_replicas().
  Communicator& shard_comm() const;
  int replica() const;
  int num_replicas() const;
  int num_units() const;
  std::vector<std::string> unit_names() const;
  // What the engine did that the run's log should say (the converted copy it wrote or reused).
  const std::vector<std::string>& notes() const;

  MemoryStats memory() const;
  void reset_gathered_peak();
  // What this rank sent and received, over the job's communicator and the hybrid groups.
  CommStats comm_stats() const;
  // Seconds the calling thread spent blocked on collectives since the last reset.
  double exposed_comm_seconds() const;
  void reset_exposed_comm();

  // This rank's slices of every flat buffer, unit by unit, trainable then frozen (fp32 masters;
  // frozen buffers under bf16 param_dtype in bf16, FlatBufferInfo::dtype): identical bits under
  // every strategy at the same world size (sliced over shard_comm()).
  std::vector<at::Tensor> local_shards() const;
  // One of them (index into flat_buffers()): a file-backed buffer's slice is read from its files
  // for the call, so writers take one buffer at a time instead of every slice at once.
  at::Tensor local_shard(size_t buffer) const;
  // The layout of those buffers, in the same order.
  std::vector<FlatBufferInfo> flat_buffers() const;
  // Runs fn(name, full float32 tensor) for every parameter, gathering one buffer at a time.
  // A collective: every rank must call it.
  void for_each_full_parameter(const std::function<void(const std::string&, const at::Tensor&)>& fn);

  class Impl;  // src/shard/engine.h

 private:
  friend struct EngineAccess;  // src/shard/engine_internal.h: the optimizer's hand-over
  std::unique_ptr<Impl> impl_;
};

std::shared_ptr<ShardedModel> fully_shard(std::shared_ptr<torch::nn::Module> module,
                                          std::shared_ptr<Communicator> comm, ShardOptions options = {});

}  // namespace zeroshard
