#include "nn/activations.h"

#include "nn/vec_math.h"

#include <ATen/Parallel.h>
#include <torch/autograd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>

namespace zeroshard::nn {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// How elements are stored and computed: bf16 as raw bits computed in fp32, fp32, fp64.
template <typename S>
struct Io;
template <>
struct Io<uint16_t> {
  using A = float;
  __attribute__((always_inline)) static float load(uint16_t v) { return vec::bf16_to_float(v); }
  __attribute__((always_inline)) static uint16_t store(float a) { return vec::float_to_bf16(a); }
  __attribute__((always_inline)) static float exp(float a) { return vec::exp(a); }
};
template <>
struct Io<float> {
  using A = float;
  __attribute__((always_inline)) static float load(float v) { return v; }
  __attribute__((always_inline)) static float store(float a) { return a; }
  __attribute__((always_inline)) static float exp(float a) { return vec::exp(a); }
};
template <>
struct Io<double> {
  using A = double;
  static double load(double v) { return v; }
  static double store(double a) { return a; }
  static double exp(double a) { return std::exp(a); }
};

// A view of t as rows of its last dimension: the distance between rows, when t's last dimension
// has unit stride and the others collapse into one (a contiguous tensor, or one half of a
// projection's output); nullopt otherwise.
std::optional<int64_t> row_stride(const at::Tensor& t) {
  const int64_t n = t.dim(), cols = t.size(-1);
  if (cols != 1 && t.stride(-1) != 1) return std::nullopt;
  int64_t stride = -1, expect = 0;
  for (int64_t i = n - 2; i >= 0; --i) {
    if (t.size(i) == 1) continue;
    if (stride < 0) {
      stride = t.stride(i);
      expect = stride * t.size(i);
    } else if (t.stride(i) != expect) {
      return std::nullopt;
    } else {
      expect *= t.size(i);
    }
  }
  return stride < 0 ? cols : stride;
}

// 1 - sigma for sigma = 1 / (1 + e), without the cancellation of 1 - sigma: e * sigma, and 1 when
// e overflowed (sigma = 0, e * sigma would be inf * 0).
template <typename A>
__attribute__((always_inline)) inline A one_minus_sigma(A e, A sigma) {
  return sigma == A(0) ? A(1) : e * sigma;
}

// --- SwiGLU: y = round(silu(g)) * u; du = dy * round(silu(g)); dg = dy * u * silu'(g). ---

template <typename S>
__attribute__((always_inline)) inline void swiglu_forward_rows(const S* g, int64_t gs, const S* u, int64_t us, S* y,
                                                               int64_t rows, int64_t cols) {
  using IO = Io<S>;
  using A = typename IO::A;
  for (int64_t r = 0; r < rows; ++r) {
    const S* gr = g + r * gs;
    const S* ur = u + r * us;
    S* yr = y + r * cols;
    for (int64_t j = 0; j < cols; ++j) {
      const A gv = IO::load(gr[j]);
      const A s = IO::load(IO::store(gv / (A(1) + IO::exp(-gv))));
      yr[j] = IO::store(s * IO::load(ur[j]));
    }
  }
}

template <typename S>
__attribute__((always_inline)) inline void swiglu_backward_rows(const S* g, int64_t gs, const S* u, int64_t us,
                                                                const S* dy, S* dg, S* du, int64_t rows,
                                                                int64_t cols) {
  using IO = Io<S>;
  using A = typename IO::A;
  for (int64_t r = 0; r < rows; ++r) {
    const S* gr = g + r * gs;
    const S* ur = u + r * us;
    const int64_t o = r * cols;
    for (int64_t j = 0; j < cols; ++j) {
      const A gv = IO::load(gr[j]), uv = IO::load(ur[j]), dv = IO::load(dy[o + j]);
      const A e = IO::exp(-gv), d = A(1) + e;
      const A s = IO::load(IO::store(gv / d));  // the forward's rounded silu(g)
      const A sigma = A(1) / d;
      du[o + j] = IO::store(dv * s);
      dg[o + j] = IO::store(dv * uv * (sigma * (A(1) + gv * one_minus_sigma(e, sigma))));
    }
  }
}

// --- tanh-GELU: y = x * sigma(2z), z = sqrt(2/pi) (x + 0.044715 x^3); its derivative is
// sigma(2z) + 2 x sigma(2z) (1 - sigma(2z)) sqrt(2/pi) (1 + 3 * 0.044715 x^2). ---

constexpr double kSqrt2OverPi = 0.7978845608028654, kKappa = 0.044715;

template <typename S>
__attribute__((always_inline)) inline void gelu_forward_rows(const S* x, int64_t xs, S* y, int64_t rows, int64_t cols) {
  using IO = Io<S>;
  using A = typename IO::A;
  const A beta = static_cast<A>(kSqrt2OverPi), kappa = static_cast<A>(kKappa);
  for (int64_t r = 0; r < rows; ++r) {
    const S* xr = x + r * xs;
    S* yr = y + r * cols;
    for (int64_t j = 0; j < cols; ++j) {
      const A v = IO::load(xr[j]);
      const A z = beta * (v + kappa * (v * v * v));
      yr[j] = IO::store(v / (A(1) + IO::exp(A(-2) * z)));
    }
  }
}

template <typename S>
__attribute__((always_inline)) inline void gelu_backward_rows(const S* x, int64_t xs, const S* dy, S* dx, int64_t rows,
                                                              int64_t cols) {
  using IO = Io<S>;
  using A = typename IO::A;
  const A beta = static_cast<A>(kSqrt2OverPi), kappa = static_cast<A>(kKappa);
  for (int64_t r = 0; r < rows; ++r) {
    const S* xr = x + r * xs;
    const int64_t o = r * cols;
    for (int64_t j = 0; j < cols; ++j) {
      const A v = IO::load(xr[j]), dv = IO::load(dy[o + j]);
      const A z = beta * (v + kappa * (v * v * v));
      const A e = IO::exp(A(-2) * z);
      const A sigma = A(1) / (A(1) + e);
      const A dz = beta * (A(1) + A(3) * kappa * (v * v));
      dx[o + j] = IO::store(dv * (sigma + A(2) * v * sigma * one_minus_sigma(e, sigma) * dz));
    }
  }
}

// bf16 and fp32 loops, each compiled for AVX-512, AVX2 and baseline x86-64 (chosen at load time).
// The same arithmetic in each: no FMA contraction (CMakeLists.txt), so the same bits.
#define ZS_VECTOR_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#define ZS_CLONED_KERNELS(S, tag)                                                                            \
  ZS_VECTOR_CLONES void swiglu_forward_##tag(const S* g, int64_t gs, const S* u, int64_t us, S* y, int64_t rows, \
                                             int64_t cols) {                                                 \
    swiglu_forward_rows<S>(g, gs, u, us, y, rows, cols);                                                     \
  }                                                                                                          \
  ZS_VECTOR_CLONES void swiglu_backward_##tag(const S* g, int64_t gs, const S* u, int64_t us, const S* dy,     \
                                              S* dg, S* du, int64_t rows, int64_t cols) {                     \
    swiglu_backward_rows<S>(g, gs, u, us, dy, dg, du, rows, cols);                                           \
  }                                                                                                          \
  ZS_VECTOR_CLONES void gelu_forward_##tag(const S* x, int64_t xs, S* y, int64_t rows, int64_t cols) {         \
    gelu_forward_rows<S>(x, xs, y, rows, cols);                                                              \
  }                                                                                                          \
  ZS_VECTOR_CLONES void gelu_backward_##tag(const S* x, int64_t xs, const S* dy, S* dx, int64_t rows,          \
                                            int64_t cols) {                                                  \
    gelu_backward_rows<S>(x, xs, dy, dx, rows, cols);                                                        \
  }
ZS_CLONED_KERNELS(uint16_t, bf16)
ZS_CLONED_KERNELS(float, f32)
#undef ZS_CLONED_KERNELS
#undef ZS_VECTOR_CLONES

void swiglu_forward_f64(const double* g, int64_t gs, const double* u, int64_t us, double* y, int64_t rows, int64_t cols) {
  swiglu_forward_rows<double>(g, gs, u, us, y, rows, cols);
}
void swiglu_backward_f64(const double* g, int64_t gs, const double* u, int64_t us, const double* dy, double* dg,
                         double* du, int64_t rows, int64_t cols) {
  swiglu_backward_rows<double>(g, gs, u, us, dy, dg, du, rows, cols);
}
void gelu_forward_f64(const double* x, int64_t xs, double* y, int64_t rows, int64_t cols) {
  gelu_forward_rows<double>(x, xs, y, rows, cols);
}
void gelu_backward_f64(const double* x, int64_t xs, const double* dy, double* dx, int64_t rows, int64_t cols) {
  gelu_backward_rows<double>(x, xs, dy, dx, rows, cols);
}

bool fused_dtype(at::ScalarType t) { return t == at::kBFloat16 || t == at::kFloat || t == at::kDouble; }

// Calls f(storage pointer type tag) for t's dtype: uint16_t for bf16, float, double.
template <typename F>
void dispatch(at::ScalarType t, const F& f) {
  if (t == at::kBFloat16) {
    f(uint16_t{});
  } else if (t == at::kFloat) {
    f(float{});
  } else {
    f(double{});
  }
}

template <typename S>
S* ptr(const at::Tensor& t) {
  return static_cast<S*>(t.data_ptr());
}

// Rows of the given length per parallel task: about 32k elements, and every element computed on
// its own, so the split does not change any bit.
int64_t grain_rows(int64_t cols) { return std::max<int64_t>(1, 32768 / std::max<int64_t>(1, cols)); }

struct SwigluFunction : torch::autograd::Function<SwigluFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& gate, const at::Tensor& up) {
    const int64_t cols = gate.size(-1), rows = gate.numel() / cols, gs = *row_stride(gate), us = *row_stride(up);
    at::Tensor y = at::empty(gate.sizes(), gate.options().memory_format(at::MemoryFormat::Contiguous));
    dispatch(gate.scalar_type(), [&](auto tag) {
      using S = decltype(tag);
      const S *g = ptr<S>(gate), *u = ptr<S>(up);
      S* out = ptr<S>(y);
      at::parallel_for(0, rows, grain_rows(cols), [&](int64_t r0, int64_t r1) {
        if constexpr (std::is_same_v<S, uint16_t>) {
          swiglu_forward_bf16(g + r0 * gs, gs, u + r0 * us, us, out + r0 * cols, r1 - r0, cols);
        } else if constexpr (std::is_same_v<S, float>) {
          swiglu_forward_f32(g + r0 * gs, gs, u + r0 * us, us, out + r0 * cols, r1 - r0, cols);
        } else {
          swiglu_forward_f64(g + r0 * gs, gs, u + r0 * us, us, out + r0 * cols, r1 - r0, cols);
        }
      });
    });
    ctx->save_for_backward({gate, up});
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &gate = saved[0], &up = saved[1];
    const at::Tensor dy = grads[0].contiguous();
    const int64_t cols = gate.size(-1), rows = gate.numel() / cols, gs = *row_stride(gate), us = *row_stride(up);
    const auto opts = gate.options().memory_format(at::MemoryFormat::Contiguous);
    at::Tensor dg = at::empty(gate.sizes(), opts), du = at::empty(gate.sizes(), opts);
    dispatch(gate.scalar_type(), [&](auto tag) {
      using S = decltype(tag);
      const S *g = ptr<S>(gate), *u = ptr<S>(up), *d = ptr<S>(dy);
      S *pg = ptr<S>(dg), *pu = ptr<S>(du);
      at::parallel_for(0, rows, grain_rows(cols), [&](int64_t r0, int64_t r1) {
        const int64_t o = r0 * cols;
        if constexpr (std::is_same_v<S, uint16_t>) {
          swiglu_backward_bf16(g + r0 * gs, gs, u + r0 * us, us, d + o, pg + o, pu + o, r1 - r0, cols);
        } else if constexpr (std::is_same_v<S, float>) {
          swiglu_backward_f32(g + r0 * gs, gs, u + r0 * us, us, d + o, pg + o, pu + o, r1 - r0, cols);
        } else {
          swiglu_backward_f64(g + r0 * gs, gs, u + r0 * us, us, d + o, pg + o, pu + o, r1 - r0, cols);
        }
      });
    });
    return {ctx->needs_input_grad(0) ? dg : at::Tensor(), ctx->needs_input_grad(1) ? du : at::Tensor()};
  }
};

struct GeluTanhFunction : torch::autograd::Function<GeluTanhFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x) {
    const int64_t cols = x.size(-1), rows = x.numel() / cols, xs = *row_stride(x);
    at::Tensor y = at::empty(x.sizes(), x.options().memory_format(at::MemoryFormat::Contiguous));
    dispatch(x.scalar_type(), [&](auto tag) {
      using S = decltype(tag);
      const S* in = ptr<S>(x);
      S* out = ptr<S>(y);
      at::parallel_for(0, rows, grain_rows(cols), [&](int64_t r0, int64_t r1) {
        if constexpr (std::is_same_v<S, uint16_t>) {
          gelu_forward_bf16(in + r0 * xs, xs, out + r0 * cols, r1 - r0, cols);
        } else if constexpr (std::is_same_v<S, float>) {
          gelu_forward_f32(in + r0 * xs, xs, out + r0 * cols, r1 - r0, cols);
        } else {
          gelu_forward_f64(in + r0 * xs, xs, out + r0 * cols, r1 - r0, cols);
        }
      });
    });
    ctx->save_for_backward({x});
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const at::Tensor x = ctx->get_saved_variables()[0];
    const at::Tensor dy = grads[0].contiguous();
    const int64_t cols = x.size(-1), rows = x.numel() / cols, xs = *row_stride(x);
    at::Tensor dx = at::empty(x.sizes(), x.options().memory_format(at::MemoryFormat::Contiguous));
    dispatch(x.scalar_type(), [&](auto tag) {
      using S = decltype(tag);
      const S *in = ptr<S>(x), *d = ptr<S>(dy);
      S* out = ptr<S>(dx);
      at::parallel_for(0, rows, grain_rows(cols), [&](int64_t r0, int64_t r1) {
        const int64_t o = r0 * cols;
        if constexpr (std::is_same_v<S, uint16_t>) {
          gelu_backward_bf16(in + r0 * xs, xs, d + o, out + o, r1 - r0, cols);
        } else if constexpr (std::is_same_v<S, float>) {
          gelu_backward_f32(in + r0 * xs, xs, d + o, out + o, r1 - r0, cols);
        } else {
          gelu_backward_f64(in + r0 * xs, xs, d + o, out + o, r1 - r0, cols);
        }
      });
    });
    return {dx};
  }
};

bool fusable(const at::Tensor& t) {
  return t.dim() > 0 && t.numel() > 0 && t.device().is_cpu() && fused_dtype(t.scalar_type()) && row_stride(t).has_value();
}

}  // namespace

at::Tensor swiglu_composed(const at::Tensor& gate, const at::Tensor& up) { return at::silu(gate) * up; }

at::Tensor swiglu(const at::Tensor& gate, const at::Tensor& up) {
  if (!gate.sizes().equals(up.sizes())) {
    throw std::invalid_argument("swiglu: gate and up of one shape expected, got gate " + c10::str(gate.sizes()) +
                                " and up " + c10::str(up.sizes()));
  }
  if (gate.scalar_type() != up.scalar_type() || !fusable(gate) || !fusable(up)) return swiglu_composed(gate, up);
  return SwigluFunction::apply(gate, up);
}

at::Tensor gelu_tanh_composed(const at::Tensor& x) { return at::gelu(x, "tanh"); }

at::Tensor gelu_tanh(const at::Tensor& x) { return fusable(x) ? GeluTanhFunction::apply(x) : gelu_tanh_composed(x); }

}  // namespace zeroshard::nn
