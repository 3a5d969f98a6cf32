// The qwen_image series' pipeline module: the towers, the training loss and the sampler (series.h).
#include "models/qwen_image/schedule.h"
#include "models/qwen_image/series.h"
#include "nn/init.h"
#include "nn/layers.h"
#include "util/text.h"

#include <chrono>
#include <cmath>
#include <stdexcept>

namespace zeroshard::models::qwen_image {

namespace {

// QwenImagePipeline.prompt_template_encode (DiffSynth's QwenImageUnit_PromptEmbedder has the same
// text): a system line, the user turn holding the prompt, the assistant turn's start.
constexpr const char* kTemplateHead =
    "<|im_start|>system\nDescribe the image by detailing the color, shape, size, texture, quantity, text, spatial "
    "relationships of the objects and background:<|im_end|>\n<|im_start|>user\n";
constexpr const char* kTemplateTail = "<|im_end|>\n<|im_start|>assistant\n";

// Salts: each tower seeded as a model of its own (the VAE's is the wan series' salt, so a Wan
// VAE seeded by either series is the same).

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

std::pair<at::Tensor, at::Tensor> pad_states(const std::vector<at::Tensor>& states) {
  if (states.empty()) throw std::invalid_argument("qwen_image pad_states: no samples");
  int64_t L = 0;
  for (const auto& s : states) {
    TORCH_CHECK(s.dim() == 2 && s.size(1) == states[0].size(1), "qwen_image: text states must be [n, ",
                states[0].size(1), "], got ", s.sizes());
    L = std::max(L, s.size(0));
  }
  std::vector<at::Tensor> padded, masks;
  for (const auto& s : states) {
    const int64_t n = s.size(0);
    padded.push_back(at::cat({s, at::zeros({L - n, s.size(1)}, s.options())}));
    masks.push_back(at::cat({at::ones({n}, at::kLong), at::zeros({L - n}, at::kLong)}));
  }
  return {at::stack(padded), at::stack(masks)};
}

QwenImagePipelineImpl::QwenImagePipelineImpl(const QwenImageSeriesConfig& c, bool with_dit, bool with_towers)
    : config_(c) {
  if (with_dit) dit = register_module("dit", QwenImageDit(c.dit_config()));
  if (with_towers) {
    text_encoder = register_module("text_encoder", qwen3::QwenForCausalLM(c.text_config(), /*lm_head=*/false));
    vae = register_module("vae", wan::WanVae(c.vae_config()));
    for (auto& p : text_encoder->parameters()) p.set_requires_grad(false);
    for (auto& p : vae->parameters()) p.set_requires_grad(false);
  }
}

std::vector<int64_t> QwenImagePipelineImpl::latent_shape(int64_t height, int64_t width) const {
  const int64_t f = config_.vae.spatial_factor();
  return {config_.vae.z_dim, height / f, width / f};
}

void QwenImagePipelineImpl::init_text_encoder(uint64_t seed, const std::string& name, at::Tensor& param) const {
  if (!text_encoder) throw std::invalid_argument("qwen_image: '" + name + "' on a pipeline built without its towers");
  text_encoder->init_parameter(seed, name, param);  // transformers' _init_weights
}

void QwenImagePipelineImpl::init_vae(uint64_t seed, const std::string& name, at::Tensor& param) const {
  wan::wan_vae_init(seed, name, param);  // as wan_init seeds the wan series' VAE
}

torch::nn::Module& QwenImagePipelineImpl::dit_module() {
  if (!dit) throw std::logic_error("qwen_image: the pipeline was built without its DiT");
  return *dit;
}

text::BpeTokenizer& QwenImagePipelineImpl::tokenizer() {
  if (!tokenizer_) {
    const std::string& path = config_.io.tokenizer;
    if (path.empty()) throw std::invalid_argument("qwen_image.tokenizer: the Qwen2.5 tokenizer.json is required");
    auto tok = std::make_unique<text::BpeTokenizer>(text::BpeTokenizer::from_file(path));
    if (tok->vocab_size() > config_.text.vocab_size) {
      throw std::invalid_argument("qwen_image.text_vocab " + std::to_string(config_.text.vocab_size) +
                                  " is below the tokenizer's " + std::to_string(tok->vocab_size()) + " ids (" + path +
                                  ")");
    }
    tokenizer_ = std::move(tok);
  }
  return *tokenizer_;
}

at::Tensor QwenImagePipelineImpl::prompt_ids(const std::string& prompt) {
  // _get_qwen_prompt_embeds: the whole rendered text tokenized (truncation at 1024 + drop_idx, then
  // prompt_embeds[:, :max_sequence_length]): the kept rows are ids drop_idx .. drop_idx + text_len - 1,
  // and the text tower is causal, so encoding the ids up to there gives them exactly.
  std::vector<int32_t> ids = tokenizer().encode(std::string(kTemplateHead) + prompt + kTemplateTail);
  const int64_t n = static_cast<int64_t>(ids.size());
  if (n <= config_.drop_idx) {
    throw std::invalid_argument("qwen_image: the prompt in Qwen-Image's template is " + std::to_string(n) +
                                " tokens with " + config_.io.tokenizer + ", not more than qwen_image.drop_idx = " +
                                std::to_string(config_.drop_idx) + ": no text state would be left");
  }
  ids.resize(static_cast<size_t>(std::min(n, config_.drop_idx + config_.text_len)));
  at::Tensor t = at::empty({1, static_cast<int64_t>(ids.size())}, at::kLong);
  for (size_t i = 0; i < ids.size(); ++i) t[0][static_cast<int64_t>(i)] = static_cast<int64_t>(ids[i]);
  return t;
}

at::Tensor QwenImagePipelineImpl::encode_image(const at::Tensor& image) {
  TORCH_CHECK(vae, "qwen_image: the pipeline was built without its towers");
  torch::NoGradGuard no_grad;
  const auto t0 = std::chrono::steady_clock::now();
  // One frame: [1, 3, 1, H, W] -> [1, 16, 1, h, w], normalized by latents_mean / latents_std.
  const at::ScalarType dt = vae->encoder->parameters().front().scalar_type();
  at::Tensor z = vae->encode(image.unsqueeze(0).unsqueeze(2).to(dt)).select(2, 0)[0].to(at::kFloat);
  towers_seconds += seconds_since(t0);
  return z;
}

at::Tensor QwenImagePipelineImpl::encode_prompt(const std::string& prompt) {
  TORCH_CHECK(text_encoder, "qwen_image: the pipeline was built without its towers");
  const at::Tensor ids = prompt_ids(prompt);  // tokenizing is not tower time
  torch::NoGradGuard no_grad;
  const auto t0 = std::chrono::steady_clock::now();
  // hidden_states[-1]: the last layer's output after model.norm. One unpadded prompt: positions
  // 0 .. n-1 (cumsum(mask) - 1) and every row real, so hidden[mask] is every row.
  const at::Tensor states = text_encoder->forward(qwen3::Inputs(ids)).last_hidden_state[0];
  const int64_t n = states.size(0);
  at::Tensor kept = states.narrow(0, config_.drop_idx, n - config_.drop_idx).to(at::kFloat);
  towers_seconds += seconds_since(t0);
  return kept;
}

at::Tensor QwenImagePipelineImpl::decode_latents(const at::Tensor& latents) {
  TORCH_CHECK(vae, "qwen_image: the pipeline was built without its towers");
  torch::NoGradGuard no_grad;
  // latents / (1 / latents_std) + latents_mean, then vae.decode(...)[:, :, 0]; clamped as the
  // image processor's postprocess clamps.
  const at::ScalarType dt = vae->decoder->parameters().front().scalar_type();
  return vae->decode(latents.unsqueeze(2).to(dt)).select(2, 0).to(at::kFloat).clamp(-1, 1);
}

at::Tensor QwenImagePipelineImpl::velocity(const at::Tensor& latents, const at::Tensor& states, const at::Tensor& mask,
                                           const at::Tensor& sigmas) {
  const int64_t h = latents.size(2), w = latents.size(3), p = config_.dit.patch_size;
  // The DiT runs in its compute dtype (bf16 under mixed_precision.param_dtype: bf16, as DiffSynth
  // runs it in torch_dtype); the prediction comes back in float32 (noise_pred.float()).
  const at::ScalarType dt = dit->img_in->weight.scalar_type();
  const at::Tensor out = dit->forward(pack_latents(latents).to(dt), states.to(dt), mask, sigmas.to(dt),
                                      {ImageShape{1, h / p, w / p}})
                             .to(at::kFloat);
  return unpack_latents(out, h, w);
}

at::Tensor QwenImagePipelineImpl::compute_loss(const diffusion::ImageBatch& b) {
  // FlowMatchSFTLoss with model_fn_qwen_image, sample by sample as DiffSynth (batch 1) and then
  // averaged: x_t = (1 - sigma) x0 + sigma noise; the DiT takes timestep / 1000; the target is
  // noise - x0; MSE over the latent times the timestep's weight. (DiffSynth rounds the drawn
  // timestep to bf16 and looks its sigma up again; in float32 that is the drawn sigma.)
  const int64_t B = b.size();
  std::vector<at::Tensor> x0, states, noisy;
  for (int64_t i = 0; i < B; ++i) {
    const size_t k = static_cast<size_t>(i);
    x0.push_back(b.cached() ? b.latents[k] : encode_image(b.images[k]));
    states.push_back(b.cached() ? b.conds[k].at("context") : encode_prompt(b.prompts[k]));
    const at::Tensor s = b.sigmas[i];
    noisy.push_back((1 - s) * x0[k] + s * b.noises[k]);
  }
  const auto [context, mask] = pad_states(states);
  const at::Tensor pred = velocity(at::stack(noisy), context, mask, b.timesteps / 1000);
  std::vector<at::Tensor> per_sample;
  for (int64_t i = 0; i < B; ++i) {
    const size_t k = static_cast<size_t>(i);
    per_sample.push_back((pred[i] - (b.noises[k] - x0[k])).pow(2).mean() * b.weights[i]);
  }
  return at::stack(per_sample).mean();
}

int64_t QwenImagePipelineImpl::prompt_tokens(const std::string& prompt) {
  return static_cast<int64_t>(tokenizer().encode(prompt).size());
}

std::map<std::string, at::Tensor> QwenImagePipelineImpl::compute_condition(const at::Tensor& image,
                                                                           const std::string& prompt) {
  return {{"latent", encode_image(image)}, {"context", encode_prompt(prompt)}};
}

at::Tensor QwenImagePipelineImpl::compute_sample(const std::vector<std::string>& prompts, const at::Tensor& noise,
                                                 int64_t steps) {
  torch::NoGradGuard no_grad;
  const int64_t B = noise.size(0), h = noise.size(2), w = noise.size(3);
  TORCH_CHECK(static_cast<int64_t>(prompts.size()) == B, "qwen_image: ", prompts.size(), " prompts for ", B, " images");
  const diffusion::ImageSeriesKeys& io = config_.io;
  const bool cfg = io.guidance_scale > 1.0;  // do_true_cfg (the negative prompt is always given, "" by default)
  std::vector<at::Tensor> pos, neg;
  for (const auto& p : prompts) {
    pos.push_back(encode_prompt(p));
    if (cfg) neg.push_back(encode_prompt(io.negative_prompt));
  }
  const auto [pos_states, pos_mask] = pad_states(pos);
  at::Tensor neg_states, neg_mask;
  if (cfg) std::tie(neg_states, neg_mask) = pad_states(neg);

  // The schedule: mu from the image's token count (dynamic_shift_len = (H/16)(W/16)), or sample_shift.
  const int64_t p = config_.dit.patch_size;
  const double shift = config_.dynamic_shift ? std::exp(dynamic_shift_mu((h / p) * (w / p))) : io.sample_shift;
  const diffusion::FlowMatchSchedule s = qwen_image_schedule(steps, shift, config_.shift_terminal, false);
  at::Tensor lat = noise.to(at::kFloat);
  for (int64_t j = 0; j < steps; ++j) {
    const at::Tensor t = (s.timesteps.narrow(0, j, 1) / 1000).expand({B}).contiguous();
    at::Tensor pred = velocity(lat, pos_states, pos_mask, t);
    if (cfg) {
      // The combination and the norm rescale on the DiT's packed output (per token, over its
      // c * 2 * 2 features), as the pipeline applies them.
      const at::Tensor uncond = velocity(lat, neg_states, neg_mask, t);
      pred = unpack_latents(true_cfg(pack_latents(pred), pack_latents(uncond), io.guidance_scale), h, w);
    }
    const at::Tensor next = j + 1 < steps ? s.sigmas[j + 1] : at::zeros({}, at::kFloat);
    lat = lat + pred * (next - s.sigmas[j]);
  }
  return decode_latents(lat);
}

}  // namespace zeroshard::models::qwen_image
