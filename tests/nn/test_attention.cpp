// The blockwise attention kernel (src/nn/attention_blockwise.cpp) against the plain formulation
// (AttentionKernel::Plain): outputs and gradients for every mask kind, GQA, cross-attention,
// float32, float64 and bf16 (both bf16 product kernels), with tiles small enough that every case
// spans several query and key blocks (including partial last blocks); determinism; and memory
// counted at the allocator growing linearly in the sequence length.
#include "nn/attention.h"
#include "nn/layers.h"
#include "nn/matmul.h"
#include "util/tensor_memory.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

using namespace zeroshard;

namespace {

struct Result {
  at::Tensor out, dq, dk, dv;
};

// Forward, then backward of <out, w> for a fixed random w: the gradients of every input.
Result run(const at::Tensor& q0, const at::Tensor& k0, const at::Tensor& v0, const at::Tensor& w,
           const nn::AttentionOptions& o) {
  at::Tensor q = q0.detach().clone().requires_grad_(true), k = k0.detach().clone().requires_grad_(true),
             v = v0.detach().clone().requires_grad_(true);
  at::Tensor out = nn::attention(q, k, v, o);
  (out.to(at::kDouble) * w).sum().backward();
  // The kernel must not touch its inputs (autograd saved them).
  EXPECT_TRUE(q.detach().equal(q0) && k.detach().equal(k0) && v.detach().equal(v0)) << "inputs modified";
  return {out.detach(), q.grad(), k.grad(), v.grad()};
}

// max |a - b| / max |b| (b the reference), in float64.
double rel(const at::Tensor& a, const at::Tensor& b) {
  const at::Tensor bb = b.to(at::kDouble);
  return (a.to(at::kDouble) - bb).abs().max().item<double>() / std::max(bb.abs().max().item<double>(), 1e-300);
}

struct Case {
  std::string name;
  int64_t B, H, Hkv, Tq, Tk, D;
  std::function<void(nn::AttentionOptions&)> masks;
};

// Every mask kind; T = 37/29 so that tiles of 8 queries x 5 keys leave partial blocks.
std::vector<Case> cases() {
  return {
      {"full", 2, 4, 4, 37, 37, 16, [](nn::AttentionOptions&) {}},
      {"causal", 2, 4, 4, 37, 37, 16, [](nn::AttentionOptions& o) { o.causal = true; }},
      {"causal_kv_cache", 2, 4, 2, 11, 37, 16, [](nn::AttentionOptions& o) { o.causal = true; }},
      {"gqa_scale", 2, 6, 2, 37, 37, 8,
       [](nn::AttentionOptions& o) {
         o.causal = true;
         o.scale = 0.37;
       }},
      {"cross", 2, 4, 2, 37, 29, 16, [](nn::AttentionOptions&) {}},
      {"key_padding", 3, 4, 4, 37, 37, 16,
       [](nn::AttentionOptions& o) {
         // Batch 0 all real, batch 1 the last 20 keys padded, batch 2 every key padded (every
         // row starved: the plain formulation averages all values).
         at::Tensor kp = at::ones({3, 37}, at::kBool);
         kp[1].narrow(0, 17, 20).fill_(false);
         kp[2].fill_(false);
         o.key_padding = kp;
       }},
      {"causal_left_padding", 2, 4, 2, 37, 37, 16,
       [](nn::AttentionOptions& o) {
         // Left padding with causal order: queries at padded positions see only padded keys
         // (starved rows) while the blocks to their right are skipped.
         o.causal = true;
         at::Tensor kp = at::ones({2, 37}, at::kBool);
         kp[0].narrow(0, 0, 13).fill_(false);
         o.key_padding = kp;
       }},
      {"packed_segments", 2, 4, 2, 37, 37, 16,
       [](nn::AttentionOptions& o) {
         o.causal = true;
         at::Tensor seg = at::zeros({2, 37}, at::kLong);
         seg[0].narrow(0, 9, 20).fill_(1);
         seg[0].narrow(0, 29, 8).fill_(2);
         seg[1].narrow(0, 30, 7).fill_(1);
         o.query_segments = o.key_segments = seg;
       }},
      {"segments_without_keys", 1, 2, 2, 12, 12, 8,
       [](nn::AttentionOptions& o) {
         // Queries of segment 5 have no key of their segment: starved rows.
         o.query_segments = at::tensor({0, 0, 0, 1, 1, 1, 5, 5, 5, 1, 1, 1}, at::kLong).view({1, 12});
         o.key_segments = at::tensor({0, 0, 0, 1, 1, 1, 2, 2, 2, 1, 1, 1}, at::kLong).view({1, 12});
       }},
  };
}

struct Inputs {
  at::Tensor q, k, v, w;
};

Inputs inputs(const Case& c, at::ScalarType dtype, uint64_t seed) {
  torch::manual_seed(seed);
  Inputs in;
  in.q = at::randn({c.B, c.H, c.Tq, c.D}, at::kDouble).to(dtype);
  in.k = at::randn({c.B, c.Hkv, c.Tk, c.D}, at::kDouble).to(dtype);
  in.v = at::randn({c.B, c.Hkv, c.Tk, c.D}, at::kDouble).to(dtype);
  in.w = at::randn({c.B, c.H, c.Tq, c.D}, at::kDouble);
  return in;
}

nn::AttentionOptions options(const Case& c, nn::AttentionKernel kernel, int64_t bq = 8, int64_t bk = 5) {
  nn::AttentionOptions o;
  c.masks(o);
  o.kernel = kernel;
  o.block_q = bq;
  o.block_k = bk;
  return o;
}

void expect_close(const Result& got, const Result& want, double tol, const std::string& what) {
  EXPECT_LT(rel(got.out, want.out), tol) << what << ": output";
  EXPECT_LT(rel(got.dq, want.dq), tol) << what << ": dq";
  EXPECT_LT(rel(got.dk, want.dk), tol) << what << ": dk";
  EXPECT_LT(rel(got.dv, want.dv), tol) << what << ": dv";
}

}  // namespace

TEST(BlockwiseAttention, EqualsThePlainFormulationInFloat64) {
  for (const Case& c : cases()) {
    const Inputs in = inputs(c, at::kDouble, 1);
    const Result want = run(in.q, in.k, in.v, in.w, options(c, nn::AttentionKernel::Plain));
    for (auto [bq, bk] : {std::pair<int64_t, int64_t>{8, 5}, {3, 64}, {64, 7}, {0, 0}}) {
      const Result got = run(in.q, in.k, in.v, in.w, options(c, nn::AttentionKernel::Blockwise, bq, bk));
      expect_close(got, want, 1e-12, c.name + " tiles " + std::to_string(bq) + "x" + std::to_string(bk));
      EXPECT_EQ(got.out.scalar_type(), at::kDouble);
      EXPECT_EQ(got.dq.scalar_type(), at::kDouble);
    }
  }
}

TEST(BlockwiseAttention, EqualsThePlainFormulationInFloat32) {
  for (const Case& c : cases()) {
    const Inputs in = inputs(c, at::kFloat, 2);
    const Result plain = run(in.q, in.k, in.v, in.w, options(c, nn::AttentionKernel::Plain));
    const Result got = run(in.q, in.k, in.v, in.w, options(c, nn::AttentionKernel::Blockwise));
    // The float32 floor: both within a few ulps of the float64 truth, and of each other.
    const Result truth = run(in.q.to(at::kDouble), in.k.to(at::kDouble), in.v.to(at::kDouble), in.w,
                             options(c, nn::AttentionKernel::Plain));
    expect_close(got, plain, 2e-6, c.name + " vs plain fp32");
    expect_close(got, truth, 2e-6, c.name + " vs fp64 truth");
    EXPECT_EQ(got.out.scalar_type(), at::kFloat);
  }
}

TEST(BlockwiseAttention, Bf16WithEitherProductKernelIsAsCloseToTheTruthAsThePlainOne) {
  const nn::Bf16Matmul before = nn::resolved_bf16_matmul();
  for (nn::Bf16Matmul mode : {nn::Bf16Matmul::ViaFp32, nn::Bf16Matmul::Native}) {
    nn::set_bf16_matmul(mode);
    for (const Case& c : cases()) {
      const Inputs in = inputs(c, at::kBFloat16, 3);
      // The truth: float64 on the same (bf16-rounded) inputs.
      const Result truth = run(in.q.to(at::kDouble), in.k.to(at::kDouble), in.v.to(at::kDouble), in.w,
                               options(c, nn::AttentionKernel::Plain));
      const Result plain = run(in.q, in.k, in.v, in.w, options(c, nn::AttentionKernel::Plain));
      const Result got = run(in.q, in.k, in.v, in.w, options(c, nn::AttentionKernel::Blockwise));
      const std::string what = c.name + " bf16 " + nn::bf16_matmul_name(mode);
      EXPECT_EQ(got.out.scalar_type(), at::kBFloat16) << what;
      EXPECT_EQ(got.dq.scalar_type(), at::kBFloat16) << what;
      // bf16 carries 8 bits: a few of its ulps off the truth, and no worse than the plain kernel
      // (which rounds the scores themselves to bf16) by more than one ulp.
      const double ulp = 1.0 / 128;
      for (auto [g, p, t, n] : {std::tuple{got.out, plain.out, truth.out, "out"}, {got.dq, plain.dq, truth.dq, "dq"},
                                {got.dk, plain.dk, truth.dk, "dk"}, {got.dv, plain.dv, truth.dv, "dv"}}) {
        EXPECT_LT(rel(g, t), 2 * ulp) << what << " " << n;
        EXPECT_LT(rel(g, t), rel(p, t) + ulp) << what << " " << n;
      }
    }
  }
  nn::set_bf16_matmul(before);
}

TEST(BlockwiseAttention, CausalDefaultTilesAcrossSeveralBlocksEqualThePlainFormulation) {
  // The causal default tiles (kAttentionBlockQ queries x as many keys) with masks straddling
  // their boundaries: 600 positions span three tiles, two packed segments meet inside one.
  const Case c{"causal_default_tiles", 2, 4, 2, 600, 600, 16, [](nn::AttentionOptions& o) {
                 o.causal = true;
                 const at::Tensor seg = (at::arange(600, at::kLong) >= 300).to(at::kLong).view({1, 600}).repeat({2, 1});
                 o.query_segments = o.key_segments = seg;
               }};
  const Inputs in = inputs(c, at::kDouble, 7);
  const Result want = run(in.q, in.k, in.v, in.w, options(c, nn::AttentionKernel::Plain));
  expect_close(run(in.q, in.k, in.v, in.w, options(c, nn::AttentionKernel::Blockwise, 0, 0)), want, 1e-12,
               "fp64 default tiles");
  const nn::Bf16Matmul before = nn::resolved_bf16_matmul();
  nn::set_bf16_matmul(nn::Bf16Matmul::Native);  // bf16 scores, masked at bf16's lowest value
  const Inputs b = inputs(c, at::kBFloat16, 7);
  const Result truth = run(b.q.to(at::kDouble), b.k.to(at::kDouble), b.v.to(at::kDouble), b.w,
                           options(c, nn::AttentionKernel::Plain));
  const Result got = run(b.q, b.k, b.v, b.w, options(c, nn::AttentionKernel::Blockwise, 0, 0));
  nn::set_bf16_matmul(before);
  expect_close(got, truth, 2.0 / 128, "bf16 native default tiles");
}

TEST(BlockwiseAttention, IsDeterministic) {
  // Activation checkpointing's bitwise recompute check needs the same bits on every call.
  const Case c = cases()[7];  // packed segments, causal, GQA
  const Inputs in = inputs(c, at::kFloat, 4);
  const nn::AttentionOptions o = options(c, nn::AttentionKernel::Blockwise);
  const Result a = run(in.q, in.k, in.v, in.w, o), b = run(in.q, in.k, in.v, in.w, o);
  EXPECT_TRUE(a.out.equal(b.out));
  EXPECT_TRUE(a.dq.equal(b.dq));
  EXPECT_TRUE(a.dk.equal(b.dk));
  EXPECT_TRUE(a.dv.equal(b.dv));
}

TEST(BlockwiseAttention, NonContiguousInputsAndAWritableOutput) {
  // The zoo passes q/k/v as transposed views of [B, T, H, D] projections, and may write the
  // output in place.
  torch::manual_seed(5);
  const at::Tensor qx = at::randn({2, 19, 4, 8}), kx = at::randn({2, 19, 2, 8}), vx = at::randn({2, 19, 2, 8});
  nn::AttentionOptions o;
  o.causal = true;
  o.block_q = 4;
  o.block_k = 6;
  nn::AttentionOptions p = o;
  p.kernel = nn::AttentionKernel::Plain;
  const at::Tensor w = at::randn({2, 4, 19, 8}, at::kDouble);
  const Result got = run(qx.transpose(1, 2), kx.transpose(1, 2), vx.transpose(1, 2), w, o);
  const Result want = run(qx.transpose(1, 2), kx.transpose(1, 2), vx.transpose(1, 2), w, p);
  expect_close(got, want, 2e-6, "transposed inputs");
  at::Tensor q = qx.transpose(1, 2).detach().requires_grad_(true);
  at::Tensor out = nn::attention(q, kx.transpose(1, 2), vx.transpose(1, 2), o);
  EXPECT_NO_THROW(out.mul_(2).sum().backward());
}

TEST(BlockwiseAttention, MemoryCountedAtTheAllocatorGrowsLinearly) {
  util::track_tensor_memory();
  // Peak bytes above the inputs during one forward + backward (H = 2, D = 16, tiles 64 x 64).
  auto peak = [](int64_t n, nn::AttentionKernel kernel) {
    torch::manual_seed(6);
    at::Tensor q = at::randn({1, 2, n, 16}).requires_grad_(true), k = at::randn({1, 2, n, 16}).requires_grad_(true),
               v = at::randn({1, 2, n, 16}).requires_grad_(true), w = at::randn({1, 2, n, 16});
    nn::AttentionOptions o;
    o.causal = true;
    o.kernel = kernel;
    o.block_q = o.block_k = 64;
    const int64_t before = util::live_tensor_bytes();
    util::reset_peak_tensor_bytes();
    (nn::attention(q, k, v, o) * w).sum().backward();
    return util::peak_tensor_bytes() - before;
  };
  const int64_t n = 2048, score_matrix = n * n * 4;  // one head's float32 scores
  const int64_t small = peak(n / 4, nn::AttentionKernel::Blockwise), large = peak(n, nn::AttentionKernel::Blockwise);
  EXPECT_LT(large, score_matrix / 4) << "blockwise peak " << large << " bytes at n = " << n;
  EXPECT_LT(static_cast<double>(large) / static_cast<double>(small), 5.0)
      << "blockwise: " << small << " bytes at n = " << n / 4 << ", " << large << " at n = " << n << " (4x tokens)";
  // The same measure sees the plain formulation's n^2: the test can fail.
  const int64_t plain_small = peak(n / 4, nn::AttentionKernel::Plain), plain_large = peak(n, nn::AttentionKernel::Plain);
  EXPECT_GT(plain_large, score_matrix);
  EXPECT_GT(static_cast<double>(plain_large) / static_cast<double>(plain_small), 12.0);
}

TEST(BlockwiseAttention, LayersKeepThePlainPathUpToTheThresholdAndScaleAboveIt) {
  // nn::causal_attention / nn::full_attention (the llama series, the toy DiTs): the plain
  // formulation up to kPlainAttentionMaxKeys keys (the default job's bits), the blockwise kernel
  // above — equal within the float32 floor, and without the n^2 scores (counted at the allocator).
  util::track_tensor_memory();
  const int64_t n = nn::kPlainAttentionMaxKeys + 3;
  torch::manual_seed(7);
  const at::Tensor q = at::randn({1, 2, n, 8}), k = at::randn({1, 1, n, 8}), v = at::randn({1, 1, n, 8});
  nn::AttentionOptions plain;
  plain.causal = true;
  plain.kernel = nn::AttentionKernel::Plain;
  const int64_t before = util::live_tensor_bytes();
  util::reset_peak_tensor_bytes();
  const at::Tensor got = nn::causal_attention(q, k, v);
  EXPECT_LT(util::peak_tensor_bytes() - before, n * n * 4) << "causal_attention kept the score matrix above the threshold";
  EXPECT_LT(rel(got, nn::attention(q, k, v, plain)), 2e-6);
  const at::Tensor kf = k.expand({1, 2, n, 8}).contiguous(), vf = v.expand({1, 2, n, 8}).contiguous();
  nn::AttentionOptions plain_full;
  plain_full.kernel = nn::AttentionKernel::Plain;
  util::reset_peak_tensor_bytes();
  const at::Tensor got_full = nn::full_attention(q, kf, vf);
  EXPECT_LT(util::peak_tensor_bytes() - before, n * n * 4) << "full_attention kept the score matrix above the threshold";
  EXPECT_LT(rel(got_full, nn::attention(q, kf, vf, plain_full)), 2e-6);
  // At the threshold: the plain formulation itself, bit for bit.
  const int64_t m = nn::kPlainAttentionMaxKeys;
  const at::Tensor qs = q.narrow(2, 0, m), ks = k.narrow(2, 0, m), vs = v.narrow(2, 0, m);
  const at::Tensor kk = ks.repeat_interleave(2, 1), vv = vs.repeat_interleave(2, 1);
  at::Tensor scores = nn::matmul(qs, kk.transpose(-2, -1)) / std::sqrt(8.0);
  scores = scores.masked_fill(at::ones({m, m}, at::kBool).triu(1), -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(nn::causal_attention(qs, ks, vs).equal(nn::matmul(at::softmax(scores, -1), vv)));
}
