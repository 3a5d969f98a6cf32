// What every text-to-image series (z_image, flux1, qwen_image, flux2) shares, so that a series
// folder holds only what is its own: the DiT, the towers, the loss convention and the sampler.
//
//  - ImageSeriesKeys: the keys `<series>.<key>` every image series has (tower files, tokenizer,
//    dataset folder or conditioning cache, size and aspect-ratio buckets, flow-matching shift,
//    sampling shift, guidance scale, negative prompt).
//  - ImageBatch: one micro-batch as a pipeline takes it: from the cache, latents and the named
//    conditioning tensors the series' `prepare` wrote; with the towers in the loop, images in
//    [-1, 1] and prompts. Both with the per-sample noise and flow-matching draws.
//  - ImagePipelineImpl: the series' trained root module ("dit.*", and with the towers
//    "text_encoder.*" and "vae.*"); the series implements the virtual pieces, the base runs them
//    through call_hooked so the sharding engine gathers the root's own parameters.
//  - ImageSeriesSpec + make_image_series(): the series' training task (epoch order or buckets
//    over the folder or the cache, noise and timesteps per sample number so W-independent,
//    LoRA on the DiT, tower files as parameter sources), `zeroshard prepare` (the towers once
//    into the cache, records split over the ranks) and `zeroshard sample` (PNG of the prompts).
//
// Samples: training sample n (numbered step * G .. (step + 1) * G - 1 over all ranks and micro-
// batches, G the global batch) is dataset item ImageData::item_of(n, G); its noise and timestep
// come from (data.seed, "<series>.noise.<n>") (TrainingDraws).
#pragma once

#include "data/metadata_csv.h"
#include "models/diffusion/flow_match.h"
#include "models/diffusion/prepare_records.h"
#include "models/series.h"
#include "train/config.h"
#include "zeroshard/comm.h"
#include "zeroshard/nn/hookable.h"
#include "zeroshard/param_source.h"

#include <torch/torch.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace zeroshard::models::diffusion {

class CacheReader;
class EpochOrder;

// The keys every image series registers under its name (`z_image.dataset`, `flux1.cache`, ...).
struct ImageSeriesKeys {
  // Files: the DiT's released weights (ImageSeriesSpec::dit_source reads them; LoRA adapters stay
  // seeded), the frozen towers (empty: seeded) and the text tower's tokenizer.
  std::string dit_from, vae_from, text_encoder_from, tokenizer;
  // The files of a series' further towers (ImageSeriesSpec::extra_towers), by their key
  // ("clip_from" for FLUX.1's CLIP-L); the series registers `<series>.<key>` on its entry.
  std::map<std::string, std::string> extra_from;
  // Data: a DiffSynth folder (metadata.csv: image, prompt) or a prepared cache.
  std::string dataset, cache;
  // The metadata file (csv, json or jsonl, DiffSynth's dataset_metadata_path); empty: the
  // folder's metadata.csv, .json or .jsonl.
  std::string metadata;
  int64_t height = 1024, width = 1024;
  // Aspect-ratio buckets "HxW,HxW,..." (empty: every image at height x width): each image goes
  // to the bucket nearest its aspect ratio, every step's global batch comes from one bucket.
  std::string buckets;
  std::string on_bad_file = "stop";
  // Flow matching (flow_match.h): training shift, DiffSynth's timestep weights.
  double shift = 3.0;
  bool timestep_weighting = true;
  // Sampling: the schedule's shift, the guidance scale (what it means is the series' own: a
  // guidance embedding for FLUX.1 dev, true CFG for Qwen-Image and Z-Image), the negative prompt.
  double sample_shift = 3.0, guidance_scale = 1.0;
  std::string negative_prompt;

  // Registers the keys under `series.` (documented generically; `tokenizer_what` names the file,
  // e.g. "the Qwen3 tokenizer.json").
  void register_keys(train::ConfigKeys& k, const std::string& series, const std::string& tokenizer_what);
  // Sizes are multiples of `multiple` (VAE factor x DiT patch); dataset or cache set when the
  // config needs its data (TrainConfig::needs_data).
  void validate(const std::string& series, int64_t multiple, bool needs_data) const;
  // The buckets as (height, width); {(height, width)} without buckets.
  std::vector<std::pair<int64_t, int64_t>> bucket_sizes(const std::string& series) const;
  std::string bucket_text(const std::string& series) const;
};

// A from-scratch value for the DiTs and VAEs of the image series (no released initializer; torch's
// module defaults), keyed by (seed, name): learned pad tokens N(0, 0.02); norm scales (1-D
// "*norm*.weight", "*.scale") and BatchNorm running variances 1; other vectors 0; every other
// weight uniform(+-1/sqrt(fan_in)) (torch's Linear / Conv default bound).
void seeded_init(uint64_t seed, const std::string& name, at::Tensor& param);

// The bucket (index into sizes) nearest an image of height x width in aspect ratio
// (|log(w/h) - log(W/H)|, the first on ties).
int64_t nearest_bucket(const std::vector<std::pair<int64_t, int64_t>>& sizes, int64_t height, int64_t width);
// The bucket of an image file (its decoded size; 0 without decoding when there is one bucket).
int64_t bucket_of_file(const std::vector<std::pair<int64_t, int64_t>>& sizes, const std::string& path);

// One micro-batch of B samples.
struct ImageBatch {
  // From the cache: latents [latent shape] and each sample's named conditioning tensors.
  std::vector<at::Tensor> latents;
  std::vector<std::map<std::string, at::Tensor>> conds;
  // Towers in the loop: images [3, H, W] in [-1, 1] and prompts.
  std::vector<at::Tensor> images;
  std::vector<std::string> prompts;
  // Noise like the latents; sigmas, timesteps (1000 sigma, as the schedule gives them), weights: [B] float32.
  std::vector<at::Tensor> noises;
  at::Tensor sigmas, timesteps, weights;

  bool cached() const { return images.empty(); }
  int64_t size() const { return static_cast<int64_t>(noises.size()); }
};

// The trained root of an image series. A series derives from it and implements the protected
// virtuals; the public calls run them inside call_hooked (the root's own parameters gathered).
class ImagePipelineImpl : public nn::HookableModule {
 public:
  // Mean over the micro-batch of the series' flow-matching loss (its own sign and time
  // conventions), the towers run sample by sample under no_grad when the batch is not cached.
  at::Tensor loss(const ImageBatch& batch);
  // The towers on one sample, what `prepare` caches: {"latent": [latent shape], plus the
  // series' conditioning fields}, all float32.
  std::map<std::string, at::Tensor> condition(const at::Tensor& image, const std::string& prompt);
  // Sampling: from noise [B, latent shape] for the prompts, `steps` steps of the series'
  // sampler with its guidance; returns images [B, 3, H, W] in [-1, 1].
  at::Tensor sample(const std::vector<std::string>& prompts, const at::Tensor& noise, int64_t steps);
  // Tokens of `prompt` alone in the text tower's tokenizer (no template, special tokens or
  // padding): the prompt's length in `prepare`'s per-item report.
  virtual int64_t prompt_tokens(const std::string& prompt) = 0;

  // The latent of an image of height x width (e.g. {16, h / 8, w / 8}).
  virtual std::vector<int64_t> latent_shape(int64_t height, int64_t width) const = 0;
  // Seeded initial value of parameter `name`, keyed by (seed, name): LoRA adapters by
  // nn::lora_init, "dit.*" by seeded_init, "text_encoder.*" by init_text_encoder, "vae.*" by
  // init_vae and any other name (a further tower's) by init_extra_tower (each tower's seed
  // salted: a tower of its own).
  void init_parameter(uint64_t seed, const std::string& name, at::Tensor& param) const;
  // The module LoRA adapts (registered as "dit").
  virtual torch::nn::Module& dit_module() = 0;

  double towers_seconds = 0.0;  // spent in the towers since the last reset (the series adds to it)

 protected:
  virtual at::Tensor compute_loss(const ImageBatch& batch) = 0;
  virtual std::map<std::string, at::Tensor> compute_condition(const at::Tensor& image, const std::string& prompt) = 0;
  virtual at::Tensor compute_sample(const std::vector<std::string>& prompts, const at::Tensor& noise,
                                    int64_t steps) = 0;
  // A tower parameter's initial value; `name` below "text_encoder." / "vae.", seed already salted.
  virtual void init_text_encoder(uint64_t seed, const std::string& name, at::Tensor& param) const = 0;
  // Default: seeded_init keyed by the full name "vae.<name>".
  virtual void init_vae(uint64_t seed, const std::string& name, at::Tensor& param) const;
  // A further tower's parameter (ImageSeriesSpec::extra_towers), `name` in full ("clip.*"), seed
  // salted. Default: no such tower (throws naming the parameter).
  virtual void init_extra_tower(uint64_t seed, const std::string& name, at::Tensor& param) const;
};

// The sharding units of a diffusion pipeline (the image series' and wan's): a chosen unit hides
// the HookableModules inside it, so the DiT and the towers as wholes are not units; their blocks
// are, and their embeddings, heads and norms join the root.
bool pipeline_unit(const std::string& qualified_name);

// What make_image_series needs from a series.
struct ImageSeriesSpec {
  std::string name;     // the model.series value, the keys' prefix, the draws' salt
  std::string summary;  // Series::summary
  // The cache: its format string, the conditioning fields beside "latent", what they are (for
  // the prepare report), the index keys a training run's config must match.
  std::string cache_format, conditioning_text;
  std::vector<std::string> cond_fields;
  std::function<std::vector<std::pair<std::string, int64_t>>(const train::TrainConfig&)> cache_shape;
  std::function<std::unique_ptr<train::SeriesConfig>()> make_config;
  std::function<const ImageSeriesKeys&(const train::TrainConfig&)> keys;
  // The pipeline without bytes (called under nn::DeferredInit), with the DiT and/or the towers.
  std::function<std::shared_ptr<ImagePipelineImpl>(const train::TrainConfig&, bool with_dit, bool with_towers)> build;
  std::function<bool(const std::string&)> is_unit = pipeline_unit;
  std::vector<reference::ReferenceKind> reference_kinds;
  // Optional: the parameters of the DiT / the VAE / the text tower (under the pipeline's names
  // below "dit." / "vae." / "text_encoder.") from a released file (<series>.dit_from, vae_from,
  // text_encoder_from), e.g. through a name map. Unset: io::checkpoint_param_source (safetensors,
  // its index.json or torch .pth holding exactly our names).
  using FileSource = std::function<std::shared_ptr<ParamSource>(const train::TrainConfig&, const std::string& path)>;
  FileSource dit_source, vae_source, text_encoder_source;
  // `zeroshard seed-weights` (Series::released_folders): the DiT in transformer/ and the VAE in
  // vae/ (diffusers' file stem), the text tower in `text_encoder_folder` (transformers' stem),
  // each through its map (unset: the release uses our names); `text_encoder_beyond`: what the
  // released text tower's folder holds beyond ours, a note and the tensors written without being
  // run (ReleasedFolder::note, not_run; unset: nothing).
  using ReleaseMap = std::function<nn::NameMap(const train::TrainConfig&)>;
  ReleaseMap dit_release_map, vae_release_map, text_encoder_release_map;
  std::string text_encoder_folder = "text_encoder";
  // The single-file form a release also ships of the DiT and the VAE, under our names (FLUX.1:
  // BFL's flux1-dev.safetensors and ae.safetensors): seed-weights' alternative folders dit_bfl
  // and vae_bfl (ReleasedFolder::alternative); an empty stem: none.
  std::function<std::string(const train::TrainConfig&)> dit_single_file_stem;
  std::string vae_single_file_stem;
  at::ScalarType vae_single_file_dtype = at::ScalarType::Undefined;  // its released dtype (ae.safetensors: float32)
  struct Beyond {
    std::string note;
    std::vector<ReleasedFolder::NotRun> not_run;
  };
  std::function<Beyond(const train::TrainConfig&)> text_encoder_beyond;
  // Further frozen towers beside the text tower and the VAE (FLUX.1's CLIP-L): each is the
  // pipeline's module `prefix` (without its dot), read from ImageSeriesKeys::extra_from[key]
  // when set (`<series>.<key>`, through `source`; unset: io::checkpoint_param_source), seeded
  // by init_extra_tower otherwise, and written by seed-weights to `folder` (stem, release_map,
  // `files` beside the weights such as config.json).
  struct ExtraTower {
    std::string prefix, key, folder, stem = "model", left_out;
    FileSource source;
    ReleaseMap release_map;
    std::function<std::map<std::string, std::string>(const train::TrainConfig&)> files;
    // Whether a config builds this tower (FLUX.1: not when flux1.pooled_file gives the vectors).
    std::function<bool(const train::TrainConfig&)> built;
  };
  std::vector<ExtraTower> extra_towers;
  // Optional: the training schedule for images of height x width (unset: flow_match_schedule(1000,
  // <series>.shift, training)).
  std::function<FlowMatchSchedule(const train::TrainConfig&, int64_t height, int64_t width)> training_schedule;
};

// The registered series: training task, prepare, sample, LoRA on "dit.".
Series make_image_series(ImageSeriesSpec spec);

// The items of an image series' data: the folder (towers in the loop) or the cache, with the
// epoch order or the buckets. item_of is a pure function of (seed, n, global batch).
class ImageData {
 public:
  ImageData(const ImageSeriesKeys& keys, const std::string& series, const std::string& cache_format,
            const std::vector<std::pair<std::string, int64_t>>& cache_shape, uint64_t seed);
  ~ImageData();
  // Towers in the loop with <series>.on_bad_file=skip: the ranks read the images once with
  // `read` (the series' reader, as prepare reads them: its info names the bucket), each its share,
  // and keep those that every rank then reads, each in its bucket (readable_records); the items
  // are numbered as a folder of only those would be. A collective, once before the first step;
  // nothing otherwise (stop mode reads every image's size when it is made and stops at the first
  // that does not decode).
  void agree_on_items(Communicator& comm, const ReadRecord& read);
  // What agree_on_items left out, for the training log.
  const std::vector<std::string>& notes() const { return notes_; }
  bool cached() const { return cache_ != nullptr; }
  int64_t size() const { return static_cast<int64_t>(prompts_.size()); }
  // One bucket: EpochOrder over all items. With buckets: step s draws bucket b with probability
  // |b| / N from (seed, s), and sample n is bucket b's EpochOrder at n.
  int64_t item_of(int64_t n, int64_t global_batch) const;
  int64_t bucket_of(int64_t item) const { return bucket_of_.at(static_cast<size_t>(item)); }
  std::pair<int64_t, int64_t> size_of(int64_t item) const;  // (height, width) of its bucket
  const std::string& prompt(int64_t item) const { return prompts_.at(static_cast<size_t>(item)); }
  // Cache: the item's tensors under `field`.
  at::Tensor read(int64_t item, const std::string& field) const;
  // Towers in the loop: the item's image [3, H, W] in [-1, 1] (resize + centre crop to its bucket).
  at::Tensor image(int64_t item) const;

 private:
  std::string series_;
  std::vector<std::string> prompts_, paths_;
  std::unique_ptr<CacheReader> cache_;
  uint64_t seed_;
  std::vector<std::pair<int64_t, int64_t>> sizes_;
  std::vector<int64_t> bucket_of_;
  std::vector<std::vector<int64_t>> members_;
  std::vector<std::unique_ptr<EpochOrder>> orders_;
  std::unique_ptr<data::MediaDataset> unchecked_;  // skip mode: the rows agree_on_items reads
  std::vector<std::string> notes_;
  void number_items();  // members_ and orders_ from bucket_of_
};

}  // namespace zeroshard::models::diffusion
