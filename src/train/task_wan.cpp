// The wan series: flow matching on captioned clips of moving shapes. The frozen text encoder
// and causal video VAE (from their files, wan.text_encoder_from / wan.vae_from, or seeded)
// turn captions and clips into text states and latent clips; only the DiT (or its LoRA
// adapters) learns.
#include "data/shapes.h"
#include "models/wan/wan.h"
#include "nn/init.h"
#include "train/task.h"
#include "zeroshard/nn/deferred.h"

namespace zeroshard::train {
namespace {

class WanTask : public GeneratedSampleTask {
 public:
  WanTask(const TrainConfig& cfg, int rank, int world) : GeneratedSampleTask(cfg, rank, world) {
    nn::DeferredInit deferred;
    model_ = models::WanPipeline(cfg.wan, cfg.vae);
    for (auto& p : model_->text_encoder->parameters()) p.set_requires_grad(false);
    for (auto& p : model_->vae->parameters()) p.set_requires_grad(false);
    if (cfg.lora_rank > 0) {
      adapted_ = nn::apply_lora(*model_->dit, lora_options(cfg));
      for (auto& name : adapted_) name = "dit." + name;
    }
  }

  std::shared_ptr<nn::HookableModule> module() const override { return model_.ptr(); }

  void init_parameter(const std::string& name, at::Tensor& param) const override {
    models::wan_init(cfg_.wan, cfg_.vae, static_cast<uint64_t>(cfg_.seed), name, param);
  }

  WrapPolicy wrap_policy() const override {
    return [](const std::string& name, const torch::nn::Module&) { return models::wan_unit(name); };
  }

  std::shared_ptr<ParamSource> initial_source(std::shared_ptr<ParamSource> seeded) const override {
    return with_tower_files(std::move(seeded), cfg_.wan_vae_from, cfg_.wan_text_encoder_from);
  }

  at::Tensor loss(int64_t step, int64_t micro) override {
    const int64_t first = first_index(step, micro);
    const auto& v = cfg_.vae;
    const int64_t latent = cfg_.image_size / v.spatial_factor();
    std::vector<at::Tensor> tokens, noise, sigma;
    for (int64_t i = 0; i < cfg_.micro_batch_size; ++i) {
      const std::string caption = data::shape_scene(static_cast<uint64_t>(cfg_.data_seed), first + i).caption;
      tokens.push_back(models::caption_tokens(caption, cfg_.wan.text.max_len));
      auto gen = nn::generator_for(static_cast<uint64_t>(cfg_.data_seed), "wan.noise." + std::to_string(first + i));
      noise.push_back(at::randn({v.z_channels, cfg_.frames / v.time_factor(), latent, latent}, gen, at::kFloat));
      sigma.push_back(at::sigmoid(at::randn({1}, gen, at::kFloat)));
    }
    return model_->forward(samples(first), at::stack(tokens), at::stack(noise), at::cat(sigma));
  }

  nlohmann::json finish_step(Communicator& comm) override {
    return towers_time_metrics(comm, &model_->towers_seconds);
  }

  std::string item_name() const override { return "clips"; }

 private:
  at::Tensor samples(int64_t first) const override {
    return data::shape_clips(static_cast<uint64_t>(cfg_.data_seed), first, cfg_.micro_batch_size, cfg_.frames,
                             cfg_.image_size);
  }

  models::WanPipeline model_{nullptr};
};

}  // namespace

std::unique_ptr<Task> make_wan_task(const TrainConfig& cfg, int rank, int world) {
  return std::make_unique<WanTask>(cfg, rank, world);
}

}  // namespace zeroshard::train
