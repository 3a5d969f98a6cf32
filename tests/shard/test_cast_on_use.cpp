// no_shard under bf16 mixed precision keeps the full fp32 master and casts each unit's bf16 compute
// copy from it when the unit runs (pre-forward, pre-backward), freeing it after: no persistent
// 2-byte copy per parameter. Checked in one process (W = 1) against `optim`, which keeps a
// persistent bf16 copy of the same masters: the same logits, the same reduced gradients and the
// same masters after a step, bit for bit; the engine's bytes counted at the CPU allocator.
#include "models/llama/llama.h"
#include "shard/engine_internal.h"
#include "util/tensor_memory.h"
#include "zeroshard/comm.h"
#include "zeroshard/nn/deferred.h"
#include "zeroshard/optim.h"
#include "zeroshard/shard.h"

#include <gtest/gtest.h>

using namespace zeroshard;

namespace {

models::LlamaConfig small_llama() {
  models::LlamaConfig c;
  c.vocab_size = 97;
  c.dim = 64;
  c.n_layers = 3;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.ffn_hidden = 176;
  c.max_seq_len = 16;
  return c;
}

struct Built {
  models::Llama model{nullptr};
  std::shared_ptr<ShardedModel> sharded;
  int64_t engine_bytes = 0;  // live tensor bytes fully_shard left behind (allocator count)
  int64_t trainable_padded = 0;
};

Built build(Strategy s) {
  util::track_tensor_memory();
  Built b;
  {
    nn::DeferredInit deferred;
    b.model = models::Llama(small_llama());
  }
  ShardOptions o(s);
  o.param_dtype = at::kBFloat16;
  o.param_source = param_source_from_init(
      [](const std::string& name, at::Tensor& t) { models::llama_init(small_llama(), 7, name, t); });
  const int64_t before = util::live_tensor_bytes();
  b.sharded = fully_shard(b.model.ptr(), make_local_communicator(), o);
  b.engine_bytes = util::live_tensor_bytes() - before;
  for (const auto& info : b.sharded->flat_buffers()) b.trainable_padded += info.trainable ? info.padded : 0;
  return b;
}

at::Tensor loss_of(const at::Tensor& logits, const at::Tensor& targets) {
  return at::cross_entropy_loss(logits.to(at::kFloat).reshape({-1, logits.size(-1)}), targets.reshape({-1}));
}

}  // namespace

TEST(CastOnUse, NoShardInBf16KeepsNoPersistentComputeCopyAndComputesAsAPersistentOne) {
  Built cast = build(Strategy::NoShard);
  Built kept = build(Strategy::Optim);  // W = 1: its master shard is the whole buffer, plus a bf16 copy
  ASSERT_EQ(cast.trainable_padded, kept.trainable_padded);
  const int64_t padded = cast.trainable_padded;
  ASSERT_GT(padded, 50000);

  // Resident: the fp32 master (4 B) and the fp32 gradient (4 B); optim adds the bf16 copy (2 B).
  const MemoryStats m = cast.sharded->memory();
  EXPECT_EQ(m.params_bytes, 4 * padded);
  EXPECT_EQ(kept.sharded->memory().params_bytes, 6 * padded);
  EXPECT_EQ(cast.engine_bytes, m.params_bytes + m.grads_bytes) << "the allocator agrees with the engine's report";
  EXPECT_EQ(kept.engine_bytes - cast.engine_bytes, 2 * padded);
  EXPECT_EQ(m.gathered_bytes, 0);
  EXPECT_EQ(m.transient_bytes, 0);

  const at::Tensor tokens = at::arange(0, 24, at::kLong).remainder(97).view({2, 12});
  const at::Tensor targets = at::arange(1, 25, at::kLong).remainder(97).view({2, 12});
  ShardedAdamW opt_cast(cast.sharded, AdamWOptions{});
  ShardedAdamW opt_kept(kept.sharded, AdamWOptions{});
  for (int step = 0; step < 2; ++step) {
    cast.sharded->reset_gathered_peak();
    const at::Tensor a = cast.model->forward(tokens);
    const at::Tensor b = kept.model->forward(tokens);
    ASSERT_TRUE(a.equal(b)) << "step " << step << ": the cast copy computes as the persistent one";
    // During forward only the root (its tied embedding and final norm) stays cast.
    EXPECT_GT(cast.sharded->memory().gathered_bytes, 0);
    cast.sharded->backward(loss_of(a, targets), true);
    kept.sharded->backward(loss_of(b, targets), true);
    const MemoryStats after = cast.sharded->memory();
    EXPECT_EQ(after.gathered_bytes, 0) << "every cast copy is freed after its unit's backward";
    // The root and one block at a time: less than the whole model's bf16 bytes.
    EXPECT_GT(after.gathered_peak_bytes, 0);
    EXPECT_LT(after.gathered_peak_bytes, 2 * padded);
    EXPECT_EQ(cast.sharded->finish_gradients(1.0), kept.sharded->finish_gradients(1.0));
    const auto vc = shard::optimizer_views(*cast.sharded);
    const auto vk = shard::optimizer_views(*kept.sharded);
    ASSERT_EQ(vc.size(), vk.size());
    for (size_t i = 0; i < vc.size(); ++i) {
      EXPECT_TRUE(vc[i].grad.equal(vk[i].grad)) << "buffer " << i;
      EXPECT_EQ(vc[i].grad_scale, vk[i].grad_scale);
    }
    opt_cast.step(1e-3);
    opt_kept.step(1e-3);
    const auto mc = cast.sharded->local_shards();
    const auto mk = kept.sharded->local_shards();
    ASSERT_EQ(mc.size(), mk.size());
    for (size_t i = 0; i < mc.size(); ++i) EXPECT_TRUE(mc[i].equal(mk[i])) << "master " << i;
  }
  // Evaluation (no graph) casts and frees as well.
  at::NoGradGuard no_grad;
  EXPECT_TRUE(cast.model->forward(tokens).equal(kept.model->forward(tokens)));
  EXPECT_EQ(cast.sharded->memory().gathered_bytes, 0);
}
