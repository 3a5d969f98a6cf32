// What the two look-alike diffusion pipelines (series flux: captioned shape images; wan:
// captioned clips of moving shapes) share: flow matching in the latent space of a frozen VAE,
// conditioned by a frozen text encoder (both from their files, <series>.vae_from /
// <series>.text_encoder_from, or seeded), only the DiT (or its LoRA adapters) learning; and
// sampling by Euler steps of the learned flow, decoded by the VAE into one PNG. A Traits struct
// per series says what differs (src/models/flux/series.cpp, src/models/wan/series.cpp).
#pragma once

#include "checkpoint/checkpoint.h"
#include "data/shapes.h"
#include "io/png.h"
#include "io/safetensors.h"
#include "io/torch_pth.h"
#include "models/text/text_encoder.h"
#include "models/vae/series.h"
#include "nn/init.h"
#include "sample/sample.h"
#include "train/task.h"
#include "util/text.h"
#include "zeroshard/nn/deferred.h"

#include <torch/torch.h>

#include <chrono>

namespace zeroshard::models {

// The text tower's keys (<series>.text_*) and both towers' files (<series>.vae_from,
// <series>.text_encoder_from).
inline void register_tower_keys(train::ConfigKeys& k, const std::string& series, TextEncoderConfig& t,
                                std::string* vae_from, std::string* text_from) {
  {
    train::ConfigKeys::ModelScope model(k);
    k.add_int(series + ".text_dim", &t.dim, 2, 1 << 16, "text encoder width");
    k.add_int(series + ".text_layers", &t.n_layers, 0, 1024, "text encoder layers");
    k.add_int(series + ".text_heads", &t.n_heads, 1, 1024, "text encoder heads");
    k.add_int(series + ".text_ffn_hidden", &t.ffn_hidden, 1, 1 << 20, "text encoder SwiGLU width");
    k.add_int(series + ".text_len", &t.max_len, 1, 4096, "caption bytes (zero-padded or cut)");
  }
  k.add_string(series + ".vae_from", vae_from, {}, "the frozen VAE's safetensors (a vae run's export); empty: seeded");
  k.add_string(series + ".text_encoder_from", text_from, {}, "the frozen text encoder's safetensors; empty: seeded");
}

// The towers' files must exist and cannot be combined with model.init_from.
inline void check_tower_files(const train::TrainConfig& c, const std::string& series, const std::string& vae_from,
                              const std::string& text_from) {
  for (const auto& [key, path] : {std::pair<std::string, const std::string*>{series + ".vae_from", &vae_from},
                                  {series + ".text_encoder_from", &text_from}}) {
    if (path->empty()) continue;
    if (!c.init_from.empty()) {
      throw std::invalid_argument("model.init_from holds the whole pipeline, towers included; drop " + key +
                                  " or model.init_from");
    }
    if (!std::filesystem::exists(*path)) throw std::invalid_argument(key + ": file '" + *path + "' does not exist");
  }
}

template <class Traits>
class PipelineTask : public train::GeneratedSampleTask {
 public:
  using Pipeline = typename Traits::Pipeline;

  PipelineTask(const train::TrainConfig& cfg, int rank, int world)
      : GeneratedSampleTask(cfg, rank, world), series_(cfg.series_config<typename Traits::Config>()) {
    model_ = build(cfg, &adapted_);
  }

  // The pipeline without bytes: towers frozen; LoRA (if asked) adapts the DiT only.
  static Pipeline build(const train::TrainConfig& cfg, std::vector<std::string>* adapted) {
    nn::DeferredInit deferred;
    Pipeline p = Traits::build(cfg.series_config<typename Traits::Config>());
    for (auto& param : p->text_encoder->parameters()) param.set_requires_grad(false);
    for (auto& param : p->vae->parameters()) param.set_requires_grad(false);
    if (cfg.lora.rank > 0) {
      std::vector<std::string> names = nn::apply_lora(*p->dit, train::lora_options(cfg));
      for (auto& name : names) name = "dit." + name;
      if (adapted != nullptr) *adapted = names;
    }
    return p;
  }

  std::shared_ptr<nn::HookableModule> module() const override { return model_.ptr(); }

  void init_parameter(const std::string& name, at::Tensor& param) const override {
    Traits::init(series_, static_cast<uint64_t>(cfg_.train.seed), name, param);
  }

  // `seeded`, with the parameters under "vae." and "text_encoder." read from those towers' own
  // files when given.
  std::shared_ptr<ParamSource> initial_source(std::shared_ptr<ParamSource> seeded) const override {
    std::shared_ptr<ParamSource> source = std::move(seeded);
    auto from_file = [&source](const std::string& path, const std::string& prefix) {
      if (path.empty()) return;
      source = combine_param_sources(source, prefixed_param_source(io::checkpoint_param_source(path), prefix),
                                     [prefix](const std::string& n) { return util::starts_with(n, prefix); });
    };
    from_file(series_.vae_from, "vae.");
    from_file(series_.text_encoder_from, "text_encoder.");
    return source;
  }

  at::Tensor loss(int64_t step, int64_t micro) override {
    const int64_t first = first_index(step, micro);
    std::vector<at::Tensor> tokens, noise, sigma;
    for (int64_t i = 0; i < cfg_.train.micro_batch_size; ++i) {
      const auto scene = data::shape_scene(static_cast<uint64_t>(cfg_.data.seed), first + i);
      tokens.push_back(caption_tokens(Traits::caption(scene), Traits::text(series_).max_len));
      // Noise and the logit-normal sigma (SD3) per sample from (seed, sample index).
      auto gen = nn::generator_for(static_cast<uint64_t>(cfg_.data.seed),
                                   std::string(Traits::kName) + ".noise." + std::to_string(first + i));
      noise.push_back(at::randn(Traits::latent_shape(series_), gen, at::kFloat));
      sigma.push_back(at::sigmoid(at::randn({1}, gen, at::kFloat)));
    }
    return model_->forward(samples(first), at::stack(tokens), at::stack(noise), at::cat(sigma));
  }

  // {"towers_s": the mean over ranks of the frozen towers' time in the step}. A collective.
  nlohmann::json finish_step(Communicator& comm) override {
    at::Tensor t = at::full({1}, model_->towers_seconds, at::kDouble);
    comm.all_reduce(t);
    model_->towers_seconds = 0.0;
    return {{"towers_s", t.item<double>() / comm.world_size()}};
  }

  std::string item_name() const override { return Traits::kItems; }

  // Images (or clips) from captions: --prompt for all, else the held-out scenes' captions (their
  // true images drawn above the samples); Euler sampling of the flow, then the VAE's decoder.
  static std::string generate(const sample::SampleOptions& o, ckpt::Checkpoint& ck, const train::TrainConfig& cfg,
                              const RendezvousInfo& rdv) {
    if (o.clips < 1) throw std::invalid_argument("--clips must be >= 1, got " + std::to_string(o.clips));
    if (o.denoise_steps < 1) throw std::invalid_argument("--steps must be >= 1, got " + std::to_string(o.denoise_steps));
    const auto& series = cfg.series_config<typename Traits::Config>();
    auto comm = make_communicator(rdv);
    Pipeline p = build(cfg, nullptr);
    auto sharded = fully_shard(p.ptr(), comm, sample::sampling_shard_options(cfg, o, ck));

    const bool own_prompt = o.prompt != "\n";
    const uint64_t data_seed = static_cast<uint64_t>(cfg.data.seed);
    std::vector<std::string> captions;
    std::vector<at::Tensor> tokens, noise;
    for (int64_t i = 0; i < o.clips; ++i) {
      const data::ShapeScene scene = data::shape_scene(data_seed, o.first_clip + i);
      captions.push_back(own_prompt ? o.prompt : Traits::caption(scene));
      tokens.push_back(caption_tokens(captions.back(), Traits::text(series).max_len));
      auto gen = nn::generator_for(o.seed, "sample.noise." + std::to_string(i));
      noise.push_back(at::randn(Traits::latent_shape(series), gen));
    }
    const at::Tensor samples = p->generate(at::stack(tokens), at::stack(noise), o.denoise_steps);

    const std::string path = sample::output_path(ck, o.out, "samples.png");
    if (comm->rank() == 0) io::write_png_rows(path, Traits::png_rows(series, data_seed, o, samples, !own_prompt));
    comm->barrier();
    std::string summary = "generated " + std::to_string(o.clips) + " " + Traits::kItems + " (" +
                          std::to_string(o.denoise_steps) + " Euler steps); wrote " + path + "; captions, in order:";
    for (const auto& c : captions) summary += "\n  " + c;
    return summary;
  }

 private:
  at::Tensor samples(int64_t first) const override { return Traits::samples(series_, cfg_, first); }

  const typename Traits::Config& series_;
  Pipeline model_{nullptr};
};

}  // namespace zeroshard::models
