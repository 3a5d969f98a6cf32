// `zeroshard sample` on a flux run: images from captions by Euler integration of the learned
// flow (sigma 1 -> 0), decoded by the frozen VAE, written as one PNG.
#include "data/shapes.h"
#include "io/png.h"
#include "models/flux/flux.h"
#include "nn/init.h"
#include "sample/checkpoint_model.h"
#include "sample/sample.h"
#include "zeroshard/nn/deferred.h"
#include "zeroshard/shard.h"

#include <torch/torch.h>

#include <stdexcept>

namespace zeroshard::sample {

std::string generate_images(const SampleOptions& o, const RendezvousInfo& rdv) {
  if (o.clips < 1) throw std::invalid_argument("--clips must be >= 1, got " + std::to_string(o.clips));
  if (o.denoise_steps < 1) throw std::invalid_argument("--steps must be >= 1, got " + std::to_string(o.denoise_steps));
  ckpt::Checkpoint ck(ckpt::resolve_checkpoint(o.checkpoint));
  const train::TrainConfig cfg = model_config_of(ck);
  if (cfg.model_series != "flux") {
    throw std::invalid_argument(ck.dir() + " holds a " + cfg.model_series + " model; images need series flux");
  }
  auto comm = make_communicator(rdv);
  models::FluxPipeline model{nullptr};
  {
    nn::DeferredInit deferred;
    model = models::FluxPipeline(cfg.flux, cfg.vae);
    if (cfg.lora_rank > 0) nn::apply_lora(*model->dit, train::lora_options(cfg));
  }
  ShardOptions so;
  so.strategy = parse_strategy(o.strategy);
  so.wrap_policy = [](const std::string& name, const torch::nn::Module&) { return models::flux_unit(name); };
  so.param_source = ck.param_source();
  auto sharded = fully_shard(model.ptr(), comm, so);

  // Captions: --prompt for every image, or those of held-out scenes (whose true first frames
  // are drawn above the samples).
  const bool own_prompt = o.prompt != "\n";
  const int64_t S = cfg.image_size, latent = S / cfg.vae.spatial_factor();
  std::vector<std::string> captions;
  std::vector<at::Tensor> tokens, noise;
  for (int64_t i = 0; i < o.clips; ++i) {
    captions.push_back(own_prompt ? o.prompt
                                  : data::shape_scene(static_cast<uint64_t>(cfg.data_seed), o.first_clip + i).still_caption);
    tokens.push_back(models::caption_tokens(captions.back(), cfg.flux.text.max_len));
    auto gen = nn::generator_for(o.seed, "sample.noise." + std::to_string(i));
    noise.push_back(at::randn({cfg.vae.z_channels, latent, latent}, gen, at::kFloat));
  }
  const at::Tensor images = model->generate(at::stack(tokens), at::stack(noise), o.denoise_steps);

  const std::string path = output_path(ck, o.out, "samples.png");
  if (comm->rank() == 0) {
    const int64_t gap = 2, rows = own_prompt ? 1 : 2;
    at::Tensor sheet = at::zeros({3, rows * (S + gap), o.clips * (S + gap)}, at::kFloat);
    const at::Tensor truth = own_prompt ? at::Tensor()
                                        : data::shape_images(static_cast<uint64_t>(cfg.data_seed), o.first_clip,
                                                             o.clips, S);
    for (int64_t i = 0; i < o.clips; ++i) {
      if (!own_prompt) sheet.narrow(1, 0, S).narrow(2, i * (S + gap), S).copy_(truth[i]);
      sheet.narrow(1, (rows - 1) * (S + gap), S).narrow(2, i * (S + gap), S).copy_(images[i]);
    }
    io::write_png(path, sheet);
  }
  comm->barrier();
  std::string summary = "generated " + std::to_string(o.clips) + " images (" + std::to_string(o.denoise_steps) +
                        " Euler steps); wrote " + path + "; captions, left to right:";
  for (const auto& c : captions) summary += "\n  " + c;
  return summary;
}

}  // namespace zeroshard::sample
