// The image series' keys and data (image_series.h): the folder or the cache, epoch order, buckets.
#include "io/image_codec.h"
#include "models/diffusion/cond_cache.h"
#include "models/diffusion/image_folder.h"
#include "models/diffusion/image_series.h"
#include "models/diffusion/prepare_records.h"
#include "nn/init.h"
#include "train/config_keys.h"
#include "util/text.h"

#include <cmath>
#include <stdexcept>

namespace zeroshard::models::diffusion {

void ImageSeriesKeys::register_keys(train::ConfigKeys& k, const std::string& s, const std::string& tokenizer_what) {
  k.add_path(s + ".dit_from", &dit_from,
             "the DiT's released file (safetensors or its index.json); empty: seeded (LoRA adapters always seeded)");
  k.add_path(s + ".vae_from", &vae_from,
             "the frozen VAE's file (safetensors or torch .pth, released names); empty: seeded");
  k.add_path(s + ".text_encoder_from", &text_encoder_from,
             "the frozen text encoder's file (safetensors, index.json or .pth, released names); empty: seeded");
  k.add_path(s + ".tokenizer", &tokenizer, tokenizer_what);
  k.add_path(s + ".dataset", &dataset, "a DiffSynth folder: metadata.csv (image, prompt) + jpg/png/webp");
  k.add_path(s + ".metadata", &metadata,
             "the dataset's metadata file (.csv, .json or .jsonl; image paths relative to the dataset folder); "
             "empty: the folder's metadata.csv, .json or .jsonl");
  k.add_path(s + ".cache", &cache,
             "a conditioning cache (`zeroshard prepare` writes it): train without the towers; empty: towers in the loop");
  k.add_int(s + ".height", &height, 16, 1 << 14, "image height (resize + centre crop)");
  k.add_int(s + ".width", &width, 16, 1 << 14, "image width");
  k.add_string(s + ".buckets", &buckets, {},
               "aspect-ratio buckets HxW,HxW,... (each image to the nearest aspect ratio, one bucket per step); "
               "empty: every image at height x width");
  k.add_string(s + ".on_bad_file", &on_bad_file, {"stop", "skip"},
               "stop at an unreadable image, or leave it out (prepare: of the cache, listed in the report and "
               "index.json; training with the towers in the loop: the ranks read every image once before the "
               "first step and train on the rest, listed in the log)");
  k.add_float(s + ".shift", &shift, 1e-3, 1e3, "flow-matching sigma shift for training");
  k.add_bool(s + ".timestep_weighting", &timestep_weighting,
             "multiply each sample's MSE by DiffSynth's timestep weight (false: plain MSE)");
  k.add_float(s + ".sample_shift", &sample_shift, 1e-3, 1e3, "sigma shift of the sampler's schedule");
  k.add_float(s + ".guidance_scale", &guidance_scale, 0.0, 1e3, "sampling guidance (the series' convention)");
  k.add_string(s + ".negative_prompt", &negative_prompt, {}, "the sampler's negative prompt");
}

void ImageSeriesKeys::validate(const std::string& s, int64_t multiple, bool needs_data) const {
  for (const auto& [h, w] : bucket_sizes(s)) {
    if (h % multiple != 0 || w % multiple != 0 || h <= 0 || w <= 0) {
      throw std::invalid_argument(s + ": image sizes must be positive multiples of " + std::to_string(multiple) +
                                  " (VAE x patch), got " + std::to_string(h) + " x " + std::to_string(w) +
                                  (buckets.empty() ? " (" + s + ".height x " + s + ".width)" : " in " + s + ".buckets"));
    }
  }
  if (needs_data && cache.empty() && dataset.empty()) {
    throw std::invalid_argument(s + ": set " + s + ".cache (a prepared conditioning cache) or " + s +
                                ".dataset (towers in the loop)");
  }
}

std::vector<std::pair<int64_t, int64_t>> ImageSeriesKeys::bucket_sizes(const std::string& s) const {
  if (buckets.empty()) return {{height, width}};
  std::vector<std::pair<int64_t, int64_t>> out;
  for (const std::string& b : util::split_trimmed(buckets, ',')) {
    const size_t x = b.find('x');
    try {
      if (x == std::string::npos) throw std::invalid_argument("no 'x'");
      size_t used = 0;
      const int64_t h = std::stoll(b.substr(0, x), &used);
      if (used != x) throw std::invalid_argument("height");
      const int64_t w = std::stoll(b.substr(x + 1), &used);
      if (used != b.size() - x - 1) throw std::invalid_argument("width");
      out.emplace_back(h, w);
    } catch (const std::exception&) {
      throw std::invalid_argument(s + ".buckets: '" + b + "' is not HxW (e.g. 1024x768), in '" + buckets + "'");
    }
  }
  return out;
}

std::string ImageSeriesKeys::bucket_text(const std::string& s) const {
  std::string t;
  for (const auto& [h, w] : bucket_sizes(s)) t += (t.empty() ? "" : ",") + std::to_string(h) + "x" + std::to_string(w);
  return t;
}

void seeded_init(uint64_t seed, const std::string& name, at::Tensor& param) {
  using util::ends_with;
  torch::NoGradGuard no_grad;
  if (ends_with(name, "pad_token")) {
    nn::init_normal(param, seed, name, 0.02);
  } else if (ends_with(name, "running_var") ||
             (param.dim() < 2 && (ends_with(name, ".scale") ||
                                  (name.find("norm") != std::string::npos && ends_with(name, ".weight"))))) {
    nn::init_constant(param, 1.0);
  } else if (param.dim() < 2) {
    nn::init_constant(param, 0.0);
  } else {
    const double bound = 1.0 / std::sqrt(static_cast<double>(param.numel() / param.size(0)));
    at::Generator g = nn::generator_for(seed, name);
    param.uniform_(-bound, bound, g);
  }
}

int64_t nearest_bucket(const std::vector<std::pair<int64_t, int64_t>>& sizes, int64_t height, int64_t width) {
  const double r = std::log(static_cast<double>(width) / static_cast<double>(height));
  int64_t best = 0;
  double best_d = 0;
  for (size_t b = 0; b < sizes.size(); ++b) {
    const double d = std::abs(r - std::log(static_cast<double>(sizes[b].second) / static_cast<double>(sizes[b].first)));
    if (b == 0 || d < best_d) {
      best = static_cast<int64_t>(b);
      best_d = d;
    }
  }
  return best;
}

int64_t bucket_of_file(const std::vector<std::pair<int64_t, int64_t>>& sizes, const std::string& path) {
  if (sizes.size() == 1) return 0;
  const io::RgbImage img = io::decode_image_file(path).image;
  return nearest_bucket(sizes, img.height, img.width);
}

ImageData::ImageData(const ImageSeriesKeys& keys, const std::string& series, const std::string& cache_format,
                     const std::vector<std::pair<std::string, int64_t>>& cache_shape, uint64_t seed)
    : series_(series), seed_(seed), sizes_(keys.bucket_sizes(series)) {
  if (!keys.cache.empty()) {
    cache_ = std::make_unique<CacheReader>(keys.cache, cache_format, cache_shape, series + ".");
    for (int64_t i = 0; i < cache_->size(); ++i) {
      const nlohmann::json& item = cache_->item(i);
      prompts_.push_back(item.at("prompt").get<std::string>());
      bucket_of_.push_back(item.value("bucket", int64_t{0}));
    }
    const std::string index = keys.cache + "/index.json";
    const std::string have = read_json_file(index).value("buckets", std::string());
    if (have != keys.bucket_text(series)) {
      throw std::invalid_argument(index + ": the cache has buckets '" + have + "', this run's config '" +
                                  keys.bucket_text(series) + "' (" + series + ".buckets, " + series + ".height, " +
                                  series + ".width)");
    }
  } else if (keys.on_bad_file == "skip") {
    // The rows of good metadata stand until agree_on_items (sampling reads only their prompts).
    unchecked_ = std::make_unique<data::MediaDataset>(
        load_captioned_images(keys.dataset, keys.metadata, series + ".dataset", /*collect_errors=*/true));
    for (const auto& s : unchecked_->samples) prompts_.push_back(s.prompt);
    return;
  } else {
    const data::MediaDataset d = load_captioned_images(keys.dataset, keys.metadata, series + ".dataset");
    for (const auto& s : d.samples) {
      prompts_.push_back(s.prompt);
      paths_.push_back(s.media_path);
      bucket_of_.push_back(bucket_of_file(sizes_, s.media_path));
    }
  }
  number_items();
}

void ImageData::agree_on_items(Communicator& comm, const ReadRecord& read) {
  if (!unchecked_) return;
  const ReadableRecords r = readable_records(comm, *unchecked_, read);
  prompts_.clear();
  for (size_t i = 0; i < r.samples.size(); ++i) {
    prompts_.push_back(r.samples[i].prompt);
    paths_.push_back(r.samples[i].media_path);
    bucket_of_.push_back(r.index.at("items")[i].at("bucket").get<int64_t>());
  }
  notes_ = left_out_notes(series_ + ".dataset " + unchecked_->metadata_path, series_ + ".on_bad_file", r.index);
  unchecked_.reset();
  number_items();
}

void ImageData::number_items() {
  members_.resize(sizes_.size());
  for (int64_t i = 0; i < size(); ++i) members_.at(static_cast<size_t>(bucket_of_[static_cast<size_t>(i)])).push_back(i);
  for (size_t b = 0; b < sizes_.size(); ++b) {
    // One bucket keeps the plain order (salt "<series>.epoch."); empty buckets are never drawn.
    const std::string salt =
        sizes_.size() == 1 ? series_ + ".epoch." : series_ + ".bucket" + std::to_string(b) + ".epoch.";
    orders_.push_back(members_[b].empty()
                          ? nullptr
                          : std::make_unique<EpochOrder>(seed_, salt, static_cast<int64_t>(members_[b].size())));
  }
}

ImageData::~ImageData() = default;

int64_t ImageData::item_of(int64_t n, int64_t global_batch) const {
  if (orders_.empty()) throw std::logic_error("ImageData::item_of before agree_on_items (on_bad_file=skip)");
  if (sizes_.size() == 1) return members_[0].at(static_cast<size_t>(orders_[0]->item_of(n)));
  const int64_t step = n / global_batch;
  auto gen = nn::generator_for(seed_, series_ + ".bucket_draw." + std::to_string(step));
  int64_t u = at::randint(0, size(), {1}, gen, at::kLong).item<int64_t>();
  size_t b = 0;
  while (u >= static_cast<int64_t>(members_[b].size())) u -= static_cast<int64_t>(members_[b++].size());
  return members_[b].at(static_cast<size_t>(orders_[b]->item_of(n)));
}

std::pair<int64_t, int64_t> ImageData::size_of(int64_t item) const {
  return sizes_.at(static_cast<size_t>(bucket_of(item)));
}

at::Tensor ImageData::read(int64_t item, const std::string& field) const { return cache_->read(item, field); }

at::Tensor ImageData::image(int64_t item) const {
  const auto [h, w] = size_of(item);
  return load_image_tensor(paths_.at(static_cast<size_t>(item)), h, w);
}

}  // namespace zeroshard::models::diffusion
