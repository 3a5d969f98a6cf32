// The engine: units, their flat buffers, and what each strategy does around forward,
// backward and the optimizer step. Every strategy reduces gradients the same way
// (reduce-scatter of the same flat layout per micro-batch, accumulated in the shard), so
// the four strategies give bitwise-identical results; they differ only in what stays
// resident: full parameters, full reduced gradients, full optimizer state.
//
// This file: ShardedModel (the public API, forwarding to its Impl), building the units, and
// the queries. Gathering around forward and backward: unit_hooks.cpp. Backward, the norm and
// the optimizer hand-over: step.cpp.
#include "shard/engine.h"

#include "shard/converted_copy.h"

#include "zeroshard/nn/deferred.h"

#include <algorithm>
#include <map>
#include <set>
#include <stdexcept>

namespace zeroshard {

using shard::FlatParam;
using shard::ParamSlot;
using shard::ShardLayout;
using shard::Unit;

// --- ShardedModel: the public API ----------------------------------------------------------

ShardedModel::ShardedModel(std::shared_ptr<torch::nn::Module> module, std::shared_ptr<Communicator> comm,
                           ShardOptions options)
    : impl_(std::make_unique<Impl>(std::move(module), std::move(comm), std::move(options))) {}
ShardedModel::~ShardedModel() = default;

void ShardedModel::backward(const at::Tensor& loss, bool last_micro_batch) { impl_->backward(loss, last_micro_batch); }
double ShardedModel::finish_gradients(double max_norm) { return impl_->finish_gradients(max_norm); }
void ShardedModel::discard_gradients() { impl_->discard_gradients(); }
Strategy ShardedModel::strategy() const { return impl_->plan().strategy; }
const std::shared_ptr<torch::nn::Module>& ShardedModel::module() const { return impl_->module(); }
Communicator& ShardedModel::comm() const { return impl_->comm(); }
Communicator& ShardedModel::shard_comm() const { return impl_->shard_comm(); }
int ShardedModel::replica() const { return impl_->comm().rank() / impl_->shard_comm().world_size(); }
int ShardedModel::num_replicas() const { return impl_->plan().replicas; }
int ShardedModel::num_units() const { return impl_->num_units(); }
std::vector<std::string> ShardedModel::unit_names() const { return impl_->unit_names(); }
const std::vector<std::string>& ShardedModel::notes() const { return impl_->notes(); }
MemoryStats ShardedModel::memory() const { return impl_->memory(); }
void ShardedModel::reset_gathered_peak() { impl_->reset_gathered_peak(); }
CommStats ShardedModel::comm_stats() const { return impl_->comm_stats(); }
double ShardedModel::exposed_comm_seconds() const { return impl_->clock().seconds(); }
void ShardedModel::reset_exposed_comm() { impl_->clock().reset(); }
std::vector<at::Tensor> ShardedModel::local_shards() const { return impl_->local_shards(); }
at::Tensor ShardedModel::local_shard(size_t buffer) const { return impl_->local_shard(buffer); }
std::vector<FlatBufferInfo> ShardedModel::flat_buffers() const { return impl_->flat_buffers(); }
void ShardedModel::for_each_full_parameter(const std::function<void(const std::string&, const at::Tensor&)>& fn) {
  impl_->for_each_full_parameter(fn);
}

std::shared_ptr<ShardedModel> fully_shard(std::shared_ptr<torch::nn::Module> module,
                                          std::shared_ptr<Communicator> comm, ShardOptions options) {
  return std::make_shared<ShardedModel>(std::move(module), std::move(comm), std::move(options));
}

// --- Building -------------------------------------------------------------------------------

namespace {

shard::StrategyPlan checked_plan(const std::shared_ptr<torch::nn::Module>& module,
                                 const std::shared_ptr<Communicator>& comm, const ShardOptions& options) {
  if (!module) throw std::invalid_argument("fully_shard: module is null");
  if (!comm) throw std::invalid_argument("fully_shard: communicator is null");
  if (options.param_dtype != at::kFloat && options.param_dtype != at::kBFloat16) {
    throw std::invalid_argument(std::string("fully_shard: param_dtype must be float32 or bfloat16, got ") +
                                c10::toString(options.param_dtype));
  }
  if (options.reduce_dtype != at::kFloat && options.reduce_dtype != at::kBFloat16) {
    throw std::invalid_argument(std::string("fully_shard: reduce_dtype must be float32 or bfloat16, got ") +
                                c10::toString(options.reduce_dtype));
  }
  if (options.reduce_bucket_bytes < 0) {
    throw std::invalid_argument("fully_shard: reduce_bucket_bytes must be >= 0, got " +
                                std::to_string(options.reduce_bucket_bytes));
  }
  return shard::StrategyPlan::make(options, comm->world_size());
}

}  // namespace

ShardedModel::Impl::Impl(std::shared_ptr<torch::nn::Module> module, std::shared_ptr<Communicator> comm,
                         ShardOptions options)
    : module_(std::move(module)), comm_(std::move(comm)), options_(std::move(options)),
      plan_(checked_plan(module_, comm_, options_)),
      // Prefetch hides all-gathers; a cast (no_shard in bf16) is compute, done when used.
      // File-backed frozen units are loaded ahead too (the kernel reads their pages in advance).
      prefetch_(options_.prefetch && (plan_.shard_params || options_.frozen_storage == FrozenStorage::File),
                options_.max_live_units) {
  if (!options_.wrap_policy) options_.wrap_policy = wrap_every_hookable();
  if (plan_.hybrid()) {
    // Groups of consecutive ranks hold one copy each; the ranks holding the same shard in
    // every copy form a replica group. Both splits are collectives over all ranks.
    shard_comm_ = comm_->split(comm_->rank() / plan_.shard_ranks);
    replica_comm_ = comm_->split(comm_->rank() % plan_.shard_ranks);
  } else {
    shard_comm_ = comm_;
  }
  reducer_ = std::make_unique<shard::GradReducer>(plan_, *shard_comm_, replica_comm_.get(), options_.reduce_dtype,
                                                  options_.reduce_bucket_bytes, clock_);
  try {
    build_units();
  } catch (...) {
    for (auto& u : units_) {  // no hook may outlive this half-built engine
      if (u->module) u->module->set_forward_hooks(nullptr);
    }
    throw;
  }
}

ShardedModel::Impl::~Impl() {
  for (auto& u : units_) {
    if (u->module) u->module->set_forward_hooks(nullptr);
    try {
      finish_gather(*u);  // no collective may still write into a buffer about to go
    } catch (...) {
      // a failed communicator runs nothing more
    }
  }
}

namespace shard {

std::vector<UnitParams> assign_units(const std::shared_ptr<torch::nn::Module>& root, const WrapPolicy& wrap_policy) {
  // 1. Choose unit modules (pre-order; nothing inside a chosen unit is offered).
  std::vector<std::pair<std::string, std::shared_ptr<torch::nn::Module>>> chosen;
  for (const auto& item : root->named_modules("", /*include_self=*/false)) {
    const std::string& name = item.key();
    bool inside = false;
    for (const auto& c : chosen) {
      if (name.compare(0, c.first.size() + 1, c.first + ".") == 0) inside = true;
    }
    if (inside) continue;
    if (dynamic_cast<nn::HookableModule*>(item.value().get()) == nullptr) continue;
    if (wrap_policy(name, *item.value())) chosen.emplace_back(name, item.value());
  }

  // 2. Owner of every parameter: the unit that uses it, or the root if several units (tied
  //    weights) or none do. The first qualified name of a shared parameter is its name.
  std::map<const void*, int> owner;  // TensorImpl -> unit index (0 = root)
  for (size_t u = 0; u < chosen.size(); ++u) {
    for (const auto& p : chosen[u].second->parameters(/*recurse=*/true)) {
      const void* key = p.unsafeGetTensorImpl();
      auto it = owner.find(key);
      if (it == owner.end()) owner[key] = static_cast<int>(u + 1);
      else if (it->second != static_cast<int>(u + 1)) it->second = 0;
    }
  }
  const int n_units = static_cast<int>(chosen.size()) + 1;
  std::vector<UnitParams> units(static_cast<size_t>(n_units));
  units[0].name = "<root>";
  units[0].module = root;
  for (int u = 1; u < n_units; ++u) {
    units[static_cast<size_t>(u)].name = chosen[static_cast<size_t>(u - 1)].first;
    units[static_cast<size_t>(u)].module = chosen[static_cast<size_t>(u - 1)].second;
  }
  std::set<const void*> seen;
  for (const auto& item : root->named_parameters(/*recurse=*/true)) {
    const void* key = item.value().unsafeGetTensorImpl();
    if (!seen.insert(key).second) continue;  // tied: already placed under its first name
    auto it = owner.find(key);
    const int u = it == owner.end() ? 0 : it->second;
    ParamSlot slot;
    slot.name = item.key();
    slot.param = item.value();
    UnitParams& unit = units[static_cast<size_t>(u)];
    (item.value().requires_grad() ? unit.trainable : unit.frozen).push_back(std::move(slot));
  }
  return units;
}

}  // namespace shard

void ShardedModel::Impl::build_units() {
  const int rank = shard_comm_->rank(), world = shard_comm_->world_size();
  gathers_units_ = plan_.shard_params;  // ZeRO-3 runs its hooks even when every buffer persists

  // 1-2. Units and the parameters of each (shard/unit.h).
  std::vector<shard::UnitParams> assigned = shard::assign_units(module_, options_.wrap_policy);
  const int n_units = static_cast<int>(assigned.size());

  // Values come from the source, checked first, so a file that does not fit the model fails
  // before anything is read or laid out.
  ParamSource* source = options_.param_source.get();
  std::vector<ParamInfo> all;
  for (const auto& unit : assigned) {
    for (const auto* slots : {&unit.trainable, &unit.frozen}) {
      for (const auto& s : *slots) {
        if (source == nullptr && nn::is_deferred(s.param)) {
          throw std::invalid_argument("fully_shard: parameter '" + s.name +
                                      "' was built inside nn::DeferredInit (no values yet), but "
                                      "ShardOptions::param_source is empty; pass a source (e.g. "
                                      "param_source_from_init) to materialize it");
        }
        ParamInfo info = s;
        info.shape = s.param.sizes().vec();
        info.numel = s.param.numel();
        all.push_back(std::move(info));
      }
    }
  }
  if (source != nullptr) source->check(all);

  // FrozenStorage::File: the frozen parameters the source reads from a file are used from it
  // (the `mapped` buffer); computed ones (seeded) stay in the `frozen` buffer.
  const bool from_files = options_.frozen_storage == FrozenStorage::File && source != nullptr;
  std::vector<std::vector<ParamSlot>> trainable(n_units), frozen(n_units), mapped(n_units);
  for (int u = 0; u < n_units; ++u) {
    trainable[u] = std::move(assigned[static_cast<size_t>(u)].trainable);
    for (auto& s : assigned[static_cast<size_t>(u)].frozen) {
      ParamInfo info = s;
      info.shape = s.param.sizes().vec();
      const bool in_file = from_files && source->locate(info).in_file();
      (in_file ? mapped : frozen)[u].push_back(std::move(s));
    }
  }

  // The converted copy: what the files hold in another dtype or layout is written once and then
  // read in place (shard/converted_copy.h); the mapped buffers below read through its source.
  if (from_files && !options_.converted_copy_dir.empty()) {
    std::vector<shard::CopyUnit> copy_units;
    for (int u = 0; u < n_units; ++u) {
      if (mapped[u].empty()) continue;
      shard::CopyUnit cu;
      cu.name = assigned[static_cast<size_t>(u)].name;
      for (const auto& s : mapped[u]) cu.params.push_back({s.name, s.param.sizes().vec(), 0, s.param.numel()});
      copy_units.push_back(std::move(cu));
    }
    shard::ConvertedCopy copy = shard::make_converted_copy(options_.param_source, copy_units,
                                                           options_.converted_copy_dir, options_.param_dtype, *comm_);
    options_.param_source = copy.source;
    source = options_.param_source.get();
    if (!copy.note.empty()) notes_.push_back(copy.note);
  }

  // 3. Build units: root first, then the chosen modules in pre-order. The plan decides which
  //    buffers are sharded (optim_grads_params, above the persistence threshold).
  auto sharded = [&](const std::vector<ParamSlot>& slots) {
    int64_t numel = 0;
    for (const auto& slot : slots) numel += slot.param.numel();
    return plan_.shards_buffer(numel);
  };
  for (int u = 0; u < n_units; ++u) {
    auto unit = std::make_unique<Unit>();
    unit->index = u;
    unit->is_root = (u == 0);
    unit->name = assigned[static_cast<size_t>(u)].name;
    unit->module = dynamic_cast<nn::HookableModule*>(assigned[static_cast<size_t>(u)].module.get());
    if (!trainable[u].empty()) {
      const bool shard = sharded(trainable[u]);
      // no_shard in bf16: the compute copy is cast from the full master in the unit's hooks
      // (a root without hooks keeps a persistent copy).
      const bool cast_on_use = unit->module != nullptr;
      unit->trainable = std::make_unique<FlatParam>(unit->name, true, std::move(trainable[u]), rank, world, shard,
                                                    plan_.full_master, options_.param_dtype, cast_on_use);
      unit->grad_index = static_cast<int>(reducer_->add_buffer(unit->trainable->layout()));
    }
    if (!frozen[u].empty()) {
      const bool shard = sharded(frozen[u]);
      unit->frozen = std::make_unique<FlatParam>(unit->name, false, std::move(frozen[u]), rank, world, shard,
                                                 /*full_master=*/false, options_.param_dtype);
    }
    if (!mapped[u].empty()) {
      unit->mapped = std::make_unique<FlatParam>(unit->name, false, std::move(mapped[u]), rank, world,
                                                 /*shard_params=*/false, /*full_master=*/false, options_.param_dtype);
      // A unit with hooks loads its converted parameters for each use; a root without keeps them.
      unit->mapped->read_from_files(std::make_unique<shard::FileBacked>(unit->mapped->slots(), options_.param_source,
                                                                        mapped_files_, options_.param_dtype),
                                    /*on_use=*/unit->module != nullptr);
    }
    for (FlatParam* f : unit->buffers()) f->use_bytes_pool(&bytes_pool_);
    Unit* raw = unit.get();
    unit->post_backward_callback = [raw, this] {
      // One call's backward is done; the unit's gradients are complete after the last one.
      if (--raw->calls_awaiting_backward == 0 && !raw->untracked_call) on_post_backward(*raw);
    };
    if (unit->module) {
      unit->hooks = std::make_shared<nn::ForwardHooks>();
      unit->hooks->pre = [this, raw](std::vector<at::Tensor>& in) { on_pre_forward(*raw, in); };
      unit->hooks->post = [this, raw](std::vector<at::Tensor>& out) { on_post_forward(*raw, out); };
      unit->hooks->checkpoint = options_.activation_checkpointing && u != 0;
      unit->hooks->recompute_check = options_.recompute_check;
      unit->hooks->name = unit->name;
      unit->module->set_forward_hooks(unit->hooks);
    } else if (unit->gathers()) {
      throw std::invalid_argument(
          "fully_shard: the root module has parameters outside every unit, but it is not a "
          "zeroshard::nn::HookableModule, so optim_grads_params cannot gather them before its forward; "
          "derive the root from HookableModule (running forward through call_hooked) or wrap those parameters "
          "into units");
    }
    if (unit->trainable) trainable_units_.push_back(unit.get());
    gathers_units_ = gathers_units_ || unit->gathers();
    units_.push_back(std::move(unit));
  }

  // 4. Values: this rank's shard of every flat buffer (file-backed ones map their files).
  for (auto& u : units_) {
    for (FlatParam* f : u->buffers()) f->materialize(source, *shard_comm_);
  }
  // Only needed while building (it may hold files open), unless file-backed buffers read through
  // it (FileBacked keeps its own reference; a resumed run's combined source routes every name
  // those buffers read to the model's files, never to the checkpoint it was built with).
  bool any_mapped = false;
  for (const auto& u : units_) any_mapped = any_mapped || u->mapped != nullptr;
  if (!any_mapped) options_.param_source.reset();
}

// --- Queries --------------------------------------------------------------------------------

std::vector<std::string> ShardedModel::Impl::unit_names() const {
  std::vector<std::string> out;
  for (const auto& u : units_) out.push_back(u->name);
  return out;
}

void ShardedModel::Impl::for_each_full_parameter(
    const std::function<void(const std::string&, const at::Tensor&)>& fn) {
  at::NoGradGuard no_grad;
  for (auto& u : units_) finish_gather(*u);  // a replicated fp32 master is its compute buffer
  for (auto& u : units_) {
    for (FlatParam* f : u->buffers()) {
      // The fp32 master values: kept whole on this rank, or gathered for this buffer only. A
      // frozen buffer stored in bf16 is gathered as such and widened (exact).
      at::Tensor full = f->master_full();
      if (f->file_backed()) {  // every rank reads the files: nothing to gather
        full = f->files()->read_flat(f->slots(), 0, f->layout().padded).to(at::kFloat);
      } else if (!full.defined()) {
        full = at::empty({f->layout().padded}, f->storage_dtype());
        shard_comm_->all_gather(f->shard(), full);
        if (full.scalar_type() != at::kFloat) full = full.to(at::kFloat);
      }
      for (const auto& s : f->slots()) fn(s.name, full.narrow(0, s.offset, s.numel).view(s.shape));
    }
  }
}

std::vector<at::Tensor> ShardedModel::Impl::local_shards() const {
  std::vector<at::Tensor> out;
  for (const auto& u : units_) {
    for (const FlatParam* f : u->buffers()) out.push_back(f->shard_values());
  }
  return out;
}

at::Tensor ShardedModel::Impl::local_shard(size_t buffer) const {
  size_t i = 0;
  for (const auto& u : units_) {
    for (const FlatParam* f : u->buffers()) {
      if (i++ == buffer) return f->shard_values();
    }
  }
  throw std::out_of_range("ShardedModel::local_shard: buffer " + std::to_string(buffer) + " of " + std::to_string(i));
}

std::vector<FlatBufferInfo> ShardedModel::Impl::flat_buffers() const {
  std::vector<FlatBufferInfo> out;
  for (const auto& u : units_) {
    for (const FlatParam* f : u->buffers()) {
      FlatBufferInfo info;
      info.unit = u->name;
      info.trainable = f->trainable();
      info.numel = f->layout().numel;
      info.padded = f->layout().padded;
      info.shard_size = f->layout().shard_size;
      info.dtype = f->storage_dtype();
      info.file_backed = f->file_backed();
      for (const auto& s : f->slots()) info.params.push_back(s);
      out.push_back(std::move(info));
    }
  }
  return out;
}

MemoryStats ShardedModel::Impl::memory() const {
  MemoryStats m;
  for (const auto& u : units_) {
    for (const FlatParam* f : u->buffers()) {
      m.num_params += f->layout().numel;
      if (f->trainable()) m.num_trainable += f->layout().numel;
      m.params_bytes += f->resident_bytes();
      if (f->file_backed()) {
        m.mapped_bytes += f->files()->mapped_bytes();
        m.converted_bytes += f->full_bytes();
      }
    }
    m.largest_unit_bytes = std::max(m.largest_unit_bytes, u->gathered_size_bytes());
  }
  m.grads_bytes = reducer_->resident_bytes();
  m.optim_bytes = optim_bytes_;
  m.gathered_bytes = gathered_bytes_;
  m.transient_bytes = gathered_bytes_ + reducer_->transient_bytes();
  for (const auto& u : units_) {
    for (const auto& t : u->gather_sends) m.transient_bytes += static_cast<int64_t>(t.nbytes());
  }
  m.gathered_peak_bytes = gathered_peak_;
  m.pooled_bytes = static_cast<int64_t>(bytes_pool_.pooled_bytes());
  return m;
}

CommStats ShardedModel::Impl::comm_stats() const {
  CommStats total;
  for (const Communicator* c : {comm_.get(), shard_comm_ == comm_ ? nullptr : shard_comm_.get(), replica_comm_.get()}) {
    if (c == nullptr) continue;
    const CommStats s = c->stats();
    total.bytes_sent += s.bytes_sent;
    total.bytes_received += s.bytes_received;
    total.collectives += s.collectives;
  }
  return total;
}

}  // namespace zeroshard
