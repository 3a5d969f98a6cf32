// The vae series: reconstruction + KL on generated clips of moving shapes, encoded and
// decoded chunk by chunk through the causal feature cache (vae.chunk_frames).
#include "data/shapes.h"
#include "models/vae/vae.h"
#include "nn/init.h"
#include "train/task.h"
#include "zeroshard/nn/deferred.h"


namespace zeroshard::train {
namespace {

class VideoVaeTask : public GeneratedSampleTask {
 public:
  VideoVaeTask(const TrainConfig& cfg, int rank, int world) : GeneratedSampleTask(cfg, rank, world) {
    nn::DeferredInit deferred;
    model_ = models::VideoVae(cfg.vae);
  }

  std::shared_ptr<nn::HookableModule> module() const override { return model_.ptr(); }

  void init_parameter(const std::string& name, at::Tensor& param) const override {
    models::vae_init(cfg_.vae, static_cast<uint64_t>(cfg_.seed), name, param);
  }

  at::Tensor loss(int64_t step, int64_t micro) override {
    const int64_t first = first_index(step, micro);
    const at::Tensor clips = samples(first);
    // The posterior sample's noise, per clip from (seed, clip index): the same for every
    // world size and strategy.
    std::vector<at::Tensor> noise;
    const auto& v = cfg_.vae;
    for (int64_t i = 0; i < cfg_.micro_batch_size; ++i) {
      auto gen = nn::generator_for(static_cast<uint64_t>(cfg_.data_seed), "vae.noise." + std::to_string(first + i));
      noise.push_back(at::randn({v.z_channels, cfg_.frames / v.time_factor(), cfg_.image_size / v.spatial_factor(),
                                 cfg_.image_size / v.spatial_factor()},
                                gen, at::kFloat));
    }
    models::VaeOutput out = model_->forward(clips, at::stack(noise), v.chunk_frames);
    recon_sum_ += out.recon_loss.item<double>();
    kl_sum_ += out.kl.item<double>();
    ++micro_batches_;
    return out.loss;
  }

  std::string item_name() const override { return "clips"; }

  nlohmann::json finish_step(Communicator& comm) override {
    at::Tensor sums = at::tensor({recon_sum_, kl_sum_}, at::kDouble);
    comm.all_reduce(sums);
    const double n = static_cast<double>(comm.world_size() * micro_batches_);
    recon_sum_ = kl_sum_ = 0.0;
    micro_batches_ = 0;
    return {{"recon_loss", sums[0].item<double>() / n}, {"kl", sums[1].item<double>() / n}};
  }

 private:
  at::Tensor samples(int64_t first) const override {
    return data::shape_clips(static_cast<uint64_t>(cfg_.data_seed), first, cfg_.micro_batch_size, cfg_.frames,
                             cfg_.image_size);
  }

  models::VideoVae model_{nullptr};
  double recon_sum_ = 0.0, kl_sum_ = 0.0;
  int64_t micro_batches_ = 0;
};

}  // namespace

std::unique_ptr<Task> make_video_vae_task(const TrainConfig& cfg, int rank, int world) {
  return std::make_unique<VideoVaeTask>(cfg, rank, world);
}

}  // namespace zeroshard::train
