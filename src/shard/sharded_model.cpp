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

namespace {
constexpr size_t kMaxReductionsInFlight = 2;
}

template <class Fn>
void ShardedModel::blocking_comm(Fn&& fn) {
  const auto t0 = std::chrono::steady_clock::now();
  fn();
  exposed_comm_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

struct ShardedModel::PendingReduce {
  Unit* unit;
  at::Tensor local_full;  // this rank's unreduced gradient (transient)
  at::Tensor reduced;     // this rank's reduced slice
  WorkHandle work;        // reduce-scatter in the shard group
  WorkHandle replica_work;  // hybrid: then the all-reduce across the copies (same queue, runs after)
  const WorkHandle& last() const { return replica_work ? replica_work : work; }
};

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

  // 3. Build units: root first, then the chosen modules in pre-order.
  for (int u = 0; u < n_units; ++u) {
    auto unit = std::make_unique<Unit>();
    unit->index = u;
    unit->is_root = (u == 0);
    unit->name = u == 0 ? std::string("<root>") : chosen[u - 1].first;
    unit->module = u == 0 ? dynamic_cast<nn::HookableModule*>(module_.get())
                          : dynamic_cast<nn::HookableModule*>(chosen[u - 1].second.get());
    if (!trainable[u].empty()) {
      unit->trainable = std::make_unique<FlatParam>(unit->name, true, std::move(trainable[u]), rank, world,
                                                    shards_params(strategy), strategy == Strategy::NoShard,
                                                    options_.param_dtype);
      const ShardLayout& L = unit->trainable->layout();
      if (shards_grads(strategy)) {
        unit->grad_shard = at::zeros({L.shard_size}, at::kFloat);
      } else {
        unit->grad_full = at::zeros({L.padded}, at::kFloat);
        unit->grad_shard = unit->grad_full.narrow(0, L.shard_begin(rank), L.shard_size);
      }
    }
    if (!frozen[u].empty()) {
      unit->frozen = std::make_unique<FlatParam>(unit->name, false, std::move(frozen[u]), rank, world,
                                                 shards_params(strategy), /*full_master=*/false, options_.param_dtype);
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
    } else if (shards_params(strategy) && (unit->trainable || unit->frozen)) {
      throw std::invalid_argument(
          "fully_shard: the root module has parameters outside every unit, but it is not a "
          "zeroshard::nn::HookableModule, so optim_grads_params cannot gather them before its forward; "
          "derive the root from HookableModule (running forward through call_hooked) or wrap those parameters "
          "into units");
    }
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

void ShardedModel::prefetch(const Unit& unit, int step) {
  if (!options_.prefetch) return;
  const auto it = std::find(forward_order_.begin(), forward_order_.end(), &unit);
  const long next = unit.is_root ? (step > 0 ? 0 : -1)
                                 : (it == forward_order_.end() ? -1 : (it - forward_order_.begin()) + step);
  if (next >= 0 && next < static_cast<long>(forward_order_.size())) start_gather(*forward_order_[next]);
}

void ShardedModel::release(Unit& unit) {
  if (!shards_params(options_.strategy)) return;
  finish_gather(unit);  // never free a buffer a collective is still writing
  for (FlatParam* f : {unit.trainable.get(), unit.frozen.get()}) {
    if (f == nullptr || !f->gathered()) continue;
    f->free_full();
    gathered_bytes_ -= f->full_bytes();
  }
}

void ShardedModel::on_pre_forward(Unit& unit, std::vector<at::Tensor>& inputs) {
  if (shards_params(options_.strategy)) {
    if (unit.is_root) {
      // A new forward: a unit prefetched for a forward that went another way is let go.
      for (auto& u : units_) {
        if (!u->is_root) release(*u);
      }
      recording_.clear();
    } else {
      recording_.push_back(&unit);
    }
    gather(unit);
    prefetch(unit, +1);
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
  prefetch(unit, -1);  // backward runs the units in reverse forward order
}

void ShardedModel::on_post_backward(Unit& unit) {
  if (unit.post_backward_done) return;
  unit.post_backward_done = true;
  reduce_unit_grads(unit);
  release(unit);
}

void ShardedModel::reduce_unit_grads(Unit& unit) {
  if (!unit.trainable) return;
  const ShardLayout& L = unit.trainable->layout();
  auto pending = std::make_unique<PendingReduce>();
  pending->unit = &unit;
  pending->local_full = at::empty({L.padded}, at::kFloat);
  unit.trainable->take_grads_into(pending->local_full);
  pending->reduced = at::empty({L.shard_size}, at::kFloat);
  pending->work = shard_comm_->reduce_scatter_async(pending->local_full, pending->reduced);
  // Hybrid: the copies' partial sums of this shard, summed in a fixed ring order (every copy
  // gets the same bits). Issued now, in program order: it runs once the reduce-scatter is done.
  if (replica_comm_) pending->replica_work = replica_comm_->all_reduce_async(pending->reduced);
  pending_.push_back(std::move(pending));
  // Bound the unreduced full gradients alive at once (they are what sharding saves).
  drain_pending_reductions(kMaxReductionsInFlight);
}

void ShardedModel::drain_pending_reductions(size_t max_in_flight) {
  while (!pending_.empty() && (pending_.size() > max_in_flight || pending_.front()->last()->completed())) {
    auto& p = pending_.front();
    blocking_comm([&] {
      p->work->wait();
      if (p->replica_work) p->replica_work->wait();
    });
    Unit& u = *p->unit;
    if (u.grad_has_data) {
      u.grad_shard.add_(p->reduced);
    } else {
      u.grad_shard.copy_(p->reduced);
      u.grad_has_data = true;
    }
    pending_.pop_front();
  }
}

void ShardedModel::backward(const at::Tensor& loss) {
  TORCH_CHECK(loss.defined() && loss.numel() == 1, "ShardedModel::backward: loss must be a scalar tensor");
  for (auto& u : units_) u->post_backward_done = false;
  loss.backward();
  // Units whose post-backward did not fire (the root, units whose inputs need no grad, units
  // not run in this micro-batch): reduce them now, in a fixed order on every rank.
  for (auto it = units_.rbegin(); it != units_.rend(); ++it) {
    if (!(*it)->post_backward_done) on_post_backward(**it);
    (*it)->calls_awaiting_backward = 0;
    (*it)->untracked_call = false;
  }
  drain_pending_reductions();
  ++micro_batches_;
}

double ShardedModel::finish_gradients(double max_norm) {
  if (micro_batches_ == 0) {
    throw std::logic_error("finish_gradients: no backward() since the last optimizer step");
  }
  const float denom = static_cast<float>(comm_->world_size() * micro_batches_);
  // Norm over this rank's shards, summed in a fixed order; ranks' partials summed in rank
  // order on every rank. The same partition under every strategy -> the same bits. (Hybrid:
  // every copy holds the same shards, so one group's partials are the whole norm.)
  double local = 0.0;
  for (auto& u : units_) {
    if (!u->trainable) continue;
    u->grad_shard.div_(denom);
    const float* g = u->grad_shard.data_ptr<float>();
    const int64_t n = u->grad_shard.numel();
    for (int64_t i = 0; i < n; ++i) local += static_cast<double>(g[i]) * static_cast<double>(g[i]);
  }
  at::Tensor partial = at::full({1}, local, at::kDouble);
  at::Tensor all = at::empty({shard_comm_->world_size()}, at::kDouble);
  blocking_comm([&] { shard_comm_->all_gather(partial, all); });
  double total = 0.0;
  for (int r = 0; r < shard_comm_->world_size(); ++r) total += all.data_ptr<double>()[r];
  const double norm = std::sqrt(total);
  if (max_norm > 0.0) {
    const double coef = max_norm / (norm + 1e-6);
    if (coef < 1.0) {
      for (auto& u : units_) {
        if (u->trainable) u->grad_shard.mul_(static_cast<float>(coef));
      }
    }
  }
  if (!shards_grads(options_.strategy)) {
    // no_shard / optim keep the replicated reduced gradient (what DDP's all-reduce gives).
    for (auto& u : units_) {
      if (u->trainable) blocking_comm([&] { shard_comm_->all_gather(u->grad_shard, u->grad_full); });
    }
  }
  return norm;
}

std::vector<ShardedModel::TrainableView> ShardedModel::optimizer_views() {
  std::vector<TrainableView> views;
  for (auto& u : units_) {
    if (!u->trainable) continue;
    if (options_.strategy == Strategy::NoShard) {
      views.push_back({u->trainable->master_full(), u->grad_full});
    } else {
      views.push_back({u->trainable->shard(), u->grad_shard});
    }
  }
  return views;
}

void ShardedModel::after_optimizer_step() {
  if (options_.strategy == Strategy::Optim || options_.strategy == Strategy::OptimGrads) {
    for (auto& u : units_) {
      if (!u->trainable) continue;
      FlatParam& f = *u->trainable;
      // The compute parameters from every rank's updated masters (bf16 under mixed precision).
      const at::Tensor send = f.mixed() ? f.shard().to(f.compute_dtype()) : f.shard();
      blocking_comm([&] { shard_comm_->all_gather(send, f.full()); });
    }
  } else if (options_.strategy == Strategy::NoShard) {
    for (auto& u : units_) {
      if (u->trainable) u->trainable->refresh_compute_from_master();
    }
  }
  for (auto& u : units_) u->grad_has_data = false;
  micro_batches_ = 0;
}

void ShardedModel::discard_gradients() {
  for (auto& u : units_) u->grad_has_data = false;
  micro_batches_ = 0;
}

void ShardedModel::for_each_full_parameter(const std::function<void(const std::string&, const at::Tensor&)>& fn) {
  at::NoGradGuard no_grad;
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
  m.gathered_peak_bytes = gathered_peak_;
  return m;
}

void ShardedModel::reset_gathered_peak() { gathered_peak_ = gathered_bytes_; }

}  // namespace zeroshard
