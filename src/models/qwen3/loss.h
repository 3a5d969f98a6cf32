// The Qwen family's training losses, as transformers computes them.
#pragma once

#include "models/qwen3/config.h"
#include "models/qwen3/model.h"

#include <torch/torch.h>

#include <optional>
#include <vector>

namespace zeroshard::models::qwen3 {

// transformers' ForCausalLMLoss: the logits at position t predict labels[t + 1] (labels are
// padded on the right with ignore_index and shifted left, so each row's last position predicts
// nothing); positions whose label is ignore_index (-100) are not counted; the result is the mean
// over the counted positions, or, with num_items (the Trainer's num_items_in_batch, for gradient
// accumulation), their sum divided by num_items. Computed in float32 (float64 for float64
// logits). All labels ignored gives NaN (0 / 0), as in PyTorch.
torch::Tensor causal_lm_loss(const torch::Tensor& logits, const torch::Tensor& labels, int64_t ignore_index = -100,
                             std::optional<double> num_items = std::nullopt);

// transformers' load_balancing_loss_func (Switch Transformer eq. 4-6) over every routed layer
// at once: router logits [tokens, E] of all layers concatenated, p = softmax, the top-k experts
// per row recomputed from p (their one-hot carries no gradient); f_e = mean over rows of the
// number of slots choosing e, P_e = mean over rows of p[:, e]; loss = E * sum_e f_e * P_e.
// attention_mask [B, S] (optional): rows of padded tokens are left out of both means (each
// layer's logits must then be the [B * S, E] of that batch). Computed in float32 (float64 for
// float64); transformers computes the softmax in the logits' dtype (bf16 under bf16 training).
torch::Tensor load_balancing_loss(const std::vector<torch::Tensor>& router_logits, int64_t num_experts, int64_t top_k,
                                  const torch::Tensor& attention_mask = {});

struct LmLoss {
  torch::Tensor loss;      // what to back-propagate
  torch::Tensor ce_loss;   // causal_lm_loss
  torch::Tensor aux_loss;  // load_balancing_loss (undefined for a dense model or without router logits)
};

// Qwen3MoeForCausalLM.forward's loss: ce + router_aux_loss_coef * aux when the config's
// output_router_logits is set (or `with_aux` forces it), ce alone otherwise (and for dense
// models). The aux loss uses `attention_mask` as transformers does.
LmLoss lm_loss(const QwenConfig& config, const Output& output, const torch::Tensor& labels,
               const torch::Tensor& attention_mask = {}, std::optional<bool> with_aux = std::nullopt,
               std::optional<double> num_items = std::nullopt);

}  // namespace zeroshard::models::qwen3
