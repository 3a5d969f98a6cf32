// The bf16 product kernels of src/nn/matmul.h: via_fp32 computes what a bf16 GEMM with fp32
// accumulation computes (checked against the fp32 product of the same bf16 operands, and
// against libtorch's native bf16 kernels), its gradients match fp32 autograd, and its graph
// keeps bf16 operands only (counted at the allocator). A linear layer without bias keeps
// libtorch's bits in every dtype while its weight gradient takes a tied embedding's rows in place.
#include "nn/matmul.h"
#include "support/tensor_compare.h"
#include "util/tensor_memory.h"

#include <gtest/gtest.h>
#include <limits>
#include <torch/torch.h>

using namespace zeroshard;
using zeroshard::testing::rel_diff;

namespace {

// Restores the process-wide kernel choice after a test.
struct KernelScope {
  explicit KernelScope(nn::Bf16Matmul mode) { nn::set_bf16_matmul(mode); }
  ~KernelScope() { nn::set_bf16_matmul(nn::Bf16Matmul::Auto); }
};

torch::Tensor bf16_randn(std::vector<int64_t> shape, uint64_t seed) {
  torch::manual_seed(seed);
  return torch::randn(shape).to(torch::kBFloat16);
}

// Largest |a - b| relative to the largest |b|.
}  // namespace

TEST(Bf16Matmul, NamesParseAndAutoResolvesFromTheCpu) {
  EXPECT_EQ(nn::parse_bf16_matmul("via_fp32"), nn::Bf16Matmul::ViaFp32);
  EXPECT_EQ(nn::parse_bf16_matmul("native"), nn::Bf16Matmul::Native);
  EXPECT_THROW(nn::parse_bf16_matmul("fast"), std::invalid_argument);
  KernelScope scope(nn::Bf16Matmul::Auto);
  EXPECT_EQ(nn::resolved_bf16_matmul(),
            nn::cpu_has_bf16_dot_product() ? nn::Bf16Matmul::Native : nn::Bf16Matmul::ViaFp32);
}

TEST(Bf16Matmul, ViaFp32ForwardIsTheFp32ProductOfTheBf16OperandsRoundedOnce) {
  KernelScope scope(nn::Bf16Matmul::ViaFp32);
  torch::NoGradGuard no_grad;
  const auto x = bf16_randn({3, 7, 64}, 1), w = bf16_randn({48, 64}, 2), b = bf16_randn({48}, 3);
  const auto y = nn::linear(x, w, b);
  ASSERT_EQ(y.scalar_type(), torch::kBFloat16);
  EXPECT_TRUE(torch::equal(y, torch::linear(x.to(torch::kFloat), w.to(torch::kFloat), b.to(torch::kFloat))
                                   .to(torch::kBFloat16)));
  const auto a = bf16_randn({2, 3, 16, 32}, 4), c = bf16_randn({2, 3, 32, 8}, 5);
  EXPECT_TRUE(torch::equal(nn::matmul(a, c),
                           torch::matmul(a.to(torch::kFloat), c.to(torch::kFloat)).to(torch::kBFloat16)));
  // The same arithmetic as libtorch's own bf16 kernels, up to the order of the fp32 sums.
  KernelScope native(nn::Bf16Matmul::Native);
  const auto y_native = nn::linear(x, w, b);
  EXPECT_LT(rel_diff(y, y_native), 1e-2);
}

TEST(Bf16Matmul, ViaFp32GradientsMatchFp32Autograd) {
  KernelScope scope(nn::Bf16Matmul::ViaFp32);
  auto check = [](const std::vector<torch::Tensor>& bf16_inputs,
                  const std::function<torch::Tensor(const std::vector<torch::Tensor>&)>& op, const char* what) {
    std::vector<torch::Tensor> ours, ref;
    for (const auto& t : bf16_inputs) {
      ours.push_back(t.clone().requires_grad_(true));
      ref.push_back(t.to(torch::kFloat).requires_grad_(true));
    }
    const auto y = op(ours);
    const auto upstream = torch::randn(y.sizes());
    (y.to(torch::kFloat) * upstream).sum().backward();
    (op(ref) * upstream).sum().backward();
    for (size_t i = 0; i < ours.size(); ++i) {
      ASSERT_TRUE(ours[i].grad().defined()) << what << " input " << i;
      EXPECT_EQ(ours[i].grad().scalar_type(), torch::kBFloat16) << what;
      EXPECT_LT(rel_diff(ours[i].grad(), ref[i].grad()), 2e-2) << what << " input " << i;
    }
  };
  torch::manual_seed(7);
  check({bf16_randn({4, 5, 32}, 11), bf16_randn({24, 32}, 12), bf16_randn({24}, 13)},
        [](const std::vector<torch::Tensor>& t) { return nn::linear(t[0], t[1], t[2]); }, "linear");
  check({bf16_randn({4, 32}, 14), bf16_randn({24, 32}, 15)},
        [](const std::vector<torch::Tensor>& t) { return nn::linear(t[0], t[1]); }, "linear without bias");
  check({bf16_randn({2, 3, 9, 16}, 16), bf16_randn({2, 3, 16, 5}, 17)},
        [](const std::vector<torch::Tensor>& t) { return nn::matmul(t[0], t[1]); }, "batched matmul");
  check({bf16_randn({1, 4, 3, 8, 8}, 18), bf16_randn({6, 4, 3, 3, 3}, 19), bf16_randn({6}, 20)},
        [](const std::vector<torch::Tensor>& t) { return nn::conv3d(t[0], t[1], t[2], {1, 2, 2}, {0, 1, 1}); },
        "conv3d");
  check({bf16_randn({2, 4, 9, 9}, 23), bf16_randn({6, 4, 3, 3}, 24), bf16_randn({6}, 25)},
        [](const std::vector<torch::Tensor>& t) { return nn::conv2d(t[0], t[1], t[2], {2, 2}, {1, 1}); },
        "conv2d");
}

TEST(Bf16Matmul, ViaFp32KeepsOnlyTheBf16OperandsForBackward) {
  util::track_tensor_memory();
  KernelScope scope(nn::Bf16Matmul::ViaFp32);
  const auto x = bf16_randn({256, 512}, 21).requires_grad_(true);
  const auto w = bf16_randn({512, 512}, 22).requires_grad_(true);
  const int64_t before = util::live_tensor_bytes();
  auto y = nn::linear(nn::linear(x, w), w);  // the inner output is an activation kept for backward
  const int64_t kept = util::live_tensor_bytes() - before;
  // Kept: the inner output (bf16) and the final output (bf16); the fp32 copies made for the
  // GEMMs are gone. An fp32-widening composite would keep 2 + 1 fp32 copies on top.
  EXPECT_EQ(kept, 2 * 256 * 512 * 2);
  y.to(torch::kFloat).sum().backward();
  EXPECT_TRUE(x.grad().defined() && w.grad().defined());
}

// nn::linear without bias in libtorch's own products (fp32, fp64, bf16 native): libtorch's bits,
// and a weight gradient autograd can add a tied embedding's sparse rows into.
TEST(Bf16Matmul, LinearWithoutBiasIsLibtorchsBitwiseAndATiedHeadsRowsAreAddedInPlace) {
  util::track_tensor_memory();
  KernelScope scope(nn::Bf16Matmul::Native);
  for (const auto dtype : {torch::kBFloat16, torch::kFloat, torch::kDouble}) {
    const std::string name = c10::toString(dtype);
    auto randn = [dtype](std::vector<int64_t> shape, uint64_t seed) { return bf16_randn(std::move(shape), seed).to(dtype); };
    // Output and both gradients bitwise those of torch::linear's autograd: 3-D and 2-D inputs, a
    // trainable and a frozen weight, and a single row (left to torch::linear: see applies()).
    struct Case {
      std::vector<int64_t> x;
      int64_t out;
      bool weight_grad;
    };
    for (const Case& c : {Case{{3, 7, 64}, 48, true}, Case{{5, 64}, 40, false}, Case{{1, 64}, 40, true}}) {
      const auto x0 = randn(c.x, 31), w0 = randn({c.out, c.x.back()}, 32);
      auto x1 = x0.clone().requires_grad_(true), w1 = w0.clone().requires_grad_(c.weight_grad);
      auto x2 = x0.clone().requires_grad_(true), w2 = w0.clone().requires_grad_(c.weight_grad);
      auto y1 = nn::linear(x1, w1), y2 = torch::linear(x2, w2);
      EXPECT_TRUE(torch::equal(y1, y2)) << name;
      // The output is a tensor of its own: autograd lets a caller modify it in place.
      y1.mul_(2);
      y2.mul_(2);
      const auto upstream = randn(y1.sizes().vec(), 33);
      y1.backward(upstream);
      y2.backward(upstream);
      EXPECT_TRUE(torch::equal(x1.grad(), x2.grad())) << name;
      if (c.weight_grad) {
        EXPECT_TRUE(torch::equal(w1.grad(), w2.grad())) << name;
      } else {
        EXPECT_FALSE(w1.grad().defined()) << name;
      }
    }
    // A frozen weight keeps no input alive for backward, as libtorch's product does not.
    {
      const auto w = randn({48, 64}, 36);
      const auto leaf = randn({256, 64}, 37).requires_grad_(true);
      auto kept = [&](bool ours) {
        const int64_t before = util::live_tensor_bytes();
        torch::Tensor y;
        {
          const auto x = leaf * 2;  // an activation the caller drops
          y = ours ? nn::linear(x, w) : torch::linear(x, w);
        }
        return util::live_tensor_bytes() - before;
      };
      EXPECT_EQ(kept(true), kept(false)) << name;
    }
    // A head tied to its embedding (sparse rows): the same summed gradient, and no second
    // [vocab, hidden] tensor while backward adds the two (torch::linear's weight gradient is a
    // view autograd will not add into, so it sums out of place).
    const int64_t V = 4096, D = 64, T = 32;
    const auto w0 = randn({V, D}, 34);
    const auto ids = torch::randint(V, {1, T});
    const auto upstream = randn({1, T, V}, 35);
    auto backward_peak = [&](bool ours, torch::Tensor* grad) {
      auto w = w0.clone().requires_grad_(true);
      const auto h = torch::embedding(w, ids, -1, false, /*sparse=*/true);
      const auto y = ours ? nn::linear(h, w) : torch::linear(h, w);
      const int64_t live = util::live_tensor_bytes();
      util::reset_peak_tensor_bytes();
      y.backward(upstream);
      *grad = w.grad();
      return util::peak_tensor_bytes() - live;
    };
    torch::Tensor g_ours, g_torch;
    const int64_t peak_ours = backward_peak(true, &g_ours), peak_torch = backward_peak(false, &g_torch);
    EXPECT_TRUE(torch::equal(g_ours, g_torch)) << name;
    const int64_t table = V * D * static_cast<int64_t>(c10::elementSize(dtype));  // one [vocab, hidden] tensor
    EXPECT_LT(peak_ours, 2 * table) << name << "; torch::linear: " << peak_torch << " B";
    EXPECT_GE(peak_torch, 2 * table) << name << "; ours: " << peak_ours << " B";
  }
}

// oneDNN's bf16 GEMM with an fp32 result (the blockwise attention's products): the fp32 product
// of the bf16 operands, not rounded to bf16, for tiles and their transposed views, accumulating
// with beta = 1 and ignoring c's old contents with beta = 0; a layout it cannot take is refused
// and c left as it was. Debian's libtorch loads a oneDNN that exports the function; it runs on
// CPUs with AVX-512, which every CPU with bf16 dot-product instructions has. Elsewhere every call
// must be refused, leaving c as it was (the attention then takes libtorch's products).
TEST(Bf16Matmul, Bf16GemmWithFp32ResultIsTheFp32ProductOfTheBf16Operands) {
  torch::NoGradGuard no_grad;
  if (!nn::has_bf16_gemm_with_fp32_result()) {
    ASSERT_FALSE(nn::cpu_has_bf16_dot_product()) << "dnnl_gemm_bf16bf16f32 missing or failing on a bf16 CPU";
    auto c = torch::zeros({2, 4, 3});
    EXPECT_FALSE(nn::bmm_bf16_into_fp32(bf16_randn({2, 4, 5}, 1), bf16_randn({2, 5, 3}, 2), c, 0.0f));
    EXPECT_EQ(c.abs().max().item<float>(), 0.0f);
    return;
  }
  const auto a = bf16_randn({3, 37, 64}, 11);
  const auto bt = bf16_randn({3, 29, 64}, 12);  // b is its transposed view [3, 64, 29]
  const auto b = bt.transpose(1, 2);
  const auto exact = torch::bmm(a.to(torch::kDouble), b.to(torch::kDouble));
  auto c = torch::full({3, 37, 29}, std::numeric_limits<float>::quiet_NaN());
  ASSERT_TRUE(nn::bmm_bf16_into_fp32(a, b, c, 0.0f));
  EXPECT_LT(rel_diff(c, exact), 2e-6);
  // Rounded to bf16 the result would be ~1e-3 off: it is not.
  EXPECT_GT(rel_diff(c.to(torch::kBFloat16), exact), 1e-4);
  // beta = 1 into a view with a row stride wider than its rows; a's transposed view as the left operand.
  auto wide = torch::randn({3, 37, 40});
  const auto before = wide.clone();
  auto view = wide.narrow(2, 5, 29);
  const auto at = a.transpose(1, 2).contiguous().transpose(1, 2);  // a's values, column-major
  ASSERT_TRUE(nn::bmm_bf16_into_fp32(at, b, view, 1.0f));
  EXPECT_LT(rel_diff(view, before.narrow(2, 5, 29).to(torch::kDouble) + exact), 2e-6);
  EXPECT_TRUE(torch::equal(wide.narrow(2, 0, 5), before.narrow(2, 0, 5)));
  EXPECT_TRUE(torch::equal(wide.narrow(2, 34, 6), before.narrow(2, 34, 6)));
  // Neither dimension with unit stride: refused, c unchanged.
  const auto strided = bf16_randn({3, 37, 128}, 13).slice(2, 0, 128, 2);
  auto untouched = torch::zeros({3, 37, 29});
  EXPECT_FALSE(nn::bmm_bf16_into_fp32(strided, b, untouched, 0.0f));
  EXPECT_EQ(untouched.abs().max().item<float>(), 0.0f);
}
