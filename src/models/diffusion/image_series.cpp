// The image series' pipeline base, training task, prepare and sample (image_series.h).
#include "models/diffusion/image_series.h"

#include "checkpoint/checkpoint.h"
#include "io/torch_pth.h"
#include "models/diffusion/cond_cache.h"
#include "models/diffusion/image_folder.h"
#include "models/diffusion/prepare_records.h"
#include "nn/init.h"
#include "nn/layers.h"
#include "sample/sample.h"
#include "train/task.h"
#include "util/text.h"
#include "zeroshard/nn/deferred.h"
#include "zeroshard/shard.h"

#include <filesystem>
#include <sstream>
#include <stdexcept>

namespace zeroshard::models::diffusion {

// --- the pipeline base: the series' pieces inside call_hooked -----------------------------------

at::Tensor ImagePipelineImpl::loss(const ImageBatch& b) {
  // The batch's tensors pass through the hooks in a fixed order and are read back from there.
  std::vector<at::Tensor> in;
  std::vector<std::vector<std::string>> fields(b.conds.size());
  if (b.cached()) {
    for (size_t i = 0; i < b.latents.size(); ++i) {
      in.push_back(b.latents[i]);
      for (const auto& [name, t] : b.conds.at(i)) {
        fields[i].push_back(name);
        in.push_back(t);
      }
    }
  } else {
    in.insert(in.end(), b.images.begin(), b.images.end());
  }
  in.insert(in.end(), b.noises.begin(), b.noises.end());
  in.push_back(b.sigmas);
  in.push_back(b.timesteps);
  in.push_back(b.weights);
  return call_hooked(in, [this, &b, fields](const std::vector<at::Tensor>& x) {
    ImageBatch h;
    size_t k = 0;
    if (b.cached()) {
      for (size_t i = 0; i < b.latents.size(); ++i) {
        h.latents.push_back(x[k++]);
        std::map<std::string, at::Tensor> c;
        for (const auto& name : fields[i]) c[name] = x[k++];
        h.conds.push_back(std::move(c));
      }
    } else {
      for (size_t i = 0; i < b.images.size(); ++i) h.images.push_back(x[k++]);
      h.prompts = b.prompts;
    }
    for (size_t i = 0; i < b.noises.size(); ++i) h.noises.push_back(x[k++]);
    h.sigmas = x[k];
    h.timesteps = x[k + 1];
    h.weights = x[k + 2];
    return std::vector<at::Tensor>{compute_loss(h)};
  })[0];
}

std::map<std::string, at::Tensor> ImagePipelineImpl::condition(const at::Tensor& image, const std::string& prompt) {
  std::vector<std::string> names;
  const std::vector<at::Tensor> out = call_hooked({image}, [&](const std::vector<at::Tensor>& x) {
    std::vector<at::Tensor> values;
    for (auto& [name, t] : compute_condition(x[0], prompt)) {
      names.push_back(name);
      values.push_back(t);
    }
    return values;
  });
  std::map<std::string, at::Tensor> m;
  for (size_t i = 0; i < names.size(); ++i) m[names[i]] = out[i];
  return m;
}

at::Tensor ImagePipelineImpl::sample(const std::vector<std::string>& prompts, const at::Tensor& noise, int64_t steps) {
  torch::NoGradGuard no_grad;
  return call_hooked(std::vector<at::Tensor>{noise}, [&](const std::vector<at::Tensor>& x) {
    return std::vector<at::Tensor>{compute_sample(prompts, x[0], steps)};
  })[0];
}

void ImagePipelineImpl::init_parameter(uint64_t seed, const std::string& name, at::Tensor& param) const {
  using util::starts_with;
  if (nn::is_lora_parameter(name)) {
    nn::lora_init(seed, name, param);
  } else if (starts_with(name, "dit.")) {
    seeded_init(seed, name, param);
  } else if (starts_with(name, "text_encoder.")) {
    init_text_encoder(seed ^ 0x7135ull, name.substr(13), param);
  } else if (starts_with(name, "vae.")) {
    init_vae(seed ^ 0x7661eull, name.substr(4), param);
  } else {
    init_extra_tower(seed ^ 0xe7a0ull, name, param);
  }
}

void ImagePipelineImpl::init_vae(uint64_t seed, const std::string& name, at::Tensor& param) const {
  seeded_init(seed, "vae." + name, param);
}

void ImagePipelineImpl::init_extra_tower(uint64_t, const std::string& name, at::Tensor&) const {
  throw std::invalid_argument("no initial value for parameter '" + name +
                              "' (this image pipeline has dit.*, text_encoder.* and vae.*)");
}

bool pipeline_unit(const std::string& qualified_name) {
  return qualified_name != "vae" && qualified_name != "dit" && qualified_name != "text_encoder";
}

namespace {

std::string num(double v) {
  std::ostringstream s;
  s << v;
  return s.str();
}

// A frozen tower's parameter: "vae.*", "text_encoder.*" or a further tower's.
std::function<bool(const std::string&)> tower_names(const ImageSeriesSpec& spec) {
  std::vector<std::string> prefixes{"vae.", "text_encoder."};
  for (const auto& t : spec.extra_towers) prefixes.push_back(t.prefix + ".");
  return [prefixes](const std::string& n) {
    for (const auto& p : prefixes) {
      if (util::starts_with(n, p)) return true;
    }
    return false;
  };
}

// Seeded values (the pipeline's init_parameter), the towers and the DiT from their files when given.
std::shared_ptr<ParamSource> pipeline_source(const ImageSeriesSpec& spec, const train::TrainConfig& cfg,
                                             const ImageSeriesKeys& k, std::shared_ptr<ParamSource> seeded,
                                             bool with_dit, bool with_towers) {
  std::shared_ptr<ParamSource> source = std::move(seeded);
  auto from_file = [&](const std::string& path, const std::string& prefix, const std::string& key,
                       const ImageSeriesSpec::FileSource& reader) {
    if (path.empty()) return;
    if (!std::filesystem::exists(path)) {
      throw std::invalid_argument(spec.name + "." + key + ": file '" + path + "' does not exist");
    }
    std::shared_ptr<ParamSource> file = reader ? reader(cfg, path) : io::checkpoint_param_source(path);
    source = combine_param_sources(source, prefixed_param_source(std::move(file), prefix), [prefix](const std::string& n) {
      // A DiT file holds the base weights; LoRA adapters stay seeded.
      return util::starts_with(n, prefix) && !nn::is_lora_parameter(n);
    });
  };
  if (with_towers) {
    from_file(k.vae_from, "vae.", "vae_from", spec.vae_source);
    from_file(k.text_encoder_from, "text_encoder.", "text_encoder_from", spec.text_encoder_source);
    for (const auto& t : spec.extra_towers) {
      const auto it = k.extra_from.find(t.key);
      if (it != k.extra_from.end() && (!t.built || t.built(cfg))) from_file(it->second, t.prefix + ".", t.key, t.source);
    }
  }
  if (with_dit) from_file(k.dit_from, "dit.", "dit_from", spec.dit_source);
  return source;
}

// One record read as prepare and training read it: the image at its bucket's size (into *image
// when given), what index.json and the report show of it (its bucket included).
RecordRead read_image(const data::MediaSample& sample, const std::vector<std::pair<int64_t, int64_t>>& sizes,
                      ImagePipelineImpl& p, at::Tensor* image) {
  const int64_t bucket = bucket_of_file(sizes, sample.media_path);
  const auto [hh, ww] = sizes.at(static_cast<size_t>(bucket));
  std::pair<int64_t, int64_t> source;
  at::Tensor pixels = load_image_tensor(sample.media_path, hh, ww, &source);
  if (image != nullptr) *image = std::move(pixels);
  RecordRead read;
  read.info = {{"source", std::to_string(source.first) + "x" + std::to_string(source.second)},
               {"size", std::to_string(ww) + "x" + std::to_string(hh)},
               {"prompt_tokens", p.prompt_tokens(sample.prompt)},
               {"bucket", bucket}};
  return read;
}

class ImageTask : public train::GeneratedSampleTask {
 public:
  ImageTask(const ImageSeriesSpec& spec, const train::TrainConfig& cfg, int rank, int world)
      : GeneratedSampleTask(cfg, rank, world),
        spec_(spec),
        keys_(spec.keys(cfg_)),
        data_(keys_, spec.name, spec.cache_format, spec.cache_shape(cfg_), static_cast<uint64_t>(cfg.data.seed)) {
    nn::DeferredInit deferred;
    model_ = spec.build(cfg_, /*with_dit=*/true, /*with_towers=*/!data_.cached());
    if (cfg.lora.rank > 0) {
      adapted_ = nn::apply_lora(model_->dit_module(), train::lora_options(cfg));
      for (auto& name : adapted_) name = "dit." + name;
    }
  }

  std::shared_ptr<nn::HookableModule> module() const override { return model_; }
  void init_parameter(const std::string& name, at::Tensor& param) const override {
    model_->init_parameter(static_cast<uint64_t>(cfg_.train.seed), name, param);
  }
  std::shared_ptr<ParamSource> initial_source(std::shared_ptr<ParamSource> seeded) const override {
    return pipeline_source(spec_, cfg_, keys_, std::move(seeded), true, !data_.cached());
  }

  at::Tensor loss(int64_t step, int64_t micro) override {
    const int64_t first = first_index(step, micro);
    ImageBatch b;
    const auto [h, w] = data_.size_of(data_.item_of(first, global_batch()));  // one bucket per step
    TrainingDraws draws(schedule(h, w), keys_.timestep_weighting);
    for (int64_t i = 0; i < cfg_.train.micro_batch_size; ++i) {
      const int64_t n = first + i;
      const int64_t item = data_.item_of(n, global_batch());
      std::vector<int64_t> latent_shape;
      if (data_.cached()) {
        b.latents.push_back(data_.read(item, "latent"));
        latent_shape = b.latents.back().sizes().vec();
        std::map<std::string, at::Tensor> c;
        for (const auto& f : spec_.cond_fields) c[f] = data_.read(item, f);
        b.conds.push_back(std::move(c));
      } else {
        latent_shape = model_->latent_shape(h, w);
        b.images.push_back(data_.image(item));
        b.prompts.push_back(data_.prompt(item));
      }
      b.noises.push_back(draws.add(static_cast<uint64_t>(cfg_.data.seed), spec_.name + ".noise." + std::to_string(n),
                                   latent_shape));
    }
    b.sigmas = draws.sigmas();
    b.timesteps = draws.timesteps();
    b.weights = draws.weights();
    return model_->loss(b);
  }

  void agree_on_data(Communicator& comm) override {
    const auto sizes = keys_.bucket_sizes(spec_.name);
    data_.agree_on_items(comm, [&](const data::MediaSample& sample) { return read_image(sample, sizes, *model_, nullptr); });
  }
  std::vector<std::string> notes() const override { return data_.notes(); }

  nlohmann::json finish_step(Communicator& comm) override {
    if (data_.cached()) return nlohmann::json::object();
    return towers_seconds_metric(comm, model_->towers_seconds);
  }

  std::string item_name() const override { return "images"; }

 private:
  // run.dump_batches: the dataset items of the micro-batch.
  at::Tensor samples(int64_t first) const override {
    std::vector<int64_t> items;
    for (int64_t i = 0; i < cfg_.train.micro_batch_size; ++i) items.push_back(data_.item_of(first + i, global_batch()));
    return at::tensor(items, at::kLong);
  }
  int64_t global_batch() const { return cfg_.train.micro_batch_size * cfg_.train.grad_accum * world_; }
  const FlowMatchSchedule& schedule(int64_t h, int64_t w) {
    auto it = schedules_.find({h, w});
    if (it == schedules_.end()) {
      it = schedules_
               .emplace(std::make_pair(h, w), spec_.training_schedule ? spec_.training_schedule(cfg_, h, w)
                                                                       : flow_match_schedule(1000, keys_.shift, true))
               .first;
    }
    return it->second;
  }

  ImageSeriesSpec spec_;
  const ImageSeriesKeys& keys_;
  ImageData data_;
  std::map<std::pair<int64_t, int64_t>, FlowMatchSchedule> schedules_;
  std::shared_ptr<ImagePipelineImpl> model_;
};

// `train --dry-run`: the cache's items, or every record of the folder read as the towers in the
// loop read it (the pipeline built without parameter bytes, for its tokenizer).
std::string dry_run(const ImageSeriesSpec& spec, const train::TrainConfig& cfg) {
  const ImageSeriesKeys& k = spec.keys(cfg);
  const std::string& s = spec.name;
  if (!k.cache.empty()) return dry_run_report(s, k.cache, read_json_file(k.cache + "/index.json"), false, false);
  const data::MediaDataset d = load_captioned_images(k.dataset, k.metadata, s + ".dataset", /*collect_errors=*/true);
  const auto sizes = k.bucket_sizes(s);
  std::shared_ptr<ImagePipelineImpl> p;
  {
    nn::DeferredInit deferred;
    p = spec.build(cfg, /*with_dit=*/false, /*with_towers=*/true);
  }
  const nlohmann::json index =
      read_records(d, [&](const data::MediaSample& sample) { return read_image(sample, sizes, *p, nullptr); });
  return dry_run_report(s, k.dataset, index, true, k.on_bad_file == "skip");
}

// What prepare reads before its ranks talk; Series::check_prepare reads it before any rank starts.
data::MediaDataset prepare_inputs(const ImageSeriesSpec& spec, const train::TrainConfig& cfg) {
  const ImageSeriesKeys& k = spec.keys(cfg);
  const std::string& s = spec.name;
  if (k.cache.empty()) throw std::invalid_argument(s + ".cache: the folder to write the cache to is required");
  CacheWriter::check_folder(k.cache);
  return load_captioned_images(k.dataset, k.metadata, s + ".dataset", k.on_bad_file == "skip");
}

std::string prepare(const ImageSeriesSpec& spec, const train::TrainConfig& cfg, const RendezvousInfo& rdv) {
  const ImageSeriesKeys& k = spec.keys(cfg);
  const std::string& s = spec.name;
  const data::MediaDataset d = prepare_inputs(spec, cfg);
  const auto sizes = k.bucket_sizes(s);

  CacheWriter writer(k.cache, rdv.rank);  // refuses a folder it must not replace, before the towers
  auto comm = make_communicator(rdv);
  const int rank = comm->rank(), world = comm->world_size();
  std::shared_ptr<ImagePipelineImpl> p;
  {
    nn::DeferredInit deferred;
    p = spec.build(cfg, /*with_dit=*/false, /*with_towers=*/true);
  }
  ShardOptions so = train::shard_options(cfg);
  const uint64_t seed = static_cast<uint64_t>(cfg.train.seed);
  so.param_source = pipeline_source(
      spec, cfg, k, param_source_from_init([&p, seed](const std::string& n, at::Tensor& t) { p->init_parameter(seed, n, t); }),
      false, true);
  auto sharded = fully_shard(p, comm, so);

  at::Tensor image;  // this rank's image of the round
  RecordHandlers h;
  h.read = [&](const data::MediaSample& sample) { return read_image(sample, sizes, *p, &image); };
  h.encode = [&](const data::MediaSample& sample, int64_t, bool stand_in) {
    if (stand_in) image = at::zeros({3, k.height, k.width});
    const std::map<std::string, at::Tensor> out = p->condition(image, sample.prompt);
    return NamedTensors(out.begin(), out.end());
  };
  prepare_records(*comm, d, s + ".on_bad_file", k.on_bad_file == "skip", writer, h);
  nlohmann::json meta = {{"dataset", k.dataset}, {"left_out", d.errors}, {"buckets", k.bucket_text(s)}};
  for (const auto& [key, value] : spec.cache_shape(cfg)) meta[key] = value;
  const int64_t n = writer.finish(*comm, spec.cache_format, meta, [&d](int64_t row) {
    const auto& item = sample_of_row(d.samples, row);
    return nlohmann::json{{"media", item.media}, {"prompt", item.prompt}};
  });
  const int64_t rows = static_cast<int64_t>(d.samples.size() + d.errors.size());
  if (rank != 0) return {};
  std::string report = s + ": cached " + std::to_string(n) + " of " + std::to_string(rows) + " records (" +
                       spec.conditioning_text + ") from " + k.dataset + " in " + k.cache + " on " +
                       std::to_string(world) + " ranks";
  report += prepared_report(read_json_file(k.cache + "/index.json"));
  for (const auto& note : so.param_source->notes()) report += "\n  " + note;
  return report;
}

// `zeroshard sample`: --prompt (or the first --clips prompts of the run's data), --steps steps of
// the series' sampler, the VAE's decoder; one PNG, the images side by side.
std::string sample_images(const ImageSeriesSpec& spec, const sample::SampleOptions& o, ckpt::Checkpoint& ck,
                          const train::TrainConfig& cfg, const RendezvousInfo& rdv) {
  if (o.clips < 1) throw std::invalid_argument("--clips must be >= 1, got " + std::to_string(o.clips));
  if (o.denoise_steps < 1) throw std::invalid_argument("--steps must be >= 1, got " + std::to_string(o.denoise_steps));
  const std::string& s = spec.name;
  ImageSeriesKeys k = spec.keys(cfg);
  // The towers: the checkpoint's when it trained with them, else the run's tower files.
  const nlohmann::json& saved = ck.config();
  bool towers_in_checkpoint = false;
  const auto is_tower = tower_names(spec);
  for (const auto& t : ck.tensors()) towers_in_checkpoint = towers_in_checkpoint || is_tower(t.name);
  if (!towers_in_checkpoint && saved.contains(s)) {
    k.vae_from = saved[s].value("vae_from", std::string());
    k.text_encoder_from = saved[s].value("text_encoder_from", std::string());
    for (const auto& t : spec.extra_towers) k.extra_from[t.key] = saved[s].value(t.key, std::string());
  }
  // The run's train.seed seeded its towers (model_overrides carries the series keys, not it).
  const uint64_t seed = saved.contains("train") && saved["train"].contains("seed")
                            ? saved["train"]["seed"].get<uint64_t>()
                            : static_cast<uint64_t>(cfg.train.seed);
  std::vector<std::string> prompts;
  if (o.prompt != "\n") {
    prompts.assign(static_cast<size_t>(o.clips), o.prompt);
  } else {
    const ImageData data(k, s, spec.cache_format, spec.cache_shape(cfg), static_cast<uint64_t>(cfg.data.seed));
    for (int64_t i = 0; i < o.clips; ++i) prompts.push_back(data.prompt(i % data.size()));
  }

  auto comm = make_communicator(rdv);
  std::shared_ptr<ImagePipelineImpl> p;
  {
    nn::DeferredInit deferred;
    p = spec.build(cfg, true, true);
    if (cfg.lora.rank > 0) nn::apply_lora(p->dit_module(), train::lora_options(cfg));
  }
  ShardOptions so = sample::sampling_shard_options(cfg, o, ck);
  if (!towers_in_checkpoint) {
    k.dit_from.clear();  // the DiT is the checkpoint's
    so.param_source = combine_param_sources(
        so.param_source,
        pipeline_source(spec, cfg, k,
                        param_source_from_init([&p, seed](const std::string& n, at::Tensor& t) { p->init_parameter(seed, n, t); }),
                        false, true),
        is_tower);
  }
  auto sharded = fully_shard(p, comm, so);

  std::vector<at::Tensor> noise;
  for (int64_t i = 0; i < o.clips; ++i) {
    auto gen = nn::generator_for(o.seed, s + ".sample.noise." + std::to_string(i));
    noise.push_back(at::randn(p->latent_shape(k.height, k.width), gen, at::kFloat));
  }
  const at::Tensor images = p->sample(prompts, at::stack(noise), o.denoise_steps);

  const std::string png = sample::output_path(ck, o.out, "samples.png");
  if (comm->rank() == 0) write_image_row(png, images);
  comm->barrier();
  std::string summary = "generated " + std::to_string(o.clips) + " images " + std::to_string(k.height) + "x" +
                        std::to_string(k.width) + " (" + std::to_string(o.denoise_steps) + " steps of the " + s +
                        " sampler, guidance " + num(k.guidance_scale) + "); wrote " + png +
                        "; prompts, in order:";
  for (const auto& pr : prompts) summary += "\n  " + pr;
  if (so.param_source) {
    for (const auto& note : so.param_source->notes()) summary += "\n  " + note;
  }
  return summary;
}

}  // namespace

Series make_image_series(ImageSeriesSpec spec) {
  Series s;
  s.name = spec.name;
  s.summary = spec.summary;
  s.make_config = spec.make_config;
  s.make_task = [spec](const train::TrainConfig& c, int rank, int world) -> std::unique_ptr<train::Task> {
    return std::make_unique<ImageTask>(spec, c, rank, world);
  };
  s.is_unit = spec.is_unit;
  s.sample = [spec](const sample::SampleOptions& o, ckpt::Checkpoint& ck, const train::TrainConfig& cfg,
                    const RendezvousInfo& rdv) { return sample_images(spec, o, ck, cfg, rdv); };
  s.prepare = [spec](const train::TrainConfig& cfg, const RendezvousInfo& rdv) { return prepare(spec, cfg, rdv); };
  s.check_prepare = [spec](const train::TrainConfig& cfg) { prepare_inputs(spec, cfg); };
  s.dry_run = [spec](const train::TrainConfig& cfg) { return dry_run(spec, cfg); };
  s.unprepared = [spec](const train::TrainConfig& cfg) {
    const ImageSeriesKeys& k = spec.keys(cfg);
    return unprepared_cache(spec.name + ".cache", k.cache, k.dataset);
  };
  s.seeded_model = [spec](const train::TrainConfig& cfg) {
    std::shared_ptr<ImagePipelineImpl> m;
    {
      nn::DeferredInit deferred;
      m = spec.build(cfg, /*with_dit=*/true, /*with_towers=*/true);
    }
    const auto seed = static_cast<uint64_t>(cfg.train.seed);
    return SeededModel{m, [m, seed](const std::string& name, at::Tensor& t) { m->init_parameter(seed, name, t); }};
  };
  s.released_folders = [spec](const train::TrainConfig& cfg) {
    auto folder = [&](const std::string& prefix, const std::string& dir, const std::string& stem, const std::string& key,
                      const ImageSeriesSpec::ReleaseMap& map, const std::string& left_out) {
      return ReleasedFolder{prefix, dir, stem, spec.name + "." + key, map ? map(cfg) : nn::NameMap(), false, left_out, {}, {}};
    };
    const ImageSeriesSpec::Beyond beyond = spec.text_encoder_beyond ? spec.text_encoder_beyond(cfg) : ImageSeriesSpec::Beyond{};
    std::vector<ReleasedFolder> out{
        folder("dit.", "transformer", "diffusion_pytorch_model", "dit_from", spec.dit_release_map, ""),
        folder("text_encoder.", spec.text_encoder_folder, "model", "text_encoder_from", spec.text_encoder_release_map,
               beyond.note),
        folder("vae.", "vae", "diffusion_pytorch_model", "vae_from", spec.vae_release_map, "")};
    out[1].not_run = beyond.not_run;
    for (const auto& t : spec.extra_towers) {
      if (t.built && !t.built(cfg)) continue;
      out.push_back(folder(t.prefix + ".", t.folder, t.stem, t.key, t.release_map, t.left_out));
      if (t.files) out.back().files = t.files(cfg);
    }
    auto single_file = [&](const std::string& prefix, const std::string& stem, const std::string& key,
                           const std::string& label, at::ScalarType dtype) {
      ReleasedFolder f = folder(prefix, "", stem, key, nullptr, "");
      f.single_file = f.alternative = f.key_takes_index = true;  // the key names the file
      f.label = label;
      f.dtype = dtype;
      out.push_back(std::move(f));
    };
    if (spec.dit_single_file_stem) {
      single_file("dit.", spec.dit_single_file_stem(cfg), "dit_from", "dit_bfl", at::ScalarType::Undefined);
    }
    if (!spec.vae_single_file_stem.empty()) {
      single_file("vae.", spec.vae_single_file_stem, "vae_from", "vae_bfl", spec.vae_single_file_dtype);
    }
    return out;
  };
  s.reference_kinds = spec.reference_kinds;
  s.supports_lora = true;
  s.adapter_root = "dit.";
  return s;
}

}  // namespace zeroshard::models::diffusion
