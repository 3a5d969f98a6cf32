#include "models/z_image/data.h"

#include "io/safetensors.h"
#include "models/diffusion/image_folder.h"
#include "text/chat_template.h"
#include "train/task.h"
#include "util/text.h"
#include "zeroshard/nn/deferred.h"
#include "zeroshard/shard.h"

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

}  // namespace

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
    source = combine_param_sources(source, prefixed_param_source(io::safetensors_param_source(path), prefix),
                                   [prefix](const std::string& n) { return util::starts_with(n, prefix); });
  };
  from_file(c.vae_from, "vae.", "z_image.vae_from");
  from_file(c.text_encoder_from, "text_encoder.", "z_image.text_encoder_from");
  return source;
}

// --- ZImageData --------------------------------------------------------------------------------

ZImageData::ZImageData(const ZImageSeriesConfig& c, uint64_t seed) : c_(c) {
  if (!c.cache.empty()) {
    cache_ = std::make_unique<diffusion::CacheReader>(c.cache, kFormat, cache_shape(c), "z_image.");
    for (int64_t i = 0; i < cache_->size(); ++i) prompts_.push_back(cache_->item(i).at("prompt").get<std::string>());
  } else {
    const data::MediaDataset d = diffusion::load_captioned_images(c.dataset, "z_image.dataset");
    for (const auto& s : d.samples) {
      prompts_.push_back(s.prompt);
      paths_.push_back(s.media_path);
    }
  }
  order_ = std::make_unique<diffusion::EpochOrder>(seed, "z_image.epoch.", size());
}

std::pair<at::Tensor, at::Tensor> ZImageData::cached_item(int64_t item) const {
  return {cache_->read(item, "latent"), cache_->read(item, "context")};
}

at::Tensor ZImageData::image(int64_t item) const {
  return diffusion::load_image_tensor(paths_.at(static_cast<size_t>(item)), c_.height, c_.width);
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
    try {
      image = diffusion::load_image_tensor(s.media_path, c.height, c.width);
    } catch (const std::exception& e) {
      if (c.on_bad_file == "stop") throw std::runtime_error(s.location + ": " + e.what());
      if (real) writer.left_out(s.location + ": " + e.what());
      readable = false;
      image = at::zeros({3, c.height, c.width});  // keeps this rank's tower passes in step
    }
    const std::vector<at::Tensor> out = p->conditioning({image}, {prompt_ids(tok, s.prompt, c.text_len)});
    if (real && readable) writer.add(record, {{"latent", out[0]}, {"context", out[1]}});
  }
  nlohmann::json meta = {{"dataset", c.dataset}, {"left_out", d.errors}};
  for (const auto& [key, value] : cache_shape(c)) meta[key] = value;
  const int64_t n = writer.finish(*comm, kFormat, meta, [&d](int64_t record) {
    const auto& s = d.samples[static_cast<size_t>(record)];
    return nlohmann::json{{"media", s.media}, {"prompt", s.prompt}};
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
