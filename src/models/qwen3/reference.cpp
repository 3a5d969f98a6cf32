#include "models/qwen3/reference.h"

#include "models/qwen3/loss.h"
#include "models/qwen3/model.h"

#include <stdexcept>

namespace zeroshard::models::qwen3 {

namespace {

using reference::ReferenceCase;
using reference::ReferenceModel;

QwenConfig case_config(const ReferenceCase& c) { return QwenConfig::from_hf_config(c.config, c.dir + "/config.json"); }

// The case's optional inputs (a case of the same kind may pass a padding mask or positions).
Inputs case_inputs(ReferenceCase& c) {
  Inputs in;
  in.input_ids = c.input("input_ids");
  if (c.inputs.count("attention_mask") != 0) in.attention_mask = c.input("attention_mask");
  if (c.inputs.count("position_ids") != 0) in.position_ids = c.input("position_ids");
  return in;
}

// `_call.args` may pass output_router_logits explicitly (the MoE case does); else the config's.
std::optional<bool> call_flag(const ReferenceCase& c, const std::string& name) {
  if (!c.config.contains("_call") || !c.config["_call"].contains("args")) return std::nullopt;
  for (const auto& a : c.config["_call"]["args"]) {
    if (a.is_array() && a.size() == 2 && a[0] == name && a[1].is_boolean()) return a[1].get<bool>();
  }
  return std::nullopt;
}

ReferenceModel causal_lm(const ReferenceCase& c, bool moe) {
  const QwenConfig config = case_config(c);
  if (config.is_moe() != moe) {
    throw std::invalid_argument(c.dir + "/config.json: kind '" + c.config.value("_kind", std::string()) + "' needs a " +
                                (moe ? "routed (qwen3_moe)" : "dense") + " model, model_type is '" + config.model_type +
                                "'");
  }
  auto model = QwenForCausalLM(config, /*lm_head=*/true);
  ReferenceModel m;
  m.module = model.ptr();
  const std::optional<bool> with_aux = call_flag(c, "output_router_logits");
  m.run = [model, config, moe, with_aux](ReferenceCase& rc) mutable {
    const Inputs in = case_inputs(rc);
    const Output out = model->forward(in);
    const LmLoss loss = lm_loss(config, out, rc.input("labels"), in.attention_mask, with_aux);
    std::map<std::string, at::Tensor> r{{"logits", out.logits}, {"loss", loss.loss}};
    if (moe) {
      r["ce_loss"] = loss.ce_loss;
      if (loss.aux_loss.defined()) r["aux_loss"] = loss.aux_loss;
      for (size_t i = 0; i < out.router_logits.size(); ++i)
        r["router_logits." + std::to_string(i)] = out.router_logits[i];
    }
    return r;
  };
  return m;
}

ReferenceModel text_tower(const ReferenceCase& c) {
  auto model = QwenForCausalLM(case_config(c), /*lm_head=*/false);
  ReferenceModel m;
  m.module = model.ptr();
  m.run = [model](ReferenceCase& rc) mutable {
    // Qwen-Image: hidden_states[-1] of the language model = its last hidden state (normed).
    return std::map<std::string, at::Tensor>{{"output", model->forward(case_inputs(rc)).last_hidden_state}};
  };
  return m;
}

}  // namespace

std::vector<reference::ReferenceKind> reference_kinds() {
  return {
      {"qwen3_lm", "Qwen3ForCausalLM (transformers): logits and the causal-LM loss",
       [](const ReferenceCase& c) { return causal_lm(c, false); }},
      {"qwen3_moe_lm", "Qwen3MoeForCausalLM (transformers): logits, CE + load-balancing loss, router logits",
       [](const ReferenceCase& c) { return causal_lm(c, true); }},
      {"qwen25_text", "Qwen2.5-VL language model / Qwen2Model (Qwen-Image's text encoder): last hidden state",
       [](const ReferenceCase& c) { return text_tower(c); }},
  };
}

}  // namespace zeroshard::models::qwen3
