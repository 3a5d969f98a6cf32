// Series `flux1`: FLUX.1 [dev] / [schnell] text-to-image as released (black-forest-labs), trained as
// DiffSynth-Studio trains FLUX.1 (examples/flux/model_training/train.py, diffsynth/pipelines/
// flux_image.py, diffsynth/diffusion/flow_match.py template "FLUX.1") and sampled as its
// FluxImagePipeline samples it. The conventions, each implemented in one place:
//  - the DiT: flux1_dit.h (BFL names), latents [16, h, w] packed into 2x2 patches, token
//    (i, j) = latent[:, 2i:2i+2, 2j:2j+2] flattened channel-major (c, di, dj) -> 64 features
//    ("b c (h ph) (w pw) -> b (h w) (c ph pw)"), image ids (0, i, j), text ids all zero
//    (flux1_pipeline.cpp: pack / unpack / image_ids);
//  - the DiT's time input: DiffSynth passes timestep = 1000 sigma to a time embedder that takes it
//    unscaled; BFL's `Flux` (our DiT) multiplies its [0, 1] input by 1000, so we pass
//    timestep / 1000. Guidance (dev only, flux1.guidance_embed): DiffSynth multiplies the
//    embedded guidance g by 1000 before its embedder, BFL's guidance_in does the same inside, so
//    we pass g itself. Training uses g = flux1.train_guidance = 1 (DiffSynth's FLUX training:
//    "embedded_guidance": 1); sampling g = flux1.guidance_scale (FluxImagePipeline's default
//    embedded_guidance 3.5). Schnell has no guidance embedder: g is not used;
//  - the prediction is the flow velocity itself (no sign flip): target noise - x0 on
//    x_t = (1 - sigma) x0 + sigma noise, MSE times DiffSynth's timestep weight;
//  - the schedule (flux1_schedule below, set_timesteps_flux): sigmas = linspace(1, sigma_min,
//    steps) with sigma_min = 0.003 / 1.002 (steps points, both ends included: no extra step),
//    shifted sigma' = s sigma / (1 + (s - 1) sigma), s = 3 (flux1.shift / flux1.sample_shift),
//    timesteps 1000 sigma'; training draws the id uniformly in [0, 1000) of the 1000-step
//    schedule; sampling: Euler x += v (sigma_next - sigma), the last step to sigma 0;
//  - true CFG only when flux1.true_cfg_scale > 1 (DiffSynth's cfg_scale, default 1: off):
//    v = v_neg + cfg (v_pos - v_neg), the negative prompt flux1.negative_prompt;
//  - the text: T5 v1.1 XXL encoder (models/t5, one shared relative-position table; the released
//    text_encoder_2 names through flux1_text_encoder_source / hf_t5_name_map -- the shared layer
//    still reads flux1.text_encoder_from in our names, docs/flux1.md), the prompt tokenized by SentencePiece
//    (spiece.model of tokenizer_2) as T5TokenizerFast does it: ids + </s>, truncated and padded
//    with <pad> to max_sequence_length = flux1.text_len (512 for dev, 256 for schnell in
//    diffusers' examples; DiffSynth trains with 512), encoded WITHOUT an attention mask (FLUX
//    passes none), and all text_len rows kept (the padding rows are text tokens of the DiT);
//  - the pooled vector: CLIP-L's pooler_output [768] (the released text_encoder, clip_text.h:
//    the final state at the end token), the prompt tokenized by CLIP's BPE (tokenizer/ vocab.json
//    + merges.txt: lower-cased, white space collapsed) as CLIPTokenizer(padding="max_length",
//    max_length=77, truncation=True) gives it: <|startoftext|>, at most 75 tokens,
//    <|endoftext|>, padded with the pad token (<|endoftext|> in FLUX.1's tokenizer) to 77; run
//    WITHOUT an attention mask (FluxPipeline, BFL's HFEmbedder, DiffSynth pass none). The tower is
//    "clip.*" (transformers' names below it: "clip.text_model.*"), read from flux1.clip_from.
//    Optionally flux1.pooled_file instead: a safetensors file with one tensor per prompt, named by
//    the prompt itself (docs/flux1.md); a prompt missing from it is an error naming the prompt and
//    the file (never zeros). prepare writes each item's vector into the cache ("pooled");
//  - the VAE: flux1_vae.h, latents = 0.3611 * (mean - 0.1159), 8x down, 16 channels.
#pragma once

#include "models/diffusion/flow_match.h"
#include "models/diffusion/image_series.h"
#include "models/flux/clip_text.h"
#include "models/flux/flux1_dit.h"
#include "models/flux/flux1_vae.h"
#include "models/t5/t5.h"
#include "text/bpe_tokenizer.h"
#include "text/sentencepiece_tokenizer.h"
#include "train/config.h"
#include "zeroshard/param_source.h"

#include <torch/torch.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace zeroshard::models::flux {

struct Flux1SeriesConfig : train::SeriesConfigBase<Flux1SeriesConfig> {
  Flux1SeriesConfig();
  void register_keys(train::ConfigKeys& keys) override;
  void validate(const train::TrainConfig& c) const override;

  Flux1Config dit;                   // flux1.hidden_size, num_heads, depth, ..., guidance_embed
  int64_t rope_axes_t = 16, rope_axes_h = 56, rope_axes_w = 56;
  t5::T5Config text;                 // flux1.text_* (t5-v1_1-xxl)
  int64_t text_head_dim = 64;
  Flux1VaeConfig vae;                // flux1.vae_ch, vae_num_res_blocks
  int64_t text_len = 512;            // max_sequence_length
  double train_guidance = 1.0;       // DiffSynth's training embedded_guidance (dev)
  double true_cfg_scale = 1.0;       // DiffSynth's cfg_scale (1: no true CFG)
  ClipTextConfig clip;               // flux1.clip_* (CLIP ViT-L/14's text model)
  std::string clip_tokenizer;        // CLIP's tokenizer/ folder (vocab.json + merges.txt) or a tokenizer.json
  std::string pooled_file;           // safetensors: prompt -> CLIP-L pooled [768] (instead of the CLIP tower)
  diffusion::ImageSeriesKeys io;     // flux1.dit_from, vae_from, text_encoder_from, tokenizer, dataset, ...

  Flux1Config dit_config() const;     // context_in_dim = text dim, in/out = 4 z_channels, axes
  t5::T5Config text_config() const;   // shared_pos (T5 v1.1)
  Flux1VaeConfig vae_config() const;
  int64_t spatial_factor() const;     // pixels per latent (8)
  bool has_clip_tower() const { return pooled_file.empty(); }
};

// FLUX.1's schedule in DiffSynth (see above): `steps` sigmas from 1 to 0.003/1.002, shifted;
// training: also the timestep weights (as flow_match.h computes them).
diffusion::FlowMatchSchedule flux1_schedule(int64_t steps, double shift, bool training);

// Latents [B, C, h, w] -> tokens [B, (h/2)(w/2), 4C] and back; ids [B, (h/2)(w/2), 3] = (0, i, j).
at::Tensor flux1_pack(const at::Tensor& latents);
at::Tensor flux1_unpack(const at::Tensor& tokens, int64_t channels, int64_t h, int64_t w);
at::Tensor flux1_image_ids(int64_t batch, int64_t h, int64_t w, at::ScalarType dtype);

// The prompt's T5 ids as FLUX tokenizes it: ids + </s>, truncated / padded to text_len. [1, L] int64.
at::Tensor flux1_prompt_ids(const text::SentencePieceTokenizer& tok, const std::string& prompt, int64_t text_len);

// The prompt's CLIP ids as FLUX tokenizes it (above): [1, max_len] int64.
at::Tensor flux1_clip_ids(text::BpeTokenizer& tok, const std::string& prompt, int64_t max_len);

// flux1.pooled_file: the CLIP-L pooled vectors, one tensor per prompt named by the prompt.
class PooledVectors {
 public:
  PooledVectors(const std::string& path, int64_t width);
  // [width] float32; throws std::runtime_error naming the prompt and the file when absent.
  at::Tensor get(const std::string& prompt) const;

 private:
  std::string path_;
  int64_t width_;
  std::map<std::string, at::Tensor> vectors_;
};

// The trained root: "dit.*" (BFL names), and with the towers "text_encoder.*" (our T5 names; the
// released file is read through hf_t5_name_map), "clip.*" (CLIPTextModel's names; not built with
// flux1.pooled_file) and "vae.*" (ae.safetensors names).
class Flux1PipelineImpl : public diffusion::ImagePipelineImpl {
 public:
  Flux1PipelineImpl(const Flux1SeriesConfig& c, bool with_dit, bool with_towers);

  std::vector<int64_t> latent_shape(int64_t height, int64_t width) const override;
  torch::nn::Module& dit_module() override { return *dit; }

  Flux1DiT dit{nullptr};
  t5::T5Encoder text_encoder{nullptr};
  ClipTextModel clip{nullptr};
  Flux1AutoEncoder vae{nullptr};

 protected:
  void init_text_encoder(uint64_t seed, const std::string& name, at::Tensor& param) const override;
  void init_extra_tower(uint64_t seed, const std::string& name, at::Tensor& param) const override;
  at::Tensor compute_loss(const diffusion::ImageBatch& batch) override;
  std::map<std::string, at::Tensor> compute_condition(const at::Tensor& image, const std::string& prompt) override;
  int64_t prompt_tokens(const std::string& prompt) override;
  at::Tensor compute_sample(const std::vector<std::string>& prompts, const at::Tensor& noise, int64_t steps) override;

 private:
  at::Tensor encode_image(const at::Tensor& image);         // [3, H, W] -> [16, h, w]
  at::Tensor encode_text(const std::string& prompt);        // -> [text_len, text dim]
  at::Tensor pooled(const std::string& prompt);             // -> [768]: the CLIP tower's or the file's
  // The DiT on a batch of one shape: x [B, 16, h, w], ctx [B, L, D], pooled [B, 768], t [B] (in
  // [0, 1]), guidance g -> velocity [B, 16, h, w] float32.
  at::Tensor velocity(const at::Tensor& x, const at::Tensor& ctx, const at::Tensor& pooled_vec, const at::Tensor& t,
                      double guidance);

  Flux1SeriesConfig config_;
  text::SentencePieceTokenizer& tokenizer();  // the T5 tokenizer, read on first use
  std::unique_ptr<text::SentencePieceTokenizer> tokenizer_;
  std::unique_ptr<PooledVectors> pooled_;
  std::unique_ptr<text::BpeTokenizer> clip_tokenizer_;
};
TORCH_MODULE(Flux1Pipeline);

// flux1.dit_from: a released transformer file (or .index.json) in BFL's names or diffusers'
// (told apart by the names; flux1_name_map.h), served under our (BFL) names. Any config's map
// reads any size (reading places the fused pieces by the file's and the model's shapes).
std::shared_ptr<ParamSource> flux1_dit_file_source(const std::string& path, const Flux1Config& c);
// flux1.text_encoder_from: text_encoder_2 in transformers' T5EncoderModel names (hf_t5_name_map).
std::shared_ptr<ParamSource> flux1_text_encoder_source(const std::string& path);
// flux1.clip_from: text_encoder (CLIPTextModel's names, our names below "clip."); the position-ids
// buffer older transformers saved is left unread.
std::shared_ptr<ParamSource> flux1_clip_source(const std::string& path);


Series flux1_series();

}  // namespace zeroshard::models::flux
