// Series `qwen_image`: Qwen-Image (Qwen/Qwen-Image) text-to-image as released, trained as
// DiffSynth-Studio trains it (diffsynth/diffusion/flow_match.py template "Qwen-Image",
// FlowMatchSFTLoss, model_fn_qwen_image) and sampled as diffusers' QwenImagePipeline samples it,
// on the shared image-series layer (models/diffusion/image_series.h). Conventions, each stated
// where it is implemented:
//  - the DiT: qwen_image_dit.h (QwenImageTransformer2DModel, the released names, "dit.*"). The
//    latent [16, h, w] is packed into 2x2 patches (pack_latents: tokens row-major over the
//    (h/2) x (w/2) grid, features (c, dy, dx)), img_shapes = [(1, h/2, w/2)]. It takes
//    timestep / 1000 = sigma and predicts the flow velocity noise - x0 directly (no sign flip).
//    The text states enter with their key-padding mask (padded text keys removed), text RoPE
//    positions after the image's centred ones (qwen_image_dit.cpp).
//  - the VAE: Wan 2.1's (wan/vae.h; diffusers' AutoencoderKLQwenImage is that architecture with
//    the same latents_mean / latents_std) on single frames: an image [3, H, W] in [-1, 1] is the
//    clip [3, 1, H, W]; the latent is (mu - latents_mean) / latents_std per channel ([16, H/8,
//    W/8]); decoding undoes it (z * std + mean) as the pipeline does before vae.decode.
//  - the text tower: Qwen2.5-VL-7B's language model (qwen3/model.h, "text_encoder.model.*",
//    no lm_head), its last hidden state (after the final norm) for the prompt in Qwen-Image's
//    template (QwenImagePipeline.prompt_template_encode: a system line, the user turn, the
//    assistant start; pipeline.cpp), tokenized with the Qwen2.5 tokenizer.json, the first
//    drop_idx = 34 rows dropped (prompt_template_encode_start_idx: the system turn and
//    "<|im_start|>user\n" with the released tokenizer) and at most text_len = 512 rows kept
//    (max_sequence_length); the attention mask is the kept length (every kept row is real),
//    batches pad with zero rows and a 0 mask as _get_qwen_prompt_embeds does.
//  - flow matching (schedule.h): DiffSynth's "Qwen-Image" schedule, sigmas linspace(1, 0,
//    1001)[:-1] exponentially shifted with mu = 0.8 (= the plain shift exp(0.8)) and stretched so
//    the last sigma is shift_terminal = 0.02; x_t = (1 - sigma) x0 + sigma noise, target noise -
//    x0, MSE times DiffSynth's timestep weight (mean over the micro-batch's samples).
//  - sampling: Euler steps on the same schedule family with mu from the image's token count
//    (calculate_shift: 256 -> 0.5, 8192 -> 0.9) and the step past the last sigma to 0; true
//    classifier-free guidance (guidance_scale = true_cfg_scale > 1, with the negative prompt, ""
//    by default, in the same template): uncond + g (cond - uncond) rescaled per token to the norm
//    of cond (QwenImagePipeline.__call__).
#pragma once

#include "models/diffusion/flow_match.h"
#include "models/diffusion/image_series.h"
#include "models/qwen3/model.h"
#include "models/qwen_image/qwen_image_dit.h"
#include "models/series.h"
#include "models/wan/vae.h"
#include "text/bpe_tokenizer.h"
#include "train/config.h"

#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

namespace zeroshard::models::qwen_image {

struct QwenImageSeriesConfig : train::SeriesConfigBase<QwenImageSeriesConfig> {
  QwenImageSeriesConfig();
  void register_keys(train::ConfigKeys& keys) override;
  void validate(const train::TrainConfig& c) const override;

  QwenImageDitConfig dit;     // qwen_image.num_layers, num_attention_heads, attention_head_dim, rope_axes_*
  qwen3::QwenConfig text;     // qwen_image.text_* (Qwen2.5-VL-7B's language model)
  wan::WanVaeConfig vae;      // qwen_image.vae_dim, vae_num_res_blocks (z_dim 16, released mean / std)
  int64_t rope_axes_t = 16, rope_axes_h = 56, rope_axes_w = 56;
  int64_t drop_idx = 34;      // prompt_template_encode_start_idx
  int64_t text_len = 512;     // max_sequence_length
  double shift_terminal = 0.02;
  bool dynamic_shift = true;  // sampling: mu from the image's token count (else io.sample_shift)
  bool text_vision_tower = false;  // seed-weights: Qwen2.5-VL-7B's vision tower beside the tower (20b: true)
  diffusion::ImageSeriesKeys io;

  QwenImageDitConfig dit_config() const;  // joint_attention_dim = text hidden, 16 channels, axes
  qwen3::QwenConfig text_config() const;  // mrope sections scaled to the head size
  wan::WanVaeConfig vae_config() const;
};

// The trained root: "dit.*" and, with the towers, "text_encoder.*" and "vae.*" (Wan2.1_VAE.pth
// names). Sharding units (diffusion::pipeline_unit, the wan series' rule too): the DiT's blocks, the Qwen
// layers and the VAE's residual / attention / resample blocks; the rest joins the root unit.
class QwenImagePipelineImpl : public diffusion::ImagePipelineImpl {
 public:
  QwenImagePipelineImpl(const QwenImageSeriesConfig& c, bool with_dit, bool with_towers);

  std::vector<int64_t> latent_shape(int64_t height, int64_t width) const override;
  torch::nn::Module& dit_module() override;

  // The prompt's token ids as the pipeline feeds the text tower: the template, cut at drop_idx +
  // text_len tokens ([1, n] int64). Throws when the template leaves no prompt row past drop_idx.
  at::Tensor prompt_ids(const std::string& prompt);
  // The DiT on a batch: latents [B, 16, h, w], states [B, L, hidden] with mask [B, L] (1 = real),
  // sigmas [B] -> the predicted velocity [B, 16, h, w] (float32).
  at::Tensor velocity(const at::Tensor& latents, const at::Tensor& states, const at::Tensor& mask,
                      const at::Tensor& sigmas);

  QwenImageDit dit{nullptr};
  qwen3::QwenForCausalLM text_encoder{nullptr};
  wan::WanVae vae{nullptr};

 protected:
  void init_text_encoder(uint64_t seed, const std::string& name, at::Tensor& param) const override;
  void init_vae(uint64_t seed, const std::string& name, at::Tensor& param) const override;  // Wan's VAE rule
  at::Tensor compute_loss(const diffusion::ImageBatch& batch) override;
  std::map<std::string, at::Tensor> compute_condition(const at::Tensor& image, const std::string& prompt) override;
  int64_t prompt_tokens(const std::string& prompt) override;
  at::Tensor compute_sample(const std::vector<std::string>& prompts, const at::Tensor& noise, int64_t steps) override;

 private:
  at::Tensor encode_image(const at::Tensor& image);         // [3, H, W] -> [16, H/8, W/8]
  at::Tensor encode_prompt(const std::string& prompt);      // -> [n, hidden], the kept rows
  at::Tensor decode_latents(const at::Tensor& latents);     // [B, 16, h, w] -> [B, 3, H, W] in [-1, 1]
  text::BpeTokenizer& tokenizer();
  QwenImageSeriesConfig config_;
  std::unique_ptr<text::BpeTokenizer> tokenizer_;  // loaded on first use (the towers only)
};
TORCH_MODULE(QwenImagePipeline);

// Zero-padded states [B, L, hidden] and mask [B, L] int64 (1 on the real rows) of per-sample
// states [n_i, hidden], L = max n_i: the stacking of _get_qwen_prompt_embeds.
std::pair<at::Tensor, at::Tensor> pad_states(const std::vector<at::Tensor>& states);

Series qwen_image_series();

}  // namespace zeroshard::models::qwen_image
