// Series `flux2`: its config keys, schedules and registration on the shared image-series layer
// (series.h states the conventions).
#include "models/flux2/series.h"

#include "models/flux2/mistral_text.h"

#include "io/torch_pth.h"
#include "models/flux/kl_vae.h"
#include "models/flux2/sizes.h"
#include "models/qwen3/model.h"
#include "nn/name_map.h"
#include "util/text.h"

#include <cmath>
#include <numeric>
#include <stdexcept>

namespace zeroshard::models::flux2 {

namespace {

std::vector<int64_t> int_list(const std::string& text, const std::string& key) {
  std::vector<int64_t> out;
  for (const std::string& part : util::split_trimmed(text, ',')) {
    size_t used = 0;
    int64_t v = 0;
    try {
      v = std::stoll(part, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != part.size() || part.empty()) {
      throw std::invalid_argument(key + ": '" + part + "' is not an integer, in '" + text + "'");
    }
    out.push_back(v);
  }
  if (out.empty()) throw std::invalid_argument(key + ": empty list");
  return out;
}

std::string list_text(const std::vector<int64_t>& v) {
  std::string t;
  for (int64_t x : v) t += (t.empty() ? "" : ",") + std::to_string(x);
  return t;
}

}  // namespace

Flux2SeriesConfig::Flux2SeriesConfig() : dit(flux2_klein_4b()), text(qwen3::qwen3_4b()), vae(flux2_vae()) {
  io.shift = 2.225540928492468;  // e^0.8: DiffSynth's FLUX.2 training mu
  io.sample_shift = 2.225540928492468;
  io.guidance_scale = 4.0;  // Flux2KleinPipeline's default (true CFG of the base klein models)
}

void Flux2SeriesConfig::register_keys(train::ConfigKeys& k) {
  {
    train::ConfigKeys::ModelScope model(k);
    k.add_int("flux2.num_layers", &dit.num_layers, 0, 1024, "double-stream blocks (klein 4B: 5, 9B: 8, dev: 8)");
    k.add_int("flux2.num_single_layers", &dit.num_single_layers, 0, 1024,
              "single-stream blocks (klein 4B: 20, 9B: 24, dev: 48)");
    k.add_int("flux2.num_heads", &dit.num_attention_heads, 1, 1024, "DiT heads (klein 4B: 24, 9B: 32, dev: 48)");
    k.add_int("flux2.head_dim", &dit.attention_head_dim, 2, 4096, "DiT head size (128); the RoPE axes sum to it");
    k.add_float("flux2.mlp_ratio", &dit.mlp_ratio, 0.01, 64, "SwiGLU hidden / width (3)");
    k.add_custom(
        "flux2.rope_axes", "ints", "comma-separated RoPE dims per axis (t, h, w, l)",
        "RoPE dims of the (t, h, w, l) axes (32,32,32,32)",
        [this](const std::string& v) { dit.axes_dims_rope = int_list(v, "flux2.rope_axes"); },
        [this] { return list_text(dit.axes_dims_rope); });
    k.add_float("flux2.rope_theta", &dit.rope_theta, 1.0, 1e9, "RoPE theta (2000)");
    k.add_int("flux2.timestep_channels", &dit.timestep_guidance_channels, 2, 1 << 16,
              "sinusoid channels of the timestep / guidance embedders (256)");
    k.add_bool("flux2.guidance_embeds", &dit.guidance_embeds,
               "a guidance embedder (FLUX.2 dev: true; klein: false)");
    k.add_string("flux2.text_tower", &text_tower, {"qwen3", "mistral", "none"},
                 "qwen3 (klein: Qwen3), mistral (dev: Mistral Small 3.1's language model) or none: conditioning "
                 "only from a cache");
    k.add_int("flux2.context_dim", &context_dim, 0, 1 << 20,
              "the DiT's joint_attention_dim with text_tower none (dev: 15360); 0 with a tower (3 x text_hidden)");
    k.add_string("flux2.text_out_layers", &text_out_layers, {},
                 "hidden_states indices stacked on the feature axis (9,18,27; index i = output of layer i - 1)");
    k.add_int("flux2.text_vocab", &text.vocab_size, 2, 1 << 22, "Qwen3 vocabulary (151936); >= the tokenizer's ids");
    k.add_int("flux2.text_hidden", &text.hidden_size, 2, 1 << 16, "Qwen3 width (klein 4B: 2560, 9B: 4096)");
    k.add_int("flux2.text_ffn", &text.intermediate_size, 1, 1 << 20, "Qwen3 SwiGLU width (4B: 9728, 8B: 12288)");
    k.add_int("flux2.text_layers", &text.num_hidden_layers, 1, 1024,
              "Qwen3 layers (36; only those up to the largest text_out_layers index run)");
    k.add_int("flux2.text_heads", &text.num_attention_heads, 1, 1024, "Qwen3 query heads (32)");
    k.add_int("flux2.text_kv_heads", &text.num_key_value_heads, 1, 1024, "Qwen3 key/value heads (8)");
    k.add_int("flux2.text_head_dim", &text.head_dim, 2, 4096, "Qwen3 head size (128)");
    k.add_float("flux2.text_rope_theta", &text.rope_theta, 1.0, 1e12, "text tower RoPE theta (Qwen3: 1e6, Mistral: 1e9)");
    k.add_float("flux2.text_norm_eps", &text.rms_norm_eps, 1e-12, 1.0, "text tower RMSNorm eps (Qwen3: 1e-6, Mistral: 1e-5)");
    k.add_bool("flux2.text_tie_embeddings", &text.tie_word_embeddings,
               "the released tower's output head is its embedding (Qwen3-4B: true; Qwen3-8B, Mistral: false); "
               "untied, seed-weights writes lm_head.weight, which the pipeline does not run");
    k.add_bool("flux2.text_vision_tower", &text_vision_tower,
               "seed-weights writes Mistral 3's vision tower and projector beside the tower as the released "
               "text_encoder/ holds them (dev: true; the pipeline does not run them)");
    k.add_int("flux2.text_len", &text_len, 1, 1 << 16,
              "prompt tokens: every prompt truncated / padded to it (max_sequence_length 512)");
    k.add_string("flux2.vae_channels", &vae_channels, {},
                 "VAE block_out_channels (128,256,512,512: 8x down, then the 2x2 patchify)");
    k.add_int("flux2.vae_layers", &vae.kl.layers, 1, 16, "VAE layers_per_block (2)");
    k.add_int("flux2.vae_latent_channels", &vae.kl.latent_channels, 1, 1024,
              "VAE latent channels (32; the DiT sees 4 x this after the patchify)");
    k.add_int("flux2.vae_groups", &vae.kl.groups, 1, 1024, "VAE GroupNorm groups (32)");
  }
  io.register_keys(k, "flux2", "the text tower's tokenizer.json (Qwen3's or Mistral Small 3.1's; tokenizer_config.json beside it)");
  k.add_bool("flux2.dynamic_shift", &dynamic_shift,
             "sampling: mu from the latent's token count and the steps (compute_empirical_mu, as the pipeline); "
             "false: mu = ln(flux2.sample_shift)");
  k.add_float("flux2.embedded_guidance", &embedded_guidance, 0.0, 1e3,
              "sampling: the guidance embedder's value (only with guidance_embeds, FLUX.2 dev: 4)");
  k.add_float("flux2.train_guidance", &train_guidance, 0.0, 1e3,
              "training: the guidance embedder's value (only with guidance_embeds; DiffSynth: 1)");
}

std::vector<int64_t> Flux2SeriesConfig::out_layers() const { return int_list(text_out_layers, "flux2.text_out_layers"); }

Flux2VaeConfig Flux2SeriesConfig::vae_config() const {
  Flux2VaeConfig c = vae;
  c.kl.block_channels = int_list(vae_channels, "flux2.vae_channels");
  c.kl.stem_channels = c.kl.block_channels[0];
  return c;
}

qwen3::QwenConfig Flux2SeriesConfig::text_config() const {
  qwen3::QwenConfig c = text;
  if (text_tower == "mistral") {  // MistralModel: the Qwen3 block without q/k norm (no biases in either)
    c.model_type = "mistral";
    c.qk_norm = false;
    c.qkv_bias = c.o_bias = false;
  }
  return c;
}

Flux2Config Flux2SeriesConfig::dit_config() const {
  Flux2Config c = dit;
  c.in_channels = vae_config().normalized_channels();
  c.out_channels = c.in_channels;
  c.patch_size = 1;
  c.joint_attention_dim = has_text_tower() ? static_cast<int64_t>(out_layers().size()) * text.hidden_size : context_dim;
  return c;
}

int64_t Flux2SeriesConfig::spatial_factor() const {
  const Flux2VaeConfig v = vae_config();
  return v.kl.spatial_factor() * v.patch_h;
}

void Flux2SeriesConfig::validate(const train::TrainConfig& c) const {
  (void)c;
  const Flux2VaeConfig v = vae_config();
  v.kl.validate("flux2.vae_*");
  if (has_text_tower()) {
    if (context_dim != 0 && context_dim != static_cast<int64_t>(out_layers().size()) * text.hidden_size) {
      throw std::invalid_argument("flux2.context_dim " + std::to_string(context_dim) + " disagrees with the " +
                                  text_tower + " tower (" + std::to_string(out_layers().size()) +
                                  " x flux2.text_hidden " + std::to_string(text.hidden_size) +
                                  "); leave it 0 with a text tower");
    }
    text_config().validate("flux2.text_*");
    if (text_vision_tower && text_tower != "mistral") {
      throw std::invalid_argument("flux2.text_vision_tower: only Mistral 3's folder (flux2.text_tower mistral) has one");
    }
    for (int64_t i : out_layers()) {
      if (i < 1 || i > text.num_hidden_layers) {
        throw std::invalid_argument("flux2.text_out_layers: index " + std::to_string(i) + " is outside 1.." +
                                    std::to_string(text.num_hidden_layers) + " (flux2.text_layers)");
      }
    }
  } else {
    if (context_dim < 1) throw std::invalid_argument("flux2.context_dim must be set (> 0) with flux2.text_tower none");
    if (io.cache.empty()) {
      throw std::invalid_argument("flux2.text_tower none: the conditioning comes only from a cache (flux2.cache); set "
                                  "flux2.text_tower (qwen3 for klein, mistral for dev) to run a tower");
    }
  }
  dit_config().validate("flux2");
  io.validate("flux2", spatial_factor(), c.needs_data);
}

// --- schedules ---------------------------------------------------------------------------------

namespace {

// sigma' = e^mu / (e^mu + (1 / sigma - 1)) in float32, e^mu a double scalar (Python's math.exp).
at::Tensor time_shift(const at::Tensor& sigmas, double exp_mu) { return exp_mu / (exp_mu + (1 / sigmas - 1)); }

}  // namespace

diffusion::FlowMatchSchedule flux2_training_schedule(double shift) {
  const int64_t n = 1000;
  diffusion::FlowMatchSchedule s;
  s.sigmas = time_shift(at::linspace(1.0, 1.0 / static_cast<double>(n), n, at::kFloat), shift);
  s.timesteps = s.sigmas * 1000;
  s.weights = diffusion::training_weights(s.timesteps);  // set_training_weight
  return s;
}

diffusion::FlowMatchSchedule flux2_sampling_schedule(int64_t steps, double mu) {
  if (steps < 1) throw std::invalid_argument("flux2: sampling steps must be >= 1, got " + std::to_string(steps));
  diffusion::FlowMatchSchedule s;
  s.sigmas = time_shift(at::linspace(1.0, 1.0 / static_cast<double>(steps), steps, at::kFloat), std::exp(mu));
  s.timesteps = s.sigmas * 1000;
  return s;
}

double compute_empirical_mu(int64_t image_seq_len, int64_t num_steps) {
  const double a1 = 8.73809524e-05, b1 = 1.89833333, a2 = 0.00016927, b2 = 0.45666666;
  const double len = static_cast<double>(image_seq_len);
  if (image_seq_len > 4300) return a2 * len + b2;
  const double m_200 = a2 * len + b2, m_10 = a1 * len + b1;
  const double a = (m_200 - m_10) / 190.0, b = m_200 - 200.0 * a;
  return a * static_cast<double>(num_steps) + b;
}

// --- the series --------------------------------------------------------------------------------

Series flux2_series() {
  diffusion::ImageSeriesSpec spec;
  spec.name = "flux2";
  spec.summary =
      "FLUX.2 DiT as released (klein: Qwen3 hidden states 9/18/27, dev: Mistral Small 3.1 hidden states 10/20/30; "
      "FLUX.2 VAE), flow matching as DiffSynth trains it from a DiffSynth image folder or a prepared cache";
  spec.cache_format = "zeroshard flux2 cache 1";
  spec.conditioning_text = "FLUX.2 VAE latents + the text tower's stacked hidden_states";
  spec.cond_fields = {"context"};
  spec.cache_shape = [](const train::TrainConfig& cfg) {
    const auto& c = cfg.series_config<Flux2SeriesConfig>();
    return std::vector<std::pair<std::string, int64_t>>{{"height", c.io.height},
                                                        {"width", c.io.width},
                                                        {"text_len", c.text_len},
                                                        {"context_dim", c.dit_config().joint_attention_dim},
                                                        {"latent_channels", c.dit_config().in_channels}};
  };
  spec.make_config = [] { return std::make_unique<Flux2SeriesConfig>(); };
  spec.keys = [](const train::TrainConfig& cfg) -> const diffusion::ImageSeriesKeys& {
    return cfg.series_config<Flux2SeriesConfig>().io;
  };
  spec.build = [](const train::TrainConfig& cfg, bool with_dit, bool with_towers) {
    const auto& c = cfg.series_config<Flux2SeriesConfig>();
    return std::static_pointer_cast<diffusion::ImagePipelineImpl>(
        std::make_shared<Flux2PipelineImpl>(c, with_dit, with_towers));
  };
  // FLUX.2's training schedule (mu fixed, as DiffSynth trains: not the image size's).
  spec.training_schedule = [](const train::TrainConfig& cfg, int64_t, int64_t) {
    return flux2_training_schedule(cfg.series_config<Flux2SeriesConfig>().io.shift);
  };
  // The released text_encoder/ (Qwen3 or Mistral3; lm_head, Mistral's vision tower and projector
  // left unread) and vae/ (diffusers' AutoencoderKLFlux2 names, the VAE's own; BFL's layout of the
  // autoencoder through the KL map).
  spec.text_encoder_source = [](const train::TrainConfig& cfg, const std::string& path) {
    return cfg.series_config<Flux2SeriesConfig>().text_tower == "mistral" ? mistral_text_source(path)
                                                                            : qwen3::text_tower_source(path);
  };
  spec.vae_source = [](const train::TrainConfig& cfg, const std::string& path) {
    nn::NameMap own;
    own.ignore("bn.num_batches_tracked", "BatchNorm's update counter: the running statistics stay frozen");
    return flux::kl_vae_file_source(path, cfg.series_config<Flux2SeriesConfig>().vae_config().kl, own);
  };
  // seed-weights: every folder in our names (they are the released ones) but Mistral's
  // ("language_model.model.*"); the text tower's lm_head (and Mistral 3's vision tower and
  // projector) are not ours.
  spec.text_encoder_release_map = [](const train::TrainConfig& cfg) {
    return cfg.series_config<Flux2SeriesConfig>().text_tower == "mistral" ? mistral_release_map() : nn::NameMap();
  };
  spec.text_encoder_beyond = [](const train::TrainConfig& cfg) {
    const auto& c = cfg.series_config<Flux2SeriesConfig>();
    diffusion::ImageSeriesSpec::Beyond b;
    if (c.text_tower == "mistral") {
      b.not_run = mistral_not_run(c.text.vocab_size, c.text.hidden_size, c.text_vision_tower);
      b.note = c.text_vision_tower ? "written seeded, not run: the output head, Mistral 3's vision tower and projector"
                                   : "written seeded, not run: the output head; not written: Mistral 3's vision tower "
                                     "and projector (flux2.text_vision_tower)";
    } else if (!c.text.tie_word_embeddings) {
      b.not_run = {{"lm_head.weight", {c.text.vocab_size, c.text.hidden_size}}};
      b.note = "written seeded, not run: the output head (lm_head.weight)";
    }
    return b;
  };
  // The released transformer files use Flux2DiT's names as they are (no name map).
  // reference_kinds: the flux2 kinds are listed once in series_list.cpp's reference table.
  return diffusion::make_image_series(std::move(spec));
}

}  // namespace zeroshard::models::flux2
