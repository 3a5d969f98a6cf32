// The diffusion pipelines, flux (captioned shape images) and wan (captioned clips of moving
// shapes): flow matching in the latent space of a frozen VAE, conditioned by a frozen text
// encoder (both from their files, <series>.vae_from / <series>.text_encoder_from, or seeded);
// only the DiT (or its LoRA adapters) learns. One task for both; a Series says what differs.
#include "data/shapes.h"
#include "models/flux/flux.h"
#include "models/wan/wan.h"
#include "nn/init.h"
#include "train/task.h"
#include "zeroshard/nn/deferred.h"

namespace zeroshard::train {
namespace {

struct FluxSeries {
  using Pipeline = models::FluxPipeline;
  static constexpr const char* kName = "flux";
  static constexpr const char* kItems = "images";
  static Pipeline build(const TrainConfig& c) { return Pipeline(c.flux, c.vae); }
  static void init(const TrainConfig& c, const std::string& name, at::Tensor& p) {
    models::flux_init(c.flux, c.vae, static_cast<uint64_t>(c.seed), name, p);
  }
  static bool unit(const std::string& name) { return models::flux_unit(name); }
  static const std::string& vae_from(const TrainConfig& c) { return c.flux_vae_from; }
  static const std::string& text_encoder_from(const TrainConfig& c) { return c.flux_text_encoder_from; }
  static int64_t text_len(const TrainConfig& c) { return c.flux.text.max_len; }
  static std::string caption(const data::ShapeScene& s) { return s.still_caption; }
  static std::vector<int64_t> latent_shape(const TrainConfig& c, int64_t latent) {
    return {c.vae.z_channels, latent, latent};
  }
  static at::Tensor samples(const TrainConfig& c, int64_t first) {
    return data::shape_images(static_cast<uint64_t>(c.data_seed), first, c.micro_batch_size, c.image_size);
  }
};

struct WanSeries {
  using Pipeline = models::WanPipeline;
  static constexpr const char* kName = "wan";
  static constexpr const char* kItems = "clips";
  static Pipeline build(const TrainConfig& c) { return Pipeline(c.wan, c.vae); }
  static void init(const TrainConfig& c, const std::string& name, at::Tensor& p) {
    models::wan_init(c.wan, c.vae, static_cast<uint64_t>(c.seed), name, p);
  }
  static bool unit(const std::string& name) { return models::wan_unit(name); }
  static const std::string& vae_from(const TrainConfig& c) { return c.wan_vae_from; }
  static const std::string& text_encoder_from(const TrainConfig& c) { return c.wan_text_encoder_from; }
  static int64_t text_len(const TrainConfig& c) { return c.wan.text.max_len; }
  static std::string caption(const data::ShapeScene& s) { return s.caption; }
  static std::vector<int64_t> latent_shape(const TrainConfig& c, int64_t latent) {
    return {c.vae.z_channels, c.frames / c.vae.time_factor(), latent, latent};
  }
  static at::Tensor samples(const TrainConfig& c, int64_t first) {
    return data::shape_clips(static_cast<uint64_t>(c.data_seed), first, c.micro_batch_size, c.frames, c.image_size);
  }
};

template <class Series>
class DiffusionTask : public GeneratedSampleTask {
 public:
  DiffusionTask(const TrainConfig& cfg, int rank, int world) : GeneratedSampleTask(cfg, rank, world) {
    nn::DeferredInit deferred;
    model_ = Series::build(cfg);
    // The towers never learn; LoRA (if asked) adapts the DiT only.
    for (auto& p : model_->text_encoder->parameters()) p.set_requires_grad(false);
    for (auto& p : model_->vae->parameters()) p.set_requires_grad(false);
    if (cfg.lora_rank > 0) {
      adapted_ = nn::apply_lora(*model_->dit, lora_options(cfg));
      for (auto& name : adapted_) name = "dit." + name;
    }
  }

  std::shared_ptr<nn::HookableModule> module() const override { return model_.ptr(); }

  void init_parameter(const std::string& name, at::Tensor& param) const override { Series::init(cfg_, name, param); }

  WrapPolicy wrap_policy() const override {
    return [](const std::string& name, const torch::nn::Module&) { return Series::unit(name); };
  }

  std::shared_ptr<ParamSource> initial_source(std::shared_ptr<ParamSource> seeded) const override {
    return with_tower_files(std::move(seeded), Series::vae_from(cfg_), Series::text_encoder_from(cfg_));
  }

  at::Tensor loss(int64_t step, int64_t micro) override {
    const int64_t first = first_index(step, micro);
    const int64_t latent = cfg_.image_size / cfg_.vae.spatial_factor();
    std::vector<at::Tensor> tokens, noise, sigma;
    for (int64_t i = 0; i < cfg_.micro_batch_size; ++i) {
      const auto scene = data::shape_scene(static_cast<uint64_t>(cfg_.data_seed), first + i);
      tokens.push_back(models::caption_tokens(Series::caption(scene), Series::text_len(cfg_)));
      // Noise and the logit-normal sigma (SD3) per sample from (seed, sample index).
      auto gen = nn::generator_for(static_cast<uint64_t>(cfg_.data_seed),
                                   std::string(Series::kName) + ".noise." + std::to_string(first + i));
      noise.push_back(at::randn(Series::latent_shape(cfg_, latent), gen, at::kFloat));
      sigma.push_back(at::sigmoid(at::randn({1}, gen, at::kFloat)));
    }
    return model_->forward(samples(first), at::stack(tokens), at::stack(noise), at::cat(sigma));
  }

  nlohmann::json finish_step(Communicator& comm) override {
    return towers_time_metrics(comm, &model_->towers_seconds);
  }

  std::string item_name() const override { return Series::kItems; }

 private:
  at::Tensor samples(int64_t first) const override { return Series::samples(cfg_, first); }

  typename Series::Pipeline model_{nullptr};
};

}  // namespace

std::unique_ptr<Task> make_flux_task(const TrainConfig& cfg, int rank, int world) {
  return std::make_unique<DiffusionTask<FluxSeries>>(cfg, rank, world);
}

std::unique_ptr<Task> make_wan_task(const TrainConfig& cfg, int rank, int world) {
  return std::make_unique<DiffusionTask<WanSeries>>(cfg, rank, world);
}

}  // namespace zeroshard::train
