#include "models/vae/vae.h"

#include "nn/init.h"
#include "util/text.h"

#include <cmath>
#include <stdexcept>

namespace zeroshard::models {

int64_t VaeConfig::time_factor() const {
  int64_t f = 1;
  for (bool t : temporal_down) f *= t ? 2 : 1;
  return f;
}

void VaeConfig::validate(int64_t frames, int64_t size) const {
  auto fail = [](const std::string& msg) { throw std::invalid_argument(msg); };
  if (channel_mult.empty()) fail("vae.channel_mult is empty: give the channel multiplier of every level, e.g. 1,2,2");
  for (int64_t m : channel_mult) {
    if (m < 1) fail("vae.channel_mult: every multiplier must be >= 1, got " + int_list_text(channel_mult));
  }
  if (static_cast<int64_t>(temporal_down.size()) != levels() - 1) {
    fail("vae.temporal_down has " + std::to_string(temporal_down.size()) + " entries (" + bool_list_text(temporal_down) +
         "); it needs one per downsampling, levels - 1 = " + std::to_string(levels() - 1) + " for vae.channel_mult " +
         int_list_text(channel_mult));
  }
  if (frames % time_factor() != 0) {
    fail("data.frames (" + std::to_string(frames) + ") must be a multiple of the VAE's time factor " +
         std::to_string(time_factor()) + " (vae.temporal_down " + bool_list_text(temporal_down) + ")");
  }
  if (size % spatial_factor() != 0) {
    fail("data.image_size (" + std::to_string(size) + ") must be a multiple of the VAE's spatial factor " +
         std::to_string(spatial_factor()) + " (" + std::to_string(levels()) + " levels)");
  }
  if (chunk_frames % time_factor() != 0) {
    fail("vae.chunk_frames (" + std::to_string(chunk_frames) + ") must be a multiple of the time factor " +
         std::to_string(time_factor()) + ": a strided causal convolution needs chunks aligned to its stride");
  }
}

int64_t VaeConfig::num_params() const {
  // Built without parameter bytes (DeferredInit), counted from the shapes.
  nn::DeferredInit deferred;
  VideoVae model(*this);
  int64_t n = 0;
  for (const auto& p : model->parameters()) n += p.numel();
  return n;
}

// --- blocks -------------------------------------------------------------------------------

VaeResBlockImpl::VaeResBlockImpl(int64_t in_channels, int64_t out_channels, double eps) {
  norm1 = register_module("norm1", nn::ChannelRMSNorm(in_channels, eps));
  conv1 = register_module("conv1", nn::CausalConv3d(in_channels, out_channels, std::array<int64_t, 3>{3, 3, 3}));
  norm2 = register_module("norm2", nn::ChannelRMSNorm(out_channels, eps));
  conv2 = register_module("conv2", nn::CausalConv3d(out_channels, out_channels, std::array<int64_t, 3>{3, 3, 3}));
  if (in_channels != out_channels) {
    shortcut = register_module("shortcut", nn::CausalConv3d(in_channels, out_channels, std::array<int64_t, 3>{1, 1, 1}));
  }
}

torch::Tensor VaeResBlockImpl::forward(const torch::Tensor& x, nn::FeatureCache* cache) {
  torch::Tensor h = conv1(torch::silu(norm1(x)), cache);
  h = conv2(torch::silu(norm2(h)), cache);
  return (shortcut ? shortcut(x) : x) + h;
}

VaeDownsampleImpl::VaeDownsampleImpl(int64_t channels, bool temporal) {
  conv = register_module("conv", nn::CausalConv3d(channels, channels, std::array<int64_t, 3>{1, 3, 3}, std::array<int64_t, 3>{1, 2, 2}));
  if (temporal) time_conv = register_module("time_conv", nn::CausalConv3d(channels, channels, std::array<int64_t, 3>{3, 1, 1},
                                                                          std::array<int64_t, 3>{2, 1, 1}));
}

torch::Tensor VaeDownsampleImpl::forward(const torch::Tensor& x, nn::FeatureCache* cache) {
  torch::Tensor h = conv(x);
  return time_conv ? time_conv(h, cache) : h;
}

VaeUpsampleImpl::VaeUpsampleImpl(int64_t channels, bool temporal) {
  if (temporal) time_conv = register_module("time_conv", nn::CausalConv3d(channels, 2 * channels, std::array<int64_t, 3>{3, 1, 1}));
  conv = register_module("conv", nn::CausalConv3d(channels, channels, std::array<int64_t, 3>{1, 3, 3}));
}

torch::Tensor VaeUpsampleImpl::forward(const torch::Tensor& x, nn::FeatureCache* cache) {
  torch::Tensor h = x;
  if (time_conv) {
    // [B, 2C, T, H, W] -> [B, C, 2T, H, W]: frame 2t+i is channel group i of step t.
    const auto B = x.size(0), C = x.size(1), T = x.size(2), H = x.size(3), W = x.size(4);
    h = time_conv(x, cache).reshape({B, 2, C, T, H, W}).permute({0, 2, 3, 1, 4, 5}).reshape({B, C, 2 * T, H, W});
  }
  // Nearest-neighbour ×2 in H and W.
  h = h.repeat_interleave(2, 3).repeat_interleave(2, 4);
  return conv(h);
}

VaeStageImpl::VaeStageImpl(int64_t in_channels, int64_t out_channels, int64_t blocks_n, double eps, int resample,
                           bool temporal) {
  blocks = register_module("blocks", torch::nn::ModuleList());
  for (int64_t j = 0; j < blocks_n; ++j) {
    blocks->push_back(VaeResBlock(j == 0 ? in_channels : out_channels, out_channels, eps));
    slots_ += 2;
  }
  if (resample < 0) down = register_module("sample", VaeDownsample(out_channels, temporal));
  if (resample > 0) up = register_module("sample", VaeUpsample(out_channels, temporal));
  if (resample != 0 && temporal) slots_ += 1;
}

torch::Tensor VaeStageImpl::run(const torch::Tensor& x, nn::FeatureCache* cache) {
  torch::Tensor h = x;
  for (const auto& b : *blocks) h = b->as<VaeResBlockImpl>()->forward(h, cache);
  if (down) h = down(h, cache);
  if (up) h = up(h, cache);
  return h;
}

torch::Tensor VaeStageImpl::forward(const torch::Tensor& x, nn::FeatureCache* cache) {
  if (cache == nullptr) {
    return call_hooked(x, [this](const torch::Tensor& in) { return run(in, nullptr); });
  }
  // The stage's slots of the clip's cache go in as tensors (none on the first chunk) and the
  // refilled ones come out: the body depends on its inputs only, as a sharded or
  // checkpointed unit must.
  const size_t first = cache->next;
  std::vector<torch::Tensor> inputs = {x};
  if (first + static_cast<size_t>(slots_) <= cache->slots.size()) {
    for (int64_t s = 0; s < slots_; ++s) inputs.push_back(cache->slots[first + static_cast<size_t>(s)]);
  }
  std::vector<torch::Tensor> out = call_hooked(inputs, [this](const std::vector<torch::Tensor>& in) {
    nn::FeatureCache local;
    local.slots.assign(in.begin() + 1, in.end());
    std::vector<torch::Tensor> result = {run(in[0], &local)};
    result.insert(result.end(), local.slots.begin(), local.slots.end());
    return result;
  });
  cache->slots.resize(std::max(cache->slots.size(), first + static_cast<size_t>(slots_)));
  for (int64_t s = 0; s < slots_; ++s) cache->slots[first + static_cast<size_t>(s)] = out[static_cast<size_t>(s) + 1];
  cache->next = first + static_cast<size_t>(slots_);
  return out[0];
}

// --- encoder / decoder --------------------------------------------------------------------

VaeEncoderImpl::VaeEncoderImpl(const VaeConfig& c) {
  conv_in = register_module("conv_in", nn::CausalConv3d(3, c.channels(0), std::array<int64_t, 3>{3, 3, 3}));
  down = register_module("down", torch::nn::ModuleList());
  int64_t ch = c.channels(0);
  for (int64_t i = 0; i < c.levels(); ++i) {
    const bool last = i == c.levels() - 1;
    down->push_back(VaeStage(ch, c.channels(i), c.num_res_blocks, c.norm_eps, last ? 0 : -1,
                             !last && c.temporal_down[static_cast<size_t>(i)]));
    ch = c.channels(i);
  }
  mid = register_module("mid", VaeStage(ch, ch, 1, c.norm_eps, 0, false));
  norm_out = register_module("norm_out", nn::ChannelRMSNorm(ch, c.norm_eps));
  conv_out = register_module("conv_out", nn::CausalConv3d(ch, 2 * c.z_channels, std::array<int64_t, 3>{3, 3, 3}));
}

torch::Tensor VaeEncoderImpl::forward(const torch::Tensor& x, nn::FeatureCache* cache) {
  torch::Tensor h = conv_in(x, cache);
  for (const auto& s : *down) h = s->as<VaeStageImpl>()->forward(h, cache);
  h = mid(h, cache);
  return conv_out(torch::silu(norm_out(h)), cache);
}

VaeDecoderImpl::VaeDecoderImpl(const VaeConfig& c) {
  const int64_t L = c.levels();
  int64_t ch = c.channels(L - 1);
  conv_in = register_module("conv_in", nn::CausalConv3d(c.z_channels, ch, std::array<int64_t, 3>{3, 3, 3}));
  mid = register_module("mid", VaeStage(ch, ch, 1, c.norm_eps, 0, false));
  up = register_module("up", torch::nn::ModuleList());
  for (int64_t k = 0; k < L; ++k) {
    const int64_t i = L - 1 - k;
    up->push_back(VaeStage(ch, c.channels(i), c.num_res_blocks, c.norm_eps, i > 0 ? 1 : 0,
                           i > 0 && c.temporal_down[static_cast<size_t>(i - 1)]));
    ch = c.channels(i);
  }
  norm_out = register_module("norm_out", nn::ChannelRMSNorm(ch, c.norm_eps));
  conv_out = register_module("conv_out", nn::CausalConv3d(ch, 3, std::array<int64_t, 3>{3, 3, 3}));
}

torch::Tensor VaeDecoderImpl::forward(const torch::Tensor& z, nn::FeatureCache* cache) {
  torch::Tensor h = mid(conv_in(z, cache), cache);
  for (const auto& s : *up) h = s->as<VaeStageImpl>()->forward(h, cache);
  return conv_out(torch::silu(norm_out(h)), cache);
}

// --- the model ----------------------------------------------------------------------------

VideoVaeImpl::VideoVaeImpl(const VaeConfig& c) : config_(c) {
  encoder = register_module("encoder", VaeEncoder(c));
  decoder = register_module("decoder", VaeDecoder(c));
}

namespace {

// Runs fn over [0, T) in chunks of `chunk` frames along dim 2 with one cache (0: one call, no cache).
template <class Fn>
torch::Tensor chunked(const torch::Tensor& x, int64_t chunk, Fn&& fn) {
  if (chunk <= 0) return fn(x, nullptr);
  nn::FeatureCache cache;
  std::vector<torch::Tensor> parts;
  for (int64_t t = 0; t < x.size(2); t += chunk) {
    cache.rewind();
    parts.push_back(fn(x.narrow(2, t, std::min(chunk, x.size(2) - t)), &cache));
  }
  return parts.size() == 1 ? parts[0] : torch::cat(parts, 2);
}

}  // namespace

std::pair<torch::Tensor, torch::Tensor> VideoVaeImpl::encode(const torch::Tensor& clip, int64_t chunk_frames) {
  auto out = call_hooked({clip}, [this, chunk_frames](const std::vector<torch::Tensor>& in) {
    auto [mean, logvar] = encode_body(in[0], chunk_frames);
    return std::vector<torch::Tensor>{mean, logvar};
  });
  return {out[0], out[1]};
}

torch::Tensor VideoVaeImpl::decode(const torch::Tensor& z, int64_t chunk_frames) {
  return call_hooked(z, [this, chunk_frames](const torch::Tensor& in) { return decode_body(in, chunk_frames); });
}

std::pair<torch::Tensor, torch::Tensor> VideoVaeImpl::encode_body(const torch::Tensor& clip, int64_t chunk_frames) {
  const torch::Tensor h =
      chunked(clip, chunk_frames, [this](const torch::Tensor& x, nn::FeatureCache* c) { return encoder(x, c); })
          .to(torch::kFloat);
  const int64_t Z = config_.z_channels;
  return {h.narrow(1, 0, Z), h.narrow(1, Z, Z).clamp(-30.0, 20.0)};
}

torch::Tensor VideoVaeImpl::decode_body(const torch::Tensor& z, int64_t chunk_frames) {
  const int64_t latent_chunk = chunk_frames > 0 ? std::max<int64_t>(1, chunk_frames / config_.time_factor()) : 0;
  return chunked(z, latent_chunk, [this](const torch::Tensor& x, nn::FeatureCache* c) { return decoder(x, c); })
      .to(torch::kFloat);
}

VaeOutput VideoVaeImpl::forward(const torch::Tensor& clip, const torch::Tensor& noise, int64_t chunk_frames) {
  // The root's call_hooked carries everything the engine gathers for the root unit.
  std::vector<torch::Tensor> inputs = {clip};
  if (noise.defined()) inputs.push_back(noise);
  std::vector<torch::Tensor> out = call_hooked(inputs, [&](const std::vector<torch::Tensor>& in) {
    auto [mean, logvar] = encode_body(in[0], chunk_frames);
    const torch::Tensor z = in.size() > 1 ? mean + torch::exp(0.5 * logvar) * in[1] : mean;
    return std::vector<torch::Tensor>{decode_body(z, chunk_frames), mean, logvar};
  });
  VaeOutput o;
  o.recon = out[0];
  o.mean = out[1];
  o.logvar = out[2];
  o.recon_loss = (o.recon - clip.to(torch::kFloat)).pow(2).mean();
  o.kl = (0.5 * (o.mean.pow(2) + torch::exp(o.logvar) - 1.0 - o.logvar)).mean();
  o.loss = o.recon_loss + config_.kl_weight * o.kl;
  return o;
}

void VideoVaeImpl::reset_parameters(uint64_t seed) {
  torch::NoGradGuard no_grad;
  for (auto& item : named_parameters(/*recurse=*/true)) vae_init(config_, seed, item.key(), item.value());
}

void vae_init(const VaeConfig& c, uint64_t seed, const std::string& name, at::Tensor& param) {
  (void)c;
  if (param.dim() == 1) {
    // Norm gains 1, biases 0.
    nn::init_constant(param, name.find("norm") != std::string::npos ? 1.0 : 0.0);
    return;
  }
  const int64_t fan_in = param.numel() / param.size(0);
  double std = 1.0 / std::sqrt(static_cast<double>(fan_in));
  if (util::ends_with(name, "conv2.weight") || name == "decoder.conv_out.weight") std *= 0.1;
  nn::init_normal(param, seed, name, std);
}

// --- list-valued config text --------------------------------------------------------------

std::vector<int64_t> parse_int_list(const std::string& key, const std::string& text) {
  std::vector<int64_t> out;
  for (const std::string& item : util::split_trimmed(text)) {
    size_t used = 0;
    int64_t v = 0;
    try {
      v = std::stoll(item, &used);
    } catch (...) {
      used = 0;
    }
    if (item.empty() || used != item.size()) {
      throw std::invalid_argument(key + ": '" + text + "' is not a comma-separated list of integers");
    }
    out.push_back(v);
  }
  return out;
}

std::vector<bool> parse_bool_list(const std::string& key, const std::string& text) {
  std::vector<bool> out;
  for (const std::string& item : util::split_trimmed(text)) {
    if (item == "true") out.push_back(true);
    else if (item == "false") out.push_back(false);
    else throw std::invalid_argument(key + ": '" + text + "' is not a comma-separated list of true/false");
  }
  return out;
}

std::string int_list_text(const std::vector<int64_t>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s;
}

std::string bool_list_text(const std::vector<bool>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += std::string(i ? "," : "") + (v[i] ? "true" : "false");
  return s;
}

}  // namespace zeroshard::models
