#include "models/qwen3/loss.h"

#include "nn/cross_entropy.h"
#include "nn/norms.h"

#include <stdexcept>

namespace zeroshard::models::qwen3 {

torch::Tensor causal_lm_loss(const torch::Tensor& logits, const torch::Tensor& labels, int64_t ignore_index,
                             std::optional<double> num_items) {
  TORCH_CHECK(
      logits.dim() == 3 && labels.dim() == 2 && logits.size(0) == labels.size(0) && logits.size(1) == labels.size(1),
      "causal_lm_loss: logits [B, S, V] and labels [B, S] expected, got ", logits.sizes(), " and ", labels.sizes());
  const int64_t V = logits.size(2);
  // labels -> pad(labels, (0, 1), ignore_index)[:, 1:]
  const auto shifted = torch::cat(
      {labels.narrow(1, 1, labels.size(1) - 1), torch::full({labels.size(0), 1}, ignore_index, labels.options())}, 1);
  // In fp32 (fp64 kept) as transformers' upcast, without an fp32 copy of the logits (nn/cross_entropy.h).
  const auto flat = logits.reshape({-1, V});
  if (!num_items) return nn::cross_entropy_mean(flat, shifted.reshape({-1}), ignore_index);
  return nn::cross_entropy_sum(flat, shifted.reshape({-1}), ignore_index) / *num_items;
}

torch::Tensor load_balancing_loss(const std::vector<torch::Tensor>& router_logits, int64_t num_experts, int64_t top_k,
                                  const torch::Tensor& attention_mask) {
  TORCH_CHECK(!router_logits.empty(), "load_balancing_loss: no router logits (a model without routed layers?)");
  const auto all = torch::cat(router_logits, 0);  // [layers * tokens, E]
  TORCH_CHECK(all.dim() == 2 && all.size(1) == num_experts, "load_balancing_loss: router logits must be [tokens, ",
              num_experts, "], got ", all.sizes());
  const auto probs = torch::softmax(all.to(nn::norm_dtype(all)), -1);
  const auto chosen = std::get<1>(probs.topk(top_k, -1));                            // [R, k]
  const auto one_hot = torch::one_hot(chosen, num_experts).to(probs.scalar_type());  // [R, k, E]
  torch::Tensor tokens_per_expert, prob_per_expert;                                  // [k, E], [E]
  if (!attention_mask.defined()) {
    tokens_per_expert = one_hot.mean(0);
    prob_per_expert = probs.mean(0);
  } else {
    const int64_t rows = attention_mask.numel();
    TORCH_CHECK(rows > 0 && all.size(0) % rows == 0, "load_balancing_loss: ", all.size(0),
                " router rows are not a whole number of layers of attention_mask ", attention_mask.sizes());
    // The mask of one layer's [B * S] rows, repeated for every layer.
    const auto m = attention_mask.reshape({-1}).to(probs.scalar_type()).repeat({all.size(0) / rows});  // [R]
    tokens_per_expert = (one_hot * m.view({-1, 1, 1})).sum(0) / m.sum();
    prob_per_expert = (probs * m.view({-1, 1})).sum(0) / m.sum();
  }
  return (tokens_per_expert * prob_per_expert.unsqueeze(0)).sum() * static_cast<double>(num_experts);
}

LmLoss lm_loss(const QwenConfig& config, const Output& output, const torch::Tensor& labels,
               const torch::Tensor& attention_mask, std::optional<bool> with_aux, std::optional<double> num_items) {
  if (!output.logits.defined()) throw std::invalid_argument("qwen lm_loss: the model has no lm_head (no logits)");
  LmLoss r;
  r.ce_loss = causal_lm_loss(output.logits, labels, -100, num_items);
  r.loss = r.ce_loss;
  const bool aux = config.is_moe() && with_aux.value_or(config.output_router_logits);
  if (aux) {
    if (output.router_logits.empty()) {
      throw std::invalid_argument("qwen lm_loss: the load-balancing loss needs router logits, the forward gave none");
    }
    r.aux_loss =
        load_balancing_loss(output.router_logits, config.num_experts, config.num_experts_per_tok, attention_mask);
    r.loss = r.ce_loss + config.router_aux_loss_coef * r.aux_loss.to(r.ce_loss.scalar_type());
  }
  return r;
}

}  // namespace zeroshard::models::qwen3
