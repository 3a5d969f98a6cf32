#include "models/diffusion/cond_cache.h"

#include "comm/agree.h"
#include "io/safetensors.h"
#include "nn/init.h"

#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>

namespace zeroshard::models::diffusion {

namespace fs = std::filesystem;

namespace {
constexpr size_t kRecordsPerFile = 64;
}

std::string unprepared_cache(const std::string& key, const std::string& cache, const std::string& dataset) {
  if (cache.empty() || dataset.empty()) return {};
  std::error_code ec;
  if (fs::exists(cache + "/index.json", ec)) return {};
  return key + ": " + cache + " is not prepared yet (" + cache + "/index.json does not exist)";
}

nlohmann::json read_json_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error(path + ": cannot open");
  try {
    return nlohmann::json::parse(in);
  } catch (const std::exception& e) {
    throw std::runtime_error(path + ": not JSON: " + e.what());
  }
}

void write_json_file(const std::string& path, const nlohmann::json& j) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp);
    out << j.dump(1) << "\n";
    if (!out) throw std::runtime_error(tmp + ": write failed");
  }
  fs::rename(tmp, path);
}

int64_t record_rounds(int64_t records, int world) { return (records + world - 1) / world; }

// --- CacheWriter -------------------------------------------------------------------------------

CacheWriter::CacheWriter(std::string dir, int rank) : dir_(std::move(dir)), rank_(rank) { check_folder(dir_); }

void CacheWriter::check_folder(const std::string& dir) {
  // finish() replaces the folder: only an older cache (its index.json) or an empty folder.
  std::error_code ec;
  if (fs::is_directory(dir, ec) && !fs::is_empty(dir, ec) && !fs::exists(dir + "/index.json", ec)) {
    throw std::invalid_argument(dir + " exists and is not a conditioning cache (no index.json): prepare replaces only "
                                "an older cache or an empty folder; name a new folder for the cache");
  }
  if (fs::exists(dir, ec) && !fs::is_directory(dir, ec)) {
    throw std::invalid_argument(dir + " exists and is not a folder: name a new folder for the cache");
  }
}

void CacheWriter::add(int64_t record, NamedTensors tensors, nlohmann::json info) {
  done_.emplace_back(record, std::move(tensors));
  info_.push_back(std::move(info));
}

void CacheWriter::left_out(int64_t record, std::string message) { left_out_.emplace_back(record, std::move(message)); }

int64_t CacheWriter::finish(Communicator& comm, const std::string& format, nlohmann::json meta,
                            const std::function<nlohmann::json(int64_t)>& describe) {
  // Everything goes to <dir>.partial first; rank 0 publishes it as <dir> (one rename) once the
  // index is written, so a failed or interrupted prepare never leaves a cache that looks whole.
  const std::string work = dir_ + ".partial";
  if (comm.rank() == 0) {
    fs::remove_all(work);
    fs::create_directories(work);
  }
  comm.barrier();
  std::string error;
  nlohmann::json part = nlohmann::json::array();
  try {
    for (size_t first = 0; first < done_.size(); first += kRecordsPerFile) {
      const size_t last = std::min(done_.size(), first + kRecordsPerFile);
      const std::string name =
          "part-" + std::to_string(rank_) + "-" + std::to_string(first / kRecordsPerFile) + ".safetensors";
      std::vector<io::TensorEntry> entries;
      for (size_t i = first; i < last; ++i) {
        const std::string k = std::to_string(done_[i].first);
        for (const auto& [tname, t] : done_[i].second) entries.push_back({tname + "." + k, at::kFloat, t.sizes().vec()});
      }
      io::SafetensorsWriter w(work + "/" + name, entries);
      for (size_t i = first; i < last; ++i) {
        const std::string k = std::to_string(done_[i].first);
        for (const auto& [tname, t] : done_[i].second) w.write(tname + "." + k, t.to(at::kFloat).contiguous());
        part.push_back({{"record", done_[i].first}, {"shard", name}, {"info", info_[i]}});
      }
      w.finish();
    }
    nlohmann::json bad = nlohmann::json::array();
    for (const auto& [record, message] : left_out_) bad.push_back({{"record", record}, {"message", message}});
    write_json_file(work + "/part-" + std::to_string(rank_) + ".json", {{"items", part}, {"bad", bad}});
  } catch (const std::exception& e) {
    error = "rank " + std::to_string(rank_) + " writing " + work + ": " + e.what();
  }
  if (const std::string first = first_error(comm, error); !first.empty()) {
    if (comm.rank() == 0) fs::remove_all(work);
    throw std::runtime_error(first);
  }
  int64_t n = 0;
  if (comm.rank() == 0) {
    try {
      std::map<int64_t, std::string> shard_of, bad_of;
      std::map<int64_t, nlohmann::json> info_of;
      nlohmann::json left_out = meta.value("left_out", nlohmann::json::array());
      for (int q = 0; q < comm.world_size(); ++q) {
        const std::string path = work + "/part-" + std::to_string(q) + ".json";
        const nlohmann::json j = read_json_file(path);
        for (const auto& e : j.at("items")) {
          shard_of[e.at("record").get<int64_t>()] = e.at("shard").get<std::string>();
          info_of[e.at("record").get<int64_t>()] = e.value("info", nlohmann::json::object());
        }
        for (const auto& b : j.at("bad")) bad_of[b.at("record").get<int64_t>()] = b.at("message").get<std::string>();
        fs::remove(path);
      }
      for (const auto& [record, message] : bad_of) left_out.push_back(message);
      nlohmann::json items = nlohmann::json::array();
      for (const auto& [record, shard] : shard_of) {
        nlohmann::json item = {{"shard", shard}, {"record", record}};
        item.update(info_of[record]);
        item.update(describe(record));
        items.push_back(item);
      }
      n = static_cast<int64_t>(items.size());
      if (n == 0) {
        std::string why = "no record could be read, nothing to cache (" + std::to_string(left_out.size()) + " left out)";
        for (size_t i = 0; i < left_out.size() && i < 20; ++i) why += "\n  " + left_out[i].get<std::string>();
        throw std::runtime_error(meta.value("dataset", std::string()) + ": " + why);
      }
      meta["format"] = format;
      meta["items"] = std::move(items);
      meta["left_out"] = std::move(left_out);
      write_json_file(work + "/index.json", meta);
      fs::remove_all(dir_);
      fs::rename(work, dir_);
    } catch (const std::exception& e) {
      error = e.what();
      fs::remove_all(work);
    }
  }
  if (const std::string first = first_error(comm, error); !first.empty()) throw std::runtime_error(first);
  return comm.rank() == 0 ? n : -1;
}

// --- CacheReader -------------------------------------------------------------------------------

CacheReader::CacheReader(std::string dir, const std::string& format,
                         const std::vector<std::pair<std::string, int64_t>>& expect, const std::string& key_prefix)
    : dir_(std::move(dir)) {
  const std::string index = dir_ + "/index.json";
  if (!fs::exists(index)) {
    throw std::invalid_argument(key_prefix + "cache: " + index + " does not exist (write it with `zeroshard prepare`)");
  }
  const nlohmann::json j = read_json_file(index);
  if (j.value("format", std::string()) != format) {
    throw std::invalid_argument(index + ": format is '" + j.value("format", std::string()) + "', not '" + format + "'");
  }
  for (const auto& [key, value] : expect) {
    if (!j.contains(key)) throw std::invalid_argument(index + ": no '" + key + "'");
    const int64_t have = j.at(key).get<int64_t>();
    if (have != value) {
      throw std::invalid_argument(index + ": the cache has " + key + " " + std::to_string(have) + ", this run's config " +
                                  std::to_string(value) + " (" + key_prefix + key + ")");
    }
  }
  for (const auto& item : j.at("items")) items_.push_back(item);
  if (items_.empty()) throw std::invalid_argument(index + ": the cache holds no items");
}

CacheReader::~CacheReader() = default;

at::Tensor CacheReader::read(int64_t i, const std::string& name) const {
  const nlohmann::json& it = item(i);
  const std::string path = dir_ + "/" + it.at("shard").get<std::string>();
  auto f = files_.find(path);
  if (f == files_.end()) f = files_.emplace(path, std::make_unique<io::SafetensorsFile>(path)).first;
  return f->second->read(name + "." + std::to_string(it.at("record").get<int64_t>())).to(at::kFloat);
}

// --- EpochOrder --------------------------------------------------------------------------------

EpochOrder::EpochOrder(uint64_t seed, std::string salt, int64_t items)
    : seed_(seed), salt_(std::move(salt)), items_(items) {
  if (items_ < 1) throw std::invalid_argument("EpochOrder: " + salt_ + ": no items");
}

int64_t EpochOrder::item_of(int64_t n) const {
  const int64_t epoch = n / items_;
  auto it = perms_.find(epoch);
  if (it == perms_.end()) {
    auto gen = nn::generator_for(seed_, salt_ + std::to_string(epoch));
    it = perms_.emplace(epoch, at::randperm(items_, gen, at::kLong)).first;
    // Keep a few epochs; never the one just made (numbers need not rise: buckets, a rewound order).
    if (perms_.size() > 4) perms_.erase(perms_.begin() == it ? std::next(perms_.begin()) : perms_.begin());
  }
  return it->second[n % items_].item<int64_t>();
}

nlohmann::json towers_seconds_metric(Communicator& comm, double& seconds) {
  at::Tensor t = at::full({1}, seconds, at::kDouble);
  comm.all_reduce(t);
  seconds = 0.0;
  return {{"towers_s", t.item<double>() / comm.world_size()}};
}

}  // namespace zeroshard::models::diffusion
