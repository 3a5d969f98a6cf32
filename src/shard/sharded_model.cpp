// The engine: units, their flat buffers, and what each strategy does around forward,
// backward and the optimizer step. Every strategy reduces gradients the same way
// (reduce-scatter of the same flat layout per micro-batch, accumulated in the shard), so
// the four strategies give bitwise-identical results; they differ only in what stays
// resident: full parameters, full reduced gradients, full optimizer state.
#include "zeroshard/shard.h"

#include "shard/autograd_hooks.h"
#include "shard/unit.h"
#include "zeroshard/nn/deferred.h"

#include <torch/autograd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <set>
#include <stdexcept>

namespace zeroshard {

ShardedModel::ShardedModel(std::shared_ptr<torch::nn::Module> module, std::shared_ptr<Communicator> comm,
                           ShardOptions options)
    : module_(std::move(module)), comm_(std::move(comm)), options_(std::move(options)) {
  if (!module_) throw std::invalid_argument("fully_shard: module is null");
  if (!comm_) throw std::invalid_argument("fully_shard: communicator is null");
  if (!options_.wrap_policy) options_.wrap_policy = wrap_every_hookable();
  if (options_.param_dtype != at::kFloat && options_.param_dtype != at::kBFloat16) {
    throw std::invalid_argument(std::string("fully_shard: param_dtype must be float32 or bfloat16, got ") +
                                c10::toString(options_.param_dtype));
  }
  if (options_.reduce_dtype != at::kFloat && options_.reduce_dtype != at::kBFloat16) {
    throw std::invalid_argument(std::string("fully_shard: reduce_dtype must be float32 or bfloat16, got ") +
                                c10::toString(options_.reduce_dtype));
  }
  if (options_.max_live_units < 1) {
    throw std::invalid_argument("fully_shard: max_live_units must be >= 1 (the running unit), got " +
                                std::to_string(options_.max_live_units));
  }
  if (options_.persistence_threshold < 0 || options_.reduce_bucket_bytes < 0) {
    throw std::invalid_argument("fully_shard: persistence_threshold and reduce_bucket_bytes must be >= 0");
  }
  const int world = comm_->world_size(), group = options_.shard_group_size;
  if (group < 0 || (group > 0 && world % group != 0)) {
    throw std::invalid_argument("fully_shard: shard_group_size " + std::to_string(group) +
                                " does not divide the world size " + std::to_string(world) +
                                " (hybrid sharding needs whole copies of the model)");
  }
  if (group > 0 && group < world) {
    // Groups of consecutive ranks hold one copy each; the ranks holding the same shard in
    // every copy form a replica group. Both splits are collectives over all ranks.
    shard_comm_ = comm_->split(comm_->rank() / group);
    replica_comm_ = comm_->split(comm_->rank() % group);
  } else {
    shard_comm_ = comm_;
  }
  try {
    build_units();
  } catch (...) {
    for (auto& u : units_) {  // no hook may outlive this half-built engine
      if (u->module) u->module->set_forward_hooks(nullptr);
    }
    throw;
  }
}

ShardedModel::~ShardedModel() {
  for (auto& u : units_) {
    if (u->module) u->module->set_forward_hooks(nullptr);
    try {
      finish_gather(*u);  // no collective may still write into a buffer about to go
    } catch (...) {
      // a failed communicator runs nothing more
    }
  }
}

std::shared_ptr<ShardedModel> fully_shard(std::shared_ptr<torch::nn::Module> module,
                                          std::shared_ptr<Communicator> comm, ShardOptions options) {
  return std::make_shared<ShardedModel>(std::move(module), std::move(comm), std::move(options));
}

void ShardedModel::build_units() {
  const int rank = shard_comm_->rank(), world = shard_comm_->world_size();
  const Strategy strategy = options_.strategy;

  // 1. Choose unit modules (pre-order; nothing inside a chosen unit is offered).
  std::vector<std::pair<std::string, std::shared_ptr<torch::nn::Module>>> chosen;
  for (const auto& item : module_->named_modules("", /*include_self=*/false)) {
    const std::string& name = item.key();
    bool inside = false;
    for (const auto& c : chosen) {
      if (name.compare(0, c.first.size() + 1, c.first + ".") == 0) inside = true;
    }
    if (inside) continue;
    if (dynamic_cast<nn::HookableModule*>(item.value().get()) == nullptr) continue;
    if (options_.wrap_policy(name, *item.value())) chosen.emplace_back(name, item.value());
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
  std::vector<std::vector<ParamSlot>> trainable(n_units), frozen(n_units);
  std::set<const void*> seen;
  for (const auto& item : module_->named_parameters(/*recurse=*/true)) {
    const void* key = item.value().unsafeGetTensorImpl();
    if (!seen.insert(key).second) continue;  // tied: already placed under its first name
    auto it = owner.find(key);
    const int u = it == owner.end() ? 0 : it->second;
    ParamSlot slot;
    slot.name = item.key();
    slot.param = item.value();
    (item.value().requires_grad() ? trainable : frozen)[u].push_back(std::move(slot));
  }

  // 3. Build units: root first, then the chosen modules in pre-order. Under
  //    optim_grads_params a buffer at or below the persistence threshold stays replicated.
  auto sharded = [&](const std::vector<ParamSlot>& slots) {
    int64_t numel = 0;
    for (const auto& slot : slots) numel += slot.param.numel();
    return shards_params(strategy) && numel > options_.persistence_threshold;
  };
  for (int u = 0; u < n_units; ++u) {
    auto unit = std::make_unique<Unit>();
    unit->index = u;
    unit->is_root = (u == 0);
    unit->name = u == 0 ? std::string("<root>") : chosen[u - 1].first;
    unit->module = u == 0 ? dynamic_cast<nn::HookableModule*>(module_.get())
                          : dynamic_cast<nn::HookableModule*>(chosen[u - 1].second.get());
    if (!trainable[u].empty()) {
      const bool shard = sharded(trainable[u]);
      unit->trainable = std::make_unique<FlatParam>(unit->name, true, std::move(trainable[u]), rank, world, shard,
                                                    strategy == Strategy::NoShard, options_.param_dtype);
      const ShardLayout& L = unit->trainable->layout();
      if (shards_grads(strategy)) {
        unit->grad_shard = at::zeros({L.shard_size}, at::kFloat);
      } else {
        unit->grad_full = at::zeros({L.padded}, at::kFloat);
        unit->grad_shard = unit->grad_full.narrow(0, L.shard_begin(rank), L.shard_size);
      }
    }
    if (!frozen[u].empty()) {
      const bool shard = sharded(frozen[u]);
      unit->frozen = std::make_unique<FlatParam>(unit->name, false, std::move(frozen[u]), rank, world, shard,
                                                 /*full_master=*/false, options_.param_dtype);
    }
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
    units_.push_back(std::move(unit));
  }

  // 4. Values: this rank's shard of every flat buffer, from the source (checked first, so a
  //    file that does not fit the model fails before anything is read).
  ParamSource* source = options_.param_source.get();
  std::vector<ParamInfo> all;
  for (const auto& u : units_) {
    for (const FlatParam* f : {u->trainable.get(), u->frozen.get()}) {
      if (f == nullptr) continue;
      for (const auto& s : f->slots()) {
        if (source == nullptr && nn::is_deferred(s.param)) {
          throw std::invalid_argument("fully_shard: parameter '" + s.name +
                                      "' was built inside nn::DeferredInit (no values yet), but "
                                      "ShardOptions::param_source is empty; pass a source (e.g. "
                                      "param_source_from_init) to materialize it");
        }
        all.push_back(s);
      }
    }
  }
  if (source != nullptr) source->check(all);
  for (auto& u : units_) {
    for (FlatParam* f : {u->trainable.get(), u->frozen.get()}) {
      if (f != nullptr) f->materialize(source, *shard_comm_);
    }
  }
  options_.param_source.reset();  // only needed while building (it may hold files open)
}

std::vector<std::string> ShardedModel::unit_names() const {
  std::vector<std::string> out;
  for (const auto& u : units_) out.push_back(u->name);
  return out;
}

void ShardedModel::start_gather(Unit& unit) {
  for (FlatParam* f : {unit.trainable.get(), unit.frozen.get()}) {
    if (f == nullptr || f->gathered()) continue;
    f->allocate_full();
    // Mixed precision gathers the bf16 rounding of the fp32 masters: half the bytes.
    const at::Tensor send = f->mixed() ? f->shard().to(f->compute_dtype()) : f->shard();
    unit.gather_works.push_back(shard_comm_->all_gather_async(send, f->full()));
    unit.gather_sends.push_back(send);
    gathered_bytes_ += f->full_bytes();
  }
  gathered_peak_ = std::max(gathered_peak_, gathered_bytes_);
}

void ShardedModel::finish_gather(Unit& unit) {
  if (unit.gather_works.empty()) return;
  blocking_comm([&] {
    for (auto& w : unit.gather_works) w->wait();
  });
  unit.gather_works.clear();
  unit.gather_sends.clear();
}

void ShardedModel::gather(Unit& unit) {
  start_gather(unit);  // nothing to start when a prefetch already did
  finish_gather(unit);
}

int ShardedModel::live_units() const {
  int n = 0;
  for (const auto& u : units_) n += (!u->is_root && u->gathered()) ? 1 : 0;
  return n;
}

void ShardedModel::prefetch_from(long from, int step) {
  if (!options_.prefetch) return;
  const long size = static_cast<long>(forward_order_.size());
  int live = live_units();
  for (long i = from, looked = 0; i >= 0 && i < size && looked < options_.max_live_units; i += step, ++looked) {
    if (live >= options_.max_live_units) break;
    Unit& u = *forward_order_[static_cast<size_t>(i)];
    if (!u.gathers() || u.gathered()) continue;
    start_gather(u);
    ++live;
  }
}

void ShardedModel::release(Unit& unit) {
  if (!unit.gathers()) return;
  finish_gather(unit);  // never free a buffer a collective is still writing
  for (FlatParam* f : {unit.trainable.get(), unit.frozen.get()}) {
    if (f == nullptr || !f->shards_params() || !f->gathered()) continue;
    f->free_full();
    gathered_bytes_ -= f->full_bytes();
  }
}

void ShardedModel::on_pre_forward(Unit& unit, std::vector<at::Tensor>& inputs) {
  finish_gather(unit);  // replicated parameters: the all-gather of the last optimizer step
  if (shards_params(options_.strategy)) {
    if (unit.is_root) {
      // A new forward. Its first units may have been prefetched (after the optimizer step);
      // any other unit still gathered is left from a forward that went another way.
      const size_t first = options_.prefetch ? static_cast<size_t>(options_.max_live_units) : 0;
      for (auto& u : units_) {
        if (u->is_root) continue;
        const auto end = forward_order_.begin() + static_cast<long>(std::min(first, forward_order_.size()));
        if (std::find(forward_order_.begin(), end, u.get()) == end) release(*u);
      }
      recording_.clear();
      gather(unit);
      prefetch_from(0, +1);
    } else {
      const long position = static_cast<long>(recording_.size());
      recording_.push_back(&unit);
      gather(unit);
      prefetch_from(position + 1, +1);  // the units that ran after this call last time
    }
  }
  if (torch::autograd::GradMode::is_enabled() && !unit.is_root) {
    if (attach_post_backward(inputs, &unit.post_backward_callback)) {
      ++unit.calls_awaiting_backward;
    } else {
      unit.untracked_call = true;  // reduced after loss.backward() returns
    }
  }
}

void ShardedModel::on_post_forward(Unit& unit, std::vector<at::Tensor>& outputs) {
  if (!shards_params(options_.strategy)) return;
  if (unit.is_root) forward_order_ = recording_;  // the order prefetch follows next time
  const bool training = torch::autograd::GradMode::is_enabled();
  // The root stays gathered from its forward through its backward (it is reduced last).
  if (unit.is_root && training) return;
  release(unit);
  if (training) {
    Unit* raw = &unit;
    attach_pre_backward(outputs, [this, raw] { on_pre_backward(*raw); });
  }
}

void ShardedModel::on_pre_backward(Unit& unit) {
  if (!shards_params(options_.strategy)) return;
  gather(unit);
  // Backward runs the calls in reverse forward order: find this one below the last position
  // (a unit called several times appears several times), then prefetch the calls before it.
  long pos = -1;
  for (long i = std::min(backward_cursor_, static_cast<long>(forward_order_.size())) - 1; i >= 0; --i) {
    if (forward_order_[static_cast<size_t>(i)] == &unit) {
      pos = i;
      break;
    }
  }
  if (pos < 0) return;
  backward_cursor_ = pos;
  prefetch_from(pos - 1, -1);
}

void ShardedModel::on_post_backward(Unit& unit) {
  if (unit.post_backward_done) return;
  unit.post_backward_done = true;
  reduce_unit_grads(unit);
  release(unit);
}

void ShardedModel::for_each_full_parameter(const std::function<void(const std::string&, const at::Tensor&)>& fn) {
  at::NoGradGuard no_grad;
  for (auto& u : units_) finish_gather(*u);  // a replicated fp32 master is its compute buffer
  for (auto& u : units_) {
    for (FlatParam* f : {u->trainable.get(), u->frozen.get()}) {
      if (f == nullptr) continue;
      // The fp32 master values: kept whole on this rank, or gathered for this buffer only.
      at::Tensor full = f->master_full();
      if (!full.defined()) {
        full = at::empty({f->layout().padded}, at::kFloat);
        shard_comm_->all_gather(f->shard(), full);
      }
      for (const auto& s : f->slots()) fn(s.name, full.narrow(0, s.offset, s.numel).view(s.shape));
    }
  }
}

std::vector<at::Tensor> ShardedModel::local_shards() const {
  std::vector<at::Tensor> out;
  for (const auto& u : units_) {
    for (const FlatParam* f : {u->trainable.get(), u->frozen.get()}) {
      if (f != nullptr) out.push_back(f->shard());
    }
  }
  return out;
}

std::vector<FlatBufferInfo> ShardedModel::flat_buffers() const {
  std::vector<FlatBufferInfo> out;
  for (const auto& u : units_) {
    for (const FlatParam* f : {u->trainable.get(), u->frozen.get()}) {
      if (f == nullptr) continue;
      FlatBufferInfo info;
      info.unit = u->name;
      info.trainable = f->trainable();
      info.numel = f->layout().numel;
      info.padded = f->layout().padded;
      info.shard_size = f->layout().shard_size;
      for (const auto& s : f->slots()) info.params.push_back(s);
      out.push_back(std::move(info));
    }
  }
  return out;
}

MemoryStats ShardedModel::memory() const {
  MemoryStats m;
  for (const auto& u : units_) {
    for (const FlatParam* f : {u->trainable.get(), u->frozen.get()}) {
      if (f == nullptr) continue;
      m.num_params += f->layout().numel;
      if (f->trainable()) m.num_trainable += f->layout().numel;
      m.params_bytes += f->resident_bytes();
    }
    if (u->trainable) {
      // Reduced gradients are fp32 whatever the compute dtype.
      m.grads_bytes += shards_grads(options_.strategy) ? u->trainable->shard_bytes()
                                                       : u->trainable->layout().padded * static_cast<int64_t>(sizeof(float));
    }
    m.largest_unit_bytes = std::max(m.largest_unit_bytes, u->gathered_size_bytes());
  }
  m.optim_bytes = optim_bytes_;
  m.gathered_bytes = gathered_bytes_;
  m.transient_bytes = gathered_bytes_;
  for (const auto& u : units_) {
    for (const auto& t : u->gather_sends) m.transient_bytes += static_cast<int64_t>(t.nbytes());
  }
  if (open_bucket_) {
    for (const auto& part : open_bucket_->parts) m.transient_bytes += static_cast<int64_t>(part.local_full.nbytes());
  }
  for (const auto& p : pending_) m.transient_bytes += static_cast<int64_t>(p->input.nbytes() + p->reduced.nbytes());
  m.gathered_peak_bytes = gathered_peak_;
  return m;
}

CommStats ShardedModel::comm_stats() const {
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

void ShardedModel::reset_gathered_peak() { gathered_peak_ = gathered_bytes_; }

}  // namespace zeroshard
