#include "nn/rms_norm.h"

#include "nn/vec_math.h"

#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <torch/autograd.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace zeroshard::nn {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

constexpr int64_t kBlockRows = 64;  // rows per partial sum of the weight's gradient

using vec::lane_sum;

// x's value normalized and rounded to x's dtype, as the forward multiplies it by the weight.
template <typename T, typename A>
inline A normalized(T x, A inv) {
  return static_cast<A>(static_cast<T>(static_cast<A>(x) * inv));
}

template <typename T>
void forward_rows(const T* x, const T* w, T* y, at::opmath_type<T>* rstd, int64_t rows, int64_t D, double eps) {
  using A = at::opmath_type<T>;
  const A eps_a = static_cast<A>(eps), inv_d = static_cast<A>(D);
  at::parallel_for(0, rows, kBlockRows, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const T* xr = x + r * D;
      T* yr = y + r * D;
      const A ss = lane_sum<A>(D, [xr](int64_t j) {
        const A v = static_cast<A>(xr[j]);
        return v * v;
      });
      const A inv = A(1) / std::sqrt(ss / inv_d + eps_a);
      rstd[r] = inv;
      for (int64_t j = 0; j < D; ++j) yr[j] = static_cast<T>(normalized(xr[j], inv) * static_cast<A>(w[j]));
    }
  });
}

// dx (when dx != nullptr) and, per block of kBlockRows rows, the block's share of the weight's
// gradient (when part != nullptr: [blocks, D]).
template <typename T>
void backward_rows(const T* x, const T* w, const at::opmath_type<T>* rstd, const T* dy, T* dx,
                   at::opmath_type<T>* part, int64_t rows, int64_t D) {
  using A = at::opmath_type<T>;
  const int64_t blocks = (rows + kBlockRows - 1) / kBlockRows;
  const A inv_d = A(1) / static_cast<A>(D);
  at::parallel_for(0, blocks, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      A* pb = part != nullptr ? part + b * D : nullptr;
      if (pb != nullptr) std::fill(pb, pb + D, A(0));
      for (int64_t r = b * kBlockRows; r < std::min(rows, (b + 1) * kBlockRows); ++r) {
        const T* xr = x + r * D;
        const T* gr = dy + r * D;
        const A inv = rstd[r];
        if (pb != nullptr) {
          for (int64_t j = 0; j < D; ++j) pb[j] += static_cast<A>(gr[j]) * normalized(xr[j], inv);
        }
        if (dx == nullptr) continue;
        // n = x * inv, inv = (mean(x^2) + eps)^(-1/2): dx = inv * (dn - x * inv^2 * mean(dn * x)), dn = dy * w.
        const A dot = lane_sum<A>(D, [xr, gr, w](int64_t j) {
          return static_cast<A>(gr[j]) * static_cast<A>(w[j]) * static_cast<A>(xr[j]);
        });
        const A c = inv * inv * dot * inv_d;
        T* dr = dx + r * D;
        for (int64_t j = 0; j < D; ++j) {
          const A dn = static_cast<A>(gr[j]) * static_cast<A>(w[j]);
          dr[j] = static_cast<T>(inv * (dn - static_cast<A>(xr[j]) * c));
        }
      }
    }
  });
}

struct RmsNormFunction : torch::autograd::Function<RmsNormFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight, double eps) {
    const at::Tensor xc = x.contiguous(), wc = weight.contiguous();
    const int64_t D = x.size(-1), rows = x.numel() / D;
    at::Tensor y = at::empty(x.sizes(), x.options().memory_format(at::MemoryFormat::Contiguous));
    at::Tensor rstd = at::empty({rows}, x.options().dtype(x.scalar_type() == at::kDouble ? at::kDouble : at::kFloat));
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, x.scalar_type(), "zs::rms_norm", [&] {
      forward_rows<scalar_t>(xc.data_ptr<scalar_t>(), wc.data_ptr<scalar_t>(), y.data_ptr<scalar_t>(),
                             rstd.data_ptr<at::opmath_type<scalar_t>>(), rows, D, eps);
    });
    ctx->save_for_backward({xc, wc, rstd});
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &x = saved[0], &w = saved[1], &rstd = saved[2];
    const at::Tensor dy = grads[0].contiguous();
    const int64_t D = x.size(-1), rows = x.numel() / D, blocks = (rows + kBlockRows - 1) / kBlockRows;
    const bool want_dx = ctx->needs_input_grad(0), want_dw = ctx->needs_input_grad(1);
    at::Tensor dx = want_dx ? at::empty_like(x) : at::Tensor();
    at::Tensor part = want_dw ? at::empty({blocks, D}, rstd.options()) : at::Tensor();
    at::Tensor dw_acc = want_dw ? at::zeros({D}, rstd.options()) : at::Tensor();
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, x.scalar_type(), "zs::rms_norm_backward", [&] {
      using A = at::opmath_type<scalar_t>;
      backward_rows<scalar_t>(x.data_ptr<scalar_t>(), w.data_ptr<scalar_t>(), rstd.data_ptr<A>(),
                              dy.data_ptr<scalar_t>(), want_dx ? dx.data_ptr<scalar_t>() : nullptr,
                              want_dw ? part.data_ptr<A>() : nullptr, rows, D);
      if (!want_dw) return;
      // The blocks' partial sums, added in block order.
      A* sum = dw_acc.data_ptr<A>();
      const A* p = part.data_ptr<A>();
      for (int64_t b = 0; b < blocks; ++b) {
        for (int64_t j = 0; j < D; ++j) sum[j] += p[b * D + j];
      }
    });
    return {dx, want_dw ? dw_acc.to(w.scalar_type()) : at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor rms_norm_composed(const at::Tensor& x, const at::Tensor& weight, double eps) {
  const at::Tensor xf = x.to(x.scalar_type() == at::kDouble ? at::kDouble : at::kFloat);
  return (xf * at::rsqrt(xf.pow(2).mean(-1, /*keepdim=*/true) + eps)).to(x.scalar_type()) * weight;
}

at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  if (x.dim() < 1 || weight.dim() != 1 || weight.size(0) != x.size(-1)) {
    throw std::invalid_argument("rms_norm: weight [D] for an input [..., D] expected, got weight " +
                                c10::str(weight.sizes()) + " and input " + c10::str(x.sizes()));
  }
  if (x.scalar_type() != weight.scalar_type() || x.numel() == 0 || !at::isFloatingType(x.scalar_type())) {
    return rms_norm_composed(x, weight, eps);
  }
  return RmsNormFunction::apply(x, weight, eps);
}

}  // namespace zeroshard::nn
