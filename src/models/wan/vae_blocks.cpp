// The Wan VAE's units: residual block, attention block, resample (see vae.h for the rules).
#include "models/wan/vae.h"

#include "nn/attention.h"
#include "nn/matmul.h"
#include "nn/norms.h"

#include <cmath>
#include <stdexcept>

namespace zeroshard::models::wan {

VaeRMSNormImpl::VaeRMSNormImpl(int64_t channels, bool images, bool with_bias)
    : scale_(std::sqrt(static_cast<double>(channels))) {
  const std::vector<int64_t> shape = images ? std::vector<int64_t>{channels, 1, 1} : std::vector<int64_t>{channels, 1, 1, 1};
  gamma = register_parameter("gamma", nn::new_parameter(shape));
  if (with_bias) bias = register_parameter("bias", nn::new_parameter(shape));
  if (!nn::DeferredInit::active()) {
    torch::NoGradGuard no_grad;
    gamma.fill_(1.0);
  }
}

torch::Tensor VaeRMSNormImpl::forward(const torch::Tensor& x) {
  // F.normalize over channels: x / max(||x||_2, 1e-12); then * sqrt(C) * gamma (+ bias). No
  // mean subtraction, no epsilon inside a root.
  const at::ScalarType dt = nn::norm_dtype(x);
  const at::Tensor xf = x.to(dt);
  const at::Tensor norm = xf.norm(2, {1}, /*keepdim=*/true).clamp_min(1e-12);
  at::Tensor y = xf / norm * scale_ * gamma.to(dt).view({-1, 1, 1, 1});
  if (bias.defined()) y = y + bias.to(dt).view({-1, 1, 1, 1});
  return y.to(x.scalar_type());
}

Conv2dParamsImpl::Conv2dParamsImpl(int64_t in_channels, int64_t out_channels, int64_t kernel) {
  weight = register_parameter("weight", nn::new_parameter({out_channels, in_channels, kernel, kernel}));
  bias = register_parameter("bias", nn::new_parameter({out_channels}));
}

torch::Tensor Conv2dParamsImpl::forward(const torch::Tensor& x, int64_t stride, int64_t padding) {
  // A 2-D convolution on every frame is a 3-D one with a kernel one frame deep.
  return nn::conv3d(x.to(weight.scalar_type()), weight.unsqueeze(2), bias, {1, stride, stride}, {0, padding, padding});
}

// --- the unit protocol ------------------------------------------------------------------------

torch::Tensor VaeUnit::forward(const torch::Tensor& x, nn::FeatureCache* cache) {
  if (cache == nullptr) {
    return call_hooked(x, [this](const torch::Tensor& in) { return run(in, nullptr); });
  }
  const size_t n = static_cast<size_t>(slots()), first = cache->next;
  // This unit's slots go in as tensors (none on the first chunk) and the refilled ones come
  // out: the body depends on its inputs only, as a sharded or recomputed unit must.
  std::vector<at::Tensor> inputs = {x};
  if (first + n <= cache->slots.size()) {
    for (size_t s = 0; s < n; ++s) inputs.push_back(cache->slots[first + s]);
  }
  std::vector<at::Tensor> out = call_hooked(inputs, [this, n](const std::vector<at::Tensor>& in) {
    nn::FeatureCache local;
    local.slots.assign(in.begin() + 1, in.end());
    std::vector<at::Tensor> result = {run(in[0], &local)};
    if (local.slots.size() != n) {
      throw std::logic_error("Wan VAE unit left " + std::to_string(local.slots.size()) + " cache slots, declared " +
                             std::to_string(n));
    }
    result.insert(result.end(), local.slots.begin(), local.slots.end());
    return result;
  });
  cache->slots.resize(std::max(cache->slots.size(), first + n));
  for (size_t s = 0; s < n; ++s) cache->slots[first + s] = out[s + 1];
  cache->next = first + n;
  return out[0];
}

// --- residual block ---------------------------------------------------------------------------

ResidualBlockImpl::ResidualBlockImpl(int64_t in_dim, int64_t out_dim) {
  // upstream: residual = Sequential(RMS_norm, SiLU, conv, RMS_norm, SiLU, Dropout, conv).
  auto residual = register_module("residual", std::make_shared<torch::nn::Module>("Sequential"));
  norm1 = residual->register_module("0", VaeRMSNorm(in_dim, /*images=*/false));
  conv1 = residual->register_module("2", nn::CausalConv3d(in_dim, out_dim, std::array<int64_t, 3>{3, 3, 3}));
  norm2 = residual->register_module("3", VaeRMSNorm(out_dim, false));
  conv2 = residual->register_module("6", nn::CausalConv3d(out_dim, out_dim, std::array<int64_t, 3>{3, 3, 3}));
  if (in_dim != out_dim) {
    shortcut = register_module("shortcut", nn::CausalConv3d(in_dim, out_dim, std::array<int64_t, 3>{1, 1, 1}));
  }
}

torch::Tensor ResidualBlockImpl::run(const torch::Tensor& x, nn::FeatureCache* cache) {
  const at::Tensor h = shortcut ? shortcut(x, nullptr) : x;  // 1x1x1: nothing to carry
  at::Tensor y = conv1(torch::silu(norm1(x)), cache);
  y = conv2(torch::silu(norm2(y)), cache);  // dropout: eval
  return y + h;
}

// --- attention block --------------------------------------------------------------------------

AttentionBlockImpl::AttentionBlockImpl(int64_t dim) {
  norm = register_module("norm", VaeRMSNorm(dim, /*images=*/true));
  to_qkv = register_module("to_qkv", Conv2dParams(dim, 3 * dim, 1));
  proj = register_module("proj", Conv2dParams(dim, dim, 1));
}

torch::Tensor AttentionBlockImpl::run(const torch::Tensor& x, nn::FeatureCache* /*cache*/) {
  // One head, per frame over its h*w positions; q, k, v = the three channel thirds of the 1x1
  // conv; softmax(q k^T / sqrt(C)) v; a 1x1 projection; plus the input.
  const int64_t B = x.size(0), C = x.size(1), T = x.size(2), H = x.size(3), W = x.size(4);
  const at::Tensor h = norm(x).to(to_qkv->weight.scalar_type()).permute({0, 2, 3, 4, 1}).reshape({B * T, H * W, C});
  const at::Tensor qkv = nn::linear(h, to_qkv->weight.view({3 * C, C}), to_qkv->bias);  // [BT, HW, 3C]
  auto part = [&](int64_t i) { return qkv.narrow(2, i * C, C).unsqueeze(1); };       // [BT, 1, HW, C]
  const at::Tensor a = nn::attention(part(0), part(1), part(2)).squeeze(1);          // [BT, HW, C]
  const at::Tensor y = nn::linear(a, proj->weight.view({C, C}), proj->bias);
  return y.reshape({B, T, H, W, C}).permute({0, 4, 1, 2, 3}).to(x.scalar_type()) + x;
}

// --- resample ---------------------------------------------------------------------------------

ResampleImpl::ResampleImpl(int64_t dim, Mode mode) : mode_(mode) {
  // upstream: resample = Sequential(ZeroPad2d or Upsample, Conv2d): the conv is "resample.1".
  auto resample = register_module("resample", std::make_shared<torch::nn::Module>("Sequential"));
  const bool up = mode == Mode::Upsample2d || mode == Mode::Upsample3d;
  conv = resample->register_module("1", Conv2dParams(dim, up ? dim / 2 : dim, 3));
  if (mode == Mode::Upsample3d) {
    time_conv = register_module("time_conv", nn::CausalConv3d(dim, 2 * dim, std::array<int64_t, 3>{3, 1, 1}));
  } else if (mode == Mode::Downsample3d) {
    // Registered for its parameters; run below without causal padding (stride 2, no padding).
    time_conv = register_module("time_conv", nn::CausalConv3d(dim, dim, std::array<int64_t, 3>{3, 1, 1},
                                                              std::array<int64_t, 3>{2, 1, 1}));
  }
}

namespace {
// [B, 2C, T, H, W] -> [B, C, 2T, H, W]: channel group i of step t becomes frame 2t + i.
at::Tensor interleave_time(const at::Tensor& y) {
  const int64_t B = y.size(0), C = y.size(1) / 2, T = y.size(2), H = y.size(3), W = y.size(4);
  return y.reshape({B, 2, C, T, H, W}).permute({0, 2, 3, 1, 4, 5}).reshape({B, C, 2 * T, H, W});
}
}  // namespace

torch::Tensor ResampleImpl::run(const torch::Tensor& x, nn::FeatureCache* cache) {
  at::Tensor h = x;
  if (mode_ == Mode::Upsample3d) {
    // Frame 0 passes through; later frames: causal (3,1,1) conv to 2C, zero-padded before
    // frame 1, read as (2, C) and interleaved in time.
    if (cache != nullptr) {
      if (cache->slots.empty()) {
        // The first chunk: no time conv. What later chunks see before them is 2 zero frames
        // (upstream's 'Rep' marker, then its zero padding).
        cache->slots = {at::zeros({x.size(0), x.size(1), 2, x.size(3), x.size(4)}, x.options())};
        cache->next = 1;
      } else {
        h = interleave_time(time_conv(x, cache));
      }
    } else if (x.size(2) > 1) {
      h = at::cat({x.narrow(2, 0, 1), interleave_time(time_conv(x.narrow(2, 1, x.size(2) - 1), nullptr))}, 2);
    }
  }
  if (mode_ == Mode::Upsample2d || mode_ == Mode::Upsample3d) {
    // Nearest-exact 2x (for an integer factor: each pixel repeated), then a 3x3 conv to C/2.
    return conv(h.repeat_interleave(2, 3).repeat_interleave(2, 4), 1, 1);
  }
  // Downsampling: zero-pad right and bottom by one, then a stride-2 3x3 conv.
  h = conv(at::constant_pad_nd(h, {0, 1, 0, 1}), 2, 0);
  if (mode_ != Mode::Downsample3d) return h;
  auto time_down = [this](const at::Tensor& frames) {
    return nn::conv3d(frames.to(time_conv->weight.scalar_type()), time_conv->weight, time_conv->bias, {2, 1, 1}, {0, 0, 0});
  };
  // Frame 0 kept as is; then an unpadded stride-2 (3,1,1) conv over all frames from frame 0 on,
  // each chunk after the first starting from the previous chunk's last frame.
  if (cache != nullptr) {
    if (cache->slots.empty()) {
      cache->slots = {h.narrow(2, h.size(2) - 1, 1).clone()};
      cache->next = 1;
      return h;
    }
    const at::Tensor y = time_down(at::cat({cache->slots[0], h}, 2));
    cache->slots[0] = h.narrow(2, h.size(2) - 1, 1).clone();
    return y;
  }
  if (h.size(2) == 1) return h;
  return at::cat({h.narrow(2, 0, 1), time_down(h)}, 2);
}

}  // namespace zeroshard::models::wan
