// The z_image series' config keys and its pipeline module (series.h).
#include "models/z_image/series.h"

#include "models/z_image/prompt.h"

#include "models/diffusion/flow_match.h"
#include "nn/init.h"
#include "nn/layers.h"
#include "util/text.h"

#include <chrono>
#include <cmath>
#include <stdexcept>

namespace zeroshard::models::z_image {

ZImageSeriesConfig::ZImageSeriesConfig() : dit(z_image_turbo_6b()), text(qwen3::qwen3_4b()) {
  // DiffSynth's Z-Image: shift 3 for training and sampling; ZImagePipeline's default guidance 5.
  io.shift = 3.0;
  io.sample_shift = 3.0;
  io.guidance_scale = 5.0;
}

void ZImageSeriesConfig::register_keys(train::ConfigKeys& k) {
  {
    train::ConfigKeys::ModelScope model(k);
    k.add_int("z_image.dim", &dit.dim, 2, 1 << 16, "DiT width (released: 3840)");
    k.add_int("z_image.n_layers", &dit.n_layers, 0, 1024, "DiT main blocks (30)");
    k.add_int("z_image.n_refiner_layers", &dit.n_refiner_layers, 0, 64, "noise and context refiner blocks each (2)");
    k.add_int("z_image.n_heads", &dit.n_heads, 1, 1024, "DiT heads (30)");
    k.add_int("z_image.n_kv_heads", &dit.n_kv_heads, 1, 1024, "DiT key/value heads (30)");
    k.add_int("z_image.rope_axes_t", &rope_axes_t, 0, 4096, "RoPE dims of the frame/caption axis (32); axes sum to dim / n_heads");
    k.add_int("z_image.rope_axes_h", &rope_axes_h, 0, 4096, "RoPE dims of the row axis (48)");
    k.add_int("z_image.rope_axes_w", &rope_axes_w, 0, 4096, "RoPE dims of the column axis (48)");
    k.add_int("z_image.text_vocab", &text.vocab_size, 2, 1 << 22, "Qwen3 vocabulary (151936); >= the tokenizer's ids");
    k.add_int("z_image.text_hidden", &text.hidden_size, 2, 1 << 16, "Qwen3 width = the DiT's cap_feat_dim (2560)");
    k.add_int("z_image.text_ffn", &text.intermediate_size, 1, 1 << 20, "Qwen3 SwiGLU width (9728)");
    k.add_int("z_image.text_layers", &text.num_hidden_layers, 2, 1024,
              "Qwen3 layers (36); the states are the output of layer text_layers - 1");
    k.add_int("z_image.text_heads", &text.num_attention_heads, 1, 1024, "Qwen3 query heads (32)");
    k.add_int("z_image.text_kv_heads", &text.num_key_value_heads, 1, 1024, "Qwen3 key/value heads (8)");
    k.add_int("z_image.text_head_dim", &text.head_dim, 2, 4096, "Qwen3 head size (128)");
    k.add_int("z_image.text_len", &text_len, 1, 1 << 16, "prompt tokens kept (max_sequence_length, 512)");
    k.add_int("z_image.vae_ch", &vae.ch, 32, 1 << 12, "VAE base width (128; levels x1, x2, x4, x4), a multiple of 32");
    k.add_int("z_image.vae_num_res_blocks", &vae.num_res_blocks, 1, 16, "VAE residual blocks per level (2)");
  }
  io.register_keys(k, "z_image", "the Qwen3 tokenizer.json (tokenizer_config.json beside it)");
  k.add_float("z_image.cfg_truncation", &cfg_truncation, 0.0, 1e3,
              "no guidance at steps whose 1 - sigma exceeds this (1: guidance at every step)");
  k.add_float("z_image.cfg_normalization", &cfg_normalization, 0.0, 1e3,
              "> 0: the guided prediction's norm is capped at this times the positive one's (0: off)");
}

ZImageDitConfig ZImageSeriesConfig::dit_config() const {
  ZImageDitConfig c = dit;
  c.cap_feat_dim = text.hidden_size;
  c.in_channels = vae.z_channels;
  c.axes_dims = {rope_axes_t, rope_axes_h, rope_axes_w};
  return c;
}
qwen3::QwenConfig ZImageSeriesConfig::text_config() const { return text; }
flux::Flux1VaeConfig ZImageSeriesConfig::vae_config() const { return vae; }
int64_t ZImageSeriesConfig::spatial_factor() const { return vae.kl().spatial_factor(); }

void ZImageSeriesConfig::validate(const train::TrainConfig& c) const {
  (void)c;
  dit_config().validate("z_image");
  text_config().validate("z_image.text_*");
  vae_config().kl().validate("z_image.vae_*");
  io.validate("z_image", spatial_factor() * 2, c.needs_data);  // VAE x DiT patch
}

// --- the pipeline ------------------------------------------------------------------------------

ZImagePipelineImpl::ZImagePipelineImpl(const ZImageSeriesConfig& c, bool with_dit, bool with_towers) : config_(c) {
  if (with_dit) dit = register_module("dit", ZImageDit(c.dit_config()));
  if (with_towers) {
    text_encoder = register_module("text_encoder", qwen3::QwenForCausalLM(c.text_config(), /*lm_head=*/false));
    vae = register_module("vae", flux::Flux1AutoEncoder(c.vae_config(), /*with_encoder=*/true, /*with_decoder=*/true));
    for (auto& p : text_encoder->parameters()) p.set_requires_grad(false);
    for (auto& p : vae->parameters()) p.set_requires_grad(false);
  }
}

std::vector<int64_t> ZImagePipelineImpl::latent_shape(int64_t height, int64_t width) const {
  const int64_t f = config_.spatial_factor();
  return {config_.vae.z_channels, height / f, width / f};
}

at::Tensor ZImagePipelineImpl::encode_image(const at::Tensor& image) {
  TORCH_CHECK(vae, "ZImagePipeline: built without its towers");
  torch::NoGradGuard no_grad;
  const auto t0 = std::chrono::steady_clock::now();
  const at::ScalarType dt = vae->encoder->parameters().front().scalar_type();
  at::Tensor z = vae->encode(image.unsqueeze(0).to(dt))[0].to(at::kFloat);
  towers_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return z;
}

text::BpeTokenizer& ZImagePipelineImpl::tokenizer() {
  // Read on first use: a model built without its data (seed-weights) needs no tokenizer.
  if (!tokenizer_) tokenizer_ = std::make_shared<text::BpeTokenizer>(load_tokenizer(config_));
  return *tokenizer_;
}

int64_t ZImagePipelineImpl::prompt_tokens(const std::string& prompt) {
  return static_cast<int64_t>(tokenizer().encode(prompt).size());
}

at::Tensor ZImagePipelineImpl::encode_text(const std::string& prompt) {
  TORCH_CHECK(text_encoder, "ZImagePipeline: built without its towers");
  const at::Tensor ids = prompt_ids(tokenizer(), prompt, config_.text_len);
  torch::NoGradGuard no_grad;
  const auto t0 = std::chrono::steady_clock::now();
  // hidden_states[-2]: the output of the second-to-last layer (qwen3/model.h).
  at::Tensor states = text_encoder->hidden_states(qwen3::Inputs(ids), {-2}).at(0)[0].to(at::kFloat);
  towers_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return states;
}

std::map<std::string, at::Tensor> ZImagePipelineImpl::compute_condition(const at::Tensor& image,
                                                                       const std::string& prompt) {
  return {{"latent", encode_image(image)}, {"context", encode_text(prompt)}};
}

at::Tensor ZImagePipelineImpl::compute_loss(const diffusion::ImageBatch& b) {
  const int64_t B = b.size();
  std::vector<at::Tensor> noisy, x0, ctx;
  for (int64_t i = 0; i < B; ++i) {
    const size_t u = static_cast<size_t>(i);
    x0.push_back(b.cached() ? b.latents[u] : encode_image(b.images[u]));
    ctx.push_back(b.cached() ? b.conds[u].at("context") : encode_text(b.prompts[u]));
  }
  for (int64_t i = 0; i < B; ++i) {
    const size_t u = static_cast<size_t>(i);
    const at::Tensor s = b.sigmas[i];
    noisy.push_back(((1 - s) * x0[u] + s * b.noises[u]).unsqueeze(1));  // add_noise; one frame
  }
  // model_fn_z_image: t = (1000 - timestep) / 1000, velocity = -output.
  const at::Tensor t = (1000 - b.timesteps) / 1000;
  const std::vector<at::Tensor> out = dit->forward(noisy, t, ctx, /*patch_size=*/2, /*f_patch_size=*/1);
  std::vector<at::Tensor> per_sample;
  for (int64_t i = 0; i < B; ++i) {
    const size_t u = static_cast<size_t>(i);
    const at::Tensor pred = flow_velocity(out[u].to(at::kFloat).squeeze(1));
    const at::Tensor mse = (pred - (b.noises[u] - x0[u])).pow(2).mean();
    per_sample.push_back(mse * b.weights[i]);
  }
  return at::stack(per_sample).mean();
}

at::Tensor ZImagePipelineImpl::compute_sample(const std::vector<std::string>& prompts, const at::Tensor& noise,
                                              int64_t steps) {
  const ZImageSeriesConfig& c = config_;
  const size_t B = prompts.size();
  const bool cfg = c.io.guidance_scale > 1.0;  // ZImagePipeline.do_classifier_free_guidance
  std::vector<at::Tensor> pos, neg;
  for (size_t i = 0; i < B; ++i) {
    pos.push_back(encode_text(prompts[i]));
    if (cfg) neg.push_back(encode_text(c.io.negative_prompt));
  }
  // DiffSynth's Z-Image schedule (set_timesteps_z_image): `steps` sigmas from 1, the last step to 0.
  const diffusion::FlowMatchSchedule s = diffusion::flow_match_schedule(steps, c.io.sample_shift, /*training=*/false);
  std::vector<at::Tensor> lat;
  for (size_t i = 0; i < B; ++i) lat.push_back(noise[static_cast<int64_t>(i)]);
  for (int64_t j = 0; j < steps; ++j) {
    const at::Tensor t = ((1000 - s.timesteps.narrow(0, j, 1)) / 1000).expand({static_cast<int64_t>(B)}).contiguous();
    const double t_norm = t[0].item<double>();
    const bool guide = cfg && !(t_norm > c.cfg_truncation);
    std::vector<at::Tensor> in1;
    for (const auto& l : lat) in1.push_back(l.unsqueeze(1));
    const std::vector<at::Tensor> vp = dit->forward(in1, t, pos, 2, 1);
    std::vector<at::Tensor> vn;
    if (guide) vn = dit->forward(in1, t, neg, 2, 1);
    const float next = j + 1 < steps ? s.sigmas[j + 1].item<float>() : 0.0f;
    const at::Tensor dsigma = at::scalar_tensor(next, at::kFloat) - s.sigmas[j];
    for (size_t i = 0; i < B; ++i) {
      at::Tensor pred = vp[i].to(at::kFloat).squeeze(1);
      if (guide) {
        const at::Tensor p = pred, n = vn[i].to(at::kFloat).squeeze(1);
        pred = p + c.io.guidance_scale * (p - n);
        if (c.cfg_normalization > 0) {
          const at::Tensor cap = p.norm() * c.cfg_normalization, now = pred.norm();
          if (now.item<double>() > cap.item<double>()) pred = pred * (cap / now);
        }
      }
      lat[i] = lat[i] + flow_velocity(pred) * dsigma;
    }
  }
  const at::Tensor z = at::stack(lat, 0);
  const at::ScalarType dt = vae->decoder->parameters().front().scalar_type();
  return vae->decode(z.to(dt)).to(at::kFloat).clamp(-1, 1);
}

// --- seeded initial values ---------------------------------------------------------------------

// The Qwen3 rule (transformers' _init_weights).
void ZImagePipelineImpl::init_text_encoder(uint64_t seed, const std::string& name, at::Tensor& param) const {
  if (!text_encoder) throw std::invalid_argument("z_image: '" + name + "' on a pipeline built without its towers");
  text_encoder->init_parameter(seed, name, param);
}

}  // namespace zeroshard::models::z_image
