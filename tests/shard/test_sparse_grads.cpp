// A tied embedding's gradient as rows (nn::Embedding::sparse_grad, set by the Llama and Qwen3
// models when the output head shares the table): what libtorch does with it, and what the engine
// does when a sparse gradient reaches it alone.
#include "models/llama/llama.h"
#include "support/tensor_compare.h"
#include "zeroshard/comm.h"
#include "zeroshard/nn/deferred.h"
#include "zeroshard/shard.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

using namespace zeroshard;
using zeroshard::testing::rel_diff;

// libtorch 1.13.1 fact: when a weight is used by a sparse-gradient embedding and by a dense
// product, autograd adds the sparse rows into the dense gradient in place (InputBuffer), so the
// weight's .grad is dense and no [V, D] zero fill or second [V, D] table is made. Equal, to
// rounding, to the dense embedding's gradient; duplicate ids count once per use.
TEST(SparseGrads, TiedEmbeddingRowsAddIntoTheHeadsDenseGradient) {
  at::manual_seed(3);
  const at::Tensor w0 = at::randn({50, 8});
  const at::Tensor ids = at::tensor({4, 7, 4, 49, 0, 7, 7}, at::kLong);
  at::Tensor grads[2];
  for (const bool sparse : {false, true}) {
    at::Tensor w = w0.clone().requires_grad_(true);
    const at::Tensor h = at::embedding(w, ids, -1, false, sparse);
    const at::Tensor logits = at::linear(at::tanh(h), w);
    at::cross_entropy_loss(logits, ids.roll(1)).backward();
    ASSERT_FALSE(w.grad().is_sparse());
    grads[sparse ? 1 : 0] = w.grad();
  }
  EXPECT_LT(rel_diff(grads[1], grads[0]), 1e-6);
  EXPECT_GT(grads[1][7].abs().sum().item<double>(), grads[1][5].abs().sum().item<double>());  // ids' rows
}

// An embedding with sparse_grad whose head is never used leaves a sparse .grad; the engine copies
// it into its flat buffer as the dense rows it stands for (duplicates summed), so the gradient
// norm is that of the dense gradient.
TEST(SparseGrads, EngineTakesASparseGradientAsItsDenseRows) {
  models::LlamaConfig c;
  c.vocab_size = 61;
  c.dim = 16;
  c.n_layers = 1;
  c.n_heads = 2;
  c.n_kv_heads = 2;
  c.ffn_hidden = 32;
  c.max_seq_len = 8;
  models::Llama model{nullptr};
  {
    nn::DeferredInit deferred;
    model = models::Llama(c);
  }
  ASSERT_TRUE(model->tok_embeddings->sparse_grad) << "tied: the model asks for row gradients";
  ShardOptions o(Strategy::NoShard);
  o.param_source =
      param_source_from_init([&c](const std::string& name, at::Tensor& t) { models::llama_init(c, 5, name, t); });
  auto sharded = fully_shard(model.ptr(), make_local_communicator(), o);
  const at::Tensor ids = at::tensor({3, 9, 3, 60, 0, 9, 9, 3}, at::kLong).view({2, 4});

  const at::Tensor reference_w = model->tok_embeddings->weight.detach().clone().requires_grad_(true);
  at::embedding(reference_w, ids).square().sum().backward();  // the dense gradient
  const double expected = reference_w.grad().norm().item<double>();

  const at::Tensor loss = model->tok_embeddings(ids).square().sum();
  sharded->backward(loss);
  const double norm = sharded->finish_gradients(/*max_norm=*/0.0);
  EXPECT_NEAR(norm, expected, 1e-6 * expected);
}
