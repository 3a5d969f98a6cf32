// The flux1 series' pipeline module: loss, conditioning, sampling, initial values (flux1_series.h).
#include "models/flux/flux1_series.h"

#include "nn/init.h"
#include "nn/layers.h"
#include "util/text.h"

#include <chrono>
#include <cmath>
#include <stdexcept>

namespace zeroshard::models::flux {

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

Flux1PipelineImpl::Flux1PipelineImpl(const Flux1SeriesConfig& c, bool with_dit, bool with_towers)
    : config_(c) {
  if (with_dit) dit = register_module("dit", Flux1DiT(c.dit_config()));
  if (with_towers) {
    text_encoder = register_module("text_encoder", t5::T5Encoder(c.text_config()));
    if (c.has_clip_tower()) clip = register_module("clip", ClipTextModel(c.clip));
    vae = register_module("vae", Flux1AutoEncoder(c.vae_config(), /*with_encoder=*/true, /*with_decoder=*/true));
    for (auto& p : text_encoder->parameters()) p.set_requires_grad(false);
    if (clip) {
      for (auto& p : clip->parameters()) p.set_requires_grad(false);
    }
    for (auto& p : vae->parameters()) p.set_requires_grad(false);
  }
}

std::vector<int64_t> Flux1PipelineImpl::latent_shape(int64_t height, int64_t width) const {
  const int64_t f = config_.spatial_factor();
  return {config_.vae.z_channels, height / f, width / f};
}

at::Tensor Flux1PipelineImpl::encode_image(const at::Tensor& image) {
  TORCH_CHECK(vae, "Flux1Pipeline: built without its towers");
  torch::NoGradGuard no_grad;
  const auto t0 = std::chrono::steady_clock::now();
  const at::ScalarType dt = vae->encoder->parameters().front().scalar_type();
  at::Tensor z = vae->encode(image.unsqueeze(0).to(dt))[0].to(at::kFloat);
  towers_seconds += seconds_since(t0);
  return z;
}

text::SentencePieceTokenizer& Flux1PipelineImpl::tokenizer() {
  // Read on first use: a model built without its data (seed-weights) needs no tokenizer.
  if (!tokenizer_) {
    const Flux1SeriesConfig& c = config_;
    if (c.io.tokenizer.empty()) {
      throw std::invalid_argument("flux1.tokenizer: the T5 SentencePiece model (tokenizer_2/spiece.model) is required "
                                  "with the towers");
    }
    auto tok = std::make_unique<text::SentencePieceTokenizer>(text::SentencePieceTokenizer::from_file(c.io.tokenizer));
    if (tok->vocab_size() > c.text.vocab_size) {
      throw std::invalid_argument("flux1.text_vocab " + std::to_string(c.text.vocab_size) + " is below the tokenizer's " +
                                  std::to_string(tok->vocab_size()) + " pieces (" + c.io.tokenizer + ")");
    }
    tokenizer_ = std::move(tok);
  }
  return *tokenizer_;
}

// The T5 tokens (the context's; CLIP's pooled vector reads at most 77).
int64_t Flux1PipelineImpl::prompt_tokens(const std::string& prompt) {
  return static_cast<int64_t>(tokenizer().encode(prompt).size());
}

at::Tensor Flux1PipelineImpl::encode_text(const std::string& prompt) {
  TORCH_CHECK(text_encoder, "Flux1Pipeline: built without its towers");
  text::SentencePieceTokenizer& tok = tokenizer();
  torch::NoGradGuard no_grad;
  const auto t0 = std::chrono::steady_clock::now();
  // All text_len positions, no attention mask (FluxPipeline / DiffSynth pass none to T5).
  at::Tensor states = text_encoder->forward(flux1_prompt_ids(tok, prompt, config_.text_len))[0].to(at::kFloat);
  towers_seconds += seconds_since(t0);
  return states;
}

at::Tensor Flux1PipelineImpl::pooled(const std::string& prompt) {
  // Files read on first use (not in the constructor, which runs under nn::DeferredInit).
  if (!config_.has_clip_tower()) {
    if (!pooled_) pooled_ = std::make_unique<PooledVectors>(config_.pooled_file, config_.dit.vec_in_dim);
    return pooled_->get(prompt);
  }
  TORCH_CHECK(clip, "Flux1Pipeline: built without its towers");
  if (!clip_tokenizer_) {
    const std::string& path = config_.clip_tokenizer;
    if (path.empty()) {
      throw std::invalid_argument("flux1.clip_tokenizer: CLIP's tokenizer (the released tokenizer/ folder: vocab.json + "
                                  "merges.txt) is required with the towers (or give the vectors in flux1.pooled_file)");
    }
    auto tok = std::make_unique<text::BpeTokenizer>(text::BpeTokenizer::from_file(path));
    if (tok->vocab_size() > config_.clip.vocab_size) {
      throw std::invalid_argument("flux1.clip_vocab " + std::to_string(config_.clip.vocab_size) +
                                  " is below the tokenizer's " + std::to_string(tok->vocab_size()) + " ids (" + path + ")");
    }
    clip_tokenizer_ = std::move(tok);
  }
  torch::NoGradGuard no_grad;
  const auto t0 = std::chrono::steady_clock::now();
  // No attention mask: pads follow the end token, whose row (the pooled one) they cannot reach.
  const at::Tensor ids = flux1_clip_ids(*clip_tokenizer_, prompt, config_.clip.max_position_embeddings);
  at::Tensor v = clip->forward(ids).pooled[0].to(at::kFloat);
  towers_seconds += seconds_since(t0);
  return v;
}

at::Tensor Flux1PipelineImpl::velocity(const at::Tensor& x, const at::Tensor& ctx, const at::Tensor& pooled_vec,
                                       const at::Tensor& t, double guidance) {
  const int64_t B = x.size(0), C = x.size(1), h = x.size(2), w = x.size(3);
  const at::ScalarType dt = dit->img_in->weight.scalar_type();
  const at::Tensor img = flux1_pack(x).to(dt);
  const at::Tensor img_ids = flux1_image_ids(B, h, w, dt);
  const at::Tensor txt_ids = at::zeros({B, ctx.size(1), 3}, dt);  // text ids all zero
  const at::Tensor g = config_.dit.guidance_embed ? at::full({B}, guidance, at::kFloat).to(dt) : at::Tensor();
  const at::Tensor out = dit->forward(img, img_ids, ctx.to(dt), txt_ids, t.to(dt), pooled_vec.to(dt), g);
  return flux1_unpack(out.to(at::kFloat), C, h, w);
}

std::map<std::string, at::Tensor> Flux1PipelineImpl::compute_condition(const at::Tensor& image,
                                                                        const std::string& prompt) {
  return {{"latent", encode_image(image)}, {"context", encode_text(prompt)}, {"pooled", pooled(prompt)}};
}

at::Tensor Flux1PipelineImpl::compute_loss(const diffusion::ImageBatch& b) {
  const int64_t B = b.size();
  std::vector<at::Tensor> x0, ctx, vec;
  for (int64_t i = 0; i < B; ++i) {
    const size_t k = static_cast<size_t>(i);
    if (b.cached()) {
      x0.push_back(b.latents.at(k));
      ctx.push_back(b.conds.at(k).at("context"));
      vec.push_back(b.conds.at(k).at("pooled"));
    } else {
      x0.push_back(encode_image(b.images.at(k)));
      ctx.push_back(encode_text(b.prompts.at(k)));
      vec.push_back(pooled(b.prompts.at(k)));
    }
  }
  // The batch's draws come from FLUX.1's training schedule (the spec's training_schedule).
  const at::Tensor sigmas = b.sigmas, timesteps = b.timesteps, weights = b.weights;
  const at::Tensor X0 = at::stack(x0), noise = at::stack(b.noises);
  const at::Tensor s = sigmas.view({B, 1, 1, 1});
  const at::Tensor noisy = (1 - s) * X0 + s * noise;  // add_noise
  // DiffSynth's timestep (1000 sigma) reaches BFL's DiT as timestep / 1000.
  const at::Tensor pred = velocity(noisy, at::stack(ctx), at::stack(vec), timesteps / 1000, config_.train_guidance);
  const at::Tensor mse = (pred - (noise - X0)).pow(2).mean({1, 2, 3});  // per sample, target noise - x0
  return (mse * weights).mean();
}

at::Tensor Flux1PipelineImpl::compute_sample(const std::vector<std::string>& prompts, const at::Tensor& noise,
                                             int64_t steps) {
  torch::NoGradGuard no_grad;
  const int64_t B = static_cast<int64_t>(prompts.size());
  const bool cfg = config_.true_cfg_scale > 1.0;
  std::vector<at::Tensor> pos, pos_vec, neg, neg_vec;
  for (const auto& p : prompts) {
    pos.push_back(encode_text(p));
    pos_vec.push_back(pooled(p));
    if (cfg) {
      neg.push_back(encode_text(config_.io.negative_prompt));
      neg_vec.push_back(pooled(config_.io.negative_prompt));
    }
  }
  const at::Tensor ctx = at::stack(pos), vec = at::stack(pos_vec);
  const at::Tensor nctx = cfg ? at::stack(neg) : at::Tensor(), nvec = cfg ? at::stack(neg_vec) : at::Tensor();
  const diffusion::FlowMatchSchedule s = flux1_schedule(steps, config_.io.sample_shift, /*training=*/false);
  at::Tensor x = noise.to(at::kFloat);
  for (int64_t j = 0; j < steps; ++j) {
    const at::Tensor t = (s.timesteps.narrow(0, j, 1) / 1000).expand({B}).contiguous();
    at::Tensor v = velocity(x, ctx, vec, t, config_.io.guidance_scale);
    if (cfg) {
      const at::Tensor vn = velocity(x, nctx, nvec, t, config_.io.guidance_scale);
      v = vn + config_.true_cfg_scale * (v - vn);
    }
    const at::Tensor next = j + 1 < steps ? s.sigmas[j + 1] : at::zeros({}, at::kFloat);
    x = x + v * (next - s.sigmas[j]);
  }
  TORCH_CHECK(vae, "Flux1Pipeline: sampling needs the VAE");
  const at::ScalarType dt = vae->decoder->parameters().front().scalar_type();
  return vae->decode(x.to(dt)).to(at::kFloat).clamp(-1, 1);
}

// --- seeded initial values ---------------------------------------------------------------------

// T5's own initialization (t5.h).
void Flux1PipelineImpl::init_text_encoder(uint64_t seed, const std::string& name, at::Tensor& param) const {
  t5::t5_init(config_.text_config(), seed, name, param);
}

void Flux1PipelineImpl::init_extra_tower(uint64_t seed, const std::string& name, at::Tensor& param) const {
  if (!util::starts_with(name, "clip.")) ImagePipelineImpl::init_extra_tower(seed, name, param);
  clip_text_init(config_.clip, seed, name.substr(5), param);  // transformers' CLIP _init_weights
}

}  // namespace zeroshard::models::flux
