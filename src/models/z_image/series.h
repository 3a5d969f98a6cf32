// Series `z_image`: Z-Image (Tongyi-MAI) text-to-image as released, trained as DiffSynth-Studio
// trains it and sampled as the released pipeline (diffusers ZImagePipeline) samples it:
//  - the DiT: z_image_dit.h (ZImageTransformer2DModel), latents as one-frame [16, 1, h, w],
//    patch 2 / frame patch 1; it takes t = (1000 - timestep) / 1000 (1 = clean) and predicts
//    x0 - noise, so the flow velocity is its negated output (model_fn_z_image);
//  - the VAE: FLUX.1's autoencoder (flux1_vae.h): latents = 0.3611 * (mean - 0.1159), 8x down;
//  - the text tower: Qwen3 (Qwen3-4B released), hidden_states[-2] (the output of the second-to-
//    last layer, no final norm) of the prompt rendered with Qwen3's chat template as one user
//    turn with the generation prompt and enable_thinking=True, i.e. exactly
//        "<|im_start|>user\n{prompt}<|im_end|>\n<|im_start|>assistant\n"
//    (no <think> block: Qwen3's template adds the empty one only for enable_thinking=False),
//    tokenized, cut at z_image.text_len tokens (max_sequence_length 512), and only the rows
//    where the attention mask is 1 kept (prompt_embeds[i][prompt_masks[i]]). We encode the
//    unpadded ids: with right padding and causal attention the kept rows are the same function;
//  - flow matching (models/diffusion/flow_match.h) with shift 3 and DiffSynth's timestep weights.
// Training reads a DiffSynth image folder (metadata.csv: image, prompt) with the frozen towers in
// the loop, or the conditioning cache `zeroshard prepare` writes from it (z_image.cache): the same
// tensors reach the DiT either way (one sample at a time through each tower).
//
// Samples: training sample n (consecutive per rank and micro-batch) is dataset item perm_e[n mod
// N] (diffusion::EpochOrder, salt "z_image.epoch."); its noise and timestep come from
// (data.seed, n).
#pragma once

#include "models/diffusion/image_series.h"
#include "models/flux/flux1_vae.h"
#include "models/qwen3/model.h"
#include "models/series.h"
#include "models/z_image/z_image_dit.h"
#include "text/bpe_tokenizer.h"
#include "train/config.h"
#include "zeroshard/nn/hookable.h"

#include <torch/torch.h>

#include <string>
#include <vector>

namespace zeroshard::models::z_image {

struct ZImageSeriesConfig : train::SeriesConfigBase<ZImageSeriesConfig> {
  ZImageSeriesConfig();
  void register_keys(train::ConfigKeys& keys) override;
  void validate(const train::TrainConfig& c) const override;

  ZImageDitConfig dit;         // z_image.dim, n_layers, n_refiner_layers, n_heads, n_kv_heads, rope_axes_*
  qwen3::QwenConfig text;      // z_image.text_* (Qwen3-4B)
  flux::Flux1VaeConfig vae;    // z_image.vae_ch, vae_num_res_blocks (16 latent channels, FLUX.1 factors)
  int64_t rope_axes_t = 32, rope_axes_h = 48, rope_axes_w = 48;
  int64_t text_len = 512;      // max_sequence_length
  // Files, data, flow matching, sampling: z_image.dit_from, vae_from, text_encoder_from, tokenizer,
  // dataset, cache, height, width, buckets, on_bad_file, shift (3), timestep_weighting,
  // sample_shift (3), guidance_scale (5), negative_prompt (diffusion/image_series.h).
  diffusion::ImageSeriesKeys io;
  // Sampling (diffusers ZImagePipeline): guidance when guidance_scale > 1, as pos + g (pos - neg);
  // none once 1 - sigma > cfg_truncation; cfg_normalization > 0 caps |pred| at that times |pos|.
  double cfg_truncation = 1.0, cfg_normalization = 0.0;

  ZImageDitConfig dit_config() const;  // cap_feat_dim = text hidden, in_channels = 16, axes
  qwen3::QwenConfig text_config() const;
  flux::Flux1VaeConfig vae_config() const;
  int64_t spatial_factor() const;  // pixels per latent (8)
};

// The trained root: "dit.*" (released Z-Image names below), and with the towers "text_encoder.*"
// (Qwen3, "model.*" below: transformers' names, no lm_head) and "vae.*" (ae.safetensors names).
// Sharding units (diffusion::pipeline_unit): the DiT's blocks, the Qwen3 layers, the VAE's levels and mids;
// the rest joins the root unit.
class ZImagePipelineImpl : public diffusion::ImagePipelineImpl {
 public:
  // with_towers: also the Qwen3 tokenizer (z_image.tokenizer).
  ZImagePipelineImpl(const ZImageSeriesConfig& c, bool with_dit, bool with_towers);

  std::vector<int64_t> latent_shape(int64_t height, int64_t width) const override;
  torch::nn::Module& dit_module() override { return *dit; }

  ZImageDit dit{nullptr};
  qwen3::QwenForCausalLM text_encoder{nullptr};
  flux::Flux1AutoEncoder vae{nullptr};

 protected:
  void init_text_encoder(uint64_t seed, const std::string& name, at::Tensor& param) const override;
  // Mean over samples of weight_i * MSE(-dit(x_t, (1000 - timestep_i) / 1000), noise_i - x0_i),
  // x_t = (1 - sigma_i) x0_i + sigma_i noise_i; the cache's field "context" [n, hidden].
  at::Tensor compute_loss(const diffusion::ImageBatch& batch) override;
  // {"latent": [16, h, w], "context": [n, hidden]}.
  std::map<std::string, at::Tensor> compute_condition(const at::Tensor& image, const std::string& prompt) override;
  int64_t prompt_tokens(const std::string& prompt) override;
  // Euler steps of the shifted schedule (z_image.sample_shift) with Z-Image's guidance
  // (guidance_scale, cfg_truncation, cfg_normalization, negative_prompt), then the VAE's decoder.
  at::Tensor compute_sample(const std::vector<std::string>& prompts, const at::Tensor& noise, int64_t steps) override;

 private:
  at::Tensor encode_image(const at::Tensor& image);        // [3, H, W] -> [16, h, w]
  at::Tensor encode_text(const std::string& prompt);       // -> [n, hidden]
  ZImageSeriesConfig config_;
  text::BpeTokenizer& tokenizer();
  std::shared_ptr<text::BpeTokenizer> tokenizer_;
};
TORCH_MODULE(ZImagePipeline);


Series z_image_series();

}  // namespace zeroshard::models::z_image
