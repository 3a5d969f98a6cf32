#include "shard/plan.h"

#include "shard/bucket.h"
#include "shard/file_backed.h"
#include "shard/layout.h"
#include "shard/strategy_plan.h"
#include "shard/unit.h"
#include "zeroshard/nn/hookable.h"

#include <algorithm>
#include <filesystem>

namespace zeroshard::shard {

namespace {

// One flat buffer as FlatParam lays it out over the shard group.
struct Buffer {
  ShardLayout layout;
  bool trainable = false;
  bool sharded = false;  // gathered for use, freed after
  bool cast = false;     // no_shard in bf16: the compute copy cast from the full master per use
};

// Bytes a ring all-gather / reduce-scatter sends from each of S ranks for a chunk of
// `chunk_elems` elements per rank; an all-reduce of n elements pads to chunks of ceil(n / S).
int64_t ring_bytes(int ranks, int64_t chunk_elems, int64_t elem_size) {
  return static_cast<int64_t>(ranks - 1) * chunk_elems * elem_size;
}
int64_t all_reduce_bytes(int ranks, int64_t n, int64_t elem_size) {
  return 2 * ring_bytes(ranks, (n + ranks - 1) / ranks, elem_size);
}

}  // namespace

ModelPlan plan_model(const std::shared_ptr<torch::nn::Module>& module, const ShardOptions& options, int world_size,
                     int64_t micro_batches) {
  const StrategyPlan plan = StrategyPlan::make(options, world_size);
  const int S = plan.shard_ranks, R = plan.replicas;
  const int64_t ce = static_cast<int64_t>(c10::elementSize(options.param_dtype));   // compute dtype
  const int64_t re = static_cast<int64_t>(c10::elementSize(options.reduce_dtype));  // reduce dtype
  const bool mixed = options.param_dtype != at::kFloat;
  const WrapPolicy policy = options.wrap_policy ? options.wrap_policy : wrap_every_hookable();
  const std::vector<UnitParams> assigned = assign_units(module, policy);

  ModelPlan out;
  StrategyCost& c = out.cost;
  c.strategy = plan.strategy;
  c.shard_ranks = S;
  c.replicas = R;
  // Per unit, in the engine's order: its buffers (trainable first, as the engine builds them).
  // FrozenStorage::File: the frozen parameters the source reads from files take no buffer of
  // their own (in place) or a transient one (converted), as FlatParam::read_from_files.
  ParamSource* source = options.frozen_storage == FrozenStorage::File ? options.param_source.get() : nullptr;
  if (source != nullptr) {
    std::vector<ParamInfo> all;
    for (const auto& u : assigned) {
      for (const auto* slots : {&u.trainable, &u.frozen}) {
        for (const auto& s : *slots) all.push_back({s.name, s.param.sizes().vec(), 0, s.param.numel()});
      }
    }
    source->check(all);
  }
  auto from_file = [&](const ParamSlot& s, int64_t* gathered) {
    if (source == nullptr) return false;
    const ParamLocation loc = source->locate({s.name, s.param.sizes().vec(), 0, s.param.numel()});
    if (!loc.in_file()) return false;
    const int64_t numel = s.param.numel();
    const bool in_place = FileBacked::in_place(loc, numel, options.param_dtype, std::filesystem::file_size(loc.file));
    // A converted copy holds the others in place, in the compute dtype (shard/converted_copy.h).
    const bool copied = !in_place && !options.converted_copy_dir.empty();
    c.file_bytes_per_pass += numel * (copied ? ce : static_cast<int64_t>(c10::elementSize(loc.dtype)));
    if (in_place || copied) {
      c.mapped_bytes += numel * ce;
    } else {
      c.converted_bytes += numel * ce;
      *gathered += numel * ce;
    }
    return true;
  };
  std::vector<std::vector<Buffer>> unit_buffers;
  std::vector<int64_t> unit_converted;  // per unit: its converted file-backed parameters' bytes
  for (const auto& u : assigned) {
    PlannedUnit pu;
    pu.name = u.name;
    std::vector<Buffer> buffers;
    unit_converted.push_back(0);
    for (const auto* slots : {&u.trainable, &u.frozen}) {
      if (slots->empty()) continue;
      int64_t numel = 0, file_numel = 0, converted_bytes = 0;
      for (const auto& s : *slots) {
        if (slots == &u.frozen && from_file(s, &converted_bytes)) file_numel += s.param.numel();
        else numel += s.param.numel();
      }
      pu.frozen_numel += file_numel;
      pu.gathered_bytes += converted_bytes;
      unit_converted.back() += converted_bytes;
      if (numel == 0) continue;
      Buffer b;
      b.layout = ShardLayout(numel, S);
      b.trainable = slots == &u.trainable;
      b.sharded = plan.shards_buffer(numel);
      // FlatParam's cast_on_use, as the engine decides it: a trainable buffer with a full master
      // in a compute dtype other than fp32, in a unit with hooks (every unit but a root that is
      // not a HookableModule).
      b.cast = b.trainable && plan.full_master && mixed && !b.sharded &&
               (&u != &assigned.front() || dynamic_cast<const nn::HookableModule*>(u.module.get()) != nullptr);
      (b.trainable ? pu.trainable_numel : pu.frozen_numel) += numel;
      pu.gathered_bytes += b.layout.padded * ce;
      pu.sharded = pu.sharded || b.sharded;
      buffers.push_back(b);
    }
    out.num_params += pu.trainable_numel + pu.frozen_numel;
    out.num_trainable += pu.trainable_numel;
    c.largest_unit_bytes = std::max(c.largest_unit_bytes, pu.gathered_bytes);
    out.units.push_back(pu);
    unit_buffers.push_back(std::move(buffers));
  }

  // Resident model states (FlatParam::resident_bytes, GradReducer::resident_bytes, the AdamW
  // moments shaped like the masters the optimizer updates).
  for (const auto& buffers : unit_buffers) {
    for (const Buffer& b : buffers) {
      const int64_t shard = b.layout.shard_size, padded = b.layout.padded;
      const bool full_master = b.trainable && plan.full_master && !b.sharded;
      // A frozen buffer keeps no fp32 master: it is stored in the compute dtype (bf16: 2 bytes).
      const int64_t stored = b.trainable ? 4 : ce;
      if (b.sharded) c.params_bytes += shard * stored;
      else if (b.cast) c.params_bytes += padded * 4;  // the full master; the compute copy only in use
      else if (!mixed || !b.trainable) c.params_bytes += padded * ce;
      else c.params_bytes += padded * ce + (full_master ? padded * 4 : shard * 4);
      if (!b.trainable) continue;
      c.grads_bytes += (plan.shard_grads ? shard : padded) * 4;
      c.optim_bytes += 2 * (plan.full_master ? padded : shard) * 4;
    }
  }

  // Compute buffers alive only while their unit runs (ShardedModel's gathered bytes): sharded
  // buffers gathered (optim_grads_params), compute copies cast from a full master (no_shard in
  // bf16) and converted file-backed parameters. The root (kept from its forward through its
  // backward) and a window of consecutive units: the prefetch window when the engine prefetches
  // (optim_grads_params, or any strategy with file-backed frozen storage), else two units when
  // they are gathered (the next one's gather starts before the last one is freed in backward)
  // and one when they are only cast or converted.
  auto transient_bytes = [&](size_t u) {
    int64_t bytes = unit_converted[u];
    for (const Buffer& b : unit_buffers[u]) bytes += (b.sharded || b.cast) ? b.layout.padded * ce : 0;
    return bytes;
  };
  const bool prefetches = options.prefetch && (plan.shard_params || options.frozen_storage == FrozenStorage::File);
  const size_t window = prefetches ? static_cast<size_t>(std::max(1, options.max_live_units)) : plan.shard_params ? 2 : 1;
  int64_t widest = 0;
  for (size_t i = 1; i < unit_buffers.size(); ++i) {
    int64_t sum = 0;
    for (size_t j = i; j < unit_buffers.size() && j < i + window; ++j) sum += transient_bytes(j);
    widest = std::max(widest, sum);
  }
  c.gathered_peak_bytes = unit_buffers.empty() ? 0 : transient_bytes(0) + widest;

  // One step's collectives, per rank.
  std::vector<int64_t> reduce_order;  // trainable buffers' shard sizes in the order backward reduces them
  for (size_t u = unit_buffers.size(); u-- > 0;) {
    const auto& buffers = unit_buffers[u];
    const bool has_trainable = std::any_of(buffers.begin(), buffers.end(), [](const Buffer& b) { return b.trainable; });
    for (const Buffer& b : buffers) {
      const int64_t shard = b.layout.shard_size;
      if (b.sharded) {
        // Forward gathers every sharded buffer; backward gathers a non-root unit again when
        // it trains (the root stays gathered from its forward through its backward).
        const int gathers = 1 + (u != 0 && has_trainable ? 1 : 0);
        c.comm_param_gather_bytes += micro_batches * gathers * ring_bytes(S, shard, ce);
        // The first micro-batch's forward gathers of the root and of the first max_live_units
        // units (the recorded call order: the engine's, each unit once) are prefetched at the
        // end of the optimizer step (ShardedModel::Impl::after_optimizer_step).
        if (options.prefetch && (u == 0 || u <= static_cast<size_t>(std::max(1, options.max_live_units)))) {
          c.comm_deferred_chunk_bytes.push_back(shard * ce);
        }
      }
      if (!b.trainable) continue;
      reduce_order.push_back(shard);
      c.comm_reduce_bytes += micro_batches * ring_bytes(S, shard, re);
      if (plan.gather_reduced_grads) c.comm_grad_gather_bytes += ring_bytes(S, shard, 4);
      // Replicated parameters (optim, optim_grads, persistent buffers) get every rank's
      // updated masters after the step (after_buffer_update, not waited: the next forward
      // waits); no_shard updates its full masters itself.
      if (!b.sharded && !plan.full_master) {
        c.comm_publish_bytes += ring_bytes(S, shard, ce);
        c.comm_deferred_chunk_bytes.push_back(shard * ce);
      }
    }
  }
  for (int64_t chunk : c.comm_deferred_chunk_bytes) c.comm_deferred_bytes += ring_bytes(S, chunk, 1);
  if (R > 1) {
    // Hybrid: each reduce-scatter's result (a bucket of shards) is all-reduced over the copies.
    BucketPlanner planner(options.reduce_bucket_bytes);
    int64_t open = 0;
    int64_t per_micro = 0;
    for (int64_t shard : reduce_order) {
      const BucketPlanner::Decision d = planner.add(shard * S * re);
      if (d.issue_before && open > 0) {
        per_micro += all_reduce_bytes(R, open, re);
        open = 0;
      }
      open += shard;
      if (d.issue_after) {
        per_micro += all_reduce_bytes(R, open, re);
        open = 0;
      }
    }
    if (open > 0) per_micro += all_reduce_bytes(R, open, re);
    c.comm_reduce_bytes += micro_batches * per_micro;
  }
  // The trainer's loss all-gather over the job and the norm's partial sums over a shard group
  // (one float64 per rank each).
  c.comm_scalar_bytes = ring_bytes(world_size, 1, 8) + ring_bytes(S, 1, 8);
  return out;
}

}  // namespace zeroshard::shard
