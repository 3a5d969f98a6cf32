// RMS normalization over the last dimension, one pass each way: the norm of every series
// (nn::RMSNorm; Wan's, FLUX's per-head and T5's norms call the same function).
//
// The formula is transformers' (and diffusers'): y = weight * (x_f * rsqrt(mean(x_f^2) + eps))
// rounded to x's dtype before the product, with x_f = x in fp32 (fp64 for fp64). Written as six
// libtorch operators it costs seven passes forward and a dozen backward over the activations, and
// autograd keeps an fp32 copy of a bf16 input: on Qwen3-0.6B the four norms of a layer were most
// of a step's elementwise time (docs/benchmarks.md, issue 15). Here forward reads x once per row
// for the statistic and once for the output and keeps x and the per-row rsqrt; backward reads x
// and dy once more for dx and the weight's gradient.
//
// Only the order of the sums differs from the composition: a row's sum of squares runs in 16
// interleaved partial sums combined pairwise, and the weight's gradient sums blocks of 64 rows,
// then the blocks in order. Neither depends on the intra-op thread count, so the bits are the
// same with any number of threads. Backward keeps the arithmetic in fp32 (fp64) throughout: the
// composition rounds dy * weight to bf16 before the normalization's backward; this does not.
// Inputs whose dtype differs from the weight's take the composition itself.
#pragma once

#include <ATen/ATen.h>

namespace zeroshard::nn {

// x [..., D] (fp64, fp32, bf16 or fp16), weight [D]; the result has x's shape and dtype (the
// promoted dtype when weight's differs). Throws std::invalid_argument naming both shapes when
// weight is not [D].
at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps);

// The same formula in six libtorch operators (autograd differentiates it): what rms_norm runs
// when the dtypes differ, and the formulation its tests and bench compare with.
at::Tensor rms_norm_composed(const at::Tensor& x, const at::Tensor& weight, double eps);

}  // namespace zeroshard::nn
