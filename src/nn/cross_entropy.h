// Cross-entropy of a language model's logits, summed over the rows whose target is not
// ignore_index, without materializing the fp32 log-probabilities.
//
// torch's formulation on bf16 logits — cross_entropy(logits.float(), targets) — writes the whole
// [tokens, vocab] table in fp32 three times (the cast, log_softmax's output kept for backward, its
// gradient) and zero-fills a fourth for nll_loss's backward: at Qwen3's 151,936-token vocabulary
// and 512 tokens that is 311 MB each, most of a step's elementwise time (docs/benchmarks.md, issue
// 15). This one works through the rows in chunks of about a million elements: forward keeps only
// each row's log-sum-exp (fp32, or fp64 for fp64 logits), backward recomputes softmax from the
// logits and writes the gradient once, in the logits' dtype.
//
// The arithmetic is torch's: every row in the accumulation dtype (fp32 for bf16 and fp32 logits,
// fp64 for fp64), loss_r = logsumexp(x_r) - x_r[t_r], gradient g * (softmax(x_r) - onehot(t_r))
// rounded once to the logits' dtype; only the order of the sums differs (within the fp32 floor,
// tests/nn/test_cross_entropy.cpp). A target outside [0, vocab) that is not ignore_index is an
// error naming the row and the value.
#pragma once

#include <ATen/ATen.h>

namespace zeroshard::nn {

// logits [N, V] (bf16, fp32 or fp64), targets [N] int64. A 0-dim tensor in the accumulation
// dtype: the sum of the rows' losses (0 when every row is ignored).
at::Tensor cross_entropy_sum(const at::Tensor& logits, const at::Tensor& targets, int64_t ignore_index = -100);

// The mean over the rows that count, as torch.nn.functional.cross_entropy's default (NaN when
// every row is ignored, as torch's).
at::Tensor cross_entropy_mean(const at::Tensor& logits, const at::Tensor& targets, int64_t ignore_index = -100);

}  // namespace zeroshard::nn
