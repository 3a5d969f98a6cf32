// The moe series: the model against an independent PyTorch implementation, and training under
// the four strategies with experts that receive no tokens.
#include "io/safetensors.h"
#include "models/llama/llama.h"
#include "support/spawn.h"
#include "support/train_run.h"
#include "train/config.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

using namespace zeroshard;
using namespace zeroshard::testing;

namespace {
// Debian's python3 with python3-torch, whatever python3 comes first on PATH.
const std::string kReference = std::string("/usr/bin/python3 ") + ZS_SOURCE_DIR + "/tests/models/llama/reference.py";
}  // namespace

TEST(MoeReference, ForwardAndBackwardMatchAnIndependentPyTorchImplementation) {
  models::LlamaConfig c;
  c.vocab_size = 256;
  c.dim = 32;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.ffn_hidden = 24;
  c.max_seq_len = 16;
  c.moe.n_experts = 16;  // 2 x 3 tokens x top-2 = 12 slots: at least 4 of 16 experts idle per block
  c.moe.top_k = 2;
  c.moe.shared_expert_hidden = 16;
  c.moe.aux_loss_coef = 0.1;  // large, so a wrong aux gradient would show
  models::Llama model(c);
  model->reset_parameters(7);
  at::manual_seed(3);
  const at::Tensor tokens = torch::randint(0, 256, {2, 4}, at::kLong);
  at::Tensor logits = model->forward(tokens.narrow(1, 0, 3));
  at::Tensor loss = models::lm_loss(logits, tokens.narrow(1, 1, 3));
  loss.backward();  // the aux loss's gradient arrives through attach_aux_loss

  // Experts that got no token have no gradient at all (not a zero one).
  const at::Tensor counts = model->last_tokens_per_expert();
  int idle_without_grad = 0;
  for (const auto& item : model->named_parameters()) {
    const std::string& name = item.key();
    const auto pos = name.find(".experts.");
    if (pos == std::string::npos) continue;
    const int64_t layer = std::stoll(name.substr(std::string("layers.").size()));
    const int64_t expert = std::stoll(name.substr(pos + 9));
    const bool idle = counts[layer][expert].item<int64_t>() == 0;
    EXPECT_EQ(idle, !item.value().grad().defined()) << name;
    idle_without_grad += idle ? 1 : 0;
  }
  EXPECT_GE(idle_without_grad, 2 * 4 * 3) << "at least 4 idle experts per block (3 weights each)";

  nlohmann::json cfg = {{"dim", c.dim},       {"n_layers", c.n_layers},           {"n_heads", c.n_heads},
                        {"n_kv_heads", c.n_kv_heads}, {"rope_theta", c.rope_theta}, {"norm_eps", c.norm_eps},
                        {"tie_embeddings", c.tie_embeddings}, {"n_experts", c.moe.n_experts},
                        {"top_k", c.moe.top_k}, {"shared_expert_hidden", c.moe.shared_expert_hidden},
                        {"aux_loss_coef", c.moe.aux_loss_coef}};
  std::vector<io::TensorEntry> entries;
  std::vector<at::Tensor> values;
  for (const auto& item : model->named_parameters()) {
    at::Tensor grad = item.value().grad().defined() ? item.value().grad() : at::zeros_like(item.value());
    entries.push_back({"param." + item.key(), at::kFloat, item.value().sizes().vec()});
    values.push_back(item.value().detach());
    entries.push_back({"grad." + item.key(), at::kFloat, item.value().sizes().vec()});
    values.push_back(grad);
  }
  entries.push_back({"tokens", at::kDouble, tokens.sizes().vec()});
  values.push_back(tokens.to(at::kDouble));
  entries.push_back({"loss", at::kFloat, {}});
  values.push_back(loss.detach());
  entries.push_back({"aux_loss", at::kFloat, {}});
  values.push_back(at::full({}, model->last_aux_loss(), at::kFloat));
  const std::string path = make_temp_dir("moe_ref") + "/case.safetensors";
  io::SafetensorsWriter writer(path, entries, {{"config", cfg.dump()}});
  for (size_t i = 0; i < entries.size(); ++i) writer.write(entries[i].name, values[i]);
  writer.finish();

  std::string out;
  const int rc = run_command(kReference + " moe " + path, &out);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("moe reference: loss"), std::string::npos) << out;
  std::printf("%s", out.c_str());
}

TEST(Moe, FourStrategiesAgreeBitwiseWhileSomeExpertsGetNoTokens) {
  // 16 experts, top-1, 2 x 32 tokens per rank and micro-batch: some experts idle every step.
  const std::string moe =
      " --set model.series=moe --set model.n_experts=16 --set model.top_k=1 --set model.shared_expert_hidden=32"
      " --set model.ffn_hidden=32 --set train.steps=20 --set train.micro_batch_size=2 --set train.grad_accum=2";
  const auto runs = expect_identical_strategies(moe, 2, 20, "moe");
  ASSERT_FALSE(HasFailure());
  int64_t idle_steps = 0;
  for (const auto& m : runs[3].metrics) {
    ASSERT_TRUE(m.contains("aux_loss") && m.contains("moe_idle_experts")) << m.dump();
    idle_steps += m["moe_idle_experts"].get<int64_t>() > 0 ? 1 : 0;
  }
  EXPECT_GT(idle_steps, 0) << "the test must cover experts without gradient";
  EXPECT_LT(runs[3].metrics.back()["loss"].get<double>(), runs[3].metrics.front()["loss"].get<double>());
}

TEST(Moe, KeysOfAnotherSeriesAreRejected) {
  try {
    zeroshard::train::load_config("", {"model.n_experts=8"});
    FAIL() << "MoE keys under series llama must be rejected";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("model.n_experts=8 applies to model.series: moe, not llama"), std::string::npos) << e.what();
  }
  try {
    zeroshard::train::load_config("", {"model.series=moe"});
    FAIL() << "series moe without experts must be rejected";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("needs model.n_experts >= 2"), std::string::npos) << e.what();
  }
}
