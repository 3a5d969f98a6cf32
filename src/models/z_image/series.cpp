// Series `z_image`: Z-Image as released, trained by flow matching (series.h).
#include "models/z_image/series.h"

#include "checkpoint/checkpoint.h"
#include "models/diffusion/flow_match.h"
#include "models/diffusion/image_folder.h"
#include "models/z_image/data.h"
#include "nn/init.h"
#include "nn/layers.h"
#include "sample/sample.h"
#include "train/task.h"
#include "util/text.h"
#include "zeroshard/nn/deferred.h"

#include <sstream>
#include <stdexcept>

namespace zeroshard::models::z_image {

namespace {

bool is_tower(const std::string& n) { return util::starts_with(n, "vae.") || util::starts_with(n, "text_encoder."); }

class ZImageTask : public train::GeneratedSampleTask {
 public:
  ZImageTask(const train::TrainConfig& cfg, int rank, int world)
      : GeneratedSampleTask(cfg, rank, world),
        c_(cfg.series_config<ZImageSeriesConfig>()),
        data_(c_, static_cast<uint64_t>(cfg.data.seed)),
        schedule_(diffusion::flow_match_schedule(1000, c_.shift, /*training=*/true)) {
    {
      nn::DeferredInit deferred;
      model_ = ZImagePipeline(c_, /*with_dit=*/true, /*with_towers=*/!data_.cached());
      if (cfg.lora.rank > 0) {
        adapted_ = nn::apply_lora(*model_->dit, train::lora_options(cfg));
        for (auto& name : adapted_) name = "dit." + name;
      }
    }
    if (!data_.cached()) tokenizer_ = std::make_unique<text::BpeTokenizer>(load_tokenizer(c_));
  }

  std::shared_ptr<nn::HookableModule> module() const override { return model_.ptr(); }
  void init_parameter(const std::string& name, at::Tensor& param) const override {
    model_->init_parameter(static_cast<uint64_t>(cfg_.train.seed), name, param);
  }
  std::shared_ptr<ParamSource> initial_source(std::shared_ptr<ParamSource> seeded) const override {
    if (data_.cached()) return seeded;
    // Seeded DiT and adapters; the towers from their files when given.
    return combine_param_sources(seeded, z_image::initial_source(c_, *model_, static_cast<uint64_t>(cfg_.train.seed)),
                                 is_tower);
  }

  at::Tensor loss(int64_t step, int64_t micro) override {
    const int64_t first = first_index(step, micro);
    ZImageBatch b;
    diffusion::TrainingDraws draws(schedule_, c_.timestep_weighting);
    const int64_t f = c_.spatial_factor();
    for (int64_t i = 0; i < cfg_.train.micro_batch_size; ++i) {
      const int64_t n = first + i;
      const int64_t item = data_.item_of(n, global_batch());
      std::vector<int64_t> latent_shape;
      if (data_.cached()) {
        auto [latent, context] = data_.cached_item(item);
        latent_shape = latent.sizes().vec();
        b.latents.push_back(latent);
        b.contexts.push_back(context);
      } else {
        const auto [h, w] = data_.size_of(item);
        latent_shape = {c_.vae.z_channels, h / f, w / f};
        b.images.push_back(data_.image(item));
        b.ids.push_back(prompt_ids(*tokenizer_, data_.prompt(item), c_.text_len));
      }
      b.noises.push_back(draws.add(static_cast<uint64_t>(cfg_.data.seed), "z_image.noise." + std::to_string(n), latent_shape));
    }
    b.sigmas = draws.sigmas();
    b.timesteps = draws.timesteps();
    b.weights = draws.weights();
    return model_->loss(b);
  }

  nlohmann::json finish_step(Communicator& comm) override {
    if (data_.cached()) return nlohmann::json::object();
    at::Tensor t = at::full({1}, model_->towers_seconds, at::kDouble);
    comm.all_reduce(t);
    model_->towers_seconds = 0.0;
    return {{"towers_s", t.item<double>() / comm.world_size()}};
  }

  std::string item_name() const override { return "images"; }

 private:
  // run.dump_batches: the dataset items of the micro-batch.
  at::Tensor samples(int64_t first) const override {
    std::vector<int64_t> items;
    for (int64_t i = 0; i < cfg_.train.micro_batch_size; ++i) items.push_back(data_.item_of(first + i, global_batch()));
    return at::tensor(items, at::kLong);
  }

  // Samples per step over all ranks (GeneratedSampleTask numbers them step * G .. (step + 1) * G - 1).
  int64_t global_batch() const { return cfg_.train.micro_batch_size * cfg_.train.grad_accum * world_; }

  const ZImageSeriesConfig& c_;
  ZImageData data_;
  diffusion::FlowMatchSchedule schedule_;
  std::unique_ptr<text::BpeTokenizer> tokenizer_;
  ZImagePipeline model_{nullptr};
};

std::string num(double v) {
  std::ostringstream s;
  s << v;
  return s.str();
}

// `zeroshard sample`: --prompt (or the first --clips prompts of the run's data), --steps Euler
// steps of the shifted schedule with Z-Image's guidance (z_image.guidance_scale, cfg_truncation,
// cfg_normalization, negative_prompt), the VAE's decoder; one PNG, the images side by side.
std::string generate(const sample::SampleOptions& o, ckpt::Checkpoint& ck, const train::TrainConfig& cfg,
                     const RendezvousInfo& rdv) {
  if (o.clips < 1) throw std::invalid_argument("--clips must be >= 1, got " + std::to_string(o.clips));
  if (o.denoise_steps < 1) throw std::invalid_argument("--steps must be >= 1, got " + std::to_string(o.denoise_steps));
  ZImageSeriesConfig c = cfg.series_config<ZImageSeriesConfig>();
  // The towers: the checkpoint's when it trained with them, else the run's tower files.
  const nlohmann::json& saved = ck.config();
  const bool towers_in_checkpoint = ck.find("text_encoder.model.norm.weight") != nullptr;
  if (!towers_in_checkpoint && saved.contains("z_image")) {
    c.vae_from = saved["z_image"].value("vae_from", std::string());
    c.text_encoder_from = saved["z_image"].value("text_encoder_from", std::string());
  }
  // The run's train.seed seeded its towers (model_overrides carries the z_image.* keys, not it).
  const uint64_t seed = saved.contains("train") && saved["train"].contains("seed")
                            ? saved["train"]["seed"].get<uint64_t>()
                            : static_cast<uint64_t>(cfg.train.seed);
  text::BpeTokenizer tok = load_tokenizer(c);
  std::vector<std::string> prompts;
  if (o.prompt != "\n") {
    prompts.assign(static_cast<size_t>(o.clips), o.prompt);
  } else {
    const ZImageData data(c, static_cast<uint64_t>(cfg.data.seed));
    for (int64_t i = 0; i < o.clips; ++i) prompts.push_back(data.prompt(i % data.size()));
  }

  auto comm = make_communicator(rdv);
  ZImagePipeline p{nullptr};
  {
    nn::DeferredInit deferred;
    p = ZImagePipeline(c, true, true);
    if (cfg.lora.rank > 0) nn::apply_lora(*p->dit, train::lora_options(cfg));
  }
  ShardOptions so = sample::sampling_shard_options(cfg, o, ck);
  if (!towers_in_checkpoint) so.param_source = combine_param_sources(so.param_source, initial_source(c, *p, seed), is_tower);
  auto sharded = fully_shard(p.ptr(), comm, so);

  std::vector<at::Tensor> ids, neg, noise;
  const int64_t f = c.spatial_factor();
  for (int64_t i = 0; i < o.clips; ++i) {
    ids.push_back(prompt_ids(tok, prompts[static_cast<size_t>(i)], c.text_len));
    neg.push_back(prompt_ids(tok, c.negative_prompt, c.text_len));
    auto gen = nn::generator_for(o.seed, "z_image.sample.noise." + std::to_string(i));
    noise.push_back(at::randn({c.vae.z_channels, c.height / f, c.width / f}, gen, at::kFloat));
  }
  ZImageSampling s;
  s.steps = o.denoise_steps;
  s.shift = c.sample_shift;
  s.guidance_scale = c.guidance_scale;
  s.cfg_truncation = c.cfg_truncation;
  s.cfg_normalization = c.cfg_normalization;
  const at::Tensor images = p->generate(ids, neg, at::stack(noise), s);

  const std::string png = sample::output_path(ck, o.out, "samples.png");
  if (comm->rank() == 0) diffusion::write_image_row(png, images);
  comm->barrier();
  std::string summary = "generated " + std::to_string(o.clips) + " images " + std::to_string(c.height) + "x" +
                        std::to_string(c.width) + " (" + std::to_string(o.denoise_steps) + " Euler steps, shift " +
                        num(c.sample_shift) + ", guidance " + num(c.guidance_scale) + "); wrote " + png +
                        "; prompts, in order:";
  for (const auto& pr : prompts) summary += "\n  " + pr;
  return summary;
}

}  // namespace

Series z_image_series() {
  Series s;
  s.name = "z_image";
  s.summary = "Z-Image DiT as released (Qwen3 text + FLUX.1 VAE towers), flow matching from a DiffSynth image folder "
              "or a prepared cache";
  s.make_config = [] { return std::make_unique<ZImageSeriesConfig>(); };
  s.make_task = [](const train::TrainConfig& c, int rank, int world) -> std::unique_ptr<train::Task> {
    return std::make_unique<ZImageTask>(c, rank, world);
  };
  s.is_unit = z_image_unit;
  s.sample = generate;
  s.prepare = prepare_cache;
  s.supports_lora = true;
  s.adapter_root = "dit.";
  return s;
}

}  // namespace zeroshard::models::z_image
