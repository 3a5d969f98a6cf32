#include "nn/cross_entropy.h"

#include <torch/autograd.h>

#include <algorithm>
#include <stdexcept>
#include <string>

namespace zeroshard::nn {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

at::ScalarType accumulation_dtype(const at::Tensor& logits) {
  return logits.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
}

// Rows per chunk: about a million elements (4 MB in fp32), at least one row.
int64_t chunk_rows(int64_t vocab) { return std::max<int64_t>(1, (int64_t{1} << 20) / std::max<int64_t>(1, vocab)); }

void check_targets(const at::Tensor& targets, int64_t vocab, int64_t ignore_index) {
  const at::Tensor bad = (targets.ne(ignore_index) & (targets.lt(0) | targets.ge(vocab))).nonzero();
  if (bad.size(0) == 0) return;
  const int64_t row = bad[0][0].item<int64_t>();
  throw std::invalid_argument("cross_entropy: target " + std::to_string(targets[row].item<int64_t>()) + " of row " +
                              std::to_string(row) + " is outside [0, " + std::to_string(vocab) +
                              ") and is not ignore_index " + std::to_string(ignore_index));
}

struct CrossEntropySum : torch::autograd::Function<CrossEntropySum> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& logits, const at::Tensor& targets,
                            int64_t ignore_index) {
    const int64_t N = logits.size(0), V = logits.size(1), step = chunk_rows(V);
    const at::ScalarType acc = accumulation_dtype(logits);
    const at::Tensor valid = targets.ne(ignore_index);
    const at::Tensor safe = at::where(valid, targets, at::zeros_like(targets)).unsqueeze(1);  // [N, 1]
    at::Tensor lse = at::empty({N}, logits.options().dtype(acc));
    at::Tensor total = at::zeros({}, logits.options().dtype(acc));
    for (int64_t r = 0; r < N; r += step) {
      const int64_t n = std::min(step, N - r);
      const at::Tensor x = logits.narrow(0, r, n).to(acc);
      const at::Tensor l = at::logsumexp(x, {1});
      lse.narrow(0, r, n).copy_(l);
      const at::Tensor picked = x.gather(1, safe.narrow(0, r, n)).squeeze(1);
      total.add_(((l - picked) * valid.narrow(0, r, n)).sum());
    }
    ctx->save_for_backward({logits, lse, safe, valid});
    return total;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &logits = saved[0], &lse = saved[1], &safe = saved[2], &valid = saved[3];
    const int64_t N = logits.size(0), V = logits.size(1), step = chunk_rows(V);
    const at::ScalarType acc = lse.scalar_type();
    const at::Tensor g = grads[0].to(acc);
    const at::Tensor scale = valid.to(acc) * g;  // [N]: g for the rows that count, 0 for ignored ones
    at::Tensor grad = at::empty_like(logits, at::MemoryFormat::Contiguous);
    for (int64_t r = 0; r < N; r += step) {
      const int64_t n = std::min(step, N - r);
      // A copy even when the logits are already in acc (.to would return the saved logits
      // themselves, and the in-place softmax below would overwrite the caller's tensor).
      at::Tensor p = logits.narrow(0, r, n).to(acc, /*non_blocking=*/false, /*copy=*/true);
      p.sub_(lse.narrow(0, r, n).unsqueeze(1)).exp_();  // softmax
      p.scatter_add_(1, safe.narrow(0, r, n), at::full({n, 1}, -1.0, p.options()));
      p.mul_(scale.narrow(0, r, n).unsqueeze(1));
      grad.narrow(0, r, n).copy_(p);
    }
    return {grad, at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor cross_entropy_sum(const at::Tensor& logits, const at::Tensor& targets, int64_t ignore_index) {
  if (logits.dim() != 2 || targets.dim() != 1 || logits.size(0) != targets.size(0)) {
    throw std::invalid_argument("cross_entropy: logits [N, V] and targets [N] expected, got " +
                                std::to_string(logits.dim()) + "-d logits and " + std::to_string(targets.dim()) +
                                "-d targets");
  }
  if (!at::isFloatingType(logits.scalar_type()) || targets.scalar_type() != at::kLong) {
    throw std::invalid_argument("cross_entropy: floating-point logits and int64 targets expected");
  }
  check_targets(targets, logits.size(1), ignore_index);
  return CrossEntropySum::apply(logits, targets, ignore_index);
}

at::Tensor cross_entropy_mean(const at::Tensor& logits, const at::Tensor& targets, int64_t ignore_index) {
  const at::Tensor sum = cross_entropy_sum(logits, targets, ignore_index);
  return sum / targets.ne(ignore_index).sum().to(sum.scalar_type());
}

}  // namespace zeroshard::nn
