// Series `wan`: Wan 2.1 text-to-video as released (src/models/wan/dit.h, vae.h and the t5
// family's umT5), trained as DiffSynth-Studio trains it: flow matching (flow_match.h) of the DiT
// on (VAE latents, umT5 text states) of a DiffSynth dataset folder (metadata.csv with `video`
// or `image` and `prompt`), either
//  - from a conditioning cache written once by `zeroshard prepare` (wan.cache: the towers are
//    never built; DiffSynth's "split training"), or
//  - with the frozen towers in the loop (wan.cache empty): each sample's clip is decoded,
//    VAE-encoded and its prompt tokenized and umT5-encoded inside the step.
// Both feed the DiT the same tensors: one sample at a time through each tower, states trimmed
// to the prompt's length (Wan's trim-then-zero-pad convention).
//
// Samples: training sample number n (consecutive per rank and micro-batch, as every generated-
// data series numbers them) is dataset item perm_e[n mod N] with e = n / N and perm_e a seeded
// permutation of the N items per epoch; its noise and timestep come from (data.seed, n).
#pragma once

#include "models/series.h"
#include "models/t5/t5.h"
#include "models/wan/dit.h"
#include "models/wan/vae.h"
#include "train/config.h"
#include "zeroshard/nn/hookable.h"

#include <torch/torch.h>

#include <string>
#include <vector>

namespace zeroshard::models {

struct WanSeriesConfig : train::SeriesConfigBase<WanSeriesConfig> {
  WanSeriesConfig();
  void register_keys(train::ConfigKeys& keys) override;
  void validate(const train::TrainConfig& c) const override;

  wan::WanDiTConfig dit;  // wan.dim, ffn_dim, num_heads, num_layers, freq_dim, text_len
  t5::T5Config t5;        // wan.t5_*
  wan::WanVaeConfig vae;  // wan.vae_dim, vae_num_res_blocks (z_dim 16, released mean / std)
  // Files: the frozen towers (empty: seeded), the umT5 tokenizer's spiece.model.
  std::string vae_from, text_encoder_from, tokenizer;
  // The DiT's initial values from the released diffusion_pytorch_model*.safetensors (a file or
  // its .index.json; Wan's original names or the diffusers layout); empty: seeded.
  std::string dit_from;
  // Data.
  std::string dataset;  // a DiffSynth folder: metadata.csv (video or image, prompt) + media
  std::string metadata;  // its metadata file (.csv, .json, .jsonl); empty: the folder's own
  std::string cache;    // a prepared conditioning cache; empty: towers in the loop
  int64_t height = 480, width = 832, num_frames = 81;
  std::string on_bad_file = "stop";  // prepare: stop at an unreadable file, or leave it out (listed)
  // Flow matching.
  double shift = 5.0;
  bool timestep_weighting = true;  // DiffSynth's training weights; false: plain MSE
  // Sampling.
  double sample_shift = 5.0, cfg_scale = 5.0;
  std::string negative_prompt;

  // dit / t5 / vae with the fields the keys do not set derived (text_dim = t5 dim, ...).
  wan::WanDiTConfig dit_config() const;
  t5::T5Config t5_config() const;
  wan::WanVaeConfig vae_config() const;
};

// One micro-batch: from the cache, latents [16, T', h, w] and prompt states [n, t5 dim] per
// sample; with the towers in the loop, videos [3, T, H, W] in [-1, 1] and token ids / masks
// [1, text_len] instead (latents empty). noises like the latents; sigmas, timesteps (1000 *
// sigma), weights: [B] float32 from the training schedule.
struct WanBatch {
  std::vector<at::Tensor> latents, contexts, videos, ids, masks, noises;
  at::Tensor sigmas, timesteps, weights;
  int64_t vae_chunks = 0;  // towers in the loop: VAE encoder passes per clip (WanData::vae_chunks)
};

// The trained root: the DiT, and (towers in the loop, or for prepare / sampling) the frozen umT5
// encoder and VAE. Parameter names: "dit.*" (original Wan names below), "text_encoder.*",
// "vae.*". Sharding units (diffusion::pipeline_unit): the DiT blocks, the umT5 blocks and the VAE's residual /
// attention / resample blocks; the rest (the DiT's patch, text and time embeddings and head, the
// umT5 token embedding and final norm, the VAE's conv1 / conv2) is the root unit.
class WanPipelineImpl : public nn::HookableModule {
 public:
  WanPipelineImpl(const WanSeriesConfig& c, bool with_dit, bool with_towers);
  // The flow-matching loss of a micro-batch: mean over samples of weight_i * MSE(pred_i,
  // noise_i - x0_i) on x_t = (1 - sigma_i) x0_i + sigma_i noise_i (plain MSE: weights of 1).
  at::Tensor loss(const WanBatch& batch);
  // The towers on samples, one at a time (what `zeroshard prepare` caches): latents, then
  // prompt states (trimmed), B each. vae_chunks: the VAE encoder passes per video (WanVae::encode;
  // 0: each clip's own).
  std::vector<at::Tensor> conditioning(const std::vector<at::Tensor>& videos, const std::vector<at::Tensor>& ids,
                                       const std::vector<at::Tensor>& masks, int64_t vae_chunks = 0);
  // Euler sampling (flow_match.h) from noise [B, 16, T', h, w] with classifier-free guidance
  // (cfg_scale 1: the positive prompt alone), then the VAE decoder: [B, 3, T, H, W] in [-1, 1].
  at::Tensor generate(const at::Tensor& ids, const at::Tensor& mask, const at::Tensor& neg_ids,
                      const at::Tensor& neg_mask, const at::Tensor& noise, int64_t steps, double shift,
                      double cfg_scale);

  wan::WanModel dit{nullptr};
  t5::T5Encoder text_encoder{nullptr};
  wan::WanVae vae{nullptr};
  double towers_seconds = 0.0;  // spent in the towers since the last reset

 private:
  at::Tensor encode_video(const at::Tensor& video, int64_t chunks = 0);   // [3,T,H,W] -> [16,T',h,w]
  at::Tensor encode_text(const at::Tensor& ids, const at::Tensor& mask);  // [1,L] -> [n, dim]
};
TORCH_MODULE(WanPipeline);


// Seeded initial value of a pipeline parameter (LoRA adapters included), keyed by (seed, name).
void wan_init(const WanSeriesConfig& c, uint64_t seed, const std::string& name, at::Tensor& param);

Series wan_series();

}  // namespace zeroshard::models
