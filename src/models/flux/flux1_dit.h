// The FLUX.1 transformer (dev / schnell) in its released checkpoint layout (BFL's
// flux1-*.safetensors names, black-forest-labs/flux src/flux/model.py `Flux`):
//
//   img_in, txt_in                       Linear(in_channels | context_in_dim -> hidden)
//   time_in, vector_in, guidance_in      MLPEmbedder (in_layer, SiLU, out_layer); guidance_in
//                                        only with guidance_embed (dev; schnell has none)
//   double_blocks.N                      img_* / txt_* streams: mod.lin, attn.{qkv, norm.
//                                        {query,key}_norm.scale, proj}, mlp.{0,2}; joint attention
//   single_blocks.N                      linear1 = [qkv | mlp_in], linear2 = [attn | mlp] -> hidden,
//                                        norm.{query,key}_norm.scale, modulation.lin
//   final_layer                          adaLN_modulation.1 (shift, scale), linear
//
// Blocks are HookableModules (the sharding units). Every size is read from the config (the
// released FluxParams field names), so the reduced reference cases and the full models are the
// same code.
#pragma once

#include "models/flux/dit_common.h"
#include "nn/layers.h"
#include "zeroshard/nn/hookable.h"

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <string>
#include <vector>

namespace zeroshard::models::flux {

struct Flux1Config {
  int64_t in_channels = 64;
  int64_t out_channels = 64;
  int64_t vec_in_dim = 768;
  int64_t context_in_dim = 4096;
  int64_t hidden_size = 3072;
  double mlp_ratio = 4.0;
  int64_t num_heads = 24;
  int64_t depth = 19;
  int64_t depth_single_blocks = 38;
  std::vector<int64_t> axes_dim = {16, 56, 56};
  double theta = 10000.0;
  bool qkv_bias = true;
  bool guidance_embed = true;

  int64_t head_dim() const { return hidden_size / num_heads; }
  int64_t mlp_hidden() const { return static_cast<int64_t>(static_cast<double>(hidden_size) * mlp_ratio); }
  // Reads the FluxParams fields; throws std::invalid_argument naming `source` and the field.
  static Flux1Config from_json(const nlohmann::json& j, const std::string& source);
  void validate(const std::string& source) const;
};

// Linear -> SiLU -> Linear ("in_layer", "out_layer").
class MLPEmbedderImpl : public torch::nn::Module {
 public:
  MLPEmbedderImpl(int64_t in_dim, int64_t hidden);
  torch::Tensor forward(const torch::Tensor& x);
  nn::Linear in_layer{nullptr}, out_layer{nullptr};
};
TORCH_MODULE(MLPEmbedder);

// Linear(SiLU(vec)) -> `sets` x (shift, scale, gate), each [B, 1, D] ("lin").
class Flux1ModulationImpl : public torch::nn::Module {
 public:
  Flux1ModulationImpl(int64_t dim, int64_t sets);
  std::vector<torch::Tensor> forward(const torch::Tensor& vec);
  nn::Linear lin{nullptr};

 private:
  int64_t sets_;
};
TORCH_MODULE(Flux1Modulation);

// One stream's attention weights: qkv, norm.{query_norm, key_norm}.scale, proj.
class Flux1SelfAttentionImpl : public torch::nn::Module {
 public:
  Flux1SelfAttentionImpl(int64_t dim, int64_t heads, bool qkv_bias);
  nn::Linear qkv{nullptr}, proj{nullptr};
  std::shared_ptr<torch::nn::Module> norm;
  HeadRMSNorm query_norm{nullptr}, key_norm{nullptr};
};
TORCH_MODULE(Flux1SelfAttention);

// Linear(dim, hidden) -> tanh-GELU -> Linear(hidden, dim), registered "0" and "2" as BFL's
// nn.Sequential (index 1 is the parameterless GELU).
class Flux1MlpImpl : public torch::nn::Module {
 public:
  Flux1MlpImpl(int64_t dim, int64_t hidden);
  torch::Tensor forward(const torch::Tensor& x);
  nn::Linear fc1{nullptr}, fc2{nullptr};
};
TORCH_MODULE(Flux1Mlp);

class Flux1DoubleBlockImpl : public nn::HookableModule {
 public:
  explicit Flux1DoubleBlockImpl(const Flux1Config& c);
  // img [B, Li, D], txt [B, Lt, D], vec [B, D], rope cos/sin [B, Lt + Li, head_dim / 2] -> {img, txt}.
  std::vector<torch::Tensor> forward(const torch::Tensor& img, const torch::Tensor& txt, const torch::Tensor& vec,
                                     const nn::RopeAngles& pe);
  Flux1Modulation img_mod{nullptr}, txt_mod{nullptr};
  Flux1SelfAttention img_attn{nullptr}, txt_attn{nullptr};
  Flux1Mlp img_mlp{nullptr}, txt_mlp{nullptr};

 private:
  int64_t heads_;
};
TORCH_MODULE(Flux1DoubleBlock);

class Flux1SingleBlockImpl : public nn::HookableModule {
 public:
  explicit Flux1SingleBlockImpl(const Flux1Config& c);
  // x [B, Lt + Li, D] (text first) -> same.
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& vec, const nn::RopeAngles& pe);
  nn::Linear linear1{nullptr}, linear2{nullptr};
  std::shared_ptr<torch::nn::Module> norm;
  HeadRMSNorm query_norm{nullptr}, key_norm{nullptr};
  Flux1Modulation modulation{nullptr};

 private:
  int64_t hidden_, mlp_hidden_, heads_;
};
TORCH_MODULE(Flux1SingleBlock);

// LayerNorm, (shift, scale) from adaLN_modulation.1(SiLU(vec)) -- chunk 0 is the SHIFT in BFL's
// layout (diffusers' norm_out.linear stores (scale, shift): the name map swaps the halves) --
// then linear.
class Flux1LastLayerImpl : public torch::nn::Module {
 public:
  Flux1LastLayerImpl(int64_t hidden, int64_t out_channels);
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& vec);
  nn::Linear ada{nullptr}, linear{nullptr};
};
TORCH_MODULE(Flux1LastLayer);

class Flux1DiTImpl : public torch::nn::Module {
 public:
  explicit Flux1DiTImpl(const Flux1Config& c);
  // img [B, Li, in_channels] packed latent tokens; img_ids [B, Li, A], txt_ids [B, Lt, A] float
  // positions (A = axes_dim.size(); BFL uses (0, row, col) for the image and zeros for text,
  // but any ids work); txt [B, Lt, context_in_dim]; timesteps [B] in [0, 1]; y [B, vec_in_dim]
  // pooled vector; guidance [B] (required with guidance_embed, ignored otherwise).
  // Returns [B, Li, out_channels].
  torch::Tensor forward(const torch::Tensor& img, const torch::Tensor& img_ids, const torch::Tensor& txt,
                        const torch::Tensor& txt_ids, const torch::Tensor& timesteps, const torch::Tensor& y,
                        const torch::Tensor& guidance = {});
  const Flux1Config& config() const { return config_; }

  nn::Linear img_in{nullptr}, txt_in{nullptr};
  MLPEmbedder time_in{nullptr}, vector_in{nullptr}, guidance_in{nullptr};
  torch::nn::ModuleList double_blocks{nullptr}, single_blocks{nullptr};
  Flux1LastLayer final_layer{nullptr};

 private:
  Flux1Config config_;
};
TORCH_MODULE(Flux1DiT);

// Exact parameter count of the model `c` describes (arithmetic over the layer shapes; the
// sizes test checks it against the deferred model and the published totals).
int64_t flux1_param_count(const Flux1Config& c);

}  // namespace zeroshard::models::flux
