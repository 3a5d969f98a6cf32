// Rotary position embeddings, general form: a head's feature pairs are split over position axes
// (1 axis for text, 3 for video (frame, row, column), 4 for FLUX.2), each axis with its own
// number of pairs, and pair j of an axis with `d` features rotates by position * theta^(-2j/d).
//
// The two pairings in use:
//  - Interleaved: features (2j, 2j+1) form pair j (the complex-number form: Wan, FLUX.1,
//    Qwen-Image, Z-Image, FLUX.2).
//  - RotateHalf: features (j, j + D/2) form pair j (the transformers form: Llama, Qwen2/2.5/3).
//    With several axes, the D/2 angles are the axes' angles concatenated (Qwen2.5-VL mRoPE).
// Positions are given per token and axis, may be negative or fractional (centred grids), and
// the angles are computed in float64 whatever the activations' dtype, then cast once.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

namespace zeroshard::nn {

enum class RopePairing { Interleaved, RotateHalf };

struct RopeAngles {
  at::Tensor cos, sin;  // [N, D/2] float32 (or float64 via `dtype`): one angle per token and pair
};

// positions: [N, A] (any numeric dtype; one column per axis); axes_dim: features per axis (each
// even, summing to D); theta: the base. Throws naming the mismatch.
RopeAngles rope_angles(const at::Tensor& positions, const std::vector<int64_t>& axes_dim, double theta,
                       at::ScalarType dtype = at::kFloat);

// x: [..., N, D] (e.g. [B, H, N, D]); angles for the N tokens (or [B, N, D/2] per sample, broadcast
// over the heads when x is [B, H, N, D]). Returns x rotated, in x's dtype (computed in float32
// for reduced-precision x).
at::Tensor apply_rope(const at::Tensor& x, const RopeAngles& angles, RopePairing pairing);

// Grid positions of a (frames x rows x cols) token grid in (frame, row, col) order: [F*H*W, 3]
// float64, starting at `origin` per axis (negative origins give centred grids).
at::Tensor grid_positions(int64_t frames, int64_t rows, int64_t cols, std::vector<double> origin = {0, 0, 0});

}  // namespace zeroshard::nn
