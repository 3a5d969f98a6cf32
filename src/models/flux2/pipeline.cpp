// The flux2 series' pipeline module: the towers, the loss as DiffSynth trains FLUX.2, the sampler
// as Flux2KleinPipeline samples (series.h states the conventions).
#include "models/flux2/series.h"

#include "models/flux2/mistral_text.h"
#include "nn/init.h"
#include "nn/layers.h"
#include "text/chat_template.h"
#include "util/text.h"

#include <chrono>
#include <cmath>
#include <stdexcept>

namespace zeroshard::models::flux2 {

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Position ids: the image on (0, row, col, 0) row-major, the text on (0, 0, 0, index).
at::Tensor image_ids(int64_t h, int64_t w) {
  const at::Tensor rows = at::arange(h, at::kLong).repeat_interleave(w);
  const at::Tensor cols = at::arange(w, at::kLong).repeat({h});
  const at::Tensor zero = at::zeros({h * w}, at::kLong);
  return at::stack({zero, rows, cols, zero}, 1).unsqueeze(0);
}

at::Tensor text_ids(int64_t n) {
  const at::Tensor zero = at::zeros({n}, at::kLong);
  return at::stack({zero, zero, zero, at::arange(n, at::kLong)}, 1).unsqueeze(0);
}

}  // namespace

std::pair<at::Tensor, at::Tensor> prompt_ids(text::BpeTokenizer& tok, const std::string& prompt, int64_t text_len) {
  const std::string rendered = text::render_qwen3_chat({{"user", prompt, std::nullopt}}, /*add_generation_prompt=*/true,
                                                       /*enable_thinking=*/false);
  std::vector<int32_t> ids = tok.encode(rendered);
  if (static_cast<int64_t>(ids.size()) > text_len) ids.resize(static_cast<size_t>(text_len));  // truncation=True
  const std::optional<int32_t> pad = tok.pad_id();
  if (!pad) throw std::invalid_argument("flux2.tokenizer: the tokenizer has no pad_token (padding=\"max_length\")");
  at::Tensor t = at::full({1, text_len}, static_cast<int64_t>(*pad), at::kLong);
  at::Tensor mask = at::zeros({1, text_len}, at::kLong);
  for (size_t i = 0; i < ids.size(); ++i) {
    t[0][static_cast<int64_t>(i)] = static_cast<int64_t>(ids[i]);
    mask[0][static_cast<int64_t>(i)] = 1;
  }
  return {t, mask};
}

Flux2PipelineImpl::Flux2PipelineImpl(const Flux2SeriesConfig& c, bool with_dit, bool with_towers)
    : config_(c) {
  if (with_dit) dit = register_module("dit", Flux2DiT(c.dit_config()));
  if (with_towers) {
    if (!c.has_text_tower()) {
      throw std::invalid_argument("flux2.text_tower none: no text tower to run; set flux2.text_tower (qwen3 for klein, "
                                  "mistral for dev) or train from a cache (flux2.cache)");
    }
    // The whole released language model (Qwen3 / Mistral's, its file loads as it is); only the
    // layers up to the deepest stacked index run.
    text_encoder = register_module("text_encoder", qwen3::QwenForCausalLM(c.text_config(), /*lm_head=*/false));
    vae = register_module("vae", Flux2Vae(c.vae_config(), true, true, /*stats_as_parameters=*/true));
    for (auto& p : text_encoder->parameters()) p.set_requires_grad(false);
    for (auto& p : vae->parameters()) p.set_requires_grad(false);
  }
}

std::vector<int64_t> Flux2PipelineImpl::latent_shape(int64_t height, int64_t width) const {
  const int64_t f = config_.spatial_factor();
  return {config_.dit_config().in_channels, height / f, width / f};
}

text::BpeTokenizer& Flux2PipelineImpl::tokenizer() {
  if (!tokenizer_) {
    const std::string& path = config_.io.tokenizer;
    if (path.empty()) {
      throw std::invalid_argument(std::string("flux2.tokenizer: the ") +
                                  (config_.text_tower == "mistral" ? "Mistral Small 3.1" : "Qwen3") +
                                  " tokenizer.json is required");
    }
    tokenizer_ = std::make_unique<text::BpeTokenizer>(text::BpeTokenizer::from_file(path));
    if (tokenizer_->vocab_size() > config_.text.vocab_size) {
      throw std::invalid_argument("flux2.text_vocab " + std::to_string(config_.text.vocab_size) +
                                  " is below the tokenizer's " + std::to_string(tokenizer_->vocab_size()) + " ids (" +
                                  path + ")");
    }
  }
  return *tokenizer_;
}

at::Tensor Flux2PipelineImpl::encode_image(const at::Tensor& image) {
  TORCH_CHECK(vae, "Flux2Pipeline: built without its towers");
  torch::NoGradGuard no_grad;
  const auto t0 = std::chrono::steady_clock::now();
  const at::ScalarType dt = vae->encoder->parameters().front().scalar_type();
  at::Tensor z = vae->encode(image.unsqueeze(0).to(dt))[0].to(at::kFloat);
  towers_seconds += seconds_since(t0);
  return z;
}

at::Tensor Flux2PipelineImpl::encode_text(const std::string& prompt) {
  TORCH_CHECK(text_encoder, "Flux2Pipeline: built without its towers");
  torch::NoGradGuard no_grad;
  const auto t0 = std::chrono::steady_clock::now();
  auto [ids, mask] = config_.text_tower == "mistral" ? mistral_prompt_ids(tokenizer(), prompt, config_.text_len)
                                                     : prompt_ids(tokenizer(), prompt, config_.text_len);
  // hidden_states[k] for k in flux2.text_out_layers (klein 9, 18, 27; dev 10, 20, 30), features
  // concatenated in that order.
  const std::vector<at::Tensor> states = text_encoder->hidden_states(qwen3::Inputs(ids, mask), config_.out_layers());
  std::vector<at::Tensor> rows;
  for (const auto& s : states) rows.push_back(s[0].to(at::kFloat));
  at::Tensor context = at::cat(rows, -1);
  towers_seconds += seconds_since(t0);
  return context;
}

at::Tensor Flux2PipelineImpl::velocity(const at::Tensor& latents, const at::Tensor& context, const at::Tensor& t,
                                       double guidance) {
  const int64_t B = latents.size(0), C = latents.size(1), h = latents.size(2), w = latents.size(3);
  // The DiT runs in its compute dtype (bf16 under mixed_precision.param_dtype: bf16, as the
  // pipelines run it in torch_dtype, the timestep cast with the latents); the prediction comes
  // back in float32.
  const at::ScalarType dt = dit->x_embedder->weight.scalar_type();
  const at::Tensor tokens = latents.reshape({B, C, h * w}).transpose(1, 2).to(dt);  // "B C H W -> B (H W) C"
  at::Tensor g;
  if (config_.dit.guidance_embeds) g = at::full({B}, guidance, at::kFloat).to(dt);
  const at::Tensor out =
      dit->forward(tokens, context.to(dt), t.to(dt), image_ids(h, w), text_ids(context.size(1)), g);
  return out.to(at::kFloat).transpose(1, 2).reshape({B, C, h, w});
}

int64_t Flux2PipelineImpl::prompt_tokens(const std::string& prompt) {
  return static_cast<int64_t>(tokenizer().encode(prompt).size());
}

std::map<std::string, at::Tensor> Flux2PipelineImpl::compute_condition(const at::Tensor& image,
                                                                       const std::string& prompt) {
  return {{"latent", encode_image(image)}, {"context", encode_text(prompt)}};
}

at::Tensor Flux2PipelineImpl::compute_loss(const diffusion::ImageBatch& b) {
  const int64_t B = b.size();
  std::vector<at::Tensor> x0, ctx;
  for (int64_t i = 0; i < B; ++i) {
    const auto k = static_cast<size_t>(i);
    x0.push_back(b.cached() ? b.latents.at(k) : encode_image(b.images.at(k)));
    ctx.push_back(b.cached() ? b.conds.at(k).at("context") : encode_text(b.prompts.at(k)));
  }
  // The draws come from FLUX.2's training schedule (ImageSeriesSpec::training_schedule).
  const at::Tensor& sigmas = b.sigmas;
  std::vector<at::Tensor> noisy;
  for (int64_t i = 0; i < B; ++i) {
    const at::Tensor s = sigmas[i];
    noisy.push_back((1 - s) * x0[static_cast<size_t>(i)] + s * b.noises.at(static_cast<size_t>(i)));  // add_noise
  }
  // model_fn_flux2: the DiT takes timestep / 1000; its output is the velocity, target noise - x0.
  const at::Tensor v = velocity(at::stack(noisy), at::stack(ctx), b.timesteps / 1000, config_.train_guidance);
  std::vector<at::Tensor> per_sample;
  for (int64_t i = 0; i < B; ++i) {
    const auto k = static_cast<size_t>(i);
    const at::Tensor mse = (v[i] - (b.noises.at(k) - x0[k])).pow(2).mean();
    per_sample.push_back(mse * b.weights[i]);
  }
  return at::stack(per_sample).mean();
}

at::Tensor Flux2PipelineImpl::compute_sample(const std::vector<std::string>& prompts, const at::Tensor& noise,
                                             int64_t steps) {
  torch::NoGradGuard no_grad;
  TORCH_CHECK(vae && text_encoder, "Flux2Pipeline: sampling needs the towers");
  const int64_t B = static_cast<int64_t>(prompts.size());
  const double g = config_.io.guidance_scale;
  const bool cfg = g > 1.0;  // Flux2KleinPipeline.do_classifier_free_guidance (is_distilled: sample with 1)
  std::vector<at::Tensor> pos, neg;
  for (const auto& p : prompts) pos.push_back(encode_text(p));
  if (cfg) neg.assign(static_cast<size_t>(B), encode_text(config_.io.negative_prompt));
  const at::Tensor cpos = at::stack(pos);
  const at::Tensor cneg = cfg ? at::stack(neg) : at::Tensor();
  const int64_t tokens = noise.size(2) * noise.size(3);
  const double mu = config_.dynamic_shift ? compute_empirical_mu(tokens, steps) : std::log(config_.io.sample_shift);
  const diffusion::FlowMatchSchedule s = flux2_sampling_schedule(steps, mu);
  at::Tensor x = noise.to(at::kFloat);
  for (int64_t j = 0; j < steps; ++j) {
    const at::Tensor t = (s.timesteps.narrow(0, j, 1) / 1000).expand({B}).contiguous();
    at::Tensor v = velocity(x, cpos, t, config_.embedded_guidance);
    if (cfg) {
      const at::Tensor vn = velocity(x, cneg, t, config_.embedded_guidance);
      v = vn + g * (v - vn);
    }
    const at::Tensor next = j + 1 < steps ? s.sigmas[j + 1] : at::zeros({}, at::kFloat);
    x = x + v * (next - s.sigmas[j]);
  }
  const at::ScalarType dt = vae->decoder->parameters().front().scalar_type();
  return vae->decode(x.to(dt)).to(at::kFloat).clamp(-1, 1);
}

// --- seeded initial values ---------------------------------------------------------------------

void Flux2PipelineImpl::init_text_encoder(uint64_t seed, const std::string& name, at::Tensor& param) const {
  if (!text_encoder) throw std::invalid_argument("flux2: '" + name + "' on a pipeline built without its towers");
  text_encoder->init_parameter(seed, name, param);  // transformers' _init_weights
}

}  // namespace zeroshard::models::flux2
