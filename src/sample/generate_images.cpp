// `zeroshard sample` on a diffusion run (flux: images, wan: clips): Euler integration of the
// learned flow from noise (sigma 1 -> 0), decoded by the frozen VAE, written as one PNG.
#include "data/shapes.h"
#include "io/png.h"
#include "models/flux/flux.h"
#include "models/wan/wan.h"
#include "nn/init.h"
#include "sample/checkpoint_model.h"
#include "sample/sample.h"
#include "zeroshard/nn/deferred.h"
#include "zeroshard/shard.h"

#include <torch/torch.h>

#include <functional>
#include <stdexcept>

namespace zeroshard::sample {

std::string generate_images(const SampleOptions& o, const RendezvousInfo& rdv) {
  if (o.clips < 1) throw std::invalid_argument("--clips must be >= 1, got " + std::to_string(o.clips));
  if (o.denoise_steps < 1) throw std::invalid_argument("--steps must be >= 1, got " + std::to_string(o.denoise_steps));
  ckpt::Checkpoint ck(ckpt::resolve_checkpoint(o.checkpoint));
  const train::TrainConfig cfg = model_config_of(ck);
  const bool video = cfg.model_series == "wan";
  if (cfg.model_series != "flux" && !video) {
    throw std::invalid_argument(ck.dir() + " holds a " + cfg.model_series + " model; generation needs series flux or wan");
  }
  auto comm = make_communicator(rdv);
  // The pipeline, built without bytes and materialized shard by shard from the checkpoint.
  std::shared_ptr<nn::HookableModule> root;
  std::function<at::Tensor(const at::Tensor&, const at::Tensor&)> generate;
  int64_t text_len = 0;
  {
    nn::DeferredInit deferred;
    if (video) {
      models::WanPipeline p(cfg.wan, cfg.vae);
      if (cfg.lora_rank > 0) nn::apply_lora(*p->dit, train::lora_options(cfg));
      generate = [p, &o](const at::Tensor& t, const at::Tensor& n) mutable { return p->generate(t, n, o.denoise_steps); };
      root = p.ptr();
      text_len = cfg.wan.text.max_len;
    } else {
      models::FluxPipeline p(cfg.flux, cfg.vae);
      if (cfg.lora_rank > 0) nn::apply_lora(*p->dit, train::lora_options(cfg));
      generate = [p, &o](const at::Tensor& t, const at::Tensor& n) mutable { return p->generate(t, n, o.denoise_steps); };
      root = p.ptr();
      text_len = cfg.flux.text.max_len;
    }
  }
  ShardOptions so;
  so.strategy = parse_strategy(o.strategy);
  so.wrap_policy = [video](const std::string& name, const torch::nn::Module&) {
    return video ? models::wan_unit(name) : models::flux_unit(name);
  };
  so.param_source = ck.param_source();
  auto sharded = fully_shard(root, comm, so);

  // Captions: --prompt for every sample, or those of held-out scenes (whose true images or
  // clips are drawn above the samples).
  const bool own_prompt = o.prompt != "\n";
  const uint64_t data_seed = static_cast<uint64_t>(cfg.data_seed);
  const int64_t S = cfg.image_size, latent = S / cfg.vae.spatial_factor();
  std::vector<std::string> captions;
  std::vector<at::Tensor> tokens, noise;
  for (int64_t i = 0; i < o.clips; ++i) {
    const data::ShapeScene scene = data::shape_scene(data_seed, o.first_clip + i);
    captions.push_back(own_prompt ? o.prompt : video ? scene.caption : scene.still_caption);
    tokens.push_back(models::caption_tokens(captions.back(), text_len));
    auto gen = nn::generator_for(o.seed, "sample.noise." + std::to_string(i));
    noise.push_back(video ? at::randn({cfg.vae.z_channels, cfg.frames / cfg.vae.time_factor(), latent, latent}, gen)
                          : at::randn({cfg.vae.z_channels, latent, latent}, gen));
  }
  const at::Tensor samples = generate(at::stack(tokens), at::stack(noise));  // [B, 3, (T,) S, S]

  const std::string path = output_path(ck, o.out, "samples.png");
  if (comm->rank() == 0) {
    std::vector<at::Tensor> rows;  // images: one row of truths, one of samples; clips: a pair of rows each
    if (video) {
      const at::Tensor truth = data::shape_clips(data_seed, o.first_clip, o.clips, cfg.frames, S);
      for (int64_t i = 0; i < o.clips; ++i) {
        if (!own_prompt) rows.push_back(truth[i]);
        rows.push_back(samples[i]);
      }
    } else {
      if (!own_prompt) rows.push_back(data::shape_images(data_seed, o.first_clip, o.clips, S).transpose(0, 1));
      rows.push_back(samples.transpose(0, 1));
    }
    io::write_png_rows(path, rows);
  }
  comm->barrier();
  std::string summary = "generated " + std::to_string(o.clips) + (video ? " clips (" : " images (") +
                        std::to_string(o.denoise_steps) + " Euler steps); wrote " + path + "; captions, in order:";
  for (const auto& c : captions) summary += "\n  " + c;
  return summary;
}

}  // namespace zeroshard::sample
