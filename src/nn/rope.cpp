#include "nn/rope.h"

#include <c10/util/Exception.h>

#include <numeric>
#include <string>

namespace zeroshard::nn {

RopeAngles rope_angles(const at::Tensor& positions, const std::vector<int64_t>& axes_dim, double theta,
                       at::ScalarType dtype) {
  TORCH_CHECK(positions.dim() == 2 && positions.size(1) == static_cast<int64_t>(axes_dim.size()),
              "rope_angles: positions must be [N, ", axes_dim.size(), "] (one column per axis), got ",
              positions.sizes());
  std::vector<at::Tensor> parts;
  const at::Tensor pos = positions.to(at::kDouble);
  for (size_t a = 0; a < axes_dim.size(); ++a) {
    const int64_t d = axes_dim[a];
    TORCH_CHECK(d >= 0 && d % 2 == 0, "rope_angles: axis ", a, " has ", d, " features; each axis needs an even count");
    if (d == 0) continue;
    // theta^(-2j/d), j = 0 .. d/2 - 1, in float64 (the angles reach thousands of radians).
    const at::Tensor inv_freq = at::pow(theta, at::arange(0, d, 2, at::kDouble) / static_cast<double>(d)).reciprocal();
    parts.push_back(at::outer(pos.select(1, static_cast<int64_t>(a)), inv_freq));
  }
  const at::Tensor angles = at::cat(parts, -1);
  return {angles.cos().to(dtype), angles.sin().to(dtype)};
}

at::Tensor apply_rope(const at::Tensor& x, const RopeAngles& angles, RopePairing pairing) {
  const int64_t D = x.size(-1), half = D / 2;
  TORCH_CHECK(D % 2 == 0 && angles.cos.size(-1) == half, "apply_rope: head dim ", D, " needs ", half,
              " angles per token, got ", angles.cos.size(-1));
  const at::ScalarType out_dtype = x.scalar_type();
  const at::ScalarType compute = out_dtype == at::kDouble ? at::kDouble : at::kFloat;
  at::Tensor cos = angles.cos.to(compute), sin = angles.sin.to(compute);
  if (x.dim() == 4 && cos.dim() == 3) {  // per-sample angles [B, N, D/2] for x [B, H, N, D]
    cos = cos.unsqueeze(1);
    sin = sin.unsqueeze(1);
  }
  const at::Tensor xf = x.to(compute);
  at::Tensor out;
  if (pairing == RopePairing::Interleaved) {
    // (a, b) -> (a cos - b sin, a sin + b cos) on pairs (2j, 2j+1).
    const at::Tensor pairs = xf.unflatten(-1, {half, 2});
    const at::Tensor a = pairs.select(-1, 0), b = pairs.select(-1, 1);
    out = at::stack({a * cos - b * sin, a * sin + b * cos}, -1).flatten(-2);
  } else {
    // x * [cos, cos] + rotate_half(x) * [sin, sin], rotate_half(x) = [-x2, x1].
    const at::Tensor c = at::cat({cos, cos}, -1), s = at::cat({sin, sin}, -1);
    const at::Tensor x1 = xf.narrow(-1, 0, half), x2 = xf.narrow(-1, half, half);
    out = xf * c + at::cat({-x2, x1}, -1) * s;
  }
  return out.to(out_dtype);
}

at::Tensor grid_positions(int64_t frames, int64_t rows, int64_t cols, std::vector<double> origin) {
  TORCH_CHECK(origin.size() == 3, "grid_positions: origin needs 3 values");
  const at::Tensor f = at::arange(frames, at::kDouble) + origin[0];
  const at::Tensor r = at::arange(rows, at::kDouble) + origin[1];
  const at::Tensor c = at::arange(cols, at::kDouble) + origin[2];
  const auto grids = at::meshgrid({f, r, c}, "ij");
  return at::stack({grids[0].reshape({-1}), grids[1].reshape({-1}), grids[2].reshape({-1})}, 1);
}

}  // namespace zeroshard::nn
