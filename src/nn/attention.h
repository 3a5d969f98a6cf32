// Scaled-dot-product attention for every model of the zoo, in one function: self- and
// cross-attention, grouped-query heads, causal order, key-padding masks and block-diagonal masks
// for packed sequences. Masked keys get the lowest finite float added before the softmax (as
// transformers' eager attention does), so a query whose keys are all masked averages them
// instead of producing NaN. The softmax runs in float32 for reduced-precision inputs (float64
// stays float64).
//
// Two kernels compute it (AttentionOptions::kernel):
//  - blockwise (the default, src/nn/attention_blockwise.cpp): online softmax over key blocks,
//    FlashAttention-2 style; nothing of size Tq x Tk is ever held — memory is linear in the
//    sequence length — and backward recomputes each block's probabilities from the saved
//    log-sum-exp. Deterministic (the same bits on every call with the same thread count), so
//    activation checkpointing's bitwise recompute check holds.
//  - plain: the full score matrix, softmax, product — the definition, kept as the test oracle.
// Both agree within the floating-point floor of the compute dtype (tests/nn/test_attention.cpp).
#pragma once

#include <ATen/ATen.h>

#include <optional>

namespace zeroshard::nn {

enum class AttentionKernel { Blockwise, Plain };

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
  AttentionKernel kernel = AttentionKernel::Blockwise;
  // Blockwise tiles: query positions and keys per block; 0: the defaults below.
  int64_t block_q = 0, block_k = 0;
};

// Default tiles of the blockwise kernel, measured on this project's CPU (docs/benchmarks.md,
// bench/bench_attention.cpp). Causal attention uses kAttentionBlockQ keys per tile as well.
inline constexpr int64_t kAttentionBlockQ = 256;
inline constexpr int64_t kAttentionBlockK = 512;

// q [B, H, Tq, D]; k, v [B, Hkv, Tk, D] with H a multiple of Hkv (kv head j serves query heads
// j*H/Hkv .. (j+1)*H/Hkv - 1). Returns [B, H, Tq, D] in q's dtype.
at::Tensor attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const AttentionOptions& options = {});

}  // namespace zeroshard::nn
