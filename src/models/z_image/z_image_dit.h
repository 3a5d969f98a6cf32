// Z-Image's diffusion transformer (Tongyi-MAI/Z-Image src/zimage/transformer.py,
// ZImageTransformer2DModel; the released Z-Image-Turbo transformer): a single-stream DiT. Image
// tokens first pass `noise_refiner` blocks (modulated by the timestep), caption tokens
// `context_refiner` blocks (unmodulated), then each sample's [image, caption] sequence runs through
// the main `layers`. Parameter names are the released checkpoint's.
//
// Inputs are lists, one entry per sample, of different sizes: latents [C, F, H, W] and caption
// features [L, cap_feat_dim]; the timestep t [B]. Outputs: one tensor per sample, the latent's shape.
//
// Conventions (src/zimage/pipeline.py and scheduler.py):
//  - Time runs backwards: the model takes t = 1 - sigma (1 = clean image), multiplied by t_scale
//    inside, and predicts x0 - noise; the sampler steps with -output (model_timestep and
//    flow_velocity below).
//  - Sequences are padded to a multiple of SEQ_MULTI_OF with learned pad tokens that attend and are
//    attended to; only the padding of a batch to its longest sample is masked.
#pragma once

#include <torch/torch.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "nn/layers.h"
#include "nn/norms.h"
#include "nn/rope.h"
#include "zeroshard/nn/hookable.h"

namespace zeroshard::models::z_image {

struct ZImageDitConfig {
  // Constructor arguments of ZImageTransformer2DModel.
  std::vector<int64_t> all_patch_size{2};    // spatial patch sizes, paired with
  std::vector<int64_t> all_f_patch_size{1};  // frame patch sizes: one embedder/final layer per pair
  int64_t in_channels = 16;
  int64_t dim = 3840;
  int64_t n_layers = 30;
  int64_t n_refiner_layers = 2;
  int64_t n_heads = 30;
  int64_t n_kv_heads = 30;
  double norm_eps = 1e-5;
  bool qk_norm = true;
  int64_t cap_feat_dim = 2560;  // Qwen3-4B's hidden size
  double rope_theta = 256.0;
  double t_scale = 1000.0;
  std::vector<int64_t> axes_dims{32, 48, 48};
  std::vector<int64_t> axes_lens{1536, 512, 512};  // positions per axis must stay below these
  // Module constants of src/config/model.py (config.json lists them; a case may override them).
  int64_t adaln_embed_dim = 256;           // ADALN_EMBED_DIM: adaLN input width is min(dim, this)
  int64_t seq_multi_of = 32;               // SEQ_MULTI_OF
  int64_t frequency_embedding_size = 256;  // FREQUENCY_EMBEDDING_SIZE
  double max_period = 10000.0;             // MAX_PERIOD
  // Hard-coded in the upstream constructor (TimestepEmbedder(..., mid_size=1024)).
  int64_t t_embedder_mid_size = 1024;

  int64_t head_dim() const { return dim / n_heads; }
  int64_t adaln_dim() const { return std::min(dim, adaln_embed_dim); }
  // FeedForward(hidden_dim=int(dim / 3 * 8)), the same float arithmetic as Python.
  int64_t ffn_hidden() const { return static_cast<int64_t>(static_cast<double>(dim) / 3.0 * 8.0); }
  // Throws std::invalid_argument naming the field (prefixed by `where`).
  void validate(const std::string& where = "z_image") const;
};

// Reads the constructor fields and the constants (ADALN_EMBED_DIM, SEQ_MULTI_OF,
// FREQUENCY_EMBEDDING_SIZE, MAX_PERIOD) of a config.json; absent fields take upstream's defaults.
ZImageDitConfig config_from_json(const nlohmann::json& j, const std::string& where);

// The released Z-Image-Turbo transformer (30 layers, 2+2 refiner layers, dim 3840, 30 heads):
// 6,154,908,736 parameters.
ZImageDitConfig z_image_turbo_6b();
// Parameters of a model of `c`, from the layer shapes (no model is built).
int64_t parameter_count(const ZImageDitConfig& c);

class ZImageAttentionImpl : public torch::nn::Module {
 public:
  ZImageAttentionImpl(int64_t dim, int64_t heads, int64_t kv_heads, bool qk_norm, double eps);
  // x [B, S, D]; keys [B, S] bool (true = attended); rope angles [B, S, head_dim / 2].
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& keys, const nn::RopeAngles& rope);
  nn::Linear to_q{nullptr}, to_k{nullptr}, to_v{nullptr};
  torch::nn::ModuleList to_out{nullptr};         // [0]: output projection
  nn::RMSNorm norm_q{nullptr}, norm_k{nullptr};  // empty without qk_norm

 private:
  int64_t heads_, kv_heads_, head_dim_;
};
TORCH_MODULE(ZImageAttention);

// A sequence of one batch: the tokens' key mask and rotary angles (shared by the blocks it runs through).
struct SequenceContext {
  at::Tensor keys;      // [B, S] bool: false on the batch padding only
  nn::RopeAngles rope;  // [B, S, head_dim / 2]
};

// One block (a sharding unit): noise_refiner / layers with modulation, context_refiner without.
class ZImageBlockImpl : public nn::HookableModule {
 public:
  ZImageBlockImpl(const ZImageDitConfig& c, bool modulation);
  // x [B, S, D]; adaln [B, adaln_dim] (the t embedding; undefined without modulation).
  torch::Tensor forward(const torch::Tensor& x, const SequenceContext& ctx, const torch::Tensor& adaln);
  ZImageAttention attention{nullptr};
  nn::FeedForward feed_forward{nullptr};  // w2(silu(w1 x) * w3 x), no biases
  nn::RMSNorm attention_norm1{nullptr}, attention_norm2{nullptr}, ffn_norm1{nullptr}, ffn_norm2{nullptr};
  torch::nn::ModuleList adaLN_modulation{nullptr};  // [0]: Linear(adaln_dim, 4 * dim)

 private:
  bool modulation_;
};
TORCH_MODULE(ZImageBlock);

class FinalLayerImpl : public torch::nn::Module {
 public:
  FinalLayerImpl(int64_t dim, int64_t adaln_dim, int64_t out);
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& adaln);
  nn::LayerNorm norm_final{nullptr};
  nn::Linear linear{nullptr};
  torch::nn::ModuleList adaLN_modulation{nullptr};  // [SiLU, Linear(adaln_dim, dim)]
};
TORCH_MODULE(FinalLayer);

class TimestepEmbedderImpl : public torch::nn::Module {  // t_embedder: mlp = [Linear, SiLU, Linear]
 public:
  TimestepEmbedderImpl(int64_t frequency_size, int64_t mid, int64_t out);
  torch::Tensor forward(const torch::Tensor& t_freq);
  torch::nn::ModuleList mlp{nullptr};
};
TORCH_MODULE(TimestepEmbedder);

class ZImageDitImpl : public torch::nn::Module {
 public:
  explicit ZImageDitImpl(const ZImageDitConfig& c);
  // x: per sample [in_channels, F, H, W]; t [B]; cap_feats: per sample [L_i, cap_feat_dim]; the
  // patch sizes select one registered (patch_size, f_patch_size) pair. Returns per sample the
  // latent's shape.
  std::vector<torch::Tensor> forward(const std::vector<torch::Tensor>& x, const torch::Tensor& t,
                                     const std::vector<torch::Tensor>& cap_feats, int64_t patch_size,
                                     int64_t f_patch_size);
  const ZImageDitConfig& config() const { return config_; }

  torch::nn::ModuleDict all_x_embedder{nullptr}, all_final_layer{nullptr};  // keys "<patch>-<f_patch>"
  torch::nn::ModuleList noise_refiner{nullptr}, context_refiner{nullptr}, layers{nullptr};
  TimestepEmbedder t_embedder{nullptr};
  torch::nn::ModuleList cap_embedder{nullptr};  // [RMSNorm(cap_feat_dim), Linear(cap_feat_dim, dim)]
  torch::Tensor x_pad_token, cap_pad_token;     // [1, dim]

 private:
  torch::Tensor embed_time(const torch::Tensor& t, at::ScalarType dtype);
  ZImageDitConfig config_;
};
TORCH_MODULE(ZImageDit);

// The pipeline's time and output conventions: the model's t for a noise level sigma, and the
// flow velocity (noise - x0, what the Euler step x += (sigma_next - sigma) * v takes) from its output.
inline torch::Tensor model_timestep(const torch::Tensor& sigma) { return 1.0 - sigma; }
inline torch::Tensor flow_velocity(const torch::Tensor& output) { return -output; }

}  // namespace zeroshard::models::z_image
