// Layers shared by the model zoo: Linear, Embedding, RMSNorm, SwiGLU feed-forward, rotary
// position embeddings, causal attention. Their parameters come from new_parameter(), so a model built inside a
// DeferredInit scope holds no parameter bytes until fully_shard materializes its shards.
#pragma once

#include "zeroshard/nn/deferred.h"

#include <torch/torch.h>

namespace zeroshard::nn {

// y = x W^T (+ b). Outside DeferredInit, W ~ U(-1/sqrt(in), 1/sqrt(in)) as torch::nn::Linear.
// With a LoRA adapter (Hu et al. 2021): y += (alpha / rank) * (x A^T) B^T, A [rank, in],
// B [out, rank]; B starts at zero, so the adapted layer starts as the base layer.
class LinearImpl : public torch::nn::Module {
 public:
  LinearImpl(int64_t in_features, int64_t out_features, bool bias = false);
  torch::Tensor forward(const torch::Tensor& x);
  // Registers lora_a / lora_b (deferred inside DeferredInit; otherwise A ~ N(0, 1/in), B = 0).
  void add_lora(int64_t rank, double alpha);
  torch::Tensor weight, bias;      // bias undefined when disabled
  torch::Tensor lora_a, lora_b;    // undefined without an adapter
  double lora_scale = 0.0;
};
TORCH_MODULE(Linear);

struct LoraOptions {
  int64_t rank = 0;  // 0: no adapters
  double alpha = 16.0;
  // The Linear modules to adapt: a name without a dot is the last component of the module's
  // name ({"wq", "wv"}); a dotted one its last components ({"ffn.0"} adapts "blocks.3.ffn.0").
  std::vector<std::string> targets;
};

// Adds an adapter to every nn::Linear below `root` whose name ends in one of options.targets
// and freezes every other parameter (base weights train no more; fully_shard then keeps them
// in frozen flat buffers: no gradient, no optimizer state). Throws std::invalid_argument naming
// a target that matches no Linear, with the names that exist. Returns the adapted modules.
std::vector<std::string> apply_lora(torch::nn::Module& root, const LoraOptions& options);

// The initial value of a LoRA parameter keyed by (seed, name): lora_a ~ N(0, 1/in), lora_b = 0.
bool is_lora_parameter(const std::string& name);
// The LoRA adapter values a token passes through (for FLOPs per token): every adapter, those of
// experts (".experts." in the name) weighted by the share of tokens routed to each, top_k / n_experts.
double active_lora_parameters(const torch::nn::Module& model, int64_t top_k, int64_t n_experts);
void lora_init(uint64_t seed, const std::string& name, at::Tensor& param);

// Rows of `weight` [num_embeddings, dim] picked by integer ids. Outside DeferredInit, N(0, 1).
class EmbeddingImpl : public torch::nn::Module {
 public:
  EmbeddingImpl(int64_t num_embeddings, int64_t dim);
  torch::Tensor forward(const torch::Tensor& ids);
  torch::Tensor weight;
  // The weight's gradient as the looked-up rows only (a sparse tensor) instead of a dense
  // [num_embeddings, dim] one. Set by a model whose output head is tied to this weight: autograd
  // adds the rows into the head's dense gradient in place, where a dense embedding gradient costs
  // a zero fill and a full-size add of the whole table per backward (docs/benchmarks.md, issue 15).
  bool sparse_grad = false;
};
TORCH_MODULE(Embedding);

// x * rsqrt(mean(x^2) + eps) * weight, normalized in fp32: nn::rms_norm (src/nn/rms_norm.h).
class RMSNormImpl : public torch::nn::Module {
 public:
  RMSNormImpl(int64_t dim, double eps);
  torch::Tensor forward(const torch::Tensor& x);
  torch::Tensor weight;

 private:
  double eps_;
};
TORCH_MODULE(RMSNorm);

// SwiGLU feed-forward: w2(silu(w1 x) * w3 x), no biases (Llama's FFN and each MoE expert).
class FeedForwardImpl : public torch::nn::Module {
 public:
  FeedForwardImpl(int64_t dim, int64_t hidden);
  torch::Tensor forward(const torch::Tensor& x);
  Linear w1{nullptr}, w2{nullptr}, w3{nullptr};
};
TORCH_MODULE(FeedForward);

// cos/sin tables for the half-split ("rotate_half") RoPE convention, shape [T, head_dim].
struct RopeTables {
  torch::Tensor cos, sin;
  static RopeTables make(int64_t max_seq_len, int64_t head_dim, double theta);
};

// x: [B, H, T, head_dim]; positions offset .. offset+T-1 (offset: tokens already in a KV cache).
torch::Tensor apply_rope(const torch::Tensor& x, const RopeTables& rope, int64_t offset = 0);

// The two functions below keep their plain formulation (the full score matrix; the default job's
// bits) up to this many keys and use nn::attention's blockwise kernel (memory linear in the
// sequence length, equal within the float32 floor) above it.
inline constexpr int64_t kPlainAttentionMaxKeys = 2048;

// Causal scaled-dot-product attention. q: [B, H, Tq, D]; k, v: [B, Hkv, Tk, D] with H a
// multiple of Hkv (grouped-query: kv head j serves q heads j*H/Hkv .. (j+1)*H/Hkv - 1) and
// Tk >= Tq: the queries are the last Tq positions (the keys before them come from a KV cache).
torch::Tensor causal_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v);

// Scaled-dot-product attention where every query sees every key (encoders, DiTs).
// q, k, v: [B, H, T, D] (same H).
torch::Tensor full_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v);

// Rotary positions over several axes (2-D for image patches as FLUX, 3-D for video as Wan): per
// head, the features split into equal parts, part a rotating by the token's position on axis
// a, each in the rotate-half convention. x: [B, H, N, D]; positions: one float [N] per axis
// (a token at 0 on every axis, e.g. text, is unrotated). D / axes must be even.
torch::Tensor apply_rope_axes(const torch::Tensor& x, const std::vector<torch::Tensor>& positions, double theta);

// Layer norm over the last dimension without affine parameters (the DiTs' adaLN input), in fp32.
torch::Tensor layer_norm_no_affine(const torch::Tensor& x, double eps = 1e-6);

// The DiTs' timestep embedding: sigma [B] in [0, 1] -> [B, 256], cos and sin of
// sigma * 1000 * 10000^(-i/128), computed in double (the angles reach ~1000 radians).
torch::Tensor timestep_embedding(const torch::Tensor& sigma);

}  // namespace zeroshard::nn
