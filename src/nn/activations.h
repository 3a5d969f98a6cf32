// The feed-forward activations, one pass each way: SwiGLU's silu(gate) * up (Qwen3, Llama, the
// MoE experts, Z-Image, FLUX.2) and the tanh-approximated GELU (Wan, FLUX.1, T5).
//
// As libtorch operators, SwiGLU is silu then a product: two passes forward, three backward
// (the product's two gradients, then silu's), and autograd keeps gate, up and silu(gate). Here
// forward reads gate and up once and keeps them; backward reads gate, up and dy once and writes
// both gradients. GELU is one libtorch operator each way already; here its tanh is written as a
// logistic function of one exp, x * tanh-GELU = x / (1 + e^(-2z)), which has no cancellation in
// either tail and needs no tanh.
//
// Forward follows transformers' (and diffusers') order in every dtype: silu(gate) is rounded to the
// dtype before the product, and each value is computed in fp32 (fp64 for fp64). Backward keeps its
// arithmetic in fp32 to the end; the composition rounds dy * up to bf16 before silu's backward.
// Every element is computed on its own, so the bits do not depend on the intra-op thread count,
// and the loops have no FMA contraction, so they do not depend on the CPU's vector width either.
// e^x in fp32 is our own (src/nn/vec_math.h, within 1 ulp); libtorch's Sleef exp is also within
// 1 ulp, so the two agree to the fp32 floor, not bit for bit.
//
// Inputs in fp16, inputs of two dtypes, and inputs without a unit stride in the last dimension
// take the composition (swiglu_composed, gelu_tanh_composed).
#pragma once

#include <ATen/ATen.h>

namespace zeroshard::nn {

// silu(gate) * up. gate and up have one shape (views such as the halves of one projection are
// read in place). Throws std::invalid_argument naming both shapes when they differ.
at::Tensor swiglu(const at::Tensor& gate, const at::Tensor& up);
at::Tensor swiglu_composed(const at::Tensor& gate, const at::Tensor& up);  // at::silu(gate) * up

// PyTorch's gelu(x, approximate="tanh"): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
at::Tensor gelu_tanh(const at::Tensor& x);
at::Tensor gelu_tanh_composed(const at::Tensor& x);  // at::gelu(x, "tanh")

}  // namespace zeroshard::nn
