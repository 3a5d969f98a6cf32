// Layers of the video VAE: a 3-D convolution that is causal in time and can run a clip a few
// frames at a time, carrying the frames it needs from one chunk to the next (the "feature
// cache" of Wan-VAE), and an RMS norm over channels (per position, so also causal).
#pragma once

#include "zeroshard/nn/deferred.h"

#include <torch/torch.h>

#include <array>
#include <vector>

namespace zeroshard::nn {

// The frames each causal convolution carries between chunks, in call order. A chunked pass
// runs every chunk through the same convolutions in the same order; each one takes its slot,
// uses it and leaves the frames the next chunk needs. A fresh (or reset) cache means "start of
// the clip": zero frames before it, which is what a whole-clip pass sees too.
struct FeatureCache {
  std::vector<torch::Tensor> slots;  // undefined: no frames yet
  size_t next = 0;                   // the slot of the next convolution called
  void rewind() { next = 0; }        // before each chunk
};

// Conv3d over [B, C, T, H, W] with `kernel` (kt, kh, kw) and `stride` (st, ss, ss): H and W are
// zero-padded by kh/2, kw/2 on both sides; time is padded on the left only, by kt-1 frames —
// zeros at the start of the clip, the previous chunk's last frames after it. Output frame j
// depends on input frames j*st - (kt-1) .. j*st, never later ones. Chunks must be multiples
// of st frames for chunked == whole clip.
class CausalConv3dImpl : public torch::nn::Module {
 public:
  CausalConv3dImpl(int64_t in_channels, int64_t out_channels, std::array<int64_t, 3> kernel,
                   std::array<int64_t, 3> stride = {1, 1, 1});
  // cache null: a whole clip. Otherwise takes and refills the next slot of *cache.
  torch::Tensor forward(const torch::Tensor& x, FeatureCache* cache = nullptr);
  // The frames this layer carries (kt - 1); 0 for kernels one frame deep.
  int64_t cached_frames() const { return kernel_[0] - 1; }
  torch::Tensor weight, bias;

 private:
  std::array<int64_t, 3> kernel_, stride_;
};
TORCH_MODULE(CausalConv3d);

// x * rsqrt(mean over channels of x^2 + eps) * weight[c], per (t, h, w) position, in fp32.
class ChannelRMSNormImpl : public torch::nn::Module {
 public:
  ChannelRMSNormImpl(int64_t channels, double eps);
  torch::Tensor forward(const torch::Tensor& x);
  torch::Tensor weight;

 private:
  double eps_;
};
TORCH_MODULE(ChannelRMSNorm);

}  // namespace zeroshard::nn
