#include "models/z_image/data.h"

#include "io/image_codec.h"
#include "io/safetensors.h"
#include "io/torch_pth.h"
#include "models/diffusion/image_folder.h"
#include "nn/init.h"
#include "text/chat_template.h"
#include "train/task.h"
#include "util/text.h"
#include "zeroshard/nn/deferred.h"
#include "zeroshard/shard.h"

#include <cmath>
#include <filesystem>
#include <stdexcept>

namespace zeroshard::models::z_image {

namespace {

constexpr const char* kFormat = "zeroshard z_image cache 1";

// The index keys a training run's config must match.
std::vector<std::pair<std::string, int64_t>> cache_shape(const ZImageSeriesConfig& c) {
  return {{"height", c.height},
          {"width", c.width},
          {"text_len", c.text_len},
          {"text_hidden", c.text.hidden_size},
          {"z_channels", c.vae.z_channels}};
}

std::string bucket_text(const ZImageSeriesConfig& c) {
  std::string t;
  for (const auto& [h, w] : c.bucket_sizes()) t += (t.empty() ? "" : ",") + std::to_string(h) + "x" + std::to_string(w);
  return t;
}

// The bucket of an image file (its decoded size).
int64_t bucket_of_file(const ZImageSeriesConfig& c, const std::string& path) {
  const auto sizes = c.bucket_sizes();
  if (sizes.size() == 1) return 0;
  const io::RgbImage img = io::decode_image_file(path).image;
  return nearest_bucket(sizes, img.height, img.width);
}

}  // namespace

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

at::Tensor prompt_ids(text::BpeTokenizer& tok, const std::string& prompt, int64_t text_len) {
  const std::string rendered = text::render_qwen3_chat({{"user", prompt, std::nullopt}}, /*add_generation_prompt=*/true,
                                                       /*enable_thinking=*/true);
  std::vector<int32_t> ids = tok.encode(rendered);
  if (static_cast<int64_t>(ids.size()) > text_len) ids.resize(static_cast<size_t>(text_len));  // truncation=True
  at::Tensor t = at::empty({1, static_cast<int64_t>(ids.size())}, at::kLong);
  for (size_t i = 0; i < ids.size(); ++i) t[0][static_cast<int64_t>(i)] = static_cast<int64_t>(ids[i]);
  return t;
}

text::BpeTokenizer load_tokenizer(const ZImageSeriesConfig& c) {
  if (c.tokenizer.empty()) throw std::invalid_argument("z_image.tokenizer: the Qwen3 tokenizer.json is required");
  text::BpeTokenizer tok = text::BpeTokenizer::from_file(c.tokenizer);
  if (tok.vocab_size() > c.text.vocab_size) {
    throw std::invalid_argument("z_image.text_vocab " + std::to_string(c.text.vocab_size) + " is below the tokenizer's " +
                                std::to_string(tok.vocab_size()) + " ids (" + c.tokenizer + ")");
  }
  return tok;
}

std::shared_ptr<ParamSource> initial_source(const ZImageSeriesConfig& c, const ZImagePipelineImpl& p, uint64_t seed) {
  std::shared_ptr<ParamSource> source =
      param_source_from_init([&p, seed](const std::string& name, at::Tensor& t) { p.init_parameter(seed, name, t); });
  auto from_file = [&source](const std::string& path, const std::string& prefix, const std::string& key) {
    if (path.empty()) return;
    if (!std::filesystem::exists(path)) throw std::invalid_argument(key + ": file '" + path + "' does not exist");
    source = combine_param_sources(source, prefixed_param_source(io::checkpoint_param_source(path), prefix),
                                   [prefix](const std::string& n) { return util::starts_with(n, prefix); });
  };
  from_file(c.vae_from, "vae.", "z_image.vae_from");
  from_file(c.text_encoder_from, "text_encoder.", "z_image.text_encoder_from");
  return source;
}

// --- ZImageData --------------------------------------------------------------------------------

ZImageData::ZImageData(const ZImageSeriesConfig& c, uint64_t seed) : c_(c), seed_(seed), sizes_(c.bucket_sizes()) {
  if (!c.cache.empty()) {
    cache_ = std::make_unique<diffusion::CacheReader>(c.cache, kFormat, cache_shape(c), "z_image.");
    for (int64_t i = 0; i < cache_->size(); ++i) {
      const nlohmann::json& item = cache_->item(i);
      prompts_.push_back(item.at("prompt").get<std::string>());
      bucket_of_.push_back(item.value("bucket", int64_t{0}));
    }
    const std::string index = c.cache + "/index.json";
    const std::string have = diffusion::read_json_file(index).value("buckets", std::string());
    if (have != bucket_text(c)) {
      throw std::invalid_argument(index + ": the cache has buckets '" + have + "', this run's config '" +
                                  bucket_text(c) + "' (z_image.buckets)");
    }
  } else {
    const data::MediaDataset d = diffusion::load_captioned_images(c.dataset, "z_image.dataset");
    for (const auto& s : d.samples) {
      prompts_.push_back(s.prompt);
      paths_.push_back(s.media_path);
      bucket_of_.push_back(bucket_of_file(c, s.media_path));
    }
  }
  members_.resize(sizes_.size());
  for (int64_t i = 0; i < size(); ++i) members_.at(static_cast<size_t>(bucket_of_[static_cast<size_t>(i)])).push_back(i);
  for (size_t b = 0; b < sizes_.size(); ++b) {
    // One bucket keeps the plain order (salt "z_image.epoch."); empty buckets are never drawn.
    const std::string salt = sizes_.size() == 1 ? "z_image.epoch." : "z_image.bucket" + std::to_string(b) + ".epoch.";
    orders_.push_back(members_[b].empty() ? nullptr
                                          : std::make_unique<diffusion::EpochOrder>(
                                                seed, salt, static_cast<int64_t>(members_[b].size())));
  }
}

int64_t ZImageData::item_of(int64_t n, int64_t global_batch) const {
  if (sizes_.size() == 1) return members_[0].at(static_cast<size_t>(orders_[0]->item_of(n)));
  const int64_t step = n / global_batch;
  auto gen = nn::generator_for(seed_, "z_image.bucket_draw." + std::to_string(step));
  int64_t u = at::randint(0, size(), {1}, gen, at::kLong).item<int64_t>();
  size_t b = 0;
  while (u >= static_cast<int64_t>(members_[b].size())) u -= static_cast<int64_t>(members_[b++].size());
  return members_[b].at(static_cast<size_t>(orders_[b]->item_of(n)));
}

std::pair<at::Tensor, at::Tensor> ZImageData::cached_item(int64_t item) const {
  return {cache_->read(item, "latent"), cache_->read(item, "context")};
}

at::Tensor ZImageData::image(int64_t item) const {
  const auto [h, w] = size_of(item);
  return diffusion::load_image_tensor(paths_.at(static_cast<size_t>(item)), h, w);
}

// --- prepare -----------------------------------------------------------------------------------

std::string prepare_cache(const train::TrainConfig& cfg, const RendezvousInfo& rdv) {
  const auto& c = cfg.series_config<ZImageSeriesConfig>();
  if (c.cache.empty()) throw std::invalid_argument("z_image.cache: the folder to write the cache to is required");
  const data::MediaDataset d = diffusion::load_captioned_images(c.dataset, "z_image.dataset", c.on_bad_file == "skip");
  text::BpeTokenizer tok = load_tokenizer(c);

  auto comm = make_communicator(rdv);
  const int rank = comm->rank(), world = comm->world_size();
  ZImagePipeline p{nullptr};
  {
    nn::DeferredInit deferred;
    p = ZImagePipeline(c, /*with_dit=*/false, /*with_towers=*/true);
  }
  ShardOptions so = train::shard_options(cfg);
  so.param_source = initial_source(c, *p, static_cast<uint64_t>(cfg.train.seed));
  auto sharded = fully_shard(p.ptr(), comm, so);

  const int64_t N = static_cast<int64_t>(d.samples.size());
  diffusion::CacheWriter writer(c.cache, rank);
  for (int64_t r = 0; r < diffusion::record_rounds(N, world); ++r) {
    const int64_t record = r * world + rank;
    const bool real = record < N;
    const auto& s = d.samples[static_cast<size_t>(real ? record : 0)];
    at::Tensor image;
    bool readable = true;
    int64_t bucket = 0;
    try {
      bucket = bucket_of_file(c, s.media_path);
      const auto [h, w] = c.bucket_sizes().at(static_cast<size_t>(bucket));
      image = diffusion::load_image_tensor(s.media_path, h, w);
    } catch (const std::exception& e) {
      if (c.on_bad_file == "stop") throw std::runtime_error(s.location + ": " + e.what());
      if (real) writer.left_out(s.location + ": " + e.what());
      readable = false;
      image = at::zeros({3, c.height, c.width});  // keeps this rank's tower passes in step
    }
    const std::vector<at::Tensor> out = p->conditioning({image}, {prompt_ids(tok, s.prompt, c.text_len)});
    if (real && readable) writer.add(record, {{"latent", out[0]}, {"context", out[1]}});
  }
  // Each item's bucket in index.json: rank 0 finds it again from the file's size (describe).
  nlohmann::json meta = {{"dataset", c.dataset}, {"left_out", d.errors}, {"buckets", bucket_text(c)}};
  for (const auto& [key, value] : cache_shape(c)) meta[key] = value;
  const int64_t n = writer.finish(*comm, kFormat, meta, [&d, &c](int64_t record) {
    const auto& s = d.samples[static_cast<size_t>(record)];
    return nlohmann::json{{"media", s.media}, {"prompt", s.prompt}, {"bucket", bucket_of_file(c, s.media_path)}};
  });
  if (rank != 0) return {};
  std::string report = "z_image: cached " + std::to_string(n) + " of " + std::to_string(N) +
                       " items (FLUX.1 VAE latents + Qwen3 hidden_states[-2]) from " + c.dataset + " in " + c.cache +
                       " on " + std::to_string(world) + " ranks";
  const nlohmann::json index = diffusion::read_json_file(c.cache + "/index.json");
  for (const auto& l : index.at("left_out")) report += "\n  left out: " + l.get<std::string>();
  return report;
}

}  // namespace zeroshard::models::z_image
