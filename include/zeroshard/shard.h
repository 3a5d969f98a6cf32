// The sharding engine's public API: wrap any torch::nn::Module, train it with one of the
// four ZeRO strategies (Megatron-FSDP names), with bitwise-identical results across them.
//
//   auto comm = zeroshard::make_communicator(zeroshard::RendezvousInfo::from_env());
//   auto sharded = zeroshard::fully_shard(model, comm, {zeroshard::Strategy::OptimGradsParams});
//   zeroshard::ShardedAdamW optim(sharded, {/*lr*/ 3e-4});
//   for each step: for each micro-batch: sharded->backward(loss_fn(model->forward(x)));
//                  double norm = sharded->finish_gradients(/*max_norm*/ 1.0);
//                  optim.step(lr);
#pragma once

#include "zeroshard/comm.h"
#include "zeroshard/nn/hookable.h"

#include <torch/nn/module.h>

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace zeroshard {

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
inline bool shards_grads(Strategy s) { return s == Strategy::OptimGrads || s == Strategy::OptimGradsParams; }
inline bool shards_params(Strategy s) { return s == Strategy::OptimGradsParams; }
inline bool shards_optim(Strategy s) { return s != Strategy::NoShard; }

// Decides which submodules become units (one flat buffer, gathered and freed together).
// Called for every HookableModule below the root, in pre-order; a module inside a chosen
// unit is not offered. The root's remaining parameters always form the root unit.
using WrapPolicy = std::function<bool(const std::string& qualified_name, const torch::nn::Module& module)>;
WrapPolicy wrap_every_hookable();  // the default

// A parameter as the engine lays it out: name (the first qualified name of a tied parameter),
// full shape, and its place in its unit's flat buffer.
struct ParamInfo {
  std::string name;
  std::vector<int64_t> shape;
  int64_t offset = 0;  // into the flat buffer, in elements
  int64_t numel = 0;
};

// Where parameter values come from while fully_shard builds the shards. Each rank asks only
// for the elements it keeps, one parameter range at a time, so a model built inside
// nn::DeferredInit never exists whole on one rank (seeded init, a safetensors file, a
// checkpoint written at any world size).
class ParamSource {
 public:
  virtual ~ParamSource() = default;
  // Called once with every parameter before any read: throw naming the parameter (and the
  // file) when one is missing, has another shape, or when the source holds extra tensors.
  virtual void check(const std::vector<ParamInfo>& params) { (void)params; }
  // Writes elements [begin, end) of the row-major flattening of `param` into `out`, a
  // contiguous float32 tensor of end - begin elements.
  virtual void read(const ParamInfo& param, int64_t begin, int64_t end, at::Tensor out) = 0;
};

// A source that computes each whole parameter with fn(name, tensor) (e.g. seeded init) and
// keeps the requested range: memory is one parameter at a time.
std::shared_ptr<ParamSource> param_source_from_init(std::function<void(const std::string&, at::Tensor&)> fn);

// Routes each parameter to one of two sources: those for which take_from_second(name) holds
// come from `second` (e.g. fresh LoRA adapters from the seeded init), the rest from `first`
// (e.g. the base model's safetensors file). Each source checks only its own parameters.
std::shared_ptr<ParamSource> combine_param_sources(std::shared_ptr<ParamSource> first,
                                                   std::shared_ptr<ParamSource> second,
                                                   std::function<bool(const std::string&)> take_from_second);

// Serves parameters named "<prefix>rest" from `inner`, which knows them as "rest" (a frozen
// tower's own safetensors file inside a pipeline). Combine it with combine_param_sources.
std::shared_ptr<ParamSource> prefixed_param_source(std::shared_ptr<ParamSource> inner, const std::string& prefix);

struct ShardOptions {
  ShardOptions() = default;
  ShardOptions(Strategy s) : strategy(s) {}  // NOLINT: implicit, so {Strategy::Optim} reads naturally
  Strategy strategy = Strategy::OptimGradsParams;
  WrapPolicy wrap_policy;  // empty: wrap_every_hookable()
  // Hybrid sharding (HSDP; Megatron-FSDP's outer_dp_sharding_strategy = no_shard): 0 shards
  // over every rank. Otherwise consecutive groups of this many ranks (one host's ranks, say)
  // each hold one sharded copy of the model, and the copies are replicas: gradients are
  // reduce-scattered inside the group, then all-reduced across the groups, so the large
  // collectives stay inside a host. The world size must be a multiple of it.
  int shard_group_size = 0;
  // optim_grads_params: while a unit runs forward, start the all-gathers of the units that
  // ran after it in the previous forward (re-recorded every forward); in backward, of the ones
  // that ran before it; after the optimizer step, of the next forward's first units. At most
  // max_live_units units (besides the root, the running one included) are gathered at once,
  // so prefetch looks max_live_units - 1 units ahead. On by default: without it the compute
  // thread waits for every gather (measured: 12 % of the benchmark LM's step, docs/benchmarks.md).
  bool prefetch = true;
  int max_live_units = 2;
  // optim_grads_params: a flat buffer of at most this many elements is not sharded. It stays
  // gathered (replicated, as under optim_grads) and one all-gather after each optimizer step
  // refreshes it, instead of two all-gathers per micro-batch: small units are bound by the
  // latency of a collective, not by its bytes. Its gradient and optimizer state stay sharded.
  // 0: every buffer is sharded.
  int64_t persistence_threshold = 0;
  // Gradient reduction: consecutive units whose gradients are smaller than this many bytes
  // share one reduce-scatter (laid out rank by rank, so each rank still receives its shard of
  // each unit, with the very same sums: bitwise equal to one collective per unit). A unit at
  // least this large is reduced alone. 0: one reduce-scatter per unit.
  int64_t reduce_bucket_bytes = 0;
  // Mixed precision: the dtype parameters are gathered and computed in (kFloat or kBFloat16).
  // Master weights and optimizer state stay fp32 in the shards; under bf16 the all-gathers
  // move half the bytes. Every strategy rounds the same masters the same way, so they stay
  // bitwise identical.
  at::ScalarType param_dtype = at::kFloat;
  // The dtype gradients are reduce-scattered in: kFloat, or kBFloat16 (half the bytes; each
  // hop of the ring adds in fp32 and rounds to bf16). They accumulate over micro-batches in
  // fp32 in the shard either way.
  at::ScalarType reduce_dtype = at::kFloat;
  // Activation checkpointing of every unit but the root: its activations are dropped after
  // forward and recomputed in backward, inside the gather done for backward (no second
  // all-gather under optim_grads_params). Exact: same bits as without. recompute_check
  // verifies each recompute against its forward and names the unit that differs.
  bool activation_checkpointing = false;
  nn::RecomputeCheck recompute_check = nn::RecomputeCheck::Off;
  // Values for every parameter; required when the model was built inside nn::DeferredInit.
  // Empty: the module's current parameter values (rank r's values of its own shard win).
  std::shared_ptr<ParamSource> param_source;
};

// One unit's flat buffer of one kind, as laid out at this world size.
struct FlatBufferInfo {
  std::string unit;    // qualified module name; "<root>" for the root remainder
  bool trainable = true;
  int64_t numel = 0;   // real elements
  int64_t padded = 0;  // numel rounded up to a multiple of the world size
  int64_t shard_size = 0;
  std::vector<ParamInfo> params;
  std::string key() const { return unit + (trainable ? "/trainable" : "/frozen"); }
};

// Per-rank bytes of model state (fp32), as the ZeRO paper counts them.
struct MemoryStats {
  int64_t num_params = 0;            // Ψ: parameters of the model (trainable + frozen)
  int64_t num_trainable = 0;
  int64_t params_bytes = 0;          // resident parameter storage (full or shard)
  int64_t grads_bytes = 0;           // persistent gradient storage (full or shard)
  int64_t optim_bytes = 0;           // optimizer state (exp_avg + exp_avg_sq), set by the optimizer
  int64_t gathered_bytes = 0;        // currently gathered unit parameters (optim_grads_params)
  int64_t gathered_peak_bytes = 0;   // peak of the above since the last reset
  int64_t largest_unit_bytes = 0;    // largest unit's gathered size
  // Tensors the engine holds only for the moment: gathered units, the bf16 copies gathers
  // send, gradients on their way through a reduce-scatter. Lets a caller tell the model's own
  // tensors (activations) from the engine's in a count of live bytes.
  int64_t transient_bytes = 0;
  int64_t model_state_bytes() const { return params_bytes + grads_bytes + optim_bytes; }
};

struct Unit;  // internal

class ShardedModel {
 public:
  ShardedModel(std::shared_ptr<torch::nn::Module> module, std::shared_ptr<Communicator> comm,
               ShardOptions options);
  ~ShardedModel();
  ShardedModel(const ShardedModel&) = delete;
  ShardedModel& operator=(const ShardedModel&) = delete;

  // Runs loss.backward() and completes this micro-batch's gradient reduction: every unit's
  // gradient is reduce-scattered (summed over ranks) and accumulated into its shard.
  // last_micro_batch: no_shard / optim then start all-gathering each accumulated shard into
  // the full gradient as soon as it is reduced, hidden behind the rest of the backward (any
  // value is correct; false on earlier micro-batches saves those all-gathers).
  void backward(const at::Tensor& loss, bool last_micro_batch = true);

  // After the last micro-batch of a step: computes the global L2 norm of the mean gradient
  // (the accumulated sum over world_size * micro_batches) over the shards — the value a
  // single process gets — and the factor that turns the accumulated sums into the mean
  // gradient, clipped to max_norm when max_norm > 0 and the norm exceeds it. The optimizer
  // applies that factor (TrainableView::grad_scale) in its own pass over the gradients.
  // Returns the norm before clipping.
  double finish_gradients(double max_norm);

  // Called by the optimizer once it has updated the masters of optimizer_views()[i]: starts
  // making that buffer's compute parameters current (an all-gather of the updated shards for
  // replicated parameters, a cast of the full master under no_shard), overlapped with the
  // optimizer's work on the next buffers.
  void after_buffer_update(size_t i);
  // Called by the optimizer after its step: publishes the buffers it did not hand over,
  // clears gradients and, with prefetch, starts gathering the next forward's first units.
  // The publishing all-gathers are waited by each unit's next pre-forward.
  void after_optimizer_step();
  // Instead of an optimizer step (e.g. a step skipped for a non-finite loss): drops the
  // accumulated gradients; parameters stay as they are.
  void discard_gradients();

  Strategy strategy() const { return options_.strategy; }
  // Every rank of the job.
  Communicator& comm() const { return *comm_; }
  // The ranks that share one copy of the model: its layouts, gathers and reduce-scatters.
  // The same as comm() unless sharding is hybrid.
  Communicator& shard_comm() const { return *shard_comm_; }
  // Which copy of the model this rank belongs to (0 unless hybrid), and how many there are.
  int replica() const { return comm_->rank() / shard_comm_->world_size(); }
  int num_replicas() const { return comm_->world_size() / shard_comm_->world_size(); }
  const std::shared_ptr<torch::nn::Module>& module() const { return module_; }
  int num_units() const { return static_cast<int>(units_.size()); }
  std::vector<std::string> unit_names() const;

  MemoryStats memory() const;
  // What this rank sent and received, and how many collectives it ran, over the job's
  // communicator and (hybrid) the shard and replica groups.
  CommStats comm_stats() const;
  void reset_gathered_peak();
  // Seconds the calling (compute) thread spent blocked on collectives since the last reset:
  // the communication that overlap did not hide.
  double exposed_comm_seconds() const { return exposed_comm_s_; }
  void reset_exposed_comm() { exposed_comm_s_ = 0.0; }
  void set_optimizer_state_bytes(int64_t bytes) { optim_bytes_ = bytes; }

  // Internal API for the optimizer and checkpointing: the trainable flat buffers' local
  // fp32 master values and reduced gradients (shards; full buffers under no_shard).
  struct TrainableView {
    at::Tensor master;  // updated in place by the optimizer
    at::Tensor grad;    // accumulated sums: the gradient to apply is grad * grad_scale
    float grad_scale = 1.0f;
  };
  std::vector<TrainableView> optimizer_views();

  // This rank's slices of every flat buffer (fp32 master values), unit by unit, trainable
  // then frozen: identical bits under every strategy at the same world size. Sliced over
  // shard_comm() (every copy holds the same slices when hybrid).
  std::vector<at::Tensor> local_shards() const;
  // The layout of those buffers, in the same order.
  std::vector<FlatBufferInfo> flat_buffers() const;

  // Runs fn(name, full tensor) for every parameter, gathering one unit at a time.
  // A collective: every rank must call it.
  void for_each_full_parameter(const std::function<void(const std::string&, const at::Tensor&)>& fn);

  // Hook entry points (used by the autograd glue; not for users).
  void on_pre_forward(Unit& unit, std::vector<at::Tensor>& inputs);
  void on_post_forward(Unit& unit, std::vector<at::Tensor>& outputs);
  void on_pre_backward(Unit& unit);
  void on_post_backward(Unit& unit);

 private:
  void build_units();
  void gather(Unit& unit);
  void start_gather(Unit& unit);   // allocates and issues the all-gathers, does not wait
  void finish_gather(Unit& unit);  // waits for a gather in flight
  // Prefetch: starts gathering forward_order_[from], [from + step], ... while fewer than
  // max_live_units units are gathered, looking at most max_live_units - 1 units ahead.
  void prefetch_from(long from, int step);
  int live_units() const;  // non-root units whose sharded buffers are gathered
  void release(Unit& unit);
  void reduce_unit_grads(Unit& unit);
  void flush_bucket();  // issues the open bucket's reduce-scatter
  // Finishes reductions (oldest first) until at most max_in_flight remain; completed ones
  // are always finished, so each unit's transient full gradient is freed early.
  void drain_pending_reductions(size_t max_in_flight = 0);
  // no_shard / optim: waits for the gradient all-gathers in flight; complete: first issues
  // those a backward(loss, false) on the last micro-batch left out.
  void wait_gradient_gathers(bool complete);

  std::shared_ptr<torch::nn::Module> module_;
  std::shared_ptr<Communicator> comm_;
  std::shared_ptr<Communicator> shard_comm_;    // comm_ unless hybrid
  std::shared_ptr<Communicator> replica_comm_;  // hybrid only: this shard's owners in every copy
  ShardOptions options_;
  std::vector<std::unique_ptr<Unit>> units_;
  std::vector<Unit*> trainable_units_;  // the units behind optimizer_views(), in that order
  std::vector<Unit*> forward_order_;  // non-root unit calls in the order the last forward ran them
  std::vector<Unit*> recording_;      // ... of the forward in progress
  long backward_cursor_ = 0;          // position in forward_order_ of the last pre-backward
  struct PendingReduce;
  std::deque<std::unique_ptr<PendingReduce>> pending_;
  std::unique_ptr<PendingReduce> open_bucket_;  // small units' gradients waiting to be reduced together
  std::vector<bool> published_;                 // per trainable buffer: after_buffer_update done this step
  bool last_micro_batch_ = true;
  float grad_scale_ = 1.0f;
  int micro_batches_ = 0;
  int64_t gathered_bytes_ = 0;
  int64_t gathered_peak_ = 0;
  int64_t optim_bytes_ = 0;
  double exposed_comm_s_ = 0.0;
  // Runs fn (which blocks on communication) and adds its duration to exposed_comm_s_.
  template <class Fn>
  void blocking_comm(Fn&& fn) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    exposed_comm_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
};

std::shared_ptr<ShardedModel> fully_shard(std::shared_ptr<torch::nn::Module> module,
                                          std::shared_ptr<Communicator> comm, ShardOptions options = {});

}  // namespace zeroshard
