// The language-model series (llama, moe): byte-level next-token prediction on text windows.
#include "data/sampler.h"
#include "data/text_dataset.h"
#include "models/llama/llama.h"
#include "train/task.h"
#include "zeroshard/nn/deferred.h"

#include <fstream>

namespace zeroshard::train {
namespace {

class LanguageModelTask : public Task {
 public:
  LanguageModelTask(const TrainConfig& cfg, int rank, int world)
      : cfg_(cfg), sampler_(corpus(cfg), sampler_options(cfg), rank, world) {
    nn::DeferredInit deferred;
    model_ = models::Llama(cfg.llama);
    if (cfg.lora_rank > 0) adapted_ = nn::apply_lora(*model_, lora_options(cfg));
  }

  std::shared_ptr<nn::HookableModule> module() const override { return model_.ptr(); }

  void init_parameter(const std::string& name, at::Tensor& param) const override {
    models::llama_init(cfg_.llama, static_cast<uint64_t>(cfg_.seed), name, param);
  }

  at::Tensor loss(int64_t step, int64_t micro) override {
    const at::Tensor batch = sampler_.batch(step, micro);
    at::Tensor loss = models::lm_loss(model_->forward(batch.narrow(1, 0, cfg_.seq_len)), batch.narrow(1, 1, cfg_.seq_len));
    if (cfg_.llama.moe.enabled()) {
      aux_sum_ += model_->last_aux_loss();
      const at::Tensor t = model_->last_tokens_per_expert();
      expert_tokens_ = expert_tokens_.defined() ? expert_tokens_ + t : t;
      ++micro_batches_;
    }
    return loss;
  }

  double items_per_step() const override { return static_cast<double>(sampler_.global_batch_size() * cfg_.seq_len); }
  std::string item_name() const override { return "tokens"; }

  void dump_batches(const std::string& path, int64_t steps) const override {
    std::ofstream out(path, std::ios::binary);
    for (int64_t s = 0; s < steps; ++s) {
      for (int64_t m = 0; m < cfg_.grad_accum; ++m) {
        const at::Tensor b = sampler_.batch(s, m);
        out.write(static_cast<const char*>(b.data_ptr()), static_cast<std::streamsize>(b.nbytes()));
      }
    }
  }

  nlohmann::json finish_step(Communicator& comm) override {
    nlohmann::json out = nlohmann::json::object();
    if (!cfg_.llama.moe.enabled()) return out;
    // Mean over ranks and micro-batches of the blocks' summed load-balancing losses (1.0 per
    // block when routing is perfectly even), and the (block, expert) pairs no rank routed a
    // token to: parameters without a gradient in this step.
    at::Tensor aux = at::tensor({aux_sum_}, at::kDouble);
    comm.all_reduce(aux);
    at::Tensor tokens = expert_tokens_.reshape({-1}).contiguous();
    comm.all_reduce(tokens);
    out["aux_loss"] = aux.item<double>() / static_cast<double>(comm.world_size() * micro_batches_);
    out["moe_idle_experts"] = tokens.eq(0).sum().item<int64_t>();
    aux_sum_ = 0.0;
    expert_tokens_ = at::Tensor();
    micro_batches_ = 0;
    return out;
  }

 private:
  static std::vector<uint8_t> corpus(const TrainConfig& cfg) {
    data::TextSourceOptions src;
    src.source = cfg.data_source;
    src.path = cfg.data_path;
    src.synthetic_bytes = cfg.data_synthetic_bytes;
    src.seed = static_cast<uint64_t>(cfg.data_seed);
    return data::load_corpus(src);
  }
  static data::SamplerOptions sampler_options(const TrainConfig& cfg) {
    data::SamplerOptions so;
    so.seq_len = cfg.seq_len;
    so.micro_batch_size = cfg.micro_batch_size;
    so.grad_accum = cfg.grad_accum;
    so.seed = static_cast<uint64_t>(cfg.data_seed);
    return so;
  }

  TrainConfig cfg_;
  data::DistributedWindowSampler sampler_;
  models::Llama model_{nullptr};
  double aux_sum_ = 0.0;
  at::Tensor expert_tokens_;
  int64_t micro_batches_ = 0;
};

}  // namespace

std::unique_ptr<Task> make_language_model_task(const TrainConfig& cfg, int rank, int world) {
  return std::make_unique<LanguageModelTask>(cfg, rank, world);
}

}  // namespace zeroshard::train
