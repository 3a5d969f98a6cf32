// Frozen parameters under bf16 mixed precision keep no fp32 master: the engine stores them as
// the bf16 rounding of their initial values, 2 bytes per parameter, under every strategy. What
// the module computes with is unchanged (the bf16 cast of the fp32 value, as before). Bytes are
// counted at the CPU allocator (util/tensor_memory.h) around fully_shard, in one process (W = 1).
#include "models/llama/llama.h"
#include "nn/layers.h"
#include "util/tensor_memory.h"
#include "zeroshard/comm.h"
#include "zeroshard/nn/deferred.h"
#include "zeroshard/shard.h"

#include <gtest/gtest.h>

#include <map>

using namespace zeroshard;

namespace {

const std::vector<Strategy> kStrategies = {Strategy::NoShard, Strategy::Optim, Strategy::OptimGrads,
                                           Strategy::OptimGradsParams};

models::LlamaConfig small_llama() {
  models::LlamaConfig c;
  c.vocab_size = 97;
  c.dim = 64;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.ffn_hidden = 176;
  c.max_seq_len = 16;
  return c;
}

// The seeded initial value of every parameter (base and adapters), whole.
void init_value(const std::string& name, at::Tensor& t) {
  if (nn::is_lora_parameter(name)) {
    nn::lora_init(5, name, t);
  } else {
    models::llama_init(small_llama(), 5, name, t);
  }
}

struct Built {
  models::Llama model{nullptr};
  std::shared_ptr<ShardedModel> sharded;
  int64_t engine_bytes = 0;  // live tensor bytes fully_shard left behind (allocator count)
  int64_t frozen_padded = 0, trainable_padded = 0;
};

// lora: adapters on wq, wv and the rest frozen; otherwise every parameter frozen (a tower).
Built build(Strategy s, at::ScalarType dtype, bool lora) {
  util::track_tensor_memory();
  Built b;
  {
    nn::DeferredInit deferred;  // parameters without bytes: nothing allocated before fully_shard
    b.model = models::Llama(small_llama());
    if (lora) {
      nn::apply_lora(*b.model, {8, 16.0, {"wq", "wv"}});
    } else {
      for (auto& p : b.model->parameters()) p.set_requires_grad(false);
    }
  }
  ShardOptions o(s);
  o.param_dtype = dtype;
  o.param_source = param_source_from_init(init_value);
  const int64_t before = util::live_tensor_bytes();
  b.sharded = fully_shard(b.model.ptr(), make_local_communicator(), o);
  b.engine_bytes = util::live_tensor_bytes() - before;
  for (const auto& info : b.sharded->flat_buffers()) (info.trainable ? b.trainable_padded : b.frozen_padded) += info.padded;
  return b;
}

}  // namespace

TEST(FrozenStorage, AFrozenTowerCostsTwoBytesPerParameterUnderBf16OnEveryStrategy) {
  for (Strategy s : kStrategies) {
    const Built fp32 = build(s, at::kFloat, /*lora=*/false);
    const Built bf16 = build(s, at::kBFloat16, /*lora=*/false);
    ASSERT_GT(bf16.frozen_padded, 50000) << strategy_name(s);
    ASSERT_EQ(bf16.trainable_padded, 0);
    // Measured at the allocator: no gradient, no optimizer state, no fp32 copy.
    EXPECT_EQ(fp32.engine_bytes, 4 * fp32.frozen_padded) << strategy_name(s);
    EXPECT_EQ(bf16.engine_bytes, 2 * bf16.frozen_padded) << strategy_name(s);
    const MemoryStats m = bf16.sharded->memory();
    EXPECT_EQ(m.params_bytes, bf16.engine_bytes) << strategy_name(s);  // the engine's report agrees
    EXPECT_EQ(m.grads_bytes, 0);
    for (const auto& info : bf16.sharded->flat_buffers()) EXPECT_EQ(info.dtype, at::kBFloat16) << info.key();
    for (const auto& t : bf16.sharded->local_shards()) EXPECT_EQ(t.scalar_type(), at::kBFloat16);
  }
}

TEST(FrozenStorage, ALoraBaseUnderBf16StoresItsBf16RoundingAndComputesAsBefore) {
  // Reference values: the seeded fp32 init of every parameter.
  std::map<std::string, at::Tensor> init;
  {
    models::Llama eager(small_llama());
    nn::apply_lora(*eager, {8, 16.0, {"wq", "wv"}});
    for (auto& item : eager->named_parameters()) {
      at::Tensor t = at::empty(item.value().sizes(), at::kFloat);
      init_value(item.key(), t);
      init[item.key()] = t;
    }
  }
  const at::Tensor tokens = at::arange(0, 24, at::kLong).remainder(97).view({2, 12});
  at::Tensor first_logits;
  for (Strategy s : kStrategies) {
    const Built fp32 = build(s, at::kFloat, /*lora=*/true);
    Built bf16 = build(s, at::kBFloat16, /*lora=*/true);
    ASSERT_GT(bf16.frozen_padded, 20 * bf16.trainable_padded) << "a LoRA model: mostly frozen base";
    // The engine's own bytes: the frozen base costs 2 bytes per parameter where fp32 costs 4.
    // Under optim_grads_params the trainable adapters are stored alike in both runs (fp32
    // master shard + gradient shard; the bf16 compute copy exists only while gathered), so the
    // allocator's difference is the base's alone.
    EXPECT_EQ(bf16.engine_bytes, bf16.sharded->memory().params_bytes + bf16.sharded->memory().grads_bytes)
        << strategy_name(s);
    if (s == Strategy::OptimGradsParams) {
      EXPECT_EQ(fp32.engine_bytes - bf16.engine_bytes, 2 * bf16.frozen_padded);
    }
    int64_t frozen_shard_bytes = 0;
    const auto infos = bf16.sharded->flat_buffers();
    const auto shards = bf16.sharded->local_shards();
    ASSERT_EQ(infos.size(), shards.size());
    for (size_t i = 0; i < infos.size(); ++i) {
      EXPECT_EQ(shards[i].scalar_type(), infos[i].trainable ? at::kFloat : at::kBFloat16) << infos[i].key();
      if (!infos[i].trainable) frozen_shard_bytes += static_cast<int64_t>(shards[i].nbytes());
    }
    EXPECT_EQ(frozen_shard_bytes, 2 * bf16.frozen_padded) << strategy_name(s);

    // Stored values: frozen = bf16(fp32 init) exactly; adapters keep their fp32 masters.
    bf16.sharded->for_each_full_parameter([&](const std::string& name, const at::Tensor& t) {
      const at::Tensor& want = init.at(name);
      const bool frozen = !nn::is_lora_parameter(name);
      EXPECT_TRUE(t.equal(frozen ? want.to(at::kBFloat16).to(at::kFloat) : want)) << name;
    });
    // What the module computes with: the same bits as before frozen storage changed, i.e. as
    // a module whose parameters are the bf16 cast of the fp32 values; equal on every strategy.
    at::NoGradGuard no_grad;
    const at::Tensor logits = bf16.model->forward(tokens);
    if (first_logits.defined()) {
      EXPECT_TRUE(logits.equal(first_logits)) << strategy_name(s);
    } else {
      first_logits = logits;
    }
  }
  models::Llama direct(small_llama());
  nn::apply_lora(*direct, {8, 16.0, {"wq", "wv"}});
  {
    at::NoGradGuard no_grad;
    for (auto& item : direct->named_parameters()) item.value().set_data(init.at(item.key()).to(at::kBFloat16));
    EXPECT_TRUE(direct->forward(tokens).equal(first_logits));
  }
}

// The engine's pool of freed unit buffers (shard::StorageBytesPool) starts empty: the bytes
// fully_shard allocates only to lay out a ZeRO-3 unit's views go back to the system. Over
// forwards it holds at most the units that were gathered at once (max_live_units), each of them
// ever touched: before, it started with one never-written block per unit and handed them out in
// turn, so every unit's buffer became resident over the steps (FLUX.1 [dev], docs/benchmarks.md).
TEST(FrozenStorage, TheUnitBufferPoolStartsEmptyAndHoldsAtMostTheLiveUnits) {
  models::LlamaConfig c = small_llama();
  c.dim = 1024;
  c.ffn_hidden = 4096;
  c.n_layers = 4;  // 16.8M parameters a block: 33.6 MB in bf16, above the pool's 16 MiB floor
  models::Llama model{nullptr};
  {
    nn::DeferredInit deferred;
    model = models::Llama(c);
    for (auto& p : model->parameters()) p.set_requires_grad(false);
  }
  ShardOptions o(Strategy::OptimGradsParams);
  o.param_dtype = at::kBFloat16;
  o.max_live_units = 2;
  o.param_source = param_source_from_init([&](const std::string& name, at::Tensor& t) { models::llama_init(c, 5, name, t); });
  auto sharded = fully_shard(model.ptr(), make_local_communicator(), o);
  EXPECT_EQ(sharded->memory().pooled_bytes, 0) << "the layout's bytes entered the pool";
  const int64_t unit_bytes = sharded->memory().largest_unit_bytes;
  ASSERT_GE(unit_bytes, int64_t{16} << 20);
  const at::Tensor tokens = at::arange(0, 16, at::kLong).remainder(97).view({1, 16});
  at::NoGradGuard no_grad;
  for (int i = 0; i < 3; ++i) model->forward(tokens);
  const int64_t pooled = sharded->memory().pooled_bytes;
  EXPECT_GT(pooled, 0);
  EXPECT_LE(pooled, 2 * unit_bytes) << "more blocks pooled than units were ever live at once";
}
