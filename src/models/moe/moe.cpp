#include "models/moe/moe.h"

#include <stdexcept>
#include <string>

namespace zeroshard::models {

int64_t MoeConfig::num_params(int64_t dim, int64_t expert_hidden) const {
  if (!enabled()) return 0;
  int64_t n = dim * n_experts + n_experts * 3 * dim * expert_hidden;
  if (shared_expert_hidden > 0) n += 3 * dim * shared_expert_hidden + dim;
  return n;
}

void MoeConfig::validate() const {
  auto need = [](bool ok, const std::string& what) {
    if (!ok) throw std::invalid_argument("model config: " + what);
  };
  need(n_experts >= 0, "n_experts must be >= 0, got " + std::to_string(n_experts));
  if (!enabled()) return;
  need(top_k >= 1 && top_k <= n_experts,
       "top_k must be in [1, n_experts=" + std::to_string(n_experts) + "], got " + std::to_string(top_k));
  need(shared_expert_hidden >= 0, "shared_expert_hidden must be >= 0, got " + std::to_string(shared_expert_hidden));
  need(aux_loss_coef >= 0, "aux_loss_coef must be >= 0");
}

bool MoeConfig::operator==(const MoeConfig& o) const {
  return n_experts == o.n_experts && top_k == o.top_k && shared_expert_hidden == o.shared_expert_hidden &&
         aux_loss_coef == o.aux_loss_coef;
}

MoeFeedForwardImpl::MoeFeedForwardImpl(int64_t dim, int64_t expert_hidden, const MoeConfig& c) : config_(c) {
  c.validate();
  gate = register_module("gate", nn::Linear(dim, c.n_experts));
  experts = register_module("experts", torch::nn::ModuleList());
  for (int64_t e = 0; e < c.n_experts; ++e) experts->push_back(nn::FeedForward(dim, expert_hidden));
  if (c.shared_expert_hidden > 0) {
    shared_expert = register_module("shared_expert", nn::FeedForward(dim, c.shared_expert_hidden));
    shared_expert_gate = register_module("shared_expert_gate", nn::Linear(dim, 1));
  }
}

MoeOutput MoeFeedForwardImpl::forward(const torch::Tensor& x) {
  const int64_t dim = x.size(-1), E = config_.n_experts, K = config_.top_k;
  const torch::Tensor flat = x.reshape({-1, dim});
  const int64_t N = flat.size(0);
  const torch::Tensor probs = torch::softmax(gate(flat).to(torch::kFloat), -1);  // [N, E]
  auto [top_p, top_i] = probs.topk(K, -1);                                         // [N, K]
  top_p = top_p / top_p.sum(-1, /*keepdim=*/true);
  const torch::Tensor slot_expert = top_i.reshape({-1});  // (token, slot) pairs, token-major
  const torch::Tensor slot_weight = top_p.reshape({-1});
  torch::Tensor out = torch::zeros_like(flat);
  // Expert by expert, in a fixed order: each token's k contributions are added in ascending
  // expert order, so the result does not depend on anything but the routing.
  for (int64_t e = 0; e < E; ++e) {
    const torch::Tensor slots = (slot_expert == e).nonzero().reshape({-1});
    if (slots.numel() == 0) continue;  // no tokens: this expert gets no gradient this step
    const torch::Tensor tokens = torch::div(slots, K, /*rounding_mode=*/"floor");
    const torch::Tensor w = slot_weight.index_select(0, slots).unsqueeze(1).to(flat.scalar_type());
    out.index_add_(0, tokens, experts[e]->as<nn::FeedForwardImpl>()->forward(flat.index_select(0, tokens)) * w);
  }
  if (shared_expert) out = out + shared_expert(flat) * torch::sigmoid(shared_expert_gate(flat));

  MoeOutput result;
  result.tokens_per_expert = torch::bincount(slot_expert, /*weights=*/{}, E);
  const torch::Tensor fraction = result.tokens_per_expert.to(torch::kFloat) / static_cast<double>(N * K);
  result.aux_loss = static_cast<double>(E) * (fraction * probs.mean(0)).sum();
  result.out = out.view(x.sizes());
  return result;
}

namespace {

struct AuxLossInjector : public torch::autograd::Function<AuxLossInjector> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& h,
                               const torch::Tensor& aux, double coef) {
    ctx->saved_data["coef"] = coef;
    ctx->saved_data["aux_dtype"] = static_cast<int64_t>(aux.scalar_type());
    return h.view_as(h);
  }
  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx,
                                               torch::autograd::tensor_list grads) {
    const double coef = ctx->saved_data["coef"].toDouble();
    const auto dtype = static_cast<at::ScalarType>(ctx->saved_data["aux_dtype"].toInt());
    return {grads[0], torch::full({}, coef, torch::TensorOptions().dtype(dtype)), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor attach_aux_loss(const torch::Tensor& h, const torch::Tensor& aux, double coef) {
  if (!aux.requires_grad() || coef == 0.0) return h;
  return AuxLossInjector::apply(h, aux, coef);
}

}  // namespace zeroshard::models
