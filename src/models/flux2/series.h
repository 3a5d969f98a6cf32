// Series `flux2`: FLUX.2 (Black Forest Labs) text-to-image as released, the klein sizes first,
// trained as DiffSynth-Studio trains it (examples/flux2/model_training/train.py, FlowMatchSFTLoss,
// FlowMatchScheduler("FLUX.2")) and sampled as diffusers' Flux2KleinPipeline samples it, on the
// shared image-series layer (models/diffusion/image_series.h). Conventions, each as upstream:
//  - the DiT: flux2_dit.h (Flux2DiT, released diffusers names). Its input is the latent as tokens:
//    [128, h, w] -> [h * w, 128] row-major ("B C H W -> B (H W) C"), image ids (t, h, w, l) =
//    (0, row, col, 0), text ids (0, 0, 0, index). It takes t = timestep / 1000 (= sigma, the
//    timestep being 1000 sigma) and predicts the velocity noise - x0 (no sign flip). klein has no
//    guidance embedder (guidance_embeds false); FLUX.2 dev has one, fed 1.0 in training
//    (DiffSynth's train.py: embedded_guidance 1.0) and flux2.embedded_guidance when sampling.
//  - the VAE: flux2_vae.h (AutoencoderKLFlux2 + the pipeline's patchify and BatchNorm running-
//    statistics normalization): images in [-1, 1] -> latents [128, H / 16, W / 16] (the mean; no
//    sampling); decode the inverse, the image clamped to [-1, 1].
//  - the text tower (klein): Qwen3 (klein 4B: Qwen3-4B, klein 9B: Qwen3-8B, both 36 layers),
//    hidden_states[9], [18], [27] (transformers' indexing: index i is the output of layer i - 1,
//    before the final norm) concatenated on the feature axis in that order (torch.stack(dim=1),
//    permute, reshape: 3 x hidden = the DiT's joint_attention_dim 7680 / 12288). The prompt is
//    Qwen3's chat template as one user turn with the generation prompt and enable_thinking=False:
//        "<|im_start|>user\n{prompt}<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
//    tokenized with truncation at flux2.text_len (max_sequence_length 512) and padded to exactly
//    text_len with the pad token (padding="max_length"; right: the tokenizer's default side). The
//    encoder runs with the attention mask (pads are masked keys, positions 0 .. text_len - 1), and
//    ALL text_len rows go to the DiT, pads included (Flux2DiT has no text mask).
//  - the text tower (dev, flux2.text_tower mistral): Mistral Small 3.1's language model,
//    hidden_states 10, 20, 30 of a 5120-wide model = 15360 features, its prompt in Mistral's chat
//    template with FLUX.2's system message, LEFT-padded (mistral_text.h has the details).
//    flux2.text_tower none: no tower, conditioning only from a cache (the format below).
//  - flow matching (DiffSynth's set_timesteps_flux2 with training=True): 1000 sigmas
//    linspace(1, 1/1000, 1000) in float32, exponentially time-shifted with mu 0.8,
//    sigma' = e^mu / (e^mu + (1 / sigma - 1)) (= the ordinary shift s sigma / (1 + (s - 1) sigma)
//    with s = e^mu: flux2.shift holds s, 2.225540928492468 = e^0.8), timesteps 1000 sigma'; a
//    timestep id uniform in [0, 1000), x_t = (1 - sigma) x0 + sigma noise, target noise - x0,
//    MSE times DiffSynth's timestep weight of the id (set_training_weight over those timesteps).
//  - sampling (Flux2KleinPipeline / DiffSynth Flux2ImagePipeline): N sigmas linspace(1, 1/N, N),
//    mu = compute_empirical_mu(h * w latent tokens, N) (flux2.dynamic_shift; false: mu =
//    ln flux2.sample_shift), Euler x += v (sigma_next - sigma), the last step to sigma 0. True CFG
//    when guidance_scale > 1 (the base klein models; the distilled klein 4B / 9B sample with 1):
//    v = neg + g (pos - neg), neg the prompt flux2.negative_prompt (the pipeline's "").
// Cache fields (`zeroshard prepare`): "latent" [128, h, w] and "context" [text_len, 3 x hidden].
#pragma once

#include "models/diffusion/flow_match.h"
#include "models/diffusion/image_series.h"
#include "models/flux2/flux2_dit.h"
#include "models/flux2/flux2_vae.h"
#include "models/qwen3/model.h"
#include "models/series.h"
#include "text/bpe_tokenizer.h"
#include "train/config.h"

#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

namespace zeroshard::models::flux2 {

struct Flux2SeriesConfig : train::SeriesConfigBase<Flux2SeriesConfig> {
  Flux2SeriesConfig();
  void register_keys(train::ConfigKeys& keys) override;
  void validate(const train::TrainConfig& c) const override;

  Flux2Config dit;           // flux2.num_layers, num_single_layers, num_heads, head_dim, mlp_ratio, rope_*
  qwen3::QwenConfig text;    // flux2.text_* (Qwen3-4B for klein 4B; Mistral Small 3.1 for dev)
  Flux2VaeConfig vae;        // flux2.vae_* (AutoencoderKLFlux2)
  std::string text_tower = "qwen3";  // qwen3 (klein) | mistral (dev) | none (conditioning only from a cache)
  std::string text_out_layers = "9,18,27";  // hidden_states indices stacked on the feature axis
  int64_t context_dim = 0;   // the DiT's joint_attention_dim with text_tower none (dev: 15360)
  int64_t text_len = 512;    // max_sequence_length: every prompt padded / cut to it
  bool text_vision_tower = false;  // seed-weights: Mistral 3's vision tower and projector beside the tower (dev)
  std::string vae_channels = "128,256,512,512";
  bool dynamic_shift = true;        // sampling: compute_empirical_mu (false: mu = ln sample_shift)
  double embedded_guidance = 4.0;   // sampling guidance of a model with guidance_embeds (dev)
  double train_guidance = 1.0;      // training guidance of such a model (DiffSynth: 1.0)
  diffusion::ImageSeriesKeys io;    // flux2.dataset, cache, height, width, shift, guidance_scale, ...

  Flux2Config dit_config() const;  // in_channels 4 x latent channels, joint_attention_dim from the tower
  qwen3::QwenConfig text_config() const;  // `text` with the tower's switches (mistral: no q/k norm)
  Flux2VaeConfig vae_config() const;
  std::vector<int64_t> out_layers() const;  // text_out_layers parsed
  int64_t spatial_factor() const;           // pixels per latent token (16 released: VAE 8 x patchify 2)
  bool has_text_tower() const { return text_tower != "none"; }
};

// FLUX.2's schedules (series.h's comment): the training one (1000 steps, exponential shift
// e^mu = shift, the weights) and the sampler's (steps, mu).
diffusion::FlowMatchSchedule flux2_training_schedule(double shift);
diffusion::FlowMatchSchedule flux2_sampling_schedule(int64_t steps, double mu);
// BFL's compute_empirical_mu (diffusers pipeline_flux2 / DiffSynth): the sampler's mu for a latent
// of image_seq_len tokens and num_steps steps.
double compute_empirical_mu(int64_t image_seq_len, int64_t num_steps);

// The prompt as Flux2KleinPipeline encodes it: ids [1, text_len] int64 (the chat template,
// truncated, right-padded with the pad token) and the attention mask [1, text_len] int64.
std::pair<at::Tensor, at::Tensor> prompt_ids(text::BpeTokenizer& tok, const std::string& prompt, int64_t text_len);

// The trained root: "dit.*" (Flux2DiT's released names), with the towers "text_encoder.*"
// (Qwen3 / Mistral, transformers' "model.*" names, no lm_head) and "vae.*" (diffusers AutoencoderKLFlux2
// names, bn.running_mean / running_var as frozen parameters).
class Flux2PipelineImpl : public diffusion::ImagePipelineImpl {
 public:
  Flux2PipelineImpl(const Flux2SeriesConfig& c, bool with_dit, bool with_towers);

  std::vector<int64_t> latent_shape(int64_t height, int64_t width) const override;
  torch::nn::Module& dit_module() override { return *dit; }

  Flux2DiT dit{nullptr};
  qwen3::QwenForCausalLM text_encoder{nullptr};
  Flux2Vae vae{nullptr};

 protected:
  void init_text_encoder(uint64_t seed, const std::string& name, at::Tensor& param) const override;
  at::Tensor compute_loss(const diffusion::ImageBatch& batch) override;
  std::map<std::string, at::Tensor> compute_condition(const at::Tensor& image, const std::string& prompt) override;
  int64_t prompt_tokens(const std::string& prompt) override;
  at::Tensor compute_sample(const std::vector<std::string>& prompts, const at::Tensor& noise, int64_t steps) override;

 private:
  at::Tensor encode_image(const at::Tensor& image);      // [3, H, W] -> [128, h, w] float32
  at::Tensor encode_text(const std::string& prompt);     // -> [text_len, 3 x hidden] float32
  // The DiT on latents [B, 128, h, w] with contexts [B, L, D] at sigmas t [B]: velocities [B, 128, h, w].
  at::Tensor velocity(const at::Tensor& latents, const at::Tensor& context, const at::Tensor& t, double guidance);
  text::BpeTokenizer& tokenizer();

  Flux2SeriesConfig config_;
  std::unique_ptr<text::BpeTokenizer> tokenizer_;
};
TORCH_MODULE(Flux2Pipeline);


Series flux2_series();

}  // namespace zeroshard::models::flux2
