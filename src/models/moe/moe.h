// The routed feed-forward of the `moe` series (Mixtral / Qwen-MoE style): a linear router
// scores every expert per token, the top-k experts (weights renormalized over the k) each run
// their SwiGLU on the tokens sent to them, an optional shared expert sees every token. The
// Switch-Transformer load-balancing loss pushes the router towards even expert use. Plain
// torch::nn: experts that receive no token in a step simply get no gradient.
#pragma once

#include "nn/layers.h"

#include <torch/torch.h>

namespace zeroshard::models {

struct MoeConfig {
  int64_t n_experts = 0;             // 0: dense feed-forward (series llama)
  int64_t top_k = 2;
  int64_t shared_expert_hidden = 0;  // > 0: a shared expert, gated by sigmoid(x . g) (Qwen-MoE)
  double aux_loss_coef = 0.01;       // weight of the load-balancing loss in the objective

  bool enabled() const { return n_experts > 0; }
  int64_t num_params(int64_t dim, int64_t expert_hidden) const;
  void validate() const;  // throws std::invalid_argument naming the bad field
  bool operator==(const MoeConfig& o) const;
};

struct MoeOutput {
  torch::Tensor out;                // the input's shape
  torch::Tensor aux_loss;           // scalar fp32: E * sum_e f_e * P_e
  torch::Tensor tokens_per_expert;  // int64 [E]: routed (token, slot) pairs per expert
};

class MoeFeedForwardImpl : public torch::nn::Module {
 public:
  MoeFeedForwardImpl(int64_t dim, int64_t expert_hidden, const MoeConfig& c);
  MoeOutput forward(const torch::Tensor& x);

  nn::Linear gate{nullptr};  // router: dim -> n_experts
  torch::nn::ModuleList experts{nullptr};
  nn::FeedForward shared_expert{nullptr};  // null without a shared expert
  nn::Linear shared_expert_gate{nullptr};  // dim -> 1

 private:
  MoeConfig config_;
};
TORCH_MODULE(MoeFeedForward);

// Returns h; in backward it also feeds coef (= d(coef * aux)/d aux) into aux's graph when h's
// gradient arrives (as Megatron's MoEAuxLossAutoScaler). The load-balancing loss thus trains
// the router without being added to the LM loss, and its backward runs inside the block's
// backward — while a sharding engine has the block's parameters gathered.
torch::Tensor attach_aux_loss(const torch::Tensor& h, const torch::Tensor& aux, double coef);

}  // namespace zeroshard::models
