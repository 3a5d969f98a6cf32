#include "shard/converted_copy.h"

#include "comm/agree.h"
#include "io/safetensors.h"
#include "shard/file_backed.h"
#include "util/text.h"

#include <nlohmann/json.hpp>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <stdexcept>

namespace zeroshard::shard {

namespace fs = std::filesystem;

namespace {

constexpr const char* kRecordKey = "zeroshard_converted_from";

// A unit's file name: its qualified name with anything but [A-Za-z0-9._-] replaced.
std::string file_name(const std::string& unit) {
  std::string s = unit;
  for (char& c : s) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
                    c == '_' || c == '-';
    if (!ok) c = '_';
  }
  return s + ".safetensors";
}

// What identifies a source file's contents without reading them: size and modification time,
// as io::MappedFile::check_unchanged compares them.
nlohmann::json identity(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    throw std::runtime_error("converted copy: cannot stat '" + path + "': " + std::strerror(errno));
  }
  const int64_t mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  return {path, static_cast<int64_t>(st.st_size), mtime_ns};
}

// One unit's file: the parameters to copy, where each is read from, and the record that a valid
// file carries.
struct Planned {
  std::string path;
  std::vector<ParamInfo> params;
  std::vector<ParamLocation> from;
  std::string record;
};

bool holds(const Planned& p, at::ScalarType dtype) {
  if (!fs::exists(p.path)) return false;
  try {
    const io::SafetensorsFile f(p.path);
    const auto it = f.metadata().find(kRecordKey);
    if (it == f.metadata().end() || it->second != p.record || f.entries().size() != p.params.size()) return false;
    for (const auto& info : p.params) {
      const io::TensorEntry* e = f.find(info.name);
      if (e == nullptr || e->dtype != dtype || e->shape != info.shape) return false;
    }
    return true;
  } catch (const std::exception&) {
    return false;  // unreadable (cut short by a crash elsewhere): written again
  }
}

// Written under a name of this rank's, then renamed into place: ranks that write the same file
// (each on its own host's disk) never write into each other's.
void write(const Planned& p, ParamSource& source, at::ScalarType dtype, int rank) {
  std::vector<io::TensorEntry> entries;
  for (const auto& info : p.params) entries.push_back({info.name, dtype, info.shape});
  const std::string mine = p.path + ".rank" + std::to_string(rank);
  io::SafetensorsWriter writer(mine, entries, {{"format", "pt"}, {"producer", "zeroshard"}, {kRecordKey, p.record}});
  at::NoGradGuard no_grad;
  for (const auto& info : p.params) {
    at::Tensor fp32 = at::empty({info.numel}, at::kFloat);
    source.read(info, 0, info.numel, fp32);
    // Rounded once, as FileBacked::convert and a Memory shard round it.
    writer.write(info.name, (dtype == at::kFloat ? fp32 : fp32.to(dtype)).view(info.shape));
  }
  writer.finish();
  fs::rename(mine, p.path);
}

class CopySource : public ParamSource {
 public:
  CopySource(std::shared_ptr<ParamSource> inner, const std::vector<Planned>& planned) : inner_(std::move(inner)) {
    for (const auto& p : planned) {
      files_.push_back(std::make_unique<io::SafetensorsFile>(p.path));
      for (size_t i = 0; i < p.params.size(); ++i) {
        Copied c;
        c.file = files_.back().get();
        c.entry = c.file->find(p.params[i].name);
        c.from = p.from[i];
        copied_[p.params[i].name] = c;
      }
    }
  }

  void check(const std::vector<ParamInfo>& params) override { inner_->check(params); }
  void read(const ParamInfo& param, int64_t begin, int64_t end, at::Tensor out) override {
    const auto it = copied_.find(param.name);
    if (it == copied_.end()) return inner_->read(param, begin, end, std::move(out));
    it->second.file->read_range(*it->second.entry, begin, end, out);
  }
  ParamLocation locate(const ParamInfo& param) const override {
    const auto it = copied_.find(param.name);
    if (it == copied_.end()) return inner_->locate(param);
    ParamLocation l = it->second.file->location(*it->second.entry);
    // The files it was converted from: a change there makes the copy stale, so they are checked too.
    l.also_reads = it->second.from.also_reads;
    l.also_reads.insert(l.also_reads.begin(), it->second.from.file);
    return l;
  }
  std::vector<std::string> notes() const override { return inner_->notes(); }

 private:
  struct Copied {
    const io::SafetensorsFile* file = nullptr;
    const io::TensorEntry* entry = nullptr;
    ParamLocation from;
  };
  std::shared_ptr<ParamSource> inner_;
  std::vector<std::unique_ptr<io::SafetensorsFile>> files_;
  std::map<std::string, Copied> copied_;
};

}  // namespace

ConvertedCopy make_converted_copy(std::shared_ptr<ParamSource> source, const std::vector<CopyUnit>& units,
                                  const std::string& dir, at::ScalarType compute_dtype, Communicator& comm) {
  ConvertedCopy out;
  std::vector<Planned> planned;
  const int64_t es = static_cast<int64_t>(c10::elementSize(compute_dtype));
  for (const auto& u : units) {
    Planned p;
    p.path = (fs::path(dir) / file_name(u.name)).string();
    nlohmann::json record = {{"dtype", io::safetensors_dtype(compute_dtype)}, {"unit", u.name}};
    for (const auto& info : u.params) {
      const ParamLocation loc = source->locate(info);
      if (!loc.in_file()) continue;
      if (FileBacked::in_place(loc, info.numel, compute_dtype, fs::file_size(loc.file))) continue;
      nlohmann::json files = nlohmann::json::array({identity(loc.file)});
      for (const auto& f : loc.also_reads) files.push_back(identity(f));
      record["params"].push_back({{"name", info.name}, {"shape", info.shape}, {"from", files}});
      p.params.push_back(info);
      p.from.push_back(loc);
      out.params += info.numel;
      out.bytes += info.numel * es;
    }
    if (p.params.empty()) continue;
    p.record = record.dump();
    planned.push_back(std::move(p));
  }
  if (planned.empty()) {
    out.source = std::move(source);
    return out;
  }

  const auto start = std::chrono::steady_clock::now();
  int64_t written = 0;
  // Each unit by one rank, then every rank whatever it still cannot read.
  for (int pass = 0; pass < 2; ++pass) {
    std::string failure;
    try {
      fs::create_directories(dir);
      for (size_t k = 0; k < planned.size(); ++k) {
        if (pass == 0 && static_cast<int>(k % static_cast<size_t>(comm.world_size())) != comm.rank()) continue;
        if (holds(planned[k], compute_dtype)) continue;
        write(planned[k], *source, compute_dtype, comm.rank());
        ++written;
      }
    } catch (const std::exception& e) {
      failure = "writing the converted copy in " + dir + ": " + e.what();
    }
    // A rank that failed does not throw alone: every rank stops with its message (comm/agree.h).
    const std::string error = first_error(comm, failure);
    if (!error.empty()) throw std::runtime_error(error);
  }
  out.write_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  at::Tensor counts = at::tensor({written}, at::kLong);
  comm.all_reduce(counts);
  out.units_written = static_cast<int>(counts.item<int64_t>());
  out.units_reused = std::max(0, static_cast<int>(planned.size()) - out.units_written);
  out.source = std::make_shared<CopySource>(std::move(source), planned);
  char secs[32];
  std::snprintf(secs, sizeof(secs), "%.1f", out.write_seconds);
  out.note = "model.frozen_converted=copy: " + std::to_string(out.params) + " frozen parameters (" +
             util::gigabytes(static_cast<double>(out.bytes)) +
             ") that the files hold in another dtype or layout are read in place from " + dir + " (" +
             std::to_string(out.units_written) + " unit files written in " + secs + " s, " +
             std::to_string(out.units_reused) + " reused)";
  return out;
}

}  // namespace zeroshard::shard
