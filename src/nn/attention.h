// Scaled-dot-product attention for every model of the zoo, in one function: self- and
// cross-attention, grouped-query heads, causal order, key-padding masks and block-diagonal masks
// for packed sequences. Masked keys get the lowest finite float added before the softmax (as
// transformers' eager attention does), so a query whose keys are all masked averages them
// instead of producing NaN. The softmax runs in float32 for reduced-precision inputs.
#pragma once

#include <ATen/ATen.h>

#include <optional>

namespace zeroshard::nn {

struct AttentionOptions {
  // Query i (of Tq) sits at position Tk - Tq + i and sees keys 0 .. Tk - Tq + i (the earlier keys
  // come from a KV cache when Tk > Tq).
  bool causal = false;
  // [B, Tk] bool, true where the key is real; undefined: every key is real.
  at::Tensor key_padding;
  // [B, Tq] / [B, Tk] int64 segment ids of packed sequences: a query sees only keys of its own
  // segment (combined with causal for packed LM batches). Undefined: one segment.
  at::Tensor query_segments, key_segments;
  // Scores are multiplied by this; unset: divided by sqrt(head_dim).
  std::optional<double> scale;
};

// q [B, H, Tq, D]; k, v [B, Hkv, Tk, D] with H a multiple of Hkv (kv head j serves query heads
// j*H/Hkv .. (j+1)*H/Hkv - 1). Returns [B, H, Tq, D] in q's dtype.
at::Tensor attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const AttentionOptions& options = {});

}  // namespace zeroshard::nn
