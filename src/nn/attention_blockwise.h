// The blockwise kernel behind nn::attention (see attention.h); called with validated arguments.
#pragma once

#include "nn/attention.h"

namespace zeroshard::nn {

at::Tensor blockwise_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                               const AttentionOptions& options);

}  // namespace zeroshard::nn
