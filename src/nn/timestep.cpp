#include "nn/timestep.h"

#include <c10/util/Exception.h>

#include <cmath>

namespace zeroshard::nn {

at::Tensor timestep_sinusoid(const at::Tensor& t, int64_t dim, const SinusoidOptions& o, at::ScalarType dtype) {
  TORCH_CHECK(t.dim() == 1, "timestep_sinusoid: t must be [B], got ", t.sizes());
  const int64_t half = dim / 2;
  TORCH_CHECK(half > o.freq_shift, "timestep_sinusoid: dim ", dim, " too small for freq_shift ", o.freq_shift);
  const at::Tensor freqs =
      at::exp(-std::log(o.max_period) * at::arange(half, at::kDouble) / (static_cast<double>(half) - o.freq_shift));
  const at::Tensor args = (t.to(at::kDouble) * o.scale).unsqueeze(1) * freqs.unsqueeze(0);
  at::Tensor emb = o.cos_first ? at::cat({args.cos(), args.sin()}, -1) : at::cat({args.sin(), args.cos()}, -1);
  if (dim % 2 == 1) emb = at::constant_pad_nd(emb, {0, 1});
  return emb.to(dtype);
}

}  // namespace zeroshard::nn
