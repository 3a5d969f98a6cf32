// Series `wan` (look-alike): a Wan-style video DiT trained by flow matching on captioned clips of
// moving shapes, with its frozen text encoder and causal video VAE (src/models/flux/pipeline_series.h).
#include "models/wan/series.h"

#include "models/flux/pipeline_series.h"

namespace zeroshard::models {

void WanSeriesConfig::register_keys(train::ConfigKeys& k) {
  {
    train::ConfigKeys::ModelScope model(k);
    k.add_int("wan.dim", &wan.dim, 6, 1 << 16, "DiT width");
    k.add_int("wan.n_heads", &wan.n_heads, 1, 1024, "DiT heads (head size a multiple of 6)");
    k.add_int("wan.layers", &wan.layers, 0, 1024, "DiT blocks");
    k.add_int("wan.ffn_hidden", &wan.ffn_hidden, 1, 1 << 20, "FFN hidden width");
    k.add_int("wan.patch_size", &wan.patch_size, 1, 64, "spatial patch size (one latent frame per patch)");
    k.add_float("wan.rope_theta", &wan.rope_theta, 1.0, 1e9, "RoPE base");
    k.add_float("wan.latent_scale", &wan.latent_scale, 1e-6, 1e6, "the VAE mean is multiplied by this");
  }
  register_tower_keys(k, "wan", wan.text, &vae_from, &text_encoder_from);
  register_vae_keys(k, vae);
  data.register_keys(k, /*clips=*/true);
}

void WanSeriesConfig::validate(const train::TrainConfig& c) const {
  vae.validate(data.frames, data.image_size);
  wan.validate(data.image_size / vae.spatial_factor());
  check_tower_files(c, "wan", vae_from, text_encoder_from);
}

namespace {

struct WanTraits {
  using Pipeline = WanPipeline;
  using Config = WanSeriesConfig;
  static constexpr const char* kName = "wan";
  static constexpr const char* kItems = "clips";
  static Pipeline build(const Config& c) { return Pipeline(c.wan, c.vae); }
  static void init(const Config& c, uint64_t seed, const std::string& name, at::Tensor& p) {
    wan_init(c.wan, c.vae, seed, name, p);
  }
  static const TextEncoderConfig& text(const Config& c) { return c.wan.text; }
  static std::string caption(const data::ShapeScene& s) { return s.caption; }
  static std::vector<int64_t> latent_shape(const Config& c) {
    const int64_t latent = c.data.image_size / c.vae.spatial_factor();
    return {c.vae.z_channels, c.data.frames / c.vae.time_factor(), latent, latent};
  }
  static at::Tensor samples(const Config& c, const train::TrainConfig& cfg, int64_t first) {
    return data::shape_clips(static_cast<uint64_t>(cfg.data.seed), first, cfg.train.micro_batch_size, c.data.frames,
                             c.data.image_size);
  }
  // Per clip: its held-out truth (when captions are the held-out scenes'), then the sample.
  static std::vector<at::Tensor> png_rows(const Config& c, uint64_t data_seed, const sample::SampleOptions& o,
                                          const at::Tensor& samples, bool with_truth) {
    std::vector<at::Tensor> rows;
    const at::Tensor truth = data::shape_clips(data_seed, o.first_clip, o.clips, c.data.frames, c.data.image_size);
    for (int64_t i = 0; i < o.clips; ++i) {
      if (with_truth) rows.push_back(truth[i]);
      rows.push_back(samples[i]);
    }
    return rows;
  }
};

}  // namespace

Series wan_series() {
  Series s;
  s.name = "wan";
  s.summary = "look-alike Wan-style video DiT on generated captioned clips, frozen text encoder and causal video VAE";
  s.make_config = [] { return std::make_unique<WanSeriesConfig>(); };
  s.make_task = [](const train::TrainConfig& c, int rank, int world) -> std::unique_ptr<train::Task> {
    return std::make_unique<PipelineTask<WanTraits>>(c, rank, world);
  };
  s.is_unit = wan_unit;
  s.sample = PipelineTask<WanTraits>::generate;
  s.supports_lora = true;
  s.adapter_root = "dit.";  // PipelineTask::build adapts the DiT only
  return s;
}

}  // namespace zeroshard::models
