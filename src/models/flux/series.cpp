// Series `flux` (look-alike): a FLUX-style MMDiT trained by flow matching on captioned shape
// images, with its frozen text encoder and image VAE (src/models/flux/pipeline_series.h).
#include "models/flux/series.h"

#include "models/flux/pipeline_series.h"

namespace zeroshard::models {

void FluxSeriesConfig::register_keys(train::ConfigKeys& k) {
  {
    train::ConfigKeys::ModelScope model(k);
    k.add_int("flux.dim", &flux.dim, 4, 1 << 16, "DiT width");
    k.add_int("flux.n_heads", &flux.n_heads, 1, 1024, "DiT heads (head size a multiple of 4)");
    k.add_int("flux.double_blocks", &flux.double_blocks, 0, 1024, "double-stream blocks");
    k.add_int("flux.single_blocks", &flux.single_blocks, 0, 1024, "single-stream blocks");
    k.add_int("flux.mlp_ratio", &flux.mlp_ratio, 1, 64, "MLP hidden = mlp_ratio x dim");
    k.add_int("flux.patch_size", &flux.patch_size, 1, 64, "latent patches of patch_size x patch_size");
    k.add_float("flux.rope_theta", &flux.rope_theta, 1.0, 1e9, "RoPE base");
    k.add_float("flux.latent_scale", &flux.latent_scale, 1e-6, 1e6, "the VAE mean is multiplied by this");
  }
  register_tower_keys(k, "flux", flux.text, &vae_from, &text_encoder_from);
  register_vae_keys(k, vae);
  data.register_keys(k, /*clips=*/false);
}

void FluxSeriesConfig::validate(const train::TrainConfig& c) const {
  for (bool t : vae.temporal_down) {
    if (t) {
      throw std::invalid_argument("vae.temporal_down=" + bool_list_text(vae.temporal_down) +
                                  ": the flux pipeline's VAE codes single images; set every entry to false");
    }
  }
  vae.validate(1, data.image_size);
  flux.validate(data.image_size / vae.spatial_factor());
  check_tower_files(c, "flux", vae_from, text_encoder_from);
}

namespace {

struct FluxTraits {
  using Pipeline = FluxPipeline;
  using Config = FluxSeriesConfig;
  static constexpr const char* kName = "flux";
  static constexpr const char* kItems = "images";
  static Pipeline build(const Config& c) { return Pipeline(c.flux, c.vae); }
  static void init(const Config& c, uint64_t seed, const std::string& name, at::Tensor& p) {
    flux_init(c.flux, c.vae, seed, name, p);
  }
  static const TextEncoderConfig& text(const Config& c) { return c.flux.text; }
  static std::string caption(const data::ShapeScene& s) { return s.still_caption; }
  static std::vector<int64_t> latent_shape(const Config& c) {
    const int64_t latent = c.data.image_size / c.vae.spatial_factor();
    return {c.vae.z_channels, latent, latent};
  }
  static at::Tensor samples(const Config& c, const train::TrainConfig& cfg, int64_t first) {
    return data::shape_images(static_cast<uint64_t>(cfg.data.seed), first, cfg.train.micro_batch_size, c.data.image_size);
  }
  // One row of truths (held-out scenes), one of samples.
  static std::vector<at::Tensor> png_rows(const Config& c, uint64_t data_seed, const sample::SampleOptions& o,
                                          const at::Tensor& samples, bool with_truth) {
    std::vector<at::Tensor> rows;
    if (with_truth) rows.push_back(data::shape_images(data_seed, o.first_clip, o.clips, c.data.image_size).transpose(0, 1));
    rows.push_back(samples.transpose(0, 1));
    return rows;
  }
};

}  // namespace

Series flux_series() {
  Series s;
  s.name = "flux";
  s.summary = "look-alike FLUX-style MMDiT on generated captioned images, frozen text encoder and VAE";
  s.make_config = [] { return std::make_unique<FluxSeriesConfig>(); };
  s.make_task = [](const train::TrainConfig& c, int rank, int world) -> std::unique_ptr<train::Task> {
    return std::make_unique<PipelineTask<FluxTraits>>(c, rank, world);
  };
  s.is_unit = flux_unit;
  s.sample = PipelineTask<FluxTraits>::generate;
  s.supports_lora = true;
  s.adapter_root = "dit.";  // PipelineTask::build adapts the DiT only
  return s;
}

}  // namespace zeroshard::models
