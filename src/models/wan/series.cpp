// Series `wan`: Wan 2.1 text-to-video as released, trained by flow matching (series.h).
#include "models/wan/series.h"

#include "checkpoint/checkpoint.h"
#include "io/png.h"
#include "io/safetensors.h"
#include "io/torch_pth.h"
#include "io/video_codec.h"
#include "models/wan/data.h"
#include "models/diffusion/cond_cache.h"
#include "models/diffusion/flow_match.h"
#include "models/diffusion/image_series.h"
#include "nn/init.h"
#include "nn/layers.h"
#include "nn/name_map.h"
#include "sample/sample.h"
#include "train/task.h"
#include "util/optional_parts.h"
#include "util/text.h"
#include "zeroshard/nn/deferred.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace zeroshard::models {

namespace wan {

std::shared_ptr<ParamSource> wan_initial_source(const WanSeriesConfig& c, uint64_t seed) {
  std::shared_ptr<ParamSource> source =
      param_source_from_init([&c, seed](const std::string& name, at::Tensor& t) { wan_init(c, seed, name, t); });
  auto from_file = [&source](const std::string& path, const std::string& prefix) {
    if (path.empty()) return;
    if (!std::filesystem::exists(path)) throw std::invalid_argument("wan: tower file '" + path + "' does not exist");
    source = combine_param_sources(source, prefixed_param_source(io::checkpoint_param_source(path), prefix),
                                   [prefix](const std::string& n) { return util::starts_with(n, prefix); });
  };
  from_file(c.vae_from, "vae.");
  from_file(c.text_encoder_from, "text_encoder.");
  return source;
}

std::shared_ptr<ParamSource> dit_file_source(const std::string& path) {
  if (!std::filesystem::exists(path)) throw std::invalid_argument("wan.dit_from: file '" + path + "' does not exist");
  // The file's tensor names tell the layouts apart: only diffusers has condition_embedder.*
  // and a top-level scale_shift_table.
  std::vector<std::string> names;
  if (util::ends_with(path, ".index.json")) {
    std::ifstream in(path);
    nlohmann::json index;
    try {
      index = nlohmann::json::parse(in);
    } catch (const std::exception& e) {
      throw std::runtime_error("wan.dit_from: " + path + ": not valid JSON (" + e.what() + ")");
    }
    if (!index.contains("weight_map") || !index["weight_map"].is_object()) {
      throw std::runtime_error("wan.dit_from: " + path + ": no \"weight_map\" object");
    }
    for (auto it = index["weight_map"].begin(); it != index["weight_map"].end(); ++it) names.push_back(it.key());
  } else {
    const io::SafetensorsFile file(path);
    for (const auto& e : file.entries()) names.push_back(e.name);
  }
  bool diffusers = false;
  for (const auto& n : names) diffusers = diffusers || util::starts_with(n, "condition_embedder.") || n == "scale_shift_table";
  return nn::name_mapped_param_source(path, diffusers ? dit_diffusers_name_map() : nn::NameMap());
}

}  // namespace wan

namespace {

std::string num(double v) {
  std::ostringstream s;
  s << v;
  return s.str();
}

class WanTask : public train::GeneratedSampleTask {
 public:
  WanTask(const train::TrainConfig& cfg, int rank, int world)
      : GeneratedSampleTask(cfg, rank, world),
        c_(cfg.series_config<WanSeriesConfig>()),
        data_(c_, static_cast<uint64_t>(cfg.data.seed)),
        schedule_(diffusion::flow_match_schedule(1000, c_.shift, /*training=*/true)) {
    {
      nn::DeferredInit deferred;
      model_ = WanPipeline(c_, /*with_dit=*/true, /*with_towers=*/!data_.cached());
      if (cfg.lora.rank > 0) {
        adapted_ = nn::apply_lora(*model_->dit, train::lora_options(cfg));
        for (auto& name : adapted_) name = "dit." + name;
      }
    }
    if (!data_.cached()) {
      tokenizer_ = std::make_unique<text::SentencePieceTokenizer>(text::SentencePieceTokenizer::from_file(c_.tokenizer));
      if (tokenizer_->vocab_size() > c_.t5.vocab_size) {
        throw std::invalid_argument("wan.t5_vocab " + std::to_string(c_.t5.vocab_size) + " is below the tokenizer's " +
                                    std::to_string(tokenizer_->vocab_size()) + " (" + c_.tokenizer + ")");
      }
    }
  }

  std::shared_ptr<nn::HookableModule> module() const override { return model_.ptr(); }
  void init_parameter(const std::string& name, at::Tensor& param) const override {
    wan_init(c_, static_cast<uint64_t>(cfg_.train.seed), name, param);
  }
  std::shared_ptr<ParamSource> initial_source(std::shared_ptr<ParamSource> seeded) const override {
    // Seeded DiT and adapters; the DiT's base from wan.dit_from and the towers from their files
    // when given.
    std::shared_ptr<ParamSource> source = seeded;
    if (!data_.cached()) {
      std::shared_ptr<ParamSource> towers = wan::wan_initial_source(c_, static_cast<uint64_t>(cfg_.train.seed));
      source = combine_param_sources(source, towers, [](const std::string& n) {
        return util::starts_with(n, "vae.") || util::starts_with(n, "text_encoder.");
      });
    }
    if (!c_.dit_from.empty()) {
      source = combine_param_sources(source, prefixed_param_source(wan::dit_file_source(c_.dit_from), "dit."),
                                     [](const std::string& n) {
                                       return util::starts_with(n, "dit.") && !nn::is_lora_parameter(n);
                                     });
    }
    return source;
  }

  at::Tensor loss(int64_t step, int64_t micro) override {
    const int64_t first = first_index(step, micro);
    WanBatch b;
    diffusion::TrainingDraws draws(schedule_, c_.timestep_weighting);
    for (int64_t i = 0; i < cfg_.train.micro_batch_size; ++i) {
      const int64_t n = first + i;
      const int64_t item = data_.item_of(n);
      std::vector<int64_t> latent_shape;
      if (data_.cached()) {
        auto [latent, context] = data_.cached_item(item);
        latent_shape = latent.sizes().vec();
        b.latents.push_back(latent);
        b.contexts.push_back(context);
      } else {
        const at::Tensor video = data_.video(item);
        latent_shape = {c_.vae.z_dim, 1 + (video.size(1) - 1) / c_.vae.time_factor(),
                        video.size(2) / c_.vae.spatial_factor(), video.size(3) / c_.vae.spatial_factor()};
        auto [ids, mask] = wan::prompt_tokens(*tokenizer_, data_.prompt(item), c_.dit.text_len);
        b.videos.push_back(video);
        b.ids.push_back(ids);
        b.masks.push_back(mask);
      }
      b.noises.push_back(draws.add(static_cast<uint64_t>(cfg_.data.seed), "wan.noise." + std::to_string(n), latent_shape));
    }
    b.sigmas = draws.sigmas();
    b.timesteps = draws.timesteps();
    b.weights = draws.weights();
    b.vae_chunks = data_.vae_chunks(world_, cfg_.parallel.strategy == Strategy::OptimGradsParams);
    return model_->loss(b);
  }

  void agree_on_data(Communicator& comm) override { data_.agree_on_items(comm); }
  std::vector<std::string> notes() const override { return data_.notes(); }

  nlohmann::json finish_step(Communicator& comm) override {
    if (data_.cached()) return nlohmann::json::object();
    return diffusion::towers_seconds_metric(comm, model_->towers_seconds);
  }

  std::string item_name() const override { return "clips"; }

 private:
  // run.dump_batches: the dataset items of the micro-batch.
  at::Tensor samples(int64_t first) const override {
    std::vector<int64_t> items;
    for (int64_t i = 0; i < cfg_.train.micro_batch_size; ++i) items.push_back(data_.item_of(first + i));
    return at::tensor(items, at::kLong);
  }

  const WanSeriesConfig& c_;
  wan::WanData data_;
  diffusion::FlowMatchSchedule schedule_;
  std::unique_ptr<text::SentencePieceTokenizer> tokenizer_;
  WanPipeline model_{nullptr};
};

// `zeroshard sample`: --prompt (or the first --clips prompts of the run's data), Euler steps of
// the shifted schedule with classifier-free guidance (wan.cfg_scale, wan.negative_prompt), the
// VAE's decoder; an mp4 per clip and one PNG strip (a row of frames per clip).
std::string generate(const sample::SampleOptions& o, ckpt::Checkpoint& ck, const train::TrainConfig& cfg,
                     const RendezvousInfo& rdv) {
  if (o.clips < 1) throw std::invalid_argument("--clips must be >= 1, got " + std::to_string(o.clips));
  if (o.denoise_steps < 1) throw std::invalid_argument("--steps must be >= 1, got " + std::to_string(o.denoise_steps));
  WanSeriesConfig c = cfg.series_config<WanSeriesConfig>();
  // The towers: the checkpoint's when it trained with them, else the run's tower files.
  const nlohmann::json& saved = ck.config();
  const bool towers_in_checkpoint = ck.find("text_encoder.norm.weight") != nullptr;
  if (!towers_in_checkpoint && saved.contains("wan")) {
    c.vae_from = saved["wan"].value("vae_from", std::string());
    c.text_encoder_from = saved["wan"].value("text_encoder_from", std::string());
  }
  // The run's train.seed seeded its towers (model_overrides carries the wan.* keys, not it).
  const uint64_t seed = saved.contains("train") && saved["train"].contains("seed")
                            ? saved["train"]["seed"].get<uint64_t>()
                            : static_cast<uint64_t>(cfg.train.seed);
  if (c.tokenizer.empty()) throw std::invalid_argument(ck.dir() + ": the run has no wan.tokenizer to encode prompts");
  // Every rank refuses before any collective: rank 0 writes each clip as an mp4 at the end.
  util::require_part(util::OptionalPart::kVideo, "wan sampling (an mp4 per clip beside " +
                                                     sample::output_path(ck, o.out, "samples.png") + ")");
  const auto tok = text::SentencePieceTokenizer::from_file(c.tokenizer);
  std::vector<std::string> prompts;
  if (o.prompt != "\n") {
    prompts.assign(static_cast<size_t>(o.clips), o.prompt);
  } else {
    const wan::WanData data(c, static_cast<uint64_t>(cfg.data.seed));
    for (int64_t i = 0; i < o.clips; ++i) prompts.push_back(data.prompt(i % data.size()));
  }

  auto comm = make_communicator(rdv);
  WanPipeline p{nullptr};
  {
    nn::DeferredInit deferred;
    p = WanPipeline(c, true, true);
    if (cfg.lora.rank > 0) nn::apply_lora(*p->dit, train::lora_options(cfg));
  }
  ShardOptions so = sample::sampling_shard_options(cfg, o, ck);
  if (!towers_in_checkpoint) {
    so.param_source = combine_param_sources(so.param_source, wan::wan_initial_source(c, seed), [](const std::string& n) {
                                              return util::starts_with(n, "vae.") || util::starts_with(n, "text_encoder.");
                                            });
  }
  auto sharded = fully_shard(p.ptr(), comm, so);

  std::vector<at::Tensor> ids, masks, nids, nmasks, noise;
  const int64_t T = 1 + (c.num_frames - 1) / c.vae.time_factor();
  for (int64_t i = 0; i < o.clips; ++i) {
    auto [a, m] = wan::prompt_tokens(tok, prompts[static_cast<size_t>(i)], c.dit.text_len);
    auto [na, nm] = wan::prompt_tokens(tok, c.negative_prompt, c.dit.text_len);
    ids.push_back(a);
    masks.push_back(m);
    nids.push_back(na);
    nmasks.push_back(nm);
    auto gen = nn::generator_for(o.seed, "wan.sample.noise." + std::to_string(i));
    noise.push_back(at::randn({c.vae.z_dim, T, c.height / c.vae.spatial_factor(), c.width / c.vae.spatial_factor()}, gen,
                              at::kFloat));
  }
  const at::Tensor video = p->generate(at::cat(ids), at::cat(masks), at::cat(nids), at::cat(nmasks), at::stack(noise),
                                       o.denoise_steps, c.sample_shift, c.cfg_scale);

  const std::string png = sample::output_path(ck, o.out, "samples.png");
  std::string summary = "generated " + std::to_string(o.clips) + " clips (" + std::to_string(o.denoise_steps) +
                        " Euler steps, shift " + num(c.sample_shift) + ", cfg " +
                        num(c.cfg_scale) + "); wrote " + png;
  if (comm->rank() == 0) {
    // [B, 3, T, H, W] in [-1, 1] -> per clip a row of T frames (the PNG) and an mp4.
    // The strip: clip i's frames left to right in row i, 2 grey pixels between them.
    const int64_t B = video.size(0), F = video.size(2), H = video.size(3), W = video.size(4), gap = 2;
    at::Tensor sheet = at::zeros({3, B * (H + gap), F * (W + gap)}, at::kFloat);
    const at::Tensor u8 = ((video + 1) * 127.5).round().clamp(0, 255).to(at::kByte);
    for (int64_t i = 0; i < o.clips; ++i) {
      for (int64_t t = 0; t < F; ++t) sheet.narrow(1, i * (H + gap), H).narrow(2, t * (W + gap), W).copy_(video[i].select(1, t));
      std::vector<io::RgbImage> frames;
      for (int64_t t = 0; t < u8.size(2); ++t) {
        const at::Tensor f = u8[i].select(1, t).permute({1, 2, 0}).contiguous();  // [H, W, 3]
        io::RgbImage img(f.size(1), f.size(0));
        std::memcpy(img.pixels.data(), f.data_ptr(), img.pixels.size());
        frames.push_back(std::move(img));
      }
      std::string mp4 = png.substr(0, png.size() - (util::ends_with(png, ".png") ? 4 : 0)) + "-" + std::to_string(i) + ".mp4";
      io::write_video(mp4, frames);
      summary += ", " + mp4;
    }
    io::write_png(png, sheet);
  }
  comm->barrier();
  summary += "; prompts, in order:";
  for (const auto& s : prompts) summary += "\n  " + s;
  return summary;
}

}  // namespace

Series wan_series() {
  Series s;
  s.name = "wan";
  s.summary = "Wan 2.1 text-to-video DiT as released (umT5 + video VAE towers), flow matching from a DiffSynth folder or a prepared cache";
  s.make_config = [] { return std::make_unique<WanSeriesConfig>(); };
  s.make_task = [](const train::TrainConfig& c, int rank, int world) -> std::unique_ptr<train::Task> {
    return std::make_unique<WanTask>(c, rank, world);
  };
  s.is_unit = diffusion::pipeline_unit;
  s.sample = generate;
  s.prepare = wan::prepare_cache;
  s.check_prepare = wan::check_prepare;
  s.dry_run = wan::dry_run;
  s.unprepared = [](const train::TrainConfig& cfg) {
    const auto& w = cfg.series_config<WanSeriesConfig>();
    return diffusion::unprepared_cache("wan.cache", w.cache, w.dataset);
  };
  s.supports_lora = true;
  s.adapter_root = "dit.";  // PipelineTask::build adapts the DiT only
  s.seeded_model = [](const train::TrainConfig& cfg) {
    const WanSeriesConfig c = cfg.series_config<WanSeriesConfig>();
    WanPipeline p{nullptr};
    {
      nn::DeferredInit deferred;
      p = WanPipeline(c, /*with_dit=*/true, /*with_towers=*/true);
    }
    const auto seed = static_cast<uint64_t>(cfg.train.seed);
    return SeededModel{p.ptr(), [c, seed](const std::string& name, at::Tensor& t) { wan_init(c, seed, name, t); }};
  };
  // seed-weights: as Wan-AI/Wan2.1-T2V-* ship them, side by side: the DiT (our names, the original
  // release's) as diffusion_pytorch_model-*.safetensors + index, the umT5 encoder and the VAE each
  // as one torch.save file (models_t5_umt5-xxl-enc-bf16.pth; Wan2.1_VAE.pth in float32).
  s.released_folders = [](const train::TrainConfig&) {
    return std::vector<ReleasedFolder>{
        {"dit.", "", "diffusion_pytorch_model", "wan.dit_from", {}, true, "", {}, {}},
        {"text_encoder.", "", "models_t5_umt5-xxl-enc-bf16", "wan.text_encoder_from", {}, true, "", {}, {}, true},
        {"vae.", "", "Wan2.1_VAE", "wan.vae_from", {}, true, "", {}, {}, true, at::kFloat}};
  };
  return s;
}

}  // namespace zeroshard::models
