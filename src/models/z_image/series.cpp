// Series `z_image`: Z-Image as released, trained by flow matching (series.h) on the shared image
// series layer (diffusion/image_series.h).
#include "models/z_image/series.h"

#include "io/torch_pth.h"
#include "models/diffusion/image_series.h"
#include "models/flux/kl_vae.h"
#include "models/qwen3/model.h"
#include "train/config.h"

namespace zeroshard::models::z_image {

Series z_image_series() {
  diffusion::ImageSeriesSpec s;
  s.name = "z_image";
  s.summary = "Z-Image DiT as released (Qwen3 text + FLUX.1 VAE towers), flow matching from a DiffSynth image folder "
              "or a prepared cache";
  s.cache_format = "zeroshard z_image cache 1";
  s.conditioning_text = "FLUX.1 VAE latents + Qwen3 hidden_states[-2]";
  s.cond_fields = {"context"};
  s.cache_shape = [](const train::TrainConfig& cfg) -> std::vector<std::pair<std::string, int64_t>> {
    const auto& c = cfg.series_config<ZImageSeriesConfig>();
    return {{"height", c.io.height},
            {"width", c.io.width},
            {"text_len", c.text_len},
            {"text_hidden", c.text.hidden_size},
            {"z_channels", c.vae.z_channels}};
  };
  s.make_config = [] { return std::make_unique<ZImageSeriesConfig>(); };
  s.keys = [](const train::TrainConfig& cfg) -> const diffusion::ImageSeriesKeys& {
    return cfg.series_config<ZImageSeriesConfig>().io;
  };
  s.build = [](const train::TrainConfig& cfg, bool with_dit,
               bool with_towers) -> std::shared_ptr<diffusion::ImagePipelineImpl> {
    return std::make_shared<ZImagePipelineImpl>(cfg.series_config<ZImageSeriesConfig>(), with_dit, with_towers);
  };
  // The released text_encoder/ (Qwen3-4B; its lm_head left unread) and vae/ (FLUX.1's VAE in
  // diffusers' names) or BFL's ae.safetensors.
  s.text_encoder_source = [](const train::TrainConfig&, const std::string& path) {
    return qwen3::text_tower_source(path);
  };
  s.vae_source = [](const train::TrainConfig& cfg, const std::string& path) {
    return flux::kl_vae_file_source(path, cfg.series_config<ZImageSeriesConfig>().vae_config().kl());
  };
  // seed-weights: Z-Image's vae/ is FLUX.1's VAE in diffusers' names; its text_encoder/ is
  // Qwen3-4B (the released folder also holds lm_head, which ours does not have).
  s.vae_release_map = [](const train::TrainConfig& cfg) {
    return flux::kl_vae_name_map(cfg.series_config<ZImageSeriesConfig>().vae_config().kl());
  };
  s.text_encoder_beyond = [](const train::TrainConfig&) {
    return diffusion::ImageSeriesSpec::Beyond{"not written: Qwen3's output head (lm_head.weight), which the pipeline does not run", {}};
  };
  return diffusion::make_image_series(std::move(s));
}

}  // namespace zeroshard::models::z_image
