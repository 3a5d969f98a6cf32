#include "models/wan/data.h"

#include "io/safetensors.h"
#include "nn/init.h"
#include "zeroshard/nn/deferred.h"
#include "zeroshard/shard.h"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <stdexcept>

namespace zeroshard::models::wan {

namespace fs = std::filesystem;

namespace {

constexpr const char* kFormat = "zeroshard wan cache 1";
constexpr size_t kItemsPerFile = 64;

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error(path + ": cannot open");
  try {
    return nlohmann::json::parse(in);
  } catch (const std::exception& e) {
    throw std::runtime_error(path + ": not JSON: " + e.what());
  }
}

void write_json(const std::string& path, const nlohmann::json& j) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp);
    out << j.dump(1) << "\n";
    if (!out) throw std::runtime_error(tmp + ": write failed");
  }
  fs::rename(tmp, path);
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

at::Tensor load_media(const WanSeriesConfig& c, const std::string& path) {
  data::ImageSizeRule rule;
  rule.height = c.height;
  rule.width = c.width;
  data::FrameSampling sampling;
  sampling.num_frames = c.num_frames;
  const data::Clip clip = data::load_clip(path, rule, sampling);
  const int64_t T = static_cast<int64_t>(clip.frames.size());
  std::vector<float> v = data::to_cthw(clip.frames);
  return at::from_blob(v.data(), {3, T, c.height, c.width}, at::kFloat).clone();
}

// --- WanData ---------------------------------------------------------------------------------

WanData::WanData(const WanSeriesConfig& c, uint64_t seed) : c_(c), seed_(seed) {
  if (cached()) {
    const std::string index = c.cache + "/index.json";
    if (!fs::exists(index)) {
      throw std::invalid_argument("wan.cache: " + index + " does not exist (write it with `zeroshard prepare`)");
    }
    const nlohmann::json j = read_json(index);
    if (j.value("format", std::string()) != kFormat) {
      throw std::invalid_argument(index + ": format is not '" + std::string(kFormat) + "'");
    }
    const std::pair<const char*, int64_t> expect[] = {{"height", c.height},       {"width", c.width},
                                                      {"num_frames", c.num_frames}, {"text_len", c.dit.text_len},
                                                      {"t5_dim", c.t5.dim},         {"z_dim", c.vae.z_dim}};
    for (const auto& [key, value] : expect) {
      if (j.at(key).get<int64_t>() != value) {
        throw std::invalid_argument(index + ": the cache has " + key + " " + std::to_string(j.at(key).get<int64_t>()) +
                                    ", this run's config " + std::to_string(value) + " (wan." +
                                    (std::string(key) == "t5_dim" ? "t5_dim" : key) + ")");
      }
    }
    for (const auto& item : j.at("items")) {
      prompts_.push_back(item.at("prompt").get<std::string>());
      media_paths_.push_back(item.at("media").get<std::string>());
      shards_.push_back(c.cache + "/" + item.at("shard").get<std::string>());
      records_.push_back(item.at("record").get<int64_t>());
    }
  } else {
    if (c.tokenizer.empty()) throw std::invalid_argument("wan.tokenizer: required with the towers in the loop");
    const data::MediaDataset d = data::load_media_dataset(c.dataset);
    video_column_ = d.media_column == "video";
    for (const auto& s : d.samples) {
      prompts_.push_back(s.prompt);
      media_paths_.push_back(s.media_path);
    }
  }
  if (prompts_.empty()) throw std::invalid_argument("wan: " + (cached() ? c.cache : c.dataset) + " holds no items");
}

WanData::~WanData() = default;

int64_t WanData::item_of(int64_t n) const {
  const int64_t N = size(), epoch = n / N;
  auto it = perms_.find(epoch);
  if (it == perms_.end()) {
    auto gen = nn::generator_for(seed_, "wan.epoch." + std::to_string(epoch));
    it = perms_.emplace(epoch, at::randperm(N, gen, at::kLong)).first;
    if (perms_.size() > 4) perms_.erase(perms_.begin());
  }
  return it->second[n % N].item<int64_t>();
}

std::pair<at::Tensor, at::Tensor> WanData::cached_item(int64_t item) const {
  const std::string& path = shards_.at(static_cast<size_t>(item));
  auto it = files_.find(path);
  if (it == files_.end()) it = files_.emplace(path, std::make_unique<io::SafetensorsFile>(path)).first;
  const std::string i = std::to_string(records_.at(static_cast<size_t>(item)));
  return {it->second->read("latent." + i).to(at::kFloat), it->second->read("context." + i).to(at::kFloat)};
}

at::Tensor WanData::video(int64_t item) const {
  const std::string& path = media_paths_.at(static_cast<size_t>(item));
  at::Tensor v = load_media(c_, path);
  const int64_t expect = video_column_ ? c_.num_frames : 1;
  if (v.size(1) != expect) {
    throw std::runtime_error(path + ": " + std::to_string(v.size(1)) + " frames, but with the towers in the loop every " +
                             "clip must have " + std::to_string(expect) + " (wan.num_frames; all ranks' sharded towers " +
                             "run in step): prepare a cache (`zeroshard prepare`) for clips of other lengths");
  }
  return v;
}

// --- prepare -----------------------------------------------------------------------------------

std::string prepare_cache(const train::TrainConfig& cfg, const RendezvousInfo& rdv) {
  const auto& c = cfg.series_config<WanSeriesConfig>();
  if (c.cache.empty()) throw std::invalid_argument("wan.cache: the folder to write the cache to is required");
  if (c.dataset.empty()) throw std::invalid_argument("wan.dataset: the dataset folder to prepare is required");
  if (c.tokenizer.empty()) throw std::invalid_argument("wan.tokenizer: the umT5 spiece.model is required");
  data::MediaDatasetOptions opts;
  opts.collect_errors = c.on_bad_file == "skip";
  const data::MediaDataset d = data::load_media_dataset(c.dataset, "", opts);
  const auto tok = text::SentencePieceTokenizer::from_file(c.tokenizer);
  if (tok.vocab_size() > c.t5.vocab_size) {
    throw std::invalid_argument("wan.t5_vocab " + std::to_string(c.t5.vocab_size) + " is below the tokenizer's " +
                                std::to_string(tok.vocab_size()) + " (" + c.tokenizer + ")");
  }

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

  const int64_t N = static_cast<int64_t>(d.samples.size());
  std::vector<std::string> left_out = d.errors;
  // One record per item this rank encodes: (item, file) — items numbered over readable records.
  // Unreadable media are found while encoding; with on_bad_file=skip they are dropped from the
  // numbering after all ranks have seen them, so item numbers are assigned by rank 0 at the end.
  struct Done {
    int64_t record;
    at::Tensor latent, context;
  };
  std::vector<Done> done;
  std::vector<std::string> bad;
  const int64_t rounds = (N + world - 1) / world;
  for (int64_t r = 0; r < rounds; ++r) {
    const int64_t record = r * world + rank;
    const bool real = record < N;
    const auto& s = d.samples[static_cast<size_t>(real ? record : 0)];
    at::Tensor video;
    bool readable = true;
    try {
      video = load_media(c, s.media_path);
    } catch (const std::exception& e) {
      if (c.on_bad_file == "stop") throw std::runtime_error(s.location + ": " + e.what());
      if (real) bad.push_back(s.location + ": " + e.what());
      readable = false;
      video = at::zeros({3, 1, c.height, c.width});  // keeps this rank's tower passes in step
    }
    auto [ids, mask] = prompt_tokens(tok, s.prompt, c.dit.text_len);
    const std::vector<at::Tensor> out = p->conditioning({video}, {ids}, {mask});
    if (real && readable) done.push_back({record, out[0], out[1]});
  }
  fs::create_directories(c.cache);
  // This rank's files, then a part list rank 0 merges.
  nlohmann::json part = nlohmann::json::array();
  for (size_t first = 0; first < done.size(); first += kItemsPerFile) {
    const size_t last = std::min(done.size(), first + kItemsPerFile);
    const std::string name = "part-" + std::to_string(rank) + "-" + std::to_string(first / kItemsPerFile) + ".safetensors";
    std::vector<io::TensorEntry> entries;
    for (size_t i = first; i < last; ++i) {
      const std::string k = std::to_string(done[i].record);
      entries.push_back({"latent." + k, at::kFloat, done[i].latent.sizes().vec()});
      entries.push_back({"context." + k, at::kFloat, done[i].context.sizes().vec()});
    }
    io::SafetensorsWriter w(c.cache + "/" + name, entries);
    for (size_t i = first; i < last; ++i) {
      const std::string k = std::to_string(done[i].record);
      w.write("latent." + k, done[i].latent);
      w.write("context." + k, done[i].context);
      part.push_back({{"record", done[i].record}, {"shard", name}});
    }
    w.finish();
  }
  write_json(c.cache + "/part-" + std::to_string(rank) + ".json", {{"items", part}, {"bad", bad}});
  comm->barrier();
  if (rank != 0) {
    comm->barrier();
    return {};
  }
  // Item numbers: readable records in metadata order. Tensors are stored under their record
  // number; the index maps item -> (shard, record).
  std::map<int64_t, std::string> shard_of;
  for (int q = 0; q < world; ++q) {
    const std::string path = c.cache + "/part-" + std::to_string(q) + ".json";
    const nlohmann::json j = read_json(path);
    for (const auto& e : j.at("items")) shard_of[e.at("record").get<int64_t>()] = e.at("shard").get<std::string>();
    for (const auto& b : j.at("bad")) left_out.push_back(b.get<std::string>());
    fs::remove(path);
  }
  nlohmann::json items = nlohmann::json::array();
  for (const auto& [record, shard] : shard_of) {
    const auto& s = d.samples[static_cast<size_t>(record)];
    items.push_back({{"shard", shard}, {"record", record}, {"media", s.media}, {"prompt", s.prompt}});
  }
  write_json(c.cache + "/index.json", {{"format", kFormat},
                                       {"dataset", c.dataset},
                                       {"items", items},
                                       {"left_out", left_out},
                                       {"height", c.height},
                                       {"width", c.width},
                                       {"num_frames", c.num_frames},
                                       {"text_len", c.dit.text_len},
                                       {"t5_dim", c.t5.dim},
                                       {"z_dim", c.vae.z_dim}});
  comm->barrier();
  std::string report = "wan: cached " + std::to_string(items.size()) + " of " + std::to_string(N) +
                       " items (VAE latents + umT5 states) from " + c.dataset + " in " + c.cache + " on " +
                       std::to_string(world) + " ranks";
  for (const auto& l : left_out) report += "\n  left out: " + l;
  return report;
}

}  // namespace zeroshard::models::wan
