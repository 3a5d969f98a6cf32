#include "nn/matmul.h"

#include <torch/autograd.h>

#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace zeroshard::nn {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

std::atomic<int> g_mode{static_cast<int>(Bf16Matmul::Auto)};

at::Tensor widen(const at::Tensor& t) { return t.defined() ? t.to(at::kFloat) : t; }
// autograd::Function::apply takes no undefined tensors: an absent bias travels as an empty one.
at::Tensor bias_arg(const at::Tensor& b, const at::Tensor& like) {
  return b.defined() ? b : at::empty({0}, like.options());
}
at::Tensor bias_of(const at::Tensor& arg) { return arg.numel() == 0 ? at::Tensor() : arg; }
at::Tensor narrow_to(const at::Tensor& t, const at::Tensor& like) {
  return t.defined() && like.defined() ? t.to(like.scalar_type()) : at::Tensor();
}

bool via_fp32(const at::Tensor& a, const at::Tensor& b) {
  return a.scalar_type() == at::kBFloat16 && b.scalar_type() == at::kBFloat16 &&
         resolved_bf16_matmul() == Bf16Matmul::ViaFp32;
}

bool builds_graph(std::initializer_list<at::Tensor> inputs) {
  if (!torch::autograd::GradMode::is_enabled()) return false;
  for (const auto& t : inputs) {
    if (t.defined() && t.requires_grad()) return true;
  }
  return false;
}

// The kernels below keep their bf16 inputs for backward and widen them again there.

struct LinearViaFp32 : torch::autograd::Function<LinearViaFp32> {
  static at::Tensor run(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) {
    return at::linear(widen(x), widen(w), widen(b)).to(x.scalar_type());
  }
  static variable_list forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) {
    ctx->save_for_backward({x, w, b});
    return {run(x, w, bias_of(b))};
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &x = saved[0], &w = saved[1], b = bias_of(saved[2]);
    const at::Tensor g = widen(grads[0]);
    const int64_t in = w.size(1), out = w.size(0);
    at::Tensor gx, gw, gb;
    if (ctx->needs_input_grad(0)) gx = narrow_to(at::matmul(g, widen(w)), x);
    const at::Tensor g2 = g.reshape({-1, out});
    if (ctx->needs_input_grad(1)) gw = narrow_to(at::mm(g2.t(), widen(x).reshape({-1, in})), w);
    if (b.defined() && ctx->needs_input_grad(2)) gb = narrow_to(g2.sum(0), b);
    return {gx, gw, gb};
  }
};

struct MatmulViaFp32 : torch::autograd::Function<MatmulViaFp32> {
  static at::Tensor run(const at::Tensor& a, const at::Tensor& b) {
    return at::matmul(widen(a), widen(b)).to(a.scalar_type());
  }
  static variable_list forward(AutogradContext* ctx, const at::Tensor& a, const at::Tensor& b) {
    ctx->save_for_backward({a, b});
    return {run(a, b)};
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &a = saved[0], &b = saved[1];
    const at::Tensor g = widen(grads[0]);
    at::Tensor ga, gb;
    if (ctx->needs_input_grad(0)) ga = narrow_to(at::matmul(g, widen(b).transpose(-2, -1)), a);
    if (ctx->needs_input_grad(1)) gb = narrow_to(at::matmul(widen(a).transpose(-2, -1), g), b);
    return {ga, gb};
  }
};

// y = x w^T without bias in libtorch's own products (fp32, fp64, or bf16 with the native
// kernel), with the weight's gradient returned as a new [out, in] tensor. at::linear's backward
// hands it out as the transpose of a transposed product, a view autograd will not add into: where
// one weight has two uses (a head tied to its embedding) the sparse rows of the second were summed
// out of place, a second [vocab, hidden] tensor per micro-batch. Here autograd adds them in place.
// Every product is the call at::linear's forward and backward make, with the same operands and
// strides, so the bits are the same.
struct LinearOwnWeightGrad : torch::autograd::Function<LinearOwnWeightGrad> {
  // Strided fp32, fp64 or bf16 operands; x contiguous with at least two rows (a single row can
  // carry column-major strides, for which libtorch's backward takes another product), w
  // contiguous [out > 1, in > 1].
  static bool applies(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) {
    const auto t = x.scalar_type();
    return !b.defined() && (t == at::kFloat || t == at::kDouble || t == at::kBFloat16) && w.scalar_type() == t &&
           x.layout() == at::kStrided && w.layout() == at::kStrided && x.dim() >= 2 && w.dim() == 2 &&
           x.is_contiguous() && w.is_contiguous() && w.size(0) > 1 && w.size(1) > 1 && x.size(-1) == w.size(1) &&
           x.numel() >= 2 * x.size(-1);
  }
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& w) {
    // Kept as libtorch's product keeps them: x only for the weight's gradient, w only for x's.
    ctx->save_for_backward({w.requires_grad() ? x : at::Tensor(), x.requires_grad() ? w : at::Tensor()});
    std::vector<int64_t> shape = x.sizes().vec();
    shape.back() = w.size(0);
    // Not a view (as at::matmul's own reshape): callers may modify the output in place.
    return at::_unsafe_view(at::mm(x.reshape({-1, w.size(1)}), w.t()), shape);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &x = saved[0], &w = saved[1];
    const at::Tensor g = grads[0].reshape({-1, grads[0].size(-1)});
    at::Tensor gx, gw;
    if (ctx->needs_input_grad(0)) {
      std::vector<int64_t> x_sizes = grads[0].sizes().vec();  // the output's, at the input's width
      x_sizes.back() = w.size(1);
      gx = at::_unsafe_view(at::mm(g, w), x_sizes);
    }
    if (ctx->needs_input_grad(1)) gw = at::mm(g.t(), x.reshape({-1, x.size(-1)}));
    return {gx, gw};
  }
};

// Conv2d and Conv3d (the image and video VAEs, patch embeddings): the spatial rank follows the
// weight; dilation 1, one group.
struct ConvViaFp32 : torch::autograd::Function<ConvViaFp32> {
  static at::Tensor run(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b, at::IntArrayRef stride,
                        at::IntArrayRef padding) {
    const std::vector<int64_t> ones(stride.size(), 1), zeros(stride.size(), 0);
    return at::convolution(widen(x), widen(w), widen(b), stride, padding, ones, /*transposed=*/false, zeros,
                           /*groups=*/1)
        .to(x.scalar_type());
  }
  static variable_list forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& w, const at::Tensor& b,
                               std::vector<int64_t> stride, std::vector<int64_t> padding) {
    ctx->save_for_backward({x, w, b});
    ctx->saved_data["stride"] = stride;
    ctx->saved_data["padding"] = padding;
    return {run(x, w, bias_of(b), stride, padding)};
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &x = saved[0], &w = saved[1], b = bias_of(saved[2]);
    const std::vector<int64_t> stride = ctx->saved_data["stride"].toIntVector();
    const std::vector<int64_t> padding = ctx->saved_data["padding"].toIntVector();
    const std::vector<int64_t> ones(stride.size(), 1), zeros(stride.size(), 0);
    const std::array<bool, 3> mask = {ctx->needs_input_grad(0), ctx->needs_input_grad(1),
                                      b.defined() && ctx->needs_input_grad(2)};
    const std::vector<int64_t> bias_sizes = {w.size(0)};
    auto [gx, gw, gb] = at::convolution_backward(widen(grads[0]), widen(x), widen(w),
                                                 b.defined() ? at::OptionalIntArrayRef(bias_sizes) : c10::nullopt,
                                                 stride, padding, ones, /*transposed=*/false, zeros,
                                                 /*groups=*/1, mask);
    return {mask[0] ? narrow_to(gx, x) : at::Tensor(), mask[1] ? narrow_to(gw, w) : at::Tensor(),
            mask[2] ? narrow_to(gb, b) : at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

// oneDNN's C GEMM on bf16 operands with an fp32 result, row-major like its dnnl_sgemm:
// C := alpha op(A) op(B) + beta C. Returns dnnl_success (0) or an error status.
using GemmBf16F32 = int (*)(char transa, char transb, int64_t M, int64_t N, int64_t K, float alpha, const void* A,
                            int64_t lda, const void* B, int64_t ldb, float beta, float* C, int64_t ldc);

// The function, or nullptr where it is absent or does not run here: oneDNN implements it only on
// CPUs with AVX-512 and returns dnnl_unimplemented elsewhere, so one 1x1x1 product decides, once.
GemmBf16F32 gemm_bf16_f32() {
  static const GemmBf16F32 fn = []() -> GemmBf16F32 {
    const auto f = reinterpret_cast<GemmBf16F32>(dlsym(RTLD_DEFAULT, "dnnl_gemm_bf16bf16f32"));
    if (f == nullptr) return nullptr;
    const uint16_t one = 0x3F80;  // 1.0 in bf16
    float c = 0.0f;
    return f('N', 'N', 1, 1, 1, 1.0f, &one, 1, &one, 1, 0.0f, &c, 1) == 0 && c == 1.0f ? f : nullptr;
  }();
  return fn;
}

// A row-major matrix view of x's last two dimensions for the GEMM: 'N' with its row stride, or
// 'T' (x stored transposed) with its column stride; false if neither dimension has unit stride.
bool gemm_layout(const at::Tensor& x, char& trans, int64_t& ld) {
  const int64_t rows = x.size(1), cols = x.size(2), s0 = x.stride(1), s1 = x.stride(2);
  if (s1 == 1 && s0 >= std::max<int64_t>(1, cols)) {
    trans = 'N';
    ld = s0;
    return true;
  }
  if (s0 == 1 && s1 >= std::max<int64_t>(1, rows)) {
    trans = 'T';
    ld = s1;
    return true;
  }
  return false;
}

}  // namespace

bool has_bf16_gemm_with_fp32_result() { return gemm_bf16_f32() != nullptr; }

bool bmm_bf16_into_fp32(const at::Tensor& a, const at::Tensor& b, const at::Tensor& c, float beta) {
  const GemmBf16F32 gemm = gemm_bf16_f32();
  if (gemm == nullptr) return false;
  TORCH_CHECK(a.dim() == 3 && b.dim() == 3 && c.dim() == 3 && a.size(0) == b.size(0) && a.size(0) == c.size(0) &&
                  a.size(2) == b.size(1) && c.size(1) == a.size(1) && c.size(2) == b.size(2),
              "bmm_bf16_into_fp32: a [N, M, K], b [N, K, N'] and c [N, M, N'] expected, got ", a.sizes(), ", ",
              b.sizes(), " and ", c.sizes());
  TORCH_CHECK(a.scalar_type() == at::kBFloat16 && b.scalar_type() == at::kBFloat16 && c.scalar_type() == at::kFloat,
              "bmm_bf16_into_fp32: bf16 a and b and an fp32 c expected");
  char ta = 'N', tb = 'N';
  int64_t lda = 0, ldb = 0;
  const int64_t M = c.size(1), N = c.size(2), K = a.size(2);
  if (!gemm_layout(a, ta, lda) || !gemm_layout(b, tb, ldb) || c.stride(2) != 1 || c.stride(1) < std::max<int64_t>(1, N)) {
    return false;
  }
  const auto* pa = a.data_ptr<at::BFloat16>();
  const auto* pb = b.data_ptr<at::BFloat16>();
  float* pc = c.data_ptr<float>();
  for (int64_t i = 0; i < c.size(0); ++i) {
    const int status = gemm(ta, tb, M, N, K, 1.0f, pa + i * a.stride(0), lda, pb + i * b.stride(0), ldb, beta,
                            pc + i * c.stride(0), c.stride(1));
    TORCH_CHECK(status == 0, "bmm_bf16_into_fp32: oneDNN's dnnl_gemm_bf16bf16f32 returned status ", status, " for ", M,
                "x", K, " @ ", K, "x", N);
  }
  return true;
}

Bf16Matmul parse_bf16_matmul(const std::string& name) {
  if (name == "auto") return Bf16Matmul::Auto;
  if (name == "native") return Bf16Matmul::Native;
  if (name == "via_fp32") return Bf16Matmul::ViaFp32;
  throw std::invalid_argument("bf16 matmul kernel '" + name + "': expected auto, native or via_fp32");
}

std::string bf16_matmul_name(Bf16Matmul mode) {
  switch (mode) {
    case Bf16Matmul::Auto: return "auto";
    case Bf16Matmul::Native: return "native";
    case Bf16Matmul::ViaFp32: return "via_fp32";
  }
  return "?";
}

bool cpu_has_bf16_dot_product() {
  static const bool has = [] {
    std::ifstream in("/proc/cpuinfo");
    std::string line;
    while (std::getline(in, line)) {
      // x86: "flags : ... avx512_bf16 ... amx_bf16"; Arm: "Features : ... bf16".
      if (line.rfind("flags", 0) != 0 && line.rfind("Features", 0) != 0) continue;
      std::istringstream words(line.substr(line.find(':') + 1));
      std::string w;
      while (words >> w) {
        if (w == "avx512_bf16" || w == "amx_bf16" || w == "bf16") return true;
      }
      return false;  // the first CPU's line speaks for all
    }
    return false;
  }();
  return has;
}

void set_bf16_matmul(Bf16Matmul mode) { g_mode.store(static_cast<int>(mode)); }

Bf16Matmul resolved_bf16_matmul() {
  const auto mode = static_cast<Bf16Matmul>(g_mode.load());
  if (mode != Bf16Matmul::Auto) return mode;
  return cpu_has_bf16_dot_product() ? Bf16Matmul::Native : Bf16Matmul::ViaFp32;
}

at::Tensor linear(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) {
  if (!via_fp32(x, w)) {
    if (builds_graph({x, w}) && LinearOwnWeightGrad::applies(x, w, b)) return LinearOwnWeightGrad::apply(x, w);
    return at::linear(x, w, b);
  }
  if (!builds_graph({x, w, b})) return LinearViaFp32::run(x, w, b);
  return LinearViaFp32::apply(x, w, bias_arg(b, w))[0];
}

at::Tensor matmul(const at::Tensor& a, const at::Tensor& b) {
  if (!via_fp32(a, b)) return at::matmul(a, b);
  if (!builds_graph({a, b})) return MatmulViaFp32::run(a, b);
  const bool same_batch = a.dim() == b.dim() && a.dim() >= 2 &&
                          a.sizes().slice(0, a.dim() - 2) == b.sizes().slice(0, b.dim() - 2);
  if (!same_batch) return at::matmul(widen(a), widen(b)).to(a.scalar_type());  // autograd keeps fp32 copies
  return MatmulViaFp32::apply(a, b)[0];
}

at::Tensor conv3d(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b, std::array<int64_t, 3> stride,
                  std::array<int64_t, 3> padding) {
  const std::vector<int64_t> s(stride.begin(), stride.end()), p(padding.begin(), padding.end());
  if (!via_fp32(x, w)) return at::conv3d(x, w, b, s, p);
  if (!builds_graph({x, w, b})) return ConvViaFp32::run(x, w, b, s, p);
  return ConvViaFp32::apply(x, w, bias_arg(b, w), s, p)[0];
}

at::Tensor conv2d(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b, std::array<int64_t, 2> stride,
                  std::array<int64_t, 2> padding) {
  const std::vector<int64_t> s(stride.begin(), stride.end()), p(padding.begin(), padding.end());
  if (!via_fp32(x, w)) return at::conv2d(x, w, b, s, p);
  if (!builds_graph({x, w, b})) return ConvViaFp32::run(x, w, b, s, p);
  return ConvViaFp32::apply(x, w, bias_arg(b, w), s, p)[0];
}

}  // namespace zeroshard::nn
