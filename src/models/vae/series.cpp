// Series `vae`: reconstruction + KL on generated clips of moving shapes, encoded and decoded
// chunk by chunk through the causal feature cache (vae.chunk_frames); `sample` writes held-out
// clips above their reconstructions.
#include "models/vae/series.h"

#include "checkpoint/checkpoint.h"
#include "data/shapes.h"
#include "io/png.h"
#include "nn/init.h"
#include "sample/sample.h"
#include "train/task.h"
#include "zeroshard/nn/deferred.h"

#include <torch/torch.h>

#include <cmath>

namespace zeroshard::models {

void register_vae_keys(train::ConfigKeys& k, VaeConfig& v) {
  train::ConfigKeys::ModelScope model(k);
  k.add_int("vae.base_channels", &v.base_channels, 1, 1 << 16, "channels of the first level");
  k.add_custom("vae.channel_mult", "list", "a list of integers >= 1, one per level, e.g. [1, 2, 2]",
               "channel multiplier per level", [&v](const std::string& s) { v.channel_mult = parse_int_list("vae.channel_mult", s); },
               [&v] { return int_list_text(v.channel_mult); });
  k.add_custom("vae.temporal_down", "list", "a list of true/false, one per downsampling (levels - 1), e.g. [false, true]",
               "which downsamplings also halve time",
               [&v](const std::string& s) { v.temporal_down = parse_bool_list("vae.temporal_down", s); },
               [&v] { return bool_list_text(v.temporal_down); });
  k.add_int("vae.z_channels", &v.z_channels, 1, 1 << 16, "latent channels");
  k.add_int("vae.num_res_blocks", &v.num_res_blocks, 1, 64, "residual blocks per level");
  k.add_float("vae.norm_eps", &v.norm_eps, 1e-12, 1.0, "channel RMS norm epsilon");
  k.add_float("vae.kl_weight", &v.kl_weight, 0.0, 1e6, "weight of the KL term");
  k.add_int("vae.chunk_frames", &v.chunk_frames, 0, 1 << 20, "frames per encoder chunk; 0: the whole clip");
}

void ShapesData::register_keys(train::ConfigKeys& k, bool clips) {
  k.add_string("data.source", &source, {"shapes"}, "generated captioned scenes of shapes");
  if (clips) k.add_int("data.frames", &frames, 1, 1 << 16, "frames per generated clip");
  k.add_int("data.image_size", &image_size, 1, 1 << 16, "height = width of generated images and clips");
}

void VaeSeriesConfig::register_keys(train::ConfigKeys& k) {
  register_vae_keys(k, vae);
  data.register_keys(k, /*clips=*/true);
}

void VaeSeriesConfig::validate(const train::TrainConfig& c) const {
  (void)c;
  vae.validate(data.frames, data.image_size);
}

namespace {

VideoVae build_vae(const VaeConfig& c) {
  nn::DeferredInit deferred;
  return VideoVae(c);
}

class VideoVaeTask : public train::GeneratedSampleTask {
 public:
  VideoVaeTask(const train::TrainConfig& cfg, int rank, int world)
      : GeneratedSampleTask(cfg, rank, world), series_(cfg.series_config<VaeSeriesConfig>()) {
    model_ = build_vae(series_.vae);
  }

  std::shared_ptr<nn::HookableModule> module() const override { return model_.ptr(); }

  void init_parameter(const std::string& name, at::Tensor& param) const override {
    vae_init(series_.vae, static_cast<uint64_t>(cfg_.train.seed), name, param);
  }

  at::Tensor loss(int64_t step, int64_t micro) override {
    const int64_t first = first_index(step, micro);
    const at::Tensor clips = samples(first);
    // The posterior sample's noise, per clip from (seed, clip index): the same for every
    // world size and strategy.
    std::vector<at::Tensor> noise;
    const auto& v = series_.vae;
    const int64_t frames = series_.data.frames, size = series_.data.image_size;
    for (int64_t i = 0; i < cfg_.train.micro_batch_size; ++i) {
      auto gen = nn::generator_for(static_cast<uint64_t>(cfg_.data.seed), "vae.noise." + std::to_string(first + i));
      noise.push_back(at::randn(
          {v.z_channels, frames / v.time_factor(), size / v.spatial_factor(), size / v.spatial_factor()}, gen, at::kFloat));
    }
    VaeOutput out = model_->forward(clips, at::stack(noise), v.chunk_frames);
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
    return data::shape_clips(static_cast<uint64_t>(cfg_.data.seed), first, cfg_.train.micro_batch_size,
                             series_.data.frames, series_.data.image_size);
  }

  const VaeSeriesConfig& series_;
  VideoVae model_{nullptr};
  double recon_sum_ = 0.0, kl_sum_ = 0.0;
  int64_t micro_batches_ = 0;
};

// Held-out generated clips through encode -> decode (posterior mean, chunk by chunk with the
// feature cache), written as one PNG: per clip its frames above their reconstruction.
std::string reconstruct_clips(const sample::SampleOptions& o, ckpt::Checkpoint& ck, const train::TrainConfig& cfg,
                              const RendezvousInfo& rdv) {
  if (o.clips < 1) throw std::invalid_argument("--clips must be >= 1, got " + std::to_string(o.clips));
  const VaeSeriesConfig& series = cfg.series_config<VaeSeriesConfig>();
  VaeConfig vc = series.vae;
  if (o.chunk_frames >= 0) vc.chunk_frames = o.chunk_frames;
  try {
    vc.validate(series.data.frames, series.data.image_size);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(std::string("--chunk-frames: ") + e.what());
  }
  auto comm = make_communicator(rdv);
  VideoVae model = build_vae(vc);
  auto sharded = fully_shard(model.ptr(), comm, sample::sampling_shard_options(cfg, o, ck));

  torch::NoGradGuard no_grad;
  const at::Tensor clips = data::shape_clips(static_cast<uint64_t>(cfg.data.seed), o.first_clip, o.clips,
                                             series.data.frames, series.data.image_size);
  const VaeOutput out = model->forward(clips, at::Tensor(), vc.chunk_frames);
  const double mse = out.recon_loss.item<double>();
  const double psnr = 10.0 * std::log10(4.0 / std::max(mse, 1e-12));  // pixel range [-1, 1]: peak-to-peak 2

  const std::string path = sample::output_path(ck, o.out, "reconstruction.png");
  if (comm->rank() == 0) {
    std::vector<at::Tensor> rows;
    for (int64_t c = 0; c < o.clips; ++c) {
      rows.push_back(clips[c]);
      rows.push_back(out.recon[c]);
    }
    io::write_png_rows(path, rows);
  }
  comm->barrier();
  char line[512];
  std::snprintf(line, sizeof(line),
                "reconstructed %lld held-out clips (from index %lld, chunks of %lld frames): MSE %.5f, PSNR %.2f dB; "
                "wrote %s",
                static_cast<long long>(o.clips), static_cast<long long>(o.first_clip),
                static_cast<long long>(vc.chunk_frames), mse, psnr, path.c_str());
  return line;
}

}  // namespace

Series vae_series() {
  Series s;
  s.name = "vae";
  s.summary = "causal 3-D-conv video VAE on generated clips (chunked encoding with a feature cache)";
  s.make_config = [] { return std::make_unique<VaeSeriesConfig>(); };
  s.make_task = [](const train::TrainConfig& c, int rank, int world) -> std::unique_ptr<train::Task> {
    return std::make_unique<VideoVaeTask>(c, rank, world);
  };
  s.sample = reconstruct_clips;
  return s;
}

}  // namespace zeroshard::models
