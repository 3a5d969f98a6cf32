#include "models/wan/data.h"

#include "io/safetensors.h"
#include "models/diffusion/prepare_records.h"
#include "nn/init.h"
#include "zeroshard/nn/deferred.h"
#include "zeroshard/shard.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <stdexcept>

namespace zeroshard::models::wan {

namespace {

constexpr const char* kFormat = "zeroshard wan cache 1";
// The index keys a training run's config must match.
std::vector<std::pair<std::string, int64_t>> cache_shape(const WanSeriesConfig& c) {
  return {{"height", c.height},         {"width", c.width}, {"num_frames", c.num_frames},
          {"text_len", c.dit.text_len}, {"t5_dim", c.t5.dim}, {"z_dim", c.vae.z_dim}};
}

}  // namespace

std::pair<at::Tensor, at::Tensor> prompt_tokens(const text::SentencePieceTokenizer& tok, const std::string& prompt,
                                                int64_t text_len) {
  const text::PaddedIds p = tok.encode_padded(prompt, static_cast<int32_t>(text_len), /*clean=*/true);
  at::Tensor ids = at::empty({1, text_len}, at::kLong), mask = at::empty({1, text_len}, at::kLong);
  for (int64_t i = 0; i < text_len; ++i) {
    ids[0][i] = static_cast<int64_t>(p.ids[static_cast<size_t>(i)]);
    mask[0][i] = static_cast<int64_t>(p.mask[static_cast<size_t>(i)]);
  }
  return {ids, mask};
}

at::Tensor load_media(const WanSeriesConfig& c, const std::string& path, nlohmann::json* info) {
  data::ImageSizeRule rule;
  rule.height = c.height;
  rule.width = c.width;
  data::FrameSampling sampling;
  sampling.num_frames = c.num_frames;
  const data::Clip clip = data::load_clip(path, rule, sampling);
  const int64_t T = static_cast<int64_t>(clip.frames.size());
  if (info) {
    *info = {{"frames", T}, {"source", std::to_string(clip.source_width) + "x" + std::to_string(clip.source_height)}};
    if (clip.source_fps > 0) (*info)["fps"] = std::round(clip.source_fps * 1000) / 1000;
    if (clip.source_frame_count >= 0) (*info)["source_frames"] = clip.source_frame_count;
  }
  std::vector<float> v = data::to_cthw(clip.frames);
  return at::from_blob(v.data(), {3, T, c.height, c.width}, at::kFloat).clone();
}

// --- WanData ---------------------------------------------------------------------------------

WanData::WanData(const WanSeriesConfig& c, uint64_t seed) : c_(c) {
  if (cached()) {
    cache_ = std::make_unique<diffusion::CacheReader>(c.cache, kFormat, cache_shape(c), "wan.");
    for (int64_t i = 0; i < cache_->size(); ++i) {
      prompts_.push_back(cache_->item(i).at("prompt").get<std::string>());
      media_paths_.push_back(cache_->item(i).at("media").get<std::string>());
    }
  } else {
    if (c.tokenizer.empty()) throw std::invalid_argument("wan.tokenizer: required with the towers in the loop");
    data::MediaDatasetOptions opts;
    opts.collect_errors = c.on_bad_file == "skip";
    data::MediaDataset d = data::load_media_dataset(c.dataset, c.metadata, opts);
    video_column_ = d.media_column == "video";
    for (const auto& s : d.samples) {
      prompts_.push_back(s.prompt);
      media_paths_.push_back(s.media_path);
    }
    // Skip mode: the rows of good metadata stand until agree_on_items (sampling reads only their
    // prompts).
    if (opts.collect_errors) unchecked_ = std::make_unique<data::MediaDataset>(std::move(d));
  }
  if (prompts_.empty()) throw std::invalid_argument("wan: " + (cached() ? c.cache : c.dataset) + " holds no items");
  seed_ = seed;
  if (!unchecked_) order_ = std::make_unique<diffusion::EpochOrder>(seed, "wan.epoch.", size());
}

WanData::~WanData() = default;

void WanData::agree_on_items(Communicator& comm) {
  if (!unchecked_) return;
  const auto read = [this](const data::MediaSample& s) {
    diffusion::RecordRead r;
    load_media(c_, s.media_path, &r.info);
    return r;
  };
  const diffusion::ReadableRecords r = diffusion::readable_records(comm, *unchecked_, read);
  prompts_.clear();
  media_paths_.clear();
  for (const auto& s : r.samples) {
    prompts_.push_back(s.prompt);
    media_paths_.push_back(s.media_path);
  }
  notes_ = diffusion::left_out_notes("wan.dataset " + c_.dataset, "wan.on_bad_file", r.index);
  unchecked_.reset();
  order_ = std::make_unique<diffusion::EpochOrder>(seed_, "wan.epoch.", size());
}

int64_t WanData::item_of(int64_t n) const {
  if (!order_) throw std::logic_error("WanData::item_of before agree_on_items (wan.on_bad_file=skip)");
  return order_->item_of(n);
}

std::pair<at::Tensor, at::Tensor> WanData::cached_item(int64_t item) const {
  return {cache_->read(item, "latent"), cache_->read(item, "context")};
}

at::Tensor WanData::video(int64_t item) const { return load_media(c_, media_paths_.at(static_cast<size_t>(item))); }

int64_t WanData::vae_chunks(int world, bool towers_sharded) const {
  if (cached() || !video_column_ || world <= 1 || !towers_sharded) return 0;
  return WanVaeImpl::encode_chunks(c_.num_frames);
}

// --- prepare -----------------------------------------------------------------------------------

namespace {

// One record read as prepare and training read it: the clip (into *video), what the report shows
// of it, and the VAE chunk passes it needs.
diffusion::RecordRead read_clip(const WanSeriesConfig& c, const text::SentencePieceTokenizer& tok,
                                const data::MediaSample& s, at::Tensor* video) {
  diffusion::RecordRead read;
  *video = load_media(c, s.media_path, &read.info);
  read.passes = WanVaeImpl::encode_chunks(video->size(1));
  read.info["prompt_tokens"] = prompt_tokens(tok, s.prompt, c.dit.text_len).second.sum().item<int64_t>();
  return read;
}

// What prepare reads before its ranks talk; check_prepare reads it before any rank starts.
struct PrepareInputs {
  data::MediaDataset dataset;
  text::SentencePieceTokenizer tokenizer;
};

PrepareInputs prepare_inputs(const WanSeriesConfig& c) {
  if (c.cache.empty()) throw std::invalid_argument("wan.cache: the folder to write the cache to is required");
  if (c.dataset.empty()) throw std::invalid_argument("wan.dataset: the dataset folder to prepare is required");
  if (c.tokenizer.empty()) throw std::invalid_argument("wan.tokenizer: the umT5 spiece.model is required");
  diffusion::CacheWriter::check_folder(c.cache);
  data::MediaDatasetOptions opts;
  opts.collect_errors = c.on_bad_file == "skip";
  PrepareInputs in{data::load_media_dataset(c.dataset, c.metadata, opts),
                   text::SentencePieceTokenizer::from_file(c.tokenizer)};
  if (in.tokenizer.vocab_size() > c.t5.vocab_size) {
    throw std::invalid_argument("wan.t5_vocab " + std::to_string(c.t5.vocab_size) + " is below the tokenizer's " +
                                std::to_string(in.tokenizer.vocab_size()) + " (" + c.tokenizer + ")");
  }
  return in;
}

}  // namespace

std::string dry_run(const train::TrainConfig& cfg) {
  const auto& c = cfg.series_config<WanSeriesConfig>();
  if (!c.cache.empty()) {
    return diffusion::dry_run_report("wan", c.cache, diffusion::read_json_file(c.cache + "/index.json"), false, false);
  }
  if (c.tokenizer.empty()) throw std::invalid_argument("wan.tokenizer: required with the towers in the loop");
  data::MediaDatasetOptions opts;
  opts.collect_errors = true;
  const data::MediaDataset d = data::load_media_dataset(c.dataset, c.metadata, opts);
  const auto tok = text::SentencePieceTokenizer::from_file(c.tokenizer);
  const nlohmann::json index = diffusion::read_records(d, [&](const data::MediaSample& s) {
    at::Tensor v;
    return read_clip(c, tok, s, &v);
  });
  return diffusion::dry_run_report("wan", c.dataset, index, true, c.on_bad_file == "skip");
}

void check_prepare(const train::TrainConfig& cfg) { prepare_inputs(cfg.series_config<WanSeriesConfig>()); }

std::string prepare_cache(const train::TrainConfig& cfg, const RendezvousInfo& rdv) {
  const auto& c = cfg.series_config<WanSeriesConfig>();
  const PrepareInputs in = prepare_inputs(c);
  const data::MediaDataset& d = in.dataset;
  const text::SentencePieceTokenizer& tok = in.tokenizer;

  diffusion::CacheWriter writer(c.cache, rdv.rank);  // refuses a folder it must not replace, before the towers
  auto comm = make_communicator(rdv);
  const int rank = comm->rank(), world = comm->world_size();
  WanPipeline p{nullptr};
  {
    nn::DeferredInit deferred;
    p = WanPipeline(c, /*with_dit=*/false, /*with_towers=*/true);
  }
  ShardOptions so = train::shard_options(cfg);
  so.param_source = wan_initial_source(c, static_cast<uint64_t>(cfg.train.seed));
  auto sharded = fully_shard(p.ptr(), comm, so);

  at::Tensor video;  // this rank's clip of the round
  diffusion::RecordHandlers h;
  h.read = [&](const data::MediaSample& s) { return read_clip(c, tok, s, &video); };
  h.encode = [&](const data::MediaSample& s, int64_t chunks, bool stand_in) {
    if (stand_in) video = at::zeros({3, 1, c.height, c.width});
    auto [ids, mask] = prompt_tokens(tok, s.prompt, c.dit.text_len);
    const std::vector<at::Tensor> out = p->conditioning({video}, {ids}, {mask}, chunks);
    return diffusion::NamedTensors{{"latent", out[0]}, {"context", out[1]}};
  };
  diffusion::prepare_records(*comm, d, "wan.on_bad_file", c.on_bad_file == "skip", writer, h);
  nlohmann::json meta = {{"dataset", c.dataset}, {"left_out", d.errors}};
  for (const auto& [key, value] : cache_shape(c)) meta[key] = value;
  const int64_t n = writer.finish(*comm, kFormat, meta, [&d](int64_t row) {
    const auto& s = diffusion::sample_of_row(d.samples, row);
    return nlohmann::json{{"media", s.media}, {"prompt", s.prompt}};
  });
  const int64_t rows = static_cast<int64_t>(d.samples.size() + d.errors.size());
  if (rank != 0) return {};
  std::string report = "wan: cached " + std::to_string(n) + " of " + std::to_string(rows) +
                       " records (VAE latents + umT5 states) from " + c.dataset + " in " + c.cache + " on " +
                       std::to_string(world) + " ranks";
  return report + diffusion::prepared_report(diffusion::read_json_file(c.cache + "/index.json"));
}

}  // namespace zeroshard::models::wan
