// The Wan VAE's configuration, encoder/decoder stacks and the chunked encode/decode.
#include "models/wan/vae.h"

#include "io/safetensors.h"
#include "nn/init.h"
#include "util/text.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace zeroshard::models::wan {

namespace {
// wan/modules/vae.py WanVAE: the per-channel statistics of the released latent space.
const std::vector<double> kLatentMean = {-0.7571, -0.7089, -0.9113, 0.1075, -0.1745, 0.9653, -0.1517, 1.5508,
                                         0.4134,  -0.0715, 0.5517,  -0.3632, -0.1922, -0.9497, 0.2503, -0.2921};
const std::vector<double> kLatentStd = {2.8184, 1.4541, 2.3275, 2.6558, 1.2196, 1.7708, 2.6052, 2.0743,
                                        3.2687, 2.1526, 2.8652, 1.5579, 1.6382, 1.1253, 2.8251, 1.9160};
}  // namespace

// --- config -----------------------------------------------------------------------------------

int64_t WanVaeConfig::time_factor() const {
  int64_t f = 1;
  for (size_t i = 0; i + 1 < dim_mult.size(); ++i) f *= temperal_downsample[i] ? 2 : 1;
  return f;
}

void WanVaeConfig::validate() const {
  auto fail = [](const std::string& m) { throw std::invalid_argument("Wan VAE config: " + m); };
  if (dim < 1 || z_dim < 1 || num_res_blocks < 1) fail("dim, z_dim and num_res_blocks must be positive");
  if (dim_mult.empty()) fail("dim_mult is empty");
  // Upstream hands the feature cache to every block of the encoder's / decoder's lists, and its
  // AttentionBlock.forward takes none: with attention scales its chunked encode and decode stop
  // with a TypeError, so no released model or reference has them.
  if (!attn_scales.empty()) fail("attn_scales must be empty (upstream's chunked VAE cannot run attention at a scale)");
  // Upstream's Decoder3d halves the input width of levels 1, 2 and 3 only (after each
  // upsample's conv to C/2): with a fifth level its channels would not match.
  if (dim_mult.size() > 4) fail("dim_mult has " + std::to_string(dim_mult.size()) + " levels; upstream's decoder supports at most 4");
  if (temperal_downsample.size() + 1 < dim_mult.size()) {
    fail("temperal_downsample needs at least " + std::to_string(dim_mult.size() - 1) + " entries (one per downsampling)");
  }
  if (time_factor() > 4) {
    fail("more than two temporal downsamplings: upstream's 4-frame encoder chunks would leave a strided conv short of frames");
  }
  for (size_t i = 1; i < dim_mult.size(); ++i) {
    if ((dim * dim_mult[i]) % 2 != 0) fail("every upsampled width dim * dim_mult[i] must be even (the conv to C/2)");
  }
  if (!latent_mean.empty() && (static_cast<int64_t>(latent_mean.size()) != z_dim || latent_std.size() != latent_mean.size())) {
    fail("latent_mean / latent_std need z_dim = " + std::to_string(z_dim) + " entries each");
  }
}

int64_t WanVaeConfig::num_params() const {
  nn::DeferredInit deferred;
  WanVae model(*this);
  int64_t n = 0;
  for (const auto& p : model->parameters()) n += p.numel();
  return n;
}

WanVaeConfig WanVaeConfig::from_json(const nlohmann::json& j, const std::string& source) {
  WanVaeConfig c = wan21_vae();
  try {
    c.dim = j.value("dim", c.dim);
    c.z_dim = j.value("z_dim", c.z_dim);
    if (j.contains("dim_mult")) c.dim_mult = j["dim_mult"].get<std::vector<int64_t>>();
    c.num_res_blocks = j.value("num_res_blocks", c.num_res_blocks);
    if (j.contains("attn_scales")) c.attn_scales = j["attn_scales"].get<std::vector<double>>();
    if (j.contains("temperal_downsample")) c.temperal_downsample = j["temperal_downsample"].get<std::vector<bool>>();
    if (j.contains("_latent_mean")) c.latent_mean = j["_latent_mean"].get<std::vector<double>>();
    if (j.contains("_latent_std")) c.latent_std = j["_latent_std"].get<std::vector<double>>();
    if (c.z_dim != 16 && !j.contains("_latent_mean")) {
      c.latent_mean.clear();  // the released statistics are for 16 channels only
      c.latent_std.clear();
    }
    c.validate();
  } catch (const std::exception& e) {
    throw std::invalid_argument(source + ": " + e.what());
  }
  return c;
}

WanVaeConfig wan21_vae() {
  WanVaeConfig c;  // wan/modules/vae.py _video_vae(): dim 96, z_dim 16, [1, 2, 4, 4], 2 blocks
  c.latent_mean = kLatentMean;
  c.latent_std = kLatentStd;
  return c;
}

// --- encoder / decoder ------------------------------------------------------------------------

VaeCoderImpl::VaeCoderImpl(const WanVaeConfig& c, bool decoder) : decoder_(decoder) {
  const size_t L = c.dim_mult.size();
  std::vector<int64_t> dims;  // widths: encoder [1] + dim_mult, decoder [last] + reversed
  std::vector<bool> temporal;
  if (!decoder) {
    dims.push_back(c.dim);
    for (int64_t m : c.dim_mult) dims.push_back(c.dim * m);
    temporal = c.temperal_downsample;
  } else {
    dims.push_back(c.dim * c.dim_mult.back());
    for (size_t i = L; i-- > 0;) dims.push_back(c.dim * c.dim_mult[i]);
    temporal.assign(c.temperal_downsample.rbegin(), c.temperal_downsample.rend());
  }
  conv1 = register_module("conv1", nn::CausalConv3d(decoder ? c.z_dim : 3, dims[0], std::array<int64_t, 3>{3, 3, 3}));
  middle = torch::nn::ModuleList();
  stages = torch::nn::ModuleList();
  int64_t out = dims[0];
  for (size_t i = 0; i + 1 < dims.size(); ++i) {
    int64_t in = dims[i];
    out = dims[i + 1];
    if (decoder && i >= 1 && i <= 3) in /= 2;  // after an upsample's conv to C/2 (upstream: i in 1, 2, 3)
    const int64_t blocks = decoder ? c.num_res_blocks + 1 : c.num_res_blocks;
    for (int64_t b = 0; b < blocks; ++b) {
      stages->push_back(ResidualBlock(in, out));
      in = out;
    }
    if (i + 1 != L) {
      using Mode = ResampleImpl::Mode;
      const Mode mode = decoder ? (temporal[i] ? Mode::Upsample3d : Mode::Upsample2d)
                                : (temporal[i] ? Mode::Downsample3d : Mode::Downsample2d);
      stages->push_back(Resample(out, mode));
    }
  }
  const int64_t mid = decoder ? dims[0] : out;
  middle->push_back(ResidualBlock(mid, mid));
  middle->push_back(AttentionBlock(mid));
  middle->push_back(ResidualBlock(mid, mid));
  if (decoder) {
    register_module("middle", middle);
    register_module("upsamples", stages);
  } else {
    register_module("downsamples", stages);
    register_module("middle", middle);
  }
  // upstream: head = Sequential(RMS_norm, SiLU, CausalConv3d): "head.0", "head.2".
  auto head = register_module("head", std::make_shared<torch::nn::Module>("Sequential"));
  head_norm = head->register_module("0", VaeRMSNorm(out, /*images=*/false));
  head_conv = head->register_module("2", nn::CausalConv3d(out, decoder ? 3 : 2 * c.z_dim, std::array<int64_t, 3>{3, 3, 3}));
}

torch::Tensor VaeCoderImpl::forward(const torch::Tensor& x, nn::FeatureCache* cache) {
  at::Tensor h = conv1(x, cache);
  auto run = [&](torch::nn::ModuleList& list) {
    for (const auto& m : *list) h = m->as<VaeUnit>()->forward(h, cache);
  };
  if (decoder_) {
    run(middle);
    run(stages);
  } else {
    run(stages);
    run(middle);
  }
  return head_conv(torch::silu(head_norm(h)), cache);
}

// --- the model --------------------------------------------------------------------------------

WanVaeImpl::WanVaeImpl(const WanVaeConfig& c) : config_(c) {
  c.validate();
  encoder = register_module("encoder", VaeCoder(c, false));
  conv1 = register_module("conv1", nn::CausalConv3d(2 * c.z_dim, 2 * c.z_dim, std::array<int64_t, 3>{1, 1, 1}));
  conv2 = register_module("conv2", nn::CausalConv3d(c.z_dim, c.z_dim, std::array<int64_t, 3>{1, 1, 1}));
  decoder = register_module("decoder", VaeCoder(c, true));
}

std::pair<torch::Tensor, torch::Tensor> WanVaeImpl::latent_scale(at::ScalarType dtype) const {
  if (config_.latent_mean.empty()) {
    throw std::invalid_argument("Wan VAE: no latent_mean / latent_std in the config (z_dim " +
                                std::to_string(config_.z_dim) + "); pass the scale explicitly");
  }
  const at::Tensor mean = at::tensor(config_.latent_mean, at::kDouble).to(at::kFloat);
  const at::Tensor inv_std = at::tensor(config_.latent_std, at::kDouble).to(at::kFloat).reciprocal();
  return {mean.to(dtype), inv_std.to(dtype)};
}

torch::Tensor WanVaeImpl::encode(const torch::Tensor& video, int64_t chunks) {
  const auto [mean, inv_std] = latent_scale(video.scalar_type() == at::kDouble ? at::kDouble : at::kFloat);
  return encode(video, mean, inv_std, ChunkMode::Upstream, chunks);
}

torch::Tensor WanVaeImpl::decode(const torch::Tensor& z) {
  const auto [mean, inv_std] = latent_scale(z.scalar_type() == at::kDouble ? at::kDouble : at::kFloat);
  return decode(z, mean, inv_std);
}

torch::Tensor WanVaeImpl::encode(const torch::Tensor& video, const torch::Tensor& mean, const torch::Tensor& inv_std,
                                 ChunkMode mode, int64_t chunks) {
  return call_hooked({video, mean, inv_std}, [this, mode, chunks](const std::vector<at::Tensor>& in) {
    return std::vector<at::Tensor>{encode_body(in[0], in[1], in[2], mode, chunks)};
  })[0];
}

torch::Tensor WanVaeImpl::decode(const torch::Tensor& z, const torch::Tensor& mean, const torch::Tensor& inv_std,
                                 ChunkMode mode) {
  return call_hooked({z, mean, inv_std}, [this, mode](const std::vector<at::Tensor>& in) {
    return std::vector<at::Tensor>{decode_body(in[0], in[1], in[2], mode)};
  })[0];
}

namespace {
at::Tensor per_channel(const at::Tensor& v, int64_t z, const std::string& what) {
  if (v.dim() != 1 || v.size(0) != z) {
    throw std::invalid_argument("Wan VAE: " + what + " must be [" + std::to_string(z) + "], got " +
                                io::shape_text(v.sizes().vec()));
  }
  return v.view({1, z, 1, 1, 1});
}
}  // namespace

torch::Tensor WanVaeImpl::encode_body(const torch::Tensor& video, const torch::Tensor& mean, const torch::Tensor& inv_std,
                                      ChunkMode mode, int64_t chunks) {
  const int64_t s = config_.spatial_factor();
  if (video.dim() != 5 || video.size(1) != 3 || (video.size(2) - 1) % 4 != 0 || video.size(3) % s || video.size(4) % s) {
    throw std::invalid_argument("Wan VAE encode: video " + io::shape_text(video.sizes().vec()) +
                                " must be [B, 3, 1 + 4k, H, W] with H and W multiples of " + std::to_string(s));
  }
  at::Tensor out;
  if (mode == ChunkMode::Whole) {
    out = encoder(video, nullptr);
  } else {
    // Upstream's chunks: frame 0 alone, then 4 frames at a time, one cache for the clip.
    nn::FeatureCache cache;
    std::vector<at::Tensor> parts;
    for (int64_t t = 0; t < video.size(2); t = t == 0 ? 1 : t + 4) {
      cache.rewind();
      parts.push_back(encoder(video.narrow(2, t, t == 0 ? 1 : 4), &cache));
    }
    out = at::cat(parts, 2);
    // Passes that keep this rank in step with ranks encoding longer clips; their output is dropped.
    const at::Tensor idle = chunks > encode_chunks(video.size(2))
                                ? at::zeros({video.size(0), 3, 4, video.size(3), video.size(4)}, video.options())
                                : at::Tensor();
    for (int64_t k = encode_chunks(video.size(2)); k < chunks; ++k) {
      cache.rewind();
      encoder(idle, &cache);
    }
  }
  // conv1 (1x1x1) over the whole latent; mu is the first z_dim channels (log-variance dropped).
  const at::Tensor mu = conv1(out, nullptr).narrow(1, 0, config_.z_dim);
  return (mu - per_channel(mean, config_.z_dim, "mean")) * per_channel(inv_std, config_.z_dim, "inv_std");
}

torch::Tensor WanVaeImpl::decode_body(const torch::Tensor& z, const torch::Tensor& mean, const torch::Tensor& inv_std,
                                      ChunkMode mode) {
  if (z.dim() != 5 || z.size(1) != config_.z_dim) {
    throw std::invalid_argument("Wan VAE decode: z " + io::shape_text(z.sizes().vec()) + " must be [B, " +
                                std::to_string(config_.z_dim) + ", T, h, w]");
  }
  // Division by the stored reciprocal, as upstream (not a multiplication by std).
  const at::Tensor x =
      conv2(z / per_channel(inv_std, config_.z_dim, "inv_std") + per_channel(mean, config_.z_dim, "mean"), nullptr);
  if (mode == ChunkMode::Whole) return decoder(x, nullptr);
  nn::FeatureCache cache;
  std::vector<at::Tensor> parts;
  for (int64_t t = 0; t < x.size(2); ++t) {  // one latent frame per chunk
    cache.rewind();
    parts.push_back(decoder(x.narrow(2, t, 1), &cache));
  }
  return at::cat(parts, 2);
}

void WanVaeImpl::reset_parameters(uint64_t seed) {
  torch::NoGradGuard no_grad;
  for (auto& p : named_parameters(/*recurse=*/true)) wan_vae_init(seed, p.key(), p.value());
}

void wan_vae_init(uint64_t seed, const std::string& name, at::Tensor& param) {
  torch::NoGradGuard no_grad;
  if (util::ends_with(name, ".gamma")) {
    nn::init_constant(param, 1.0);
  } else if (param.dim() < 2) {
    nn::init_constant(param, 0.0);  // conv and norm biases
  } else {
    const double bound = 1.0 / std::sqrt(static_cast<double>(param.numel() / param.size(0)));
    at::Generator g = nn::generator_for(seed, name);
    param.uniform_(-bound, bound, g);
  }
}

}  // namespace zeroshard::models::wan
