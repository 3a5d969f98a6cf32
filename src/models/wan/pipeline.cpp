// The wan series' config keys and its pipeline module (series.h).
#include "models/wan/series.h"

#include "models/diffusion/flow_match.h"
#include "nn/layers.h"
#include "util/text.h"

#include <chrono>
#include <stdexcept>

namespace zeroshard::models {

WanSeriesConfig::WanSeriesConfig() : dit(wan::wan21_t2v_1_3b()), t5(t5::umt5_xxl()), vae(wan::wan21_vae()) {}

void WanSeriesConfig::register_keys(train::ConfigKeys& k) {
  {
    train::ConfigKeys::ModelScope model(k);
    k.add_int("wan.dim", &dit.dim, 6, 1 << 16, "DiT width (1.3B: 1536, 14B: 5120)");
    k.add_int("wan.ffn_dim", &dit.ffn_dim, 1, 1 << 20, "DiT FFN width (1.3B: 8960, 14B: 13824)");
    k.add_int("wan.num_heads", &dit.num_heads, 1, 1024, "DiT heads (1.3B: 12, 14B: 40)");
    k.add_int("wan.num_layers", &dit.num_layers, 0, 1024, "DiT blocks (1.3B: 30, 14B: 40)");
    k.add_int("wan.freq_dim", &dit.freq_dim, 2, 1 << 16, "timestep sinusoid width (256)");
    k.add_int("wan.text_len", &dit.text_len, 1, 1 << 16, "prompt tokens (tokenizer length, DiT text rows; 512)");
    k.add_int("wan.t5_vocab", &t5.vocab_size, 2, 1 << 22, "umT5 vocabulary (256384); >= the tokenizer's");
    k.add_int("wan.t5_dim", &t5.dim, 1, 1 << 16, "umT5 width = the DiT's text_dim (4096)");
    k.add_int("wan.t5_dim_attn", &t5.dim_attn, 1, 1 << 16, "umT5 attention width, heads * head size (4096)");
    k.add_int("wan.t5_dim_ffn", &t5.dim_ffn, 1, 1 << 20, "umT5 gated-GELU width (10240)");
    k.add_int("wan.t5_heads", &t5.num_heads, 1, 1024, "umT5 heads (64)");
    k.add_int("wan.t5_layers", &t5.num_layers, 0, 1024, "umT5 layers (24)");
    k.add_int("wan.t5_buckets", &t5.num_buckets, 2, 1024, "umT5 relative-position buckets (32)");
    k.add_int("wan.vae_dim", &vae.dim, 2, 1 << 12, "VAE base width (96); levels x1, x2, x4, x4, 16 latent channels");
    k.add_int("wan.vae_num_res_blocks", &vae.num_res_blocks, 1, 16, "VAE residual blocks per level (2)");
  }
  k.add_path("wan.vae_from", &vae_from,
             "the frozen VAE: Wan2.1_VAE.pth as released (torch.save) or safetensors, Wan2.1_VAE names; empty: seeded");
  k.add_path("wan.text_encoder_from", &text_encoder_from,
             "the frozen umT5 encoder: models_t5_umt5-xxl-enc-bf16.pth as released or safetensors, Wan's T5Encoder "
             "names; empty: seeded");
  k.add_path("wan.dit_from", &dit_from,
             "the DiT's initial values: the released diffusion_pytorch_model.safetensors (or its .index.json), "
             "Wan's original names or the diffusers layout; adapters stay seeded; empty: seeded");
  k.add_path("wan.tokenizer", &tokenizer, "the umT5 SentencePiece model (spiece.model) for prompts");
  k.add_path("wan.dataset", &dataset, "a DiffSynth dataset folder: metadata.csv (video or image, prompt) + media");
  k.add_path("wan.metadata", &metadata,
             "the dataset's metadata file (.csv, .json or .jsonl; media paths relative to the dataset folder); "
             "empty: the folder's metadata.csv, .json or .jsonl");
  k.add_path("wan.cache", &cache,
             "a conditioning cache (`zeroshard prepare` writes it): train without the towers; empty: towers in "
             "the loop");
  k.add_int("wan.height", &height, 16, 1 << 14, "clip height (resize + centre crop; a multiple of 16)");
  k.add_int("wan.width", &width, 16, 1 << 14, "clip width (a multiple of 16)");
  k.add_int("wan.num_frames", &num_frames, 1, 1 << 14, "frames per clip, 1 + 4k (a shorter video gives its longest 1 + 4k)");
  k.add_string("wan.on_bad_file", &on_bad_file, {"stop", "skip"},
               "stop at an unreadable media file, or leave it out (prepare: of the cache, listed in the report "
               "and index.json; training with the towers in the loop: the ranks read every clip once before the "
               "first step and train on the rest, listed in the log)");
  k.add_float("wan.shift", &shift, 1e-3, 1e3, "flow-matching sigma shift for training (DiffSynth: 5)");
  k.add_bool("wan.timestep_weighting", &timestep_weighting,
             "multiply each sample's MSE by DiffSynth's timestep weight (false: plain MSE)");
  k.add_float("wan.sample_shift", &sample_shift, 1e-3, 1e3, "sigma shift of the sampler's schedule (5)");
  k.add_float("wan.cfg_scale", &cfg_scale, 0.0, 1e3, "classifier-free guidance scale for sampling (1: none)");
  k.add_string("wan.negative_prompt", &negative_prompt, {}, "the sampler's negative prompt");
}

wan::WanDiTConfig WanSeriesConfig::dit_config() const {
  wan::WanDiTConfig c = dit;
  c.text_dim = t5.dim;
  c.in_dim = c.out_dim = vae.z_dim;
  return c;
}
t5::T5Config WanSeriesConfig::t5_config() const { return t5; }
wan::WanVaeConfig WanSeriesConfig::vae_config() const { return vae; }

void WanSeriesConfig::validate(const train::TrainConfig& c) const {
  dit_config().validate();
  t5_config().validate();
  vae_config().validate();
  const int64_t spatial = vae.spatial_factor() * dit.patch_size[1];
  if (height % spatial != 0 || width % spatial != 0) {
    throw std::invalid_argument("wan.height and wan.width must be multiples of " + std::to_string(spatial) +
                                " (VAE x patch), got " + std::to_string(height) + " x " + std::to_string(width));
  }
  if ((num_frames - 1) % vae.time_factor() != 0) {
    throw std::invalid_argument("wan.num_frames must be 1 + " + std::to_string(vae.time_factor()) + "k, got " +
                                std::to_string(num_frames));
  }
  if (!dit_from.empty() && !c.init_from.empty()) {
    throw std::invalid_argument("wan.dit_from and model.init_from both give the DiT's initial values (" + dit_from +
                                ", " + c.init_from + "): set one");
  }
  if (c.needs_data && cache.empty() && dataset.empty()) {
    throw std::invalid_argument("wan: set wan.cache (a prepared conditioning cache) or wan.dataset (towers in the loop)");
  }
}

// --- the pipeline ------------------------------------------------------------------------------

WanPipelineImpl::WanPipelineImpl(const WanSeriesConfig& c, bool with_dit, bool with_towers) {
  if (with_dit) dit = register_module("dit", wan::WanModel(c.dit_config()));
  if (with_towers) {
    text_encoder = register_module("text_encoder", t5::T5Encoder(c.t5_config()));
    vae = register_module("vae", wan::WanVae(c.vae_config()));
    for (auto& p : text_encoder->parameters()) p.set_requires_grad(false);
    for (auto& p : vae->parameters()) p.set_requires_grad(false);
  }
}

at::Tensor WanPipelineImpl::encode_video(const at::Tensor& video, int64_t chunks) {
  TORCH_CHECK(vae, "WanPipeline: built without its towers");
  torch::NoGradGuard no_grad;
  const auto t0 = std::chrono::steady_clock::now();
  at::Tensor z = vae->encode(video.unsqueeze(0).to(vae->conv1->weight.scalar_type()), chunks)[0].to(at::kFloat);
  towers_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return z;
}

at::Tensor WanPipelineImpl::encode_text(const at::Tensor& ids, const at::Tensor& mask) {
  TORCH_CHECK(text_encoder, "WanPipeline: built without its towers");
  torch::NoGradGuard no_grad;
  const auto t0 = std::chrono::steady_clock::now();
  const at::Tensor states = text_encoder(ids, mask).to(at::kFloat);
  at::Tensor out = t5::trim_to_lengths(states, mask).at(0);
  towers_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

std::vector<at::Tensor> WanPipelineImpl::conditioning(const std::vector<at::Tensor>& videos,
                                                      const std::vector<at::Tensor>& ids,
                                                      const std::vector<at::Tensor>& masks, int64_t vae_chunks) {
  std::vector<at::Tensor> in(videos.begin(), videos.end());
  in.insert(in.end(), ids.begin(), ids.end());
  in.insert(in.end(), masks.begin(), masks.end());
  const size_t B = videos.size();
  return call_hooked(in, [this, B, vae_chunks](const std::vector<at::Tensor>& x) {
    std::vector<at::Tensor> out;
    for (size_t i = 0; i < B; ++i) out.push_back(encode_video(x[i], vae_chunks));
    for (size_t i = 0; i < B; ++i) out.push_back(encode_text(x[B + i], x[2 * B + i]));
    return out;
  });
}

at::Tensor WanPipelineImpl::loss(const WanBatch& b) {
  const size_t B = b.noises.size();
  const bool towers = b.latents.empty();
  std::vector<at::Tensor> in = towers ? b.videos : b.latents;
  if (towers) {
    in.insert(in.end(), b.ids.begin(), b.ids.end());
    in.insert(in.end(), b.masks.begin(), b.masks.end());
  } else {
    in.insert(in.end(), b.contexts.begin(), b.contexts.end());
  }
  in.insert(in.end(), b.noises.begin(), b.noises.end());
  in.push_back(b.sigmas);
  in.push_back(b.timesteps);
  in.push_back(b.weights);
  const int64_t chunks = b.vae_chunks;
  return call_hooked(in, [this, B, towers, chunks](const std::vector<at::Tensor>& x) {
    std::vector<at::Tensor> x0, ctx;
    size_t k = 0;
    if (towers) {
      for (size_t i = 0; i < B; ++i) x0.push_back(encode_video(x[i], chunks));
      for (size_t i = 0; i < B; ++i) ctx.push_back(encode_text(x[B + i], x[2 * B + i]));
      k = 3 * B;
    } else {
      x0.assign(x.begin(), x.begin() + static_cast<std::ptrdiff_t>(B));
      ctx.assign(x.begin() + static_cast<std::ptrdiff_t>(B), x.begin() + static_cast<std::ptrdiff_t>(2 * B));
      k = 2 * B;
    }
    const std::vector<at::Tensor> noise(x.begin() + static_cast<std::ptrdiff_t>(k),
                                        x.begin() + static_cast<std::ptrdiff_t>(k + B));
    const at::Tensor& sigmas = x[k + B];
    const at::Tensor& timesteps = x[k + B + 1];
    const at::Tensor& weights = x[k + B + 2];
    std::vector<at::Tensor> noisy;
    for (size_t i = 0; i < B; ++i) {
      const at::Tensor s = sigmas[static_cast<int64_t>(i)];
      noisy.push_back((1 - s) * x0[i] + s * noise[i]);  // FlowMatchScheduler.add_noise
    }
    const std::vector<at::Tensor> pred = dit->forward(noisy, timesteps, ctx);
    std::vector<at::Tensor> per_sample;
    for (size_t i = 0; i < B; ++i) {
      const at::Tensor mse = (pred[i].to(at::kFloat) - (noise[i] - x0[i])).pow(2).mean();
      per_sample.push_back(mse * weights[static_cast<int64_t>(i)]);
    }
    return std::vector<at::Tensor>{at::stack(per_sample).mean()};
  })[0];
}

at::Tensor WanPipelineImpl::generate(const at::Tensor& ids, const at::Tensor& mask, const at::Tensor& neg_ids,
                                     const at::Tensor& neg_mask, const at::Tensor& noise, int64_t steps, double shift,
                                     double cfg_scale) {
  torch::NoGradGuard no_grad;
  return call_hooked({ids, mask, neg_ids, neg_mask, noise}, [&](const std::vector<at::Tensor>& x) {
    const int64_t B = x[4].size(0);
    std::vector<at::Tensor> pos, neg;
    for (int64_t i = 0; i < B; ++i) {
      pos.push_back(encode_text(x[0].narrow(0, i, 1), x[1].narrow(0, i, 1)));
      neg.push_back(encode_text(x[2].narrow(0, i, 1), x[3].narrow(0, i, 1)));
    }
    const diffusion::FlowMatchSchedule s = diffusion::flow_match_schedule(steps, shift, /*training=*/false);
    std::vector<at::Tensor> lat;
    for (int64_t i = 0; i < B; ++i) lat.push_back(x[4][i]);
    for (int64_t j = 0; j < steps; ++j) {
      const at::Tensor t = s.timesteps.narrow(0, j, 1).expand({B}).contiguous();
      const std::vector<at::Tensor> vp = dit->forward(lat, t, pos);
      std::vector<at::Tensor> vn;
      if (cfg_scale != 1.0) vn = dit->forward(lat, t, neg);
      const float next = j + 1 < steps ? s.sigmas[j + 1].item<float>() : 0.0f;
      const at::Tensor dsigma = at::scalar_tensor(next, at::kFloat) - s.sigmas[j];
      for (int64_t i = 0; i < B; ++i) {
        at::Tensor v = vp[static_cast<size_t>(i)].to(at::kFloat);
        if (cfg_scale != 1.0) {
          const at::Tensor n = vn[static_cast<size_t>(i)].to(at::kFloat);
          v = n + cfg_scale * (v - n);
        }
        lat[static_cast<size_t>(i)] = lat[static_cast<size_t>(i)] + v * dsigma;
      }
    }
    at::Tensor z = at::stack(lat, 0);
    const at::Tensor video = vae->decode(z.to(vae->conv2->weight.scalar_type())).to(at::kFloat);
    return std::vector<at::Tensor>{video.clamp(-1, 1)};
  })[0];
}

// --- seeded initial values ---------------------------------------------------------------------

void wan_init(const WanSeriesConfig& c, uint64_t seed, const std::string& name, at::Tensor& param) {
  using util::starts_with;
  if (nn::is_lora_parameter(name)) {
    nn::lora_init(seed, name, param);
  } else if (starts_with(name, "dit.")) {
    wan::wan_dit_init(c.dit_config(), seed, name.substr(4), param);
  } else if (starts_with(name, "text_encoder.")) {
    t5::t5_init(c.t5_config(), seed ^ 0x7435ull, name.substr(13), param);  // salted: a tower of its own
  } else if (starts_with(name, "vae.")) {
    wan::wan_vae_init(seed ^ 0x7661eull, name.substr(4), param);
  } else {
    throw std::invalid_argument("wan_init: no initial value for parameter '" + name + "'");
  }
}

}  // namespace zeroshard::models
