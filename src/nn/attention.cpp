#include "nn/attention.h"

#include "nn/attention_blockwise.h"
#include "nn/matmul.h"

#include <c10/util/Exception.h>

#include <cmath>
#include <limits>

namespace zeroshard::nn {

namespace {

// The plain formulation: the [B, H, Tq, Tk] scores at once.
at::Tensor plain_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const AttentionOptions& o) {
  const int64_t B = q.size(0), H = q.size(1), Tq = q.size(2), D = q.size(3), Hkv = k.size(1), Tk = k.size(2);
  const at::Tensor kk = H == Hkv ? k : k.repeat_interleave(H / Hkv, 1);
  const at::Tensor vv = H == Hkv ? v : v.repeat_interleave(H / Hkv, 1);
  at::Tensor scores = nn::matmul(q, kk.transpose(-2, -1));
  scores = o.scale ? scores * *o.scale : scores / std::sqrt(static_cast<double>(D));
  // Softmax in float32 for reduced-precision inputs (float64 stays float64).
  scores = scores.to(q.scalar_type() == at::kDouble ? at::kDouble : at::kFloat);
  // keep[b, 1 or H, i, j]: whether query i may see key j.
  at::Tensor keep;
  auto combine = [&keep](const at::Tensor& m) { keep = keep.defined() ? keep.logical_and(m) : m; };
  if (o.causal) combine(at::ones({Tq, Tk}, at::kBool).tril(Tk - Tq).view({1, 1, Tq, Tk}));
  if (o.key_padding.defined()) combine(o.key_padding.to(at::kBool).view({B, 1, 1, Tk}));
  if (o.query_segments.defined()) combine(o.query_segments.view({B, 1, Tq, 1}).eq(o.key_segments.view({B, 1, 1, Tk})));
  if (keep.defined()) scores = scores.masked_fill(keep.logical_not(), std::numeric_limits<float>::lowest());
  const at::Tensor probs = at::softmax(scores, -1).to(q.scalar_type());
  return nn::matmul(probs, vv);
}

}  // namespace

at::Tensor attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const AttentionOptions& o) {
  TORCH_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4, "attention: q, k, v must be [B, H, T, D], got ", q.sizes(),
              ", ", k.sizes(), ", ", v.sizes());
  const int64_t B = q.size(0), H = q.size(1), Tq = q.size(2), D = q.size(3), Hkv = k.size(1), Tk = k.size(2);
  TORCH_CHECK(Hkv > 0 && H % Hkv == 0, "attention: ", H, " query heads are not a multiple of ", Hkv,
              " key/value heads");
  TORCH_CHECK(k.size(0) == B && v.size(0) == B && k.size(3) == D && v.size(2) == Tk && v.size(1) == Hkv,
              "attention: k ", k.sizes(), " / v ", v.sizes(), " do not match q ", q.sizes());
  TORCH_CHECK(k.scalar_type() == q.scalar_type() && v.scalar_type() == q.scalar_type(), "attention: q, k, v dtypes ",
              q.scalar_type(), ", ", k.scalar_type(), ", ", v.scalar_type(), " differ");
  TORCH_CHECK(!o.causal || Tk >= Tq, "attention: causal with ", Tk, " keys for ", Tq, " queries");
  if (o.key_padding.defined()) {
    TORCH_CHECK(o.key_padding.sizes() == at::IntArrayRef({B, Tk}), "attention: key_padding must be [", B, ", ", Tk,
                "], got ", o.key_padding.sizes());
  }
  if (o.query_segments.defined() || o.key_segments.defined()) {
    TORCH_CHECK(o.query_segments.defined() && o.key_segments.defined(),
                "attention: query_segments and key_segments go together");
    TORCH_CHECK(o.query_segments.sizes() == at::IntArrayRef({B, Tq}) &&
                    o.key_segments.sizes() == at::IntArrayRef({B, Tk}),
                "attention: segments must be [", B, ", ", Tq, "] and [", B, ", ", Tk, "], got ",
                o.query_segments.sizes(), " and ", o.key_segments.sizes());
  }
  TORCH_CHECK(o.block_q >= 0 && o.block_k >= 0, "attention: block sizes must be >= 0, got ", o.block_q, ", ",
              o.block_k);
  if (o.kernel == AttentionKernel::Plain) return plain_attention(q, k, v, o);
  return blockwise_attention(q, k, v, o);
}

}  // namespace zeroshard::nn
