#include "models/flux/kl_vae.h"

#include "nn/layers.h"
#include "nn/matmul.h"
#include "nn/norms.h"
#include "zeroshard/nn/deferred.h"

#include <cmath>
#include <stdexcept>

namespace zeroshard::models::flux {

namespace {

bool bfl(const KlVaeConfig& c) { return c.naming == VaeNaming::Bfl; }

torch::Tensor swish(const torch::Tensor& x) { return x * torch::sigmoid(x); }

torch::Tensor group_norm(const std::shared_ptr<torch::nn::Module>& m, const torch::Tensor& x) {
  return m->as<nn::GroupNormImpl>()->forward(x);
}

std::shared_ptr<torch::nn::Module> make_group_norm(const KlVaeConfig& c, int64_t channels) {
  return nn::GroupNorm(c.groups, channels, c.eps).ptr();
}

}  // namespace

void KlVaeConfig::validate(const std::string& source) const {
  if (block_channels.empty()) throw std::invalid_argument(source + ": the VAE needs at least one level");
  auto check = [&](int64_t ch, const std::string& what) {
    if (ch <= 0 || ch % groups != 0) {
      throw std::invalid_argument(source + ": " + what + " has " + std::to_string(ch) +
                                  " channels, not a multiple of the " + std::to_string(groups) + " norm groups");
    }
  };
  check(stem_channels, "the encoder stem");
  for (size_t i = 0; i < block_channels.size(); ++i) check(block_channels[i], "level " + std::to_string(i));
  if (layers <= 0) throw std::invalid_argument(source + ": the VAE needs at least one resnet per level");
}

Conv2dImpl::Conv2dImpl(int64_t in, int64_t out, int64_t kernel, int64_t stride, int64_t padding)
    : stride_(stride), padding_(padding) {
  weight = register_parameter("weight", nn::new_parameter({out, in, kernel, kernel}));
  bias = register_parameter("bias", nn::new_parameter({out}));
  if (!nn::DeferredInit::active()) {  // torch's default: U(+-1/sqrt(fan_in)) for both
    torch::NoGradGuard no_grad;
    const double bound = 1.0 / std::sqrt(static_cast<double>(in * kernel * kernel));
    weight.uniform_(-bound, bound);
    bias.uniform_(-bound, bound);
  }
}

torch::Tensor Conv2dImpl::forward(const torch::Tensor& x) {
  return nn::conv2d(x, weight, bias, {stride_, stride_}, {padding_, padding_});
}

VaeResnetImpl::VaeResnetImpl(const KlVaeConfig& c, int64_t in, int64_t out) : groups_(c.groups), eps_(c.eps) {
  norm1 = register_module("norm1", make_group_norm(c, in));
  conv1 = register_module("conv1", Conv2d(in, out, 3, 1, 1));
  norm2 = register_module("norm2", make_group_norm(c, out));
  conv2 = register_module("conv2", Conv2d(out, out, 3, 1, 1));
  if (in != out) shortcut = register_module(bfl(c) ? "nin_shortcut" : "conv_shortcut", Conv2d(in, out, 1));
}

torch::Tensor VaeResnetImpl::forward(const torch::Tensor& x) {
  torch::Tensor h = conv1(swish(group_norm(norm1, x)));
  h = conv2(swish(group_norm(norm2, h)));
  return (shortcut ? shortcut(x) : x) + h;
}

VaeAttentionImpl::VaeAttentionImpl(const KlVaeConfig& c, int64_t channels)
    : naming_(c.naming), groups_(c.groups), eps_(c.eps) {
  norm = register_module(bfl(c) ? "norm" : "group_norm", make_group_norm(c, channels));
  if (bfl(c)) {
    const char* names[4] = {"q", "k", "v", "proj_out"};
    for (int i = 0; i < 4; ++i) proj[i] = register_module(names[i], Conv2d(channels, channels, 1).ptr());
  } else {
    const char* names[3] = {"to_q", "to_k", "to_v"};
    for (int i = 0; i < 3; ++i) proj[i] = register_module(names[i], nn::Linear(channels, channels, true).ptr());
    auto to_out = register_module("to_out", torch::nn::ModuleList());
    proj[3] = nn::Linear(channels, channels, true).ptr();
    to_out->push_back(proj[3]);  // "to_out.0" (index 1 is a parameterless dropout upstream)
  }
}

std::array<torch::Tensor, 4> VaeAttentionImpl::weights() const {
  std::array<torch::Tensor, 4> w;
  for (int i = 0; i < 4; ++i) {
    if (naming_ == VaeNaming::Bfl) {
      const auto& conv = proj[i]->as<Conv2dImpl>()->weight;
      w[i] = conv.view({conv.size(0), conv.size(1)});
    } else {
      w[i] = proj[i]->as<nn::LinearImpl>()->weight;
    }
  }
  return w;
}

std::array<torch::Tensor, 4> VaeAttentionImpl::biases() const {
  std::array<torch::Tensor, 4> b;
  for (int i = 0; i < 4; ++i) {
    b[i] = naming_ == VaeNaming::Bfl ? proj[i]->as<Conv2dImpl>()->bias : proj[i]->as<nn::LinearImpl>()->bias;
  }
  return b;
}

torch::Tensor VaeAttentionImpl::forward(const torch::Tensor& x) {
  const int64_t B = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
  const auto w = weights();
  const auto b = biases();
  // Positions row-major: [B, C, H, W] -> [B, H*W, C]; one head over all channels.
  const torch::Tensor h = group_norm(norm, x).flatten(2).transpose(1, 2);
  const torch::Tensor q = nn::linear(h, w[0], b[0]), k = nn::linear(h, w[1], b[1]), v = nn::linear(h, w[2], b[2]);
  torch::Tensor scores = nn::matmul(q, k.transpose(1, 2)) / std::sqrt(static_cast<double>(C));
  const auto sdt = scores.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;  // float32 softmax for bf16
  const torch::Tensor probs = torch::softmax(scores.to(sdt), -1).to(x.scalar_type());
  const torch::Tensor out = nn::linear(nn::matmul(probs, v), w[3], b[3]);
  return x + out.transpose(1, 2).reshape({B, C, H, W});
}

VaeMidImpl::VaeMidImpl(const KlVaeConfig& c, int64_t channels) {
  if (bfl(c)) {
    block1 = register_module("block_1", VaeResnet(c, channels, channels));
    if (c.mid_attention) attn = register_module("attn_1", VaeAttention(c, channels));
    block2 = register_module("block_2", VaeResnet(c, channels, channels));
  } else {
    auto resnets = register_module("resnets", torch::nn::ModuleList());
    block1 = VaeResnet(c, channels, channels);
    block2 = VaeResnet(c, channels, channels);
    resnets->push_back(block1);
    resnets->push_back(block2);
    if (c.mid_attention) {
      auto attentions = register_module("attentions", torch::nn::ModuleList());
      attn = VaeAttention(c, channels);
      attentions->push_back(attn);
    }
  }
}

torch::Tensor VaeMidImpl::forward(const torch::Tensor& x) {
  return call_hooked(x, [this](const torch::Tensor& in) {
    torch::Tensor h = block1(in);
    if (attn) h = attn(h);
    return block2(h);
  });
}

VaeLevelImpl::VaeLevelImpl(const KlVaeConfig& c, int64_t in, int64_t out, int64_t blocks, int resample)
    : resample_(resample) {
  auto list = register_module(bfl(c) ? "block" : "resnets", torch::nn::ModuleList());
  for (int64_t i = 0; i < blocks; ++i) {
    resnets.push_back(VaeResnet(c, i == 0 ? in : out, out));
    list->push_back(resnets.back());
  }
  if (resample == 0) return;
  // Down: pad (0, 1, 0, 1), conv stride 2 no padding. Up: nearest x2, conv padding 1.
  resample_conv = resample < 0 ? Conv2d(out, out, 3, 2, 0) : Conv2d(out, out, 3, 1, 1);
  auto holder = std::make_shared<torch::nn::Module>();
  holder->register_module("conv", resample_conv);
  if (bfl(c)) {
    register_module(resample < 0 ? "downsample" : "upsample", holder);
  } else {
    auto samplers = register_module(resample < 0 ? "downsamplers" : "upsamplers", torch::nn::ModuleList());
    samplers->push_back(holder);
  }
}

torch::Tensor VaeLevelImpl::forward(const torch::Tensor& x) {
  return call_hooked(x, [this](const torch::Tensor& in) {
    torch::Tensor h = in;
    for (auto& r : resnets) h = r(h);
    if (resample_ < 0) return resample_conv(at::constant_pad_nd(h, {0, 1, 0, 1}, 0.0));
    if (resample_ > 0) return resample_conv(at::upsample_nearest2d(h, {2 * h.size(2), 2 * h.size(3)}));
    return h;
  });
}

KlEncoderImpl::KlEncoderImpl(const KlVaeConfig& c) : config_(c) {
  c.validate("KL VAE encoder");
  conv_in = register_module("conv_in", Conv2d(c.in_channels, c.stem_channels, 3, 1, 1));
  auto list = register_module(bfl(c) ? "down" : "down_blocks", torch::nn::ModuleList());
  const int64_t L = c.levels();
  for (int64_t i = 0; i < L; ++i) {
    const int64_t in = i == 0 ? c.stem_channels : c.block_channels[i - 1];
    levels.push_back(VaeLevel(c, in, c.block_channels[i], c.layers, i + 1 < L ? -1 : 0));
    list->push_back(levels.back());
  }
  const int64_t top = c.block_channels.back();
  mid = register_module(bfl(c) ? "mid" : "mid_block", VaeMid(c, top));
  norm_out = register_module(bfl(c) ? "norm_out" : "conv_norm_out", make_group_norm(c, top));
  conv_out = register_module("conv_out", Conv2d(top, 2 * c.latent_channels, 3, 1, 1));
}

torch::Tensor KlEncoderImpl::forward(const torch::Tensor& x) {
  TORCH_CHECK(x.dim() == 4 && x.size(1) == config_.in_channels, "KL VAE encoder: expected [B, ",
              config_.in_channels, ", H, W], got ", x.sizes());
  torch::Tensor h = conv_in(x);
  for (auto& level : levels) h = level(h);
  h = mid(h);
  return conv_out(swish(group_norm(norm_out, h)));
}

KlDecoderImpl::KlDecoderImpl(const KlVaeConfig& c) : config_(c) {
  c.validate("KL VAE decoder");
  const int64_t L = c.levels(), top = c.block_channels.back();
  conv_in = register_module("conv_in", Conv2d(c.latent_channels, top, 3, 1, 1));
  mid = register_module(bfl(c) ? "mid" : "mid_block", VaeMid(c, top));
  // Run order: deepest level first; each upsamples but the shallowest (level 0).
  int64_t in = top;
  for (int64_t i = L - 1; i >= 0; --i) {
    levels.push_back(VaeLevel(c, in, c.block_channels[i], c.layers + 1, i > 0 ? 1 : 0));
    in = c.block_channels[i];
  }
  auto list = register_module(bfl(c) ? "up" : "up_blocks", torch::nn::ModuleList());
  // BFL indexes up.N by level (up.0 is the shallowest, run last); diffusers by run order.
  if (bfl(c)) {
    for (int64_t i = L - 1; i >= 0; --i) list->push_back(levels[static_cast<size_t>(i)]);
  } else {
    for (auto& level : levels) list->push_back(level);
  }
  norm_out = register_module(bfl(c) ? "norm_out" : "conv_norm_out", make_group_norm(c, c.block_channels[0]));
  conv_out = register_module("conv_out", Conv2d(c.block_channels[0], c.out_channels, 3, 1, 1));
}

torch::Tensor KlDecoderImpl::forward(const torch::Tensor& z) {
  TORCH_CHECK(z.dim() == 4 && z.size(1) == config_.latent_channels, "KL VAE decoder: expected [B, ",
              config_.latent_channels, ", h, w], got ", z.sizes());
  torch::Tensor h = mid(conv_in(z));
  for (auto& level : levels) h = level(h);
  return conv_out(swish(group_norm(norm_out, h)));
}

namespace {

int64_t conv(int64_t in, int64_t out, int64_t k) { return in * out * k * k + out; }
int64_t resnet(int64_t in, int64_t out) {
  return 2 * in + conv(in, out, 3) + 2 * out + conv(out, out, 3) + (in != out ? conv(in, out, 1) : 0);
}
int64_t mid(const KlVaeConfig& c, int64_t ch) {
  return 2 * resnet(ch, ch) + (c.mid_attention ? 2 * ch + 4 * (ch * ch + ch) : 0);
}

}  // namespace

int64_t kl_encoder_param_count(const KlVaeConfig& c) {
  int64_t n = conv(c.in_channels, c.stem_channels, 3);
  for (int64_t i = 0; i < c.levels(); ++i) {
    int64_t in = i == 0 ? c.stem_channels : c.block_channels[i - 1];
    const int64_t out = c.block_channels[i];
    for (int64_t j = 0; j < c.layers; ++j, in = out) n += resnet(in, out);
    if (i + 1 < c.levels()) n += conv(out, out, 3);
  }
  const int64_t top = c.block_channels.back();
  return n + mid(c, top) + 2 * top + conv(top, 2 * c.latent_channels, 3);
}

int64_t kl_decoder_param_count(const KlVaeConfig& c) {
  const int64_t top = c.block_channels.back();
  int64_t n = conv(c.latent_channels, top, 3) + mid(c, top);
  int64_t in = top;
  for (int64_t i = c.levels() - 1; i >= 0; --i) {
    const int64_t out = c.block_channels[i];
    for (int64_t j = 0; j <= c.layers; ++j, in = out) n += resnet(in, out);
    if (i > 0) n += conv(out, out, 3);
  }
  return n + 2 * c.block_channels[0] + conv(c.block_channels[0], c.out_channels, 3);
}

}  // namespace zeroshard::models::flux
