// A small transformer text encoder (bidirectional: every token sees every token) over caption
// bytes: the frozen text tower of the flux and wan pipelines, standing in for T5 / CLIP.
// RMSNorm, rotary positions, SwiGLU; the layers are HookableModules (sharding units).
#pragma once

#include "nn/layers.h"
#include "zeroshard/nn/hookable.h"

#include <torch/torch.h>

#include <memory>

namespace zeroshard::models {

struct TextEncoderConfig {
  int64_t dim = 64;
  int64_t n_layers = 2;
  int64_t n_heads = 4;
  int64_t ffn_hidden = 128;
  int64_t max_len = 48;  // caption bytes (zero-padded or cut)
  double norm_eps = 1e-5;
  double rope_theta = 10000.0;
};

class TextEncoderLayerImpl : public nn::HookableModule {
 public:
  TextEncoderLayerImpl(const TextEncoderConfig& c, std::shared_ptr<const nn::RopeTables> rope);
  torch::Tensor forward(const torch::Tensor& x);
  nn::RMSNorm norm1{nullptr}, norm2{nullptr};
  nn::Linear wq{nullptr}, wk{nullptr}, wv{nullptr}, wo{nullptr};
  nn::FeedForward ffn{nullptr};

 private:
  int64_t n_heads_;
  std::shared_ptr<const nn::RopeTables> rope_;
};
TORCH_MODULE(TextEncoderLayer);

struct TextEncoding {
  torch::Tensor hidden;  // [B, L, dim]: per-token states (the DiT's text stream)
  torch::Tensor pooled;  // [B, dim]: their mean (the DiT's conditioning vector)
};

class TextEncoderImpl : public torch::nn::Module {
 public:
  explicit TextEncoderImpl(const TextEncoderConfig& c);
  TextEncoding forward(const torch::Tensor& tokens);  // int64 [B, L]
  nn::Embedding embed{nullptr};
  torch::nn::ModuleList layers{nullptr};
  nn::RMSNorm norm{nullptr};

 private:
  TextEncoderConfig config_;
};
TORCH_MODULE(TextEncoder);

// Caption bytes as int64 [max_len] (zero-padded; cut at max_len).
torch::Tensor caption_tokens(const std::string& caption, int64_t max_len);

}  // namespace zeroshard::models
