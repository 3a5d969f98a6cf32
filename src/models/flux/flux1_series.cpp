// The flux1 series' config keys, its schedule, packing and prompt inputs (flux1_series.h).
#include "models/flux/flux1_series.h"

#include "io/safetensors.h"
#include "models/diffusion/cond_cache.h"
#include "models/flux/flux1_name_map.h"
#include "models/flux/kl_vae.h"
#include "models/flux/sizes.h"
#include "nn/name_map.h"
#include "util/text.h"

#include <filesystem>
#include <stdexcept>

namespace zeroshard::models::flux {

Flux1SeriesConfig::Flux1SeriesConfig() : dit(flux1_dev()), text(t5::t5_v1_1_xxl()), vae(flux1_vae()) {
  io.height = 1024;
  io.width = 1024;
  io.shift = 3.0;         // set_timesteps_flux's default shift
  io.sample_shift = 3.0;
  io.guidance_scale = 3.5;  // FluxImagePipeline's embedded_guidance
}

void Flux1SeriesConfig::register_keys(train::ConfigKeys& k) {
  {
    train::ConfigKeys::ModelScope model(k);
    k.add_int("flux1.hidden_size", &dit.hidden_size, 2, 1 << 16, "DiT width (released: 3072)");
    k.add_int("flux1.num_heads", &dit.num_heads, 1, 1024, "DiT heads (24); rope axes sum to hidden_size / num_heads");
    k.add_int("flux1.depth", &dit.depth, 0, 1024, "double-stream blocks (19)");
    k.add_int("flux1.depth_single_blocks", &dit.depth_single_blocks, 0, 1024, "single-stream blocks (38)");
    k.add_float("flux1.mlp_ratio", &dit.mlp_ratio, 0.25, 64, "MLP width / hidden_size (4)");
    k.add_int("flux1.rope_axes_t", &rope_axes_t, 0, 4096, "RoPE dims of the id axis 0 (16)");
    k.add_int("flux1.rope_axes_h", &rope_axes_h, 0, 4096, "RoPE dims of the row axis (56)");
    k.add_int("flux1.rope_axes_w", &rope_axes_w, 0, 4096, "RoPE dims of the column axis (56)");
    k.add_float("flux1.theta", &dit.theta, 1.0, 1e9, "RoPE theta (10000)");
    k.add_bool("flux1.guidance_embed", &dit.guidance_embed,
               "the guidance embedder guidance_in (true: FLUX.1 dev; false: schnell)");
    k.add_int("flux1.vec_in_dim", &dit.vec_in_dim, 1, 1 << 16, "width of the pooled vector (CLIP-L: 768)");
    k.add_int("flux1.text_vocab", &text.vocab_size, 2, 1 << 22, "T5 vocabulary (32128); >= the tokenizer's pieces");
    k.add_int("flux1.text_dim", &text.dim, 2, 1 << 16, "T5 width = the DiT's context_in_dim (4096)");
    k.add_int("flux1.text_heads", &text.num_heads, 1, 1024, "T5 heads (64)");
    k.add_int("flux1.text_head_dim", &text_head_dim, 1, 4096, "T5 head size d_kv (64)");
    k.add_int("flux1.text_ffn", &text.dim_ffn, 1, 1 << 20, "T5 gated-GELU width d_ff (10240)");
    k.add_int("flux1.text_layers", &text.num_layers, 1, 1024, "T5 encoder layers (24)");
    k.add_int("flux1.text_buckets", &text.num_buckets, 2, 1 << 12, "T5 relative-position buckets (32)");
    k.add_int("flux1.text_max_distance", &text.max_distance, 2, 1 << 20, "T5 relative-position max distance (128)");
    k.add_int("flux1.text_len", &text_len, 1, 1 << 16,
              "T5 tokens per prompt, padded to it (max_sequence_length: 512 dev, 256 schnell)");
    k.add_int("flux1.vae_ch", &vae.ch, 32, 1 << 12, "VAE base width (128; levels x1, x2, x4, x4), a multiple of 32");
    k.add_int("flux1.vae_num_res_blocks", &vae.num_res_blocks, 1, 16, "VAE residual blocks per level (2)");
    k.add_int("flux1.clip_vocab", &clip.vocab_size, 2, 1 << 22, "CLIP-L vocabulary (49408); >= the tokenizer's ids");
    k.add_int("flux1.clip_hidden", &clip.hidden_size, 2, 1 << 16, "CLIP-L width = flux1.vec_in_dim (768)");
    k.add_int("flux1.clip_ffn", &clip.intermediate_size, 1, 1 << 20, "CLIP-L MLP width (3072)");
    k.add_int("flux1.clip_layers", &clip.num_hidden_layers, 1, 1024, "CLIP-L layers (12)");
    k.add_int("flux1.clip_heads", &clip.num_attention_heads, 1, 1024, "CLIP-L heads (12)");
  }
  io.register_keys(k, "flux1", "the T5 SentencePiece model (tokenizer_2/spiece.model)");
  k.add_float("flux1.train_guidance", &train_guidance, 0.0, 1e3,
              "embedded guidance of training (dev; DiffSynth's FLUX training: 1)");
  k.add_float("flux1.true_cfg_scale", &true_cfg_scale, 0.0, 1e3,
              "sampling: true CFG v_neg + c (v_pos - v_neg) when > 1 (DiffSynth's cfg_scale; 1: off)");
  k.add_path("flux1.clip_from", &io.extra_from["clip_from"],
             "CLIP-L's released file (text_encoder/model.safetensors, CLIPTextModel names); empty: seeded");
  k.add_path("flux1.clip_tokenizer", &clip_tokenizer,
             "CLIP's tokenizer: the released tokenizer/ folder (vocab.json + merges.txt) or a tokenizer.json");
  k.add_path("flux1.pooled_file", &pooled_file,
             "instead of the CLIP tower: safetensors with CLIP-L's pooled vector [768] per prompt, each tensor named "
             "by its prompt (docs/flux1.md); read with the towers in the loop, by prepare and sampling");
}

Flux1Config Flux1SeriesConfig::dit_config() const {
  Flux1Config c = dit;
  c.context_in_dim = text.dim;
  c.in_channels = c.out_channels = vae.z_channels * 4;  // 2x2 patches
  c.axes_dim = {rope_axes_t, rope_axes_h, rope_axes_w};
  c.qkv_bias = true;
  return c;
}

t5::T5Config Flux1SeriesConfig::text_config() const {
  t5::T5Config c = text;
  c.dim_attn = text.num_heads * text_head_dim;
  c.shared_pos = true;
  return c;
}

Flux1VaeConfig Flux1SeriesConfig::vae_config() const { return vae; }
int64_t Flux1SeriesConfig::spatial_factor() const { return vae.kl().spatial_factor(); }

void Flux1SeriesConfig::validate(const train::TrainConfig& c) const {
  (void)c;
  dit_config().validate("flux1 (flux1.hidden_size / num_heads / rope_axes_*)");
  text_config().validate();
  vae_config().kl().validate("flux1.vae_*");
  io.validate("flux1", spatial_factor() * 2, c.needs_data);  // VAE x 2x2 patch
  if (has_clip_tower()) {
    clip.validate("flux1.clip_*");
    if (dit.vec_in_dim != clip.hidden_size) {
      throw std::invalid_argument("flux1.vec_in_dim (" + std::to_string(dit.vec_in_dim) +
                                  ") must equal flux1.clip_hidden (" + std::to_string(clip.hidden_size) +
                                  "): the DiT's vector_in takes CLIP's pooled vector");
    }
  }
  if (!io.dit_from.empty() && !c.init_from.empty()) {
    throw std::invalid_argument("flux1.dit_from and model.init_from both give the DiT's initial values (" + io.dit_from +
                                ", " + c.init_from + "): set one");
  }
}

// --- schedule, packing, prompts ----------------------------------------------------------------

diffusion::FlowMatchSchedule flux1_schedule(int64_t steps, double shift, bool training) {
  if (steps < 1) throw std::invalid_argument("flux1: schedule steps must be >= 1, got " + std::to_string(steps));
  if (!(shift > 0)) throw std::invalid_argument("flux1: schedule shift must be > 0, got " + std::to_string(shift));
  // In float32 as torch computes it: linspace, then the shift with a Python-float s.
  const double sigma_min = 0.003 / 1.002;
  diffusion::FlowMatchSchedule s;
  const at::Tensor u = at::linspace(1.0, sigma_min, steps, at::kFloat);
  s.sigmas = shift * u / (1 + (shift - 1) * u);
  s.timesteps = s.sigmas * 1000;
  if (training) {
    s.weights = diffusion::training_weights(s.timesteps);  // DiffSynth's set_training_weight
  }
  return s;
}

at::Tensor flux1_pack(const at::Tensor& x) {
  TORCH_CHECK(x.dim() == 4 && x.size(2) % 2 == 0 && x.size(3) % 2 == 0,
              "flux1_pack: latents must be [B, C, h, w] with even h, w; got ", x.sizes());
  const int64_t B = x.size(0), C = x.size(1), h = x.size(2) / 2, w = x.size(3) / 2;
  return x.view({B, C, h, 2, w, 2}).permute({0, 2, 4, 1, 3, 5}).reshape({B, h * w, C * 4});
}

at::Tensor flux1_unpack(const at::Tensor& t, int64_t channels, int64_t h, int64_t w) {
  const int64_t B = t.size(0);
  TORCH_CHECK(t.dim() == 3 && t.size(1) == (h / 2) * (w / 2) && t.size(2) == channels * 4,
              "flux1_unpack: tokens ", t.sizes(), " do not fit latents of ", channels, " x ", h, " x ", w);
  return t.reshape({B, h / 2, w / 2, channels, 2, 2}).permute({0, 3, 1, 4, 2, 5}).reshape({B, channels, h, w});
}

at::Tensor flux1_image_ids(int64_t batch, int64_t h, int64_t w, at::ScalarType dtype) {
  const int64_t hh = h / 2, ww = w / 2;
  at::Tensor ids = at::zeros({hh, ww, 3}, at::kFloat);
  ids.select(2, 1).copy_(at::arange(hh, at::kFloat).unsqueeze(1).expand({hh, ww}));
  ids.select(2, 2).copy_(at::arange(ww, at::kFloat).unsqueeze(0).expand({hh, ww}));
  return ids.reshape({1, hh * ww, 3}).expand({batch, hh * ww, 3}).to(dtype).contiguous();
}

at::Tensor flux1_prompt_ids(const text::SentencePieceTokenizer& tok, const std::string& prompt, int64_t text_len) {
  // T5TokenizerFast(padding="max_length", max_length=text_len, truncation=True): no cleaning.
  const text::PaddedIds p = tok.encode_padded(prompt, static_cast<int32_t>(text_len), /*clean=*/false);
  at::Tensor ids = at::empty({1, text_len}, at::kLong);
  for (int64_t i = 0; i < text_len; ++i) ids[0][i] = static_cast<int64_t>(p.ids.at(static_cast<size_t>(i)));
  return ids;
}

at::Tensor flux1_clip_ids(text::BpeTokenizer& tok, const std::string& prompt, int64_t max_len) {
  // CLIPTokenizer(padding="max_length", max_length, truncation=True): the post-processor's two
  // special tokens stay, the text is cut to max_len - 2 tokens.
  const std::optional<int32_t> bos = tok.token_to_id("<|startoftext|>"), eos = tok.token_to_id("<|endoftext|>");
  if (!bos || !eos) {
    throw std::invalid_argument("flux1.clip_tokenizer: CLIP's tokenizer has no <|startoftext|> / <|endoftext|> token");
  }
  const int32_t pad = tok.pad_id().value_or(*eos);
  std::vector<int32_t> ids = tok.encode(prompt);
  if (static_cast<int64_t>(ids.size()) > max_len - 2) ids.resize(static_cast<size_t>(max_len - 2));
  at::Tensor out = at::full({1, max_len}, static_cast<int64_t>(pad), at::kLong);
  out[0][0] = static_cast<int64_t>(*bos);
  for (size_t i = 0; i < ids.size(); ++i) out[0][static_cast<int64_t>(i) + 1] = static_cast<int64_t>(ids[i]);
  out[0][static_cast<int64_t>(ids.size()) + 1] = static_cast<int64_t>(*eos);
  return out;
}

PooledVectors::PooledVectors(const std::string& path, int64_t width) : path_(path), width_(width) {
  if (!std::filesystem::exists(path)) throw std::invalid_argument("flux1.pooled_file: file '" + path + "' does not exist");
  const io::SafetensorsFile file(path);
  for (const auto& e : file.entries()) {
    at::Tensor t = file.read(e.name).to(at::kFloat).reshape({-1});
    if (t.numel() != width) {
      throw std::runtime_error("flux1.pooled_file: " + path + ": tensor '" + e.name + "' has shape " +
                               io::shape_text(e.shape) + ", expected [" + std::to_string(width) +
                               "] (flux1.vec_in_dim)");
    }
    vectors_.emplace(e.name, t.contiguous());
  }
}

at::Tensor PooledVectors::get(const std::string& prompt) const {
  const auto it = vectors_.find(prompt);
  if (it == vectors_.end()) {
    throw std::runtime_error("flux1.pooled_file: " + path_ + " has no pooled vector for the prompt \"" + prompt +
                             "\" (" + std::to_string(vectors_.size()) +
                             " prompts in the file; compute the missing ones with the released CLIP, docs/flux1.md)");
  }
  return it->second;
}


// --- released files ------------------------------------------------------------------------------

namespace {

// The tensor names of a released weights location (a file, an index, a folder).
std::vector<std::string> tensor_names(const std::string& path, const std::string& key) {
  if (!std::filesystem::exists(path)) throw std::invalid_argument(key + ": file '" + path + "' does not exist");
  std::vector<std::string> names;
  const io::SafetensorsSet set(path);
  for (const auto& [name, where] : set.tensors()) {
    (void)where;
    names.push_back(name);
  }
  return names;
}

}  // namespace

std::shared_ptr<ParamSource> flux1_dit_file_source(const std::string& path, const Flux1Config& c) {
  // The names tell the layouts apart: only diffusers' FluxTransformer2DModel has
  // transformer_blocks.* / x_embedder.*; BFL's flux1-*.safetensors has double_blocks.* / img_in.*.
  bool diffusers = false;
  for (const auto& n : tensor_names(path, "flux1.dit_from")) {
    diffusers = diffusers || util::starts_with(n, "transformer_blocks.") || util::starts_with(n, "x_embedder.");
  }
  return nn::name_mapped_param_source(path, diffusers ? flux1_diffusers_name_map(c) : nn::NameMap());
}

std::shared_ptr<ParamSource> flux1_text_encoder_source(const std::string& path) {
  // text_encoder_2/model.safetensors.index.json (or one file): transformers' T5EncoderModel names.
  tensor_names(path, "flux1.text_encoder_from");
  return nn::name_mapped_param_source(path, t5::hf_t5_name_map(/*shared_pos=*/true));
}

std::shared_ptr<ParamSource> flux1_clip_source(const std::string& path) {
  tensor_names(path, "flux1.clip_from");
  nn::NameMap map;
  map.ignore("text_model.embeddings.position_ids", "a buffer (0 .. 76) older transformers saved, not a weight");
  return nn::name_mapped_param_source(path, std::move(map));
}

// --- the series --------------------------------------------------------------------------------


Series flux1_series() {
  diffusion::ImageSeriesSpec spec;
  spec.name = "flux1";
  spec.summary = "FLUX.1 dev / schnell as released (T5 v1.1 text, CLIP-L pooled and FLUX.1 VAE towers), flow "
                 "matching as DiffSynth trains FLUX.1, from a DiffSynth image folder or a prepared cache";
  spec.cache_format = "zeroshard flux1 cache 1";
  spec.conditioning_text = "FLUX.1 VAE latents + T5 states (text_len rows) + CLIP-L pooled vectors";
  spec.cond_fields = {"context", "pooled"};
  spec.cache_shape = [](const train::TrainConfig& cfg) {
    const auto& c = cfg.series_config<Flux1SeriesConfig>();
    return std::vector<std::pair<std::string, int64_t>>{{"height", c.io.height},       {"width", c.io.width},
                                                        {"text_len", c.text_len},      {"text_dim", c.text.dim},
                                                        {"vec_in_dim", c.dit.vec_in_dim}, {"z_channels", c.vae.z_channels}};
  };
  spec.make_config = [] { return std::make_unique<Flux1SeriesConfig>(); };
  spec.keys = [](const train::TrainConfig& cfg) -> const diffusion::ImageSeriesKeys& {
    return cfg.series_config<Flux1SeriesConfig>().io;
  };
  spec.build = [](const train::TrainConfig& cfg, bool with_dit, bool with_towers) {
    return std::static_pointer_cast<diffusion::ImagePipelineImpl>(
        std::make_shared<Flux1PipelineImpl>(cfg.series_config<Flux1SeriesConfig>(), with_dit, with_towers));
  };
  spec.dit_source = [](const train::TrainConfig&, const std::string& path) {
    return flux1_dit_file_source(path, flux1_dev());
  };
  // text_encoder_2 (transformers' T5EncoderModel names).
  spec.text_encoder_source = [](const train::TrainConfig&, const std::string& path) {
    return flux1_text_encoder_source(path);
  };
  // ae.safetensors (BFL's names, the VAE's own) or the diffusers vae/ folder.
  spec.vae_source = [](const train::TrainConfig& cfg, const std::string& path) {
    return kl_vae_file_source(path, cfg.series_config<Flux1SeriesConfig>().vae_config().kl());
  };
  // seed-weights: FLUX.1-dev's diffusers folders (transformer/, text_encoder_2/, vae/).
  spec.dit_release_map = [](const train::TrainConfig& cfg) {
    return flux1_diffusers_name_map(cfg.series_config<Flux1SeriesConfig>().dit_config());
  };
  spec.text_encoder_release_map = [](const train::TrainConfig&) { return t5::hf_t5_name_map(/*shared_pos=*/true); };
  // ... and, with --only dit_bfl / vae_bfl, BFL's single files at the top, under our names.
  spec.dit_single_file_stem = [](const train::TrainConfig& cfg) {
    return std::string(cfg.series_config<Flux1SeriesConfig>().dit_config().guidance_embed ? "flux1-dev" : "flux1-schnell");
  };
  spec.vae_single_file_stem = "ae";
  spec.vae_single_file_dtype = at::kFloat;  // ae.safetensors: 335 MB, float32
  spec.text_encoder_folder = "text_encoder_2";
  spec.vae_release_map = [](const train::TrainConfig& cfg) {
    return kl_vae_name_map(cfg.series_config<Flux1SeriesConfig>().vae_config().kl());
  };
  spec.training_schedule = [](const train::TrainConfig& cfg, int64_t, int64_t) {
    return flux1_schedule(1000, cfg.series_config<Flux1SeriesConfig>().io.shift, /*training=*/true);
  };
  // CLIP-L: "clip.*", the released text_encoder/ (CLIPTextModel's names as they are).
  diffusion::ImageSeriesSpec::ExtraTower clip;
  clip.prefix = "clip";
  clip.key = "clip_from";
  clip.folder = "text_encoder";
  clip.source = [](const train::TrainConfig&, const std::string& path) { return flux1_clip_source(path); };
  clip.files = [](const train::TrainConfig& cfg) {
    return std::map<std::string, std::string>{
        {"config.json", cfg.series_config<Flux1SeriesConfig>().clip.to_hf_json().dump(2) + "\n"}};
  };
  clip.built = [](const train::TrainConfig& cfg) { return cfg.series_config<Flux1SeriesConfig>().has_clip_tower(); };
  spec.extra_towers.push_back(std::move(clip));
  // The flux family's reference kinds (flux1_dit, flux1_vae_*) are listed by series_list.cpp's
  // reference_kinds() already (models::flux::reference_kinds()), T5's by models::t5.
  return diffusion::make_image_series(std::move(spec));
}

}  // namespace zeroshard::models::flux
