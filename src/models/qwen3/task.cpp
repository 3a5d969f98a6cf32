// The training task of the qwen3 / qwen3_moe series: the model (Hugging Face names), its seeded
// init or a Hugging Face folder's weights, samples of the prepared corpora mixed by weight, the
// token-level loss, MoE figures and the held-out validation loss.
#include "data/token_sampler.h"
#include "models/qwen3/loss.h"
#include "models/qwen3/model.h"
#include "models/qwen3/series_parts.h"
#include "nn/cross_entropy.h"
#include "nn/layers.h"
#include "zeroshard/nn/deferred.h"

#include <torch/torch.h>

#include <fstream>

namespace zeroshard::models::qwen3 {

namespace {

data::CorpusOptions corpus_options(const train::TrainConfig& cfg, const QwenConfig& config) {
  const auto& s = cfg.series_config<QwenSeriesConfig>();
  data::CorpusOptions co;
  co.seq_len = s.seq_len;
  co.valid_fraction = s.valid_fraction;
  co.packing = s.packing;
  co.pad_id = std::max<int64_t>(0, config.pad_token_id);
  co.seed = static_cast<uint64_t>(cfg.data.seed);
  return co;
}

// One prepared corpus as training reads it (refused when its tokenizer's ids do not fit the
// model), with the log lines that describe it: samples and documents per split, conversations cut.
std::unique_ptr<data::TokenCorpus> open_corpus(const std::string& prefix, double weight, const data::CorpusOptions& co,
                                               const QwenConfig& config, std::vector<std::string>& notes) {
  auto corpus = std::make_unique<data::TokenCorpus>(prefix, co);
  const data::TokenCorpus& c = *corpus;
  const int64_t vocab = c.meta().value("tokenizer_vocab_size", int64_t{-1});
  if (vocab > config.vocab_size) {
    throw std::invalid_argument(prefix + ".json: the corpus was tokenized with a vocabulary of " + std::to_string(vocab) +
                                " ids (" + c.meta().value("tokenizer", std::string("?")) + ") but model.vocab_size is " +
                                std::to_string(config.vocab_size) + ": the tokenizer does not fit this model");
  }
  std::string line = "corpus " + prefix + " (" + data::corpus_kind_name(c.kind()) + ", weight " + train::float_text(weight) +
                     "): " + std::to_string(c.num_samples(data::Split::Train)) + " training samples of " +
                     std::to_string(co.seq_len + 1) + " tokens from " +
                     std::to_string(c.num_documents(data::Split::Train)) + " documents";
  if (co.valid_fraction > 0) {
    line += ", " + std::to_string(c.num_samples(data::Split::Valid)) + " validation samples from " +
            std::to_string(c.num_documents(data::Split::Valid)) + " documents";
  }
  notes.push_back(line);
  const int64_t long_train = c.too_long(data::Split::Train), long_valid = c.too_long(data::Split::Valid);
  if (long_train + long_valid > 0) {
    notes.push_back("corpus " + prefix + ": " + std::to_string(long_train + long_valid) +
                    " conversations are longer than train.seq_len + 1 = " + std::to_string(co.seq_len + 1) +
                    " tokens and are truncated (" + prefix + ".json lists where they come from); metrics.jsonl "
                    "counts them per step as truncated_sequences");
  }
  return corpus;
}

class QwenTask : public train::Task {
 public:
  QwenTask(const train::TrainConfig& cfg, int rank, int world)
      : cfg_(cfg), series_(cfg_.series_config<QwenSeriesConfig>()), config_(series_.qwen()), rank_(rank), world_(world) {
    {
      nn::DeferredInit deferred;
      model_ = QwenForCausalLM(config_, /*lm_head=*/true);
      if (cfg_.lora.rank > 0) adapted_ = nn::apply_lora(*model_, train::lora_options(cfg_));
    }
    load_corpora();
  }

  std::shared_ptr<nn::HookableModule> module() const override { return model_.ptr(); }

  void init_parameter(const std::string& name, at::Tensor& param) const override {
    model_->init_parameter(static_cast<uint64_t>(cfg_.train.seed), name, param);
  }

  std::shared_ptr<ParamSource> initial_source(std::shared_ptr<ParamSource> seeded) const override {
    if (series_.from_hf.empty()) return seeded;
    auto folder = hf_param_source(series_.from_hf, config_);
    // LoRA: the base from the folder, the fresh adapters from the seeded init.
    return cfg_.lora.rank > 0 ? combine_param_sources(folder, seeded, nn::is_lora_parameter) : folder;
  }

  at::Tensor loss(int64_t step, int64_t micro) override {
    fill_step(step);
    const int64_t mb = cfg_.train.micro_batch_size;
    const Batch b = batch(step_samples_, (micro * world_ + rank_) * mb, mb);
    const Output out = model_->forward(b.inputs);
    const int64_t V = out.logits.size(-1);
    const auto ce = nn::cross_entropy_sum(out.logits.reshape({-1, V}), b.labels.reshape({-1}), -100);
    // The mean over the step's target tokens of every rank and micro-batch: the engine averages
    // the W x grad_accum micro-batch losses, so each is scaled by that count over the targets.
    const double per_micro = static_cast<double>(std::max<int64_t>(1, step_targets_)) /
                             static_cast<double>(world_ * cfg_.train.grad_accum);
    at::Tensor loss = ce / per_micro;
    if (config_.is_moe()) {
      at::Tensor aux = aux_loss(out.router_logits, b.attention_mask);
      aux_sum_ += aux.item<double>();
      ++aux_count_;
      if (config_.output_router_logits) loss = loss + config_.router_aux_loss_coef * aux.to(loss.scalar_type());
      for (const auto& layer : model_->model->layers->children()) {
        const auto* l = layer->as<DecoderLayerImpl>();
        if (!l->routed()) continue;
        const at::Tensor t = l->moe->last_tokens_per_expert;
        expert_tokens_.push_back(t);
      }
    }
    return loss;
  }

  double items_per_step() const override { return static_cast<double>(global_batch() * series_.seq_len); }
  std::string item_name() const override { return "tokens"; }

  // Model FLOPs per token as the llama series counts them (torchtitan's convention): 6 per weight
  // of every Linear a token goes through (forward 2, backward 4) — q/k/v/o with the explicit
  // head_dim, the SwiGLU or the router plus top_k experts on routed layers, the output
  // projection (tied or not) — plus 12 * layers * heads * head_dim * seq_len for the attention
  // scores and values (the full T x T products). Norms, RoPE and biases are not counted. LoRA:
  // frozen weights 4 (forward and the input gradient), adapters 6 (experts' as often as their
  // expert runs). Every position counts, padding of chat sequences included.
  double flops_per_item() const override {
    const QwenConfig& c = config_;
    const double H = static_cast<double>(c.hidden_size), d = static_cast<double>(c.head_dim);
    const double nh = static_cast<double>(c.num_attention_heads), nkv = static_cast<double>(c.num_key_value_heads);
    const double attn = H * nh * d + 2.0 * H * nkv * d + nh * d * H;
    double weights = static_cast<double>(c.vocab_size) * H;
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
      const double ffn = c.is_moe_layer(l) ? H * static_cast<double>(c.num_experts) +
                                                 static_cast<double>(c.num_experts_per_tok) * 3.0 * H *
                                                     static_cast<double>(c.moe_intermediate_size)
                                           : 3.0 * H * static_cast<double>(c.intermediate_size);
      weights += attn + ffn;
    }
    const double scores = 12.0 * static_cast<double>(c.num_hidden_layers) * nh * d * static_cast<double>(series_.seq_len);
    if (cfg_.lora.rank == 0) return 6.0 * weights + scores;
    return 4.0 * weights + 6.0 * nn::active_lora_parameters(*model_, c.num_experts_per_tok, c.num_experts) + scores;
  }

  // Per micro-batch, int64 [micro_batch_size, seq_len] each: input ids, labels (-100: no
  // target), segment ids (0: padding) and position ids — what the model and the loss read, so a
  // peer (bench/torch_qwen3_peer.py) trains on exactly these batches.
  void dump_batches(const std::string& path, int64_t steps) const override {
    std::ofstream out(path, std::ios::binary);
    for (int64_t s = 0; s < steps; ++s) {
      fill_step(s);
      for (int64_t m = 0; m < cfg_.train.grad_accum; ++m) {
        const int64_t mb = cfg_.train.micro_batch_size;
        const Batch b = batch(step_samples_, (m * world_ + rank_) * mb, mb);
        for (const at::Tensor& t : {b.inputs.input_ids, b.labels, b.segments, b.positions}) {
          out.write(static_cast<const char*>(t.data_ptr()), static_cast<std::streamsize>(t.nbytes()));
        }
      }
    }
    if (!out) throw std::runtime_error(path + ": cannot write the dumped batches");
  }

  nlohmann::json finish_step(Communicator& comm) override {
    nlohmann::json out = nlohmann::json::object();
    out["target_tokens"] = step_targets_;
    if (chat_) out["truncated_sequences"] = step_truncated_;
    if (config_.is_moe()) {
      // Mean over ranks and micro-batches of the load-balancing loss; (layer, expert) pairs no rank
      // routed a token to (no gradient this step).
      at::Tensor aux = at::tensor({aux_sum_, static_cast<double>(aux_count_)}, at::kDouble);
      comm.all_reduce(aux);
      at::Tensor tokens = at::stack(expert_tokens_).reshape({-1}).contiguous();
      comm.all_reduce(tokens);
      out["aux_loss"] = aux[0].item<double>() / aux[1].item<double>();
      // Per micro-batch entries are summed over the step: idle = zero over every micro-batch.
      const int64_t layers = config_.num_moe_layers(), E = config_.num_experts;
      out["moe_idle_experts"] = tokens.view({-1, layers, E}).sum(0).eq(0).sum().item<int64_t>();
      aux_sum_ = 0.0;
      aux_count_ = 0;
      expert_tokens_.clear();
    }
    return out;
  }

  bool has_validation() const override { return valid_ != nullptr; }

  nlohmann::json evaluate(Communicator& comm) override {
    if (!valid_) return nlohmann::json::object();
    torch::NoGradGuard no_grad;
    const int64_t total = std::min(series_.eval_samples, valid_total_);
    const int64_t mb = cfg_.train.micro_batch_size, W = world_;
    // Every rank runs the same number of forwards (ZeRO-3 gathers are collectives): entries
    // rank, rank + W, ... of the first `total`, padded with sample-less rows.
    const int64_t per_rank = (total + W - 1) / W, batches = (per_rank + mb - 1) / mb;
    std::vector<data::TokenSample> mine;
    for (int64_t q = 0; q < batches * mb; ++q) {
      const int64_t j = rank_ + q * W;
      data::TokenSample s;
      if (q < per_rank && j < total) {
        const auto pick = valid_->at(j);
        corpora_[static_cast<size_t>(pick.corpus)]->sample(data::Split::Valid, pick.sample, s);
      } else {
        s = empty_sample();
      }
      mine.push_back(std::move(s));
    }
    double sum = 0, count = 0;
    for (int64_t b = 0; b < batches; ++b) {
      const Batch batch_ = batch(mine, b * mb, mb);
      const Output out = model_->forward(batch_.inputs);
      const int64_t V = out.logits.size(-1);
      sum += nn::cross_entropy_sum(out.logits.reshape({-1, V}), batch_.labels.reshape({-1}), -100).item<double>();
      count += static_cast<double>(batch_.labels.ne(-100).sum().item<int64_t>());
    }
    at::Tensor t = at::tensor({sum, count}, at::kDouble);
    comm.all_reduce(t);
    const double tokens = t[1].item<double>();
    return {{"val_loss", tokens > 0 ? t[0].item<double>() / tokens : 0.0},
            {"val_tokens", static_cast<int64_t>(tokens)},
            {"val_samples", total}};
  }

  std::vector<std::string> notes() const override { return notes_; }

 private:
  struct Batch {
    Inputs inputs;
    at::Tensor labels;          // [mb, L]: target id or -100
    at::Tensor segments;        // [mb, L]: 0 padding, 1, 2, ... packed sequences
    at::Tensor positions;       // [mb, L]: position ids (restart in each packed sequence)
    at::Tensor attention_mask;  // [mb, L] real tokens (undefined: all real)
  };

  int64_t global_batch() const { return cfg_.train.micro_batch_size * world_ * cfg_.train.grad_accum; }

  void load_corpora() {
    const data::CorpusOptions co = corpus_options(cfg_, config_);
    std::vector<double> weights;
    std::vector<int64_t> train_sizes, valid_sizes;
    for (const auto& [w, prefix] : series_.datasets()) {
      corpora_.push_back(open_corpus(prefix, w, co, config_, notes_));
      const data::TokenCorpus& c = *corpora_.back();
      chat_ = chat_ || c.kind() == data::CorpusKind::Chat;
      weights.push_back(w);
      train_sizes.push_back(c.num_samples(data::Split::Train));
      valid_sizes.push_back(c.num_samples(data::Split::Valid));
    }
    train_ = std::make_unique<data::BlendedSampler>(weights, train_sizes, static_cast<uint64_t>(cfg_.data.seed), true);
    if (co.valid_fraction > 0) {
      valid_ = std::make_unique<data::BlendedSampler>(weights, valid_sizes, static_cast<uint64_t>(cfg_.data.seed), false);
      for (int64_t n : valid_sizes) valid_total_ += n;
    }
  }

  data::TokenSample empty_sample() const {
    data::TokenSample s;
    const auto n = static_cast<size_t>(series_.seq_len + 1);
    s.ids.assign(n, std::max<int64_t>(0, config_.pad_token_id));
    s.target.assign(n, 0);
    s.segment.assign(n, 0);
    s.position.assign(n, 0);
    return s;
  }

  // The step's global batch (every rank reads all of it: the loss is normalized by its targets).
  void fill_step(int64_t step) const {
    if (step == cached_step_) return;
    const int64_t G = global_batch();
    step_samples_.resize(static_cast<size_t>(G));
    step_targets_ = 0;
    step_truncated_ = 0;
    for (int64_t j = 0; j < G; ++j) {
      const auto pick = train_->at(step * G + j);
      auto& s = step_samples_[static_cast<size_t>(j)];
      corpora_[static_cast<size_t>(pick.corpus)]->sample(data::Split::Train, pick.sample, s);
      step_targets_ += s.targets();
      step_truncated_ += s.truncated;
    }
    cached_step_ = step;
  }

  Batch batch(const std::vector<data::TokenSample>& samples, int64_t first, int64_t n) const {
    const int64_t L = series_.seq_len;
    at::Tensor ids = at::empty({n, L + 1}, at::kLong), labels = at::empty({n, L}, at::kLong);
    at::Tensor segments = at::empty({n, L}, at::kLong), positions = at::empty({n, L}, at::kLong);
    bool all_real = true, one_segment = true;
    for (int64_t r = 0; r < n; ++r) {
      const auto& s = samples[static_cast<size_t>(first + r)];
      auto* id = ids.data_ptr<int64_t>() + r * (L + 1);
      auto* label = labels.data_ptr<int64_t>() + r * L;
      auto* seg = segments.data_ptr<int64_t>() + r * L;
      auto* pos = positions.data_ptr<int64_t>() + r * L;
      for (int64_t t = 0; t <= L; ++t) id[t] = s.ids[static_cast<size_t>(t)];
      for (int64_t t = 0; t < L; ++t) {
        const auto k = static_cast<size_t>(t + 1);
        label[t] = s.target[k] != 0 && s.segment[k] == s.segment[k - 1] ? s.ids[k] : -100;
        seg[t] = s.segment[static_cast<size_t>(t)];
        pos[t] = s.position[static_cast<size_t>(t)];
        all_real = all_real && seg[t] > 0;
        one_segment = one_segment && (seg[t] == 1 || seg[t] == 0) && pos[t] == t;
      }
    }
    Batch b;
    b.inputs.input_ids = ids.narrow(1, 0, L).contiguous();
    b.labels = labels;
    b.segments = segments;
    b.positions = positions;
    // Packed conversations: positions restart and attention stays inside each. A single
    // conversation followed by padding needs neither (the padding comes after every real token).
    if (!one_segment) {
      b.inputs.position_ids = positions;
      b.inputs.segment_ids = segments;
    }
    if (!all_real) b.attention_mask = segments.gt(0);
    return b;
  }

  at::Tensor aux_loss(const std::vector<at::Tensor>& router_logits, const at::Tensor& mask) const {
    if (series_.aux_loss_scope == "per_layer") {
      at::Tensor sum;
      for (const auto& l : router_logits) {
        const at::Tensor a = load_balancing_loss({l}, config_.num_experts, config_.num_experts_per_tok, mask);
        sum = sum.defined() ? sum + a : a;
      }
      return sum / static_cast<double>(router_logits.size());
    }
    return load_balancing_loss(router_logits, config_.num_experts, config_.num_experts_per_tok, mask);
  }

  train::TrainConfig cfg_;
  const QwenSeriesConfig& series_;
  QwenConfig config_;
  int rank_, world_;
  QwenForCausalLM model_{nullptr};
  std::vector<std::unique_ptr<data::TokenCorpus>> corpora_;
  // The sampler replays the blend from its last position and the step's samples are cached:
  // mutable so dump_batches (const) can walk the steps.
  mutable std::unique_ptr<data::BlendedSampler> train_;
  std::unique_ptr<data::BlendedSampler> valid_;
  int64_t valid_total_ = 0;
  bool chat_ = false;
  std::vector<std::string> notes_;
  mutable int64_t cached_step_ = -1, step_targets_ = 0, step_truncated_ = 0;
  mutable std::vector<data::TokenSample> step_samples_;
  double aux_sum_ = 0.0;
  int64_t aux_count_ = 0;
  std::vector<at::Tensor> expert_tokens_;
};

}  // namespace

SeededModel seeded_model(const train::TrainConfig& cfg) {
  QwenForCausalLM model{nullptr};
  {
    nn::DeferredInit deferred;
    model = QwenForCausalLM(cfg.series_config<QwenSeriesConfig>().qwen(), /*lm_head=*/true);
  }
  const auto seed = static_cast<uint64_t>(cfg.train.seed);
  return {model.ptr(), [model, seed](const std::string& name, at::Tensor& param) { model->init_parameter(seed, name, param); }};
}

std::string describe_corpora(const train::TrainConfig& cfg) {
  const QwenConfig config = cfg.series_config<QwenSeriesConfig>().qwen();
  const data::CorpusOptions co = corpus_options(cfg, config);
  const auto corpora = cfg.series_config<QwenSeriesConfig>().datasets();
  std::vector<std::string> notes;
  for (const auto& [w, prefix] : corpora) open_corpus(prefix, w, co, config, notes);
  std::string text = cfg.series + ": training reads " + std::to_string(corpora.size()) + " prepared corpus" +
                     (corpora.size() == 1 ? "" : "es") + ", mixed by weight";
  for (const auto& n : notes) text += "\n  " + n;
  return text;
}

std::unique_ptr<train::Task> make_task(const train::TrainConfig& cfg, int rank, int world) {
  return std::make_unique<QwenTask>(cfg, rank, world);
}

}  // namespace zeroshard::models::qwen3
