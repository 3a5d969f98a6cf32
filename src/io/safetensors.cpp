#include "io/safetensors.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <stdexcept>

namespace zeroshard::io {

int64_t TensorEntry::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string safetensors_dtype(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return "F32";
    case at::kBFloat16: return "BF16";
    case at::kHalf: return "F16";
    case at::kDouble: return "F64";
    case at::kLong: return "I64";
    case at::kInt: return "I32";
    case at::kByte: return "U8";
    default: throw std::invalid_argument(std::string("safetensors: unsupported dtype ") + c10::toString(t));
  }
}

static at::ScalarType parse_dtype(const std::string& s, const std::string& file, const std::string& name) {
  if (s == "F32") return at::kFloat;
  if (s == "BF16") return at::kBFloat16;
  if (s == "F16") return at::kHalf;
  if (s == "F64") return at::kDouble;
  if (s == "I64") return at::kLong;
  if (s == "I32") return at::kInt;
  if (s == "U8") return at::kByte;
  throw std::runtime_error(file + ": tensor '" + name + "' has unsupported dtype '" + s + "'");
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

SafetensorsWriter::SafetensorsWriter(std::string path, std::vector<TensorEntry> entries,
                                     std::map<std::string, std::string> metadata)
    : entries_(std::move(entries)), file_(std::move(path)) {
  nlohmann::json header = nlohmann::json::object();
  uint64_t offset = 0;
  for (auto& e : entries_) {
    e.begin = offset;
    e.end = offset + static_cast<uint64_t>(e.numel()) * c10::elementSize(e.dtype);
    offset = e.end;
    header[e.name] = {{"dtype", safetensors_dtype(e.dtype)}, {"shape", e.shape}, {"data_offsets", {e.begin, e.end}}};
  }
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::string text = header.dump();
  while (text.size() % 8 != 0) text.push_back(' ');  // keep the data section 8-byte aligned
  const uint64_t n = text.size();
  unsigned char le[8];
  for (int i = 0; i < 8; ++i) le[i] = static_cast<unsigned char>((n >> (8 * i)) & 0xff);
  file_.write(le, 8);
  file_.write(text.data(), text.size());
  data_start_ = 8 + n;
}

void SafetensorsWriter::write(const std::string& name, const at::Tensor& t) {
  if (next_ >= entries_.size()) throw std::logic_error("safetensors: more tensors than declared ('" + name + "')");
  const TensorEntry& e = entries_[next_];
  if (e.name != name || t.sizes().vec() != e.shape) {
    throw std::logic_error("safetensors: tensor '" + name + "' " + shape_text(t.sizes().vec()) +
                           " does not match the declared entry '" + e.name + "' " + shape_text(e.shape));
  }
  at::Tensor c = t.to(e.dtype).contiguous();
  file_.write(c.data_ptr(), c.nbytes());
  ++next_;
}

void SafetensorsWriter::finish() {
  if (next_ != entries_.size()) throw std::logic_error("safetensors: not every declared tensor was written");
  file_.commit();
}

SafetensorsFile::SafetensorsFile(const std::string& path) : file_(path) {
  const uint64_t file_size = file_.size();
  if (file_size < 8) throw std::runtime_error(path + ": shorter than the 8-byte header length (truncated?)");
  unsigned char le[8];
  file_.read_at(0, le, 8);
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(le[i]) << (8 * i);
  if (n > file_size - 8 || n > (100u << 20)) {
    throw std::runtime_error(path + ": header length " + std::to_string(n) + " exceeds the file size " +
                             std::to_string(file_size) + " (not a safetensors file, or truncated)");
  }
  std::string text(n, '\0');
  file_.read_at(8, text.data(), n);
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(text);
  } catch (const std::exception& e) {
    throw std::runtime_error(path + ": header is not valid JSON: " + e.what());
  }
  if (!header.is_object()) throw std::runtime_error(path + ": header is not a JSON object");
  data_start_ = 8 + n;
  const uint64_t data_size = file_size - data_start_;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") {
      if (!it.value().is_object()) throw std::runtime_error(path + ": __metadata__ is not a JSON object");
      for (auto m = it.value().begin(); m != it.value().end(); ++m) {
        if (m.value().is_string()) metadata_[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    TensorEntry e;
    e.name = it.key();
    try {
      e.dtype = parse_dtype(it.value().at("dtype").get<std::string>(), path, e.name);
      e.shape = it.value().at("shape").get<std::vector<int64_t>>();
      auto off = it.value().at("data_offsets").get<std::vector<uint64_t>>();
      if (off.size() != 2) throw std::runtime_error("data_offsets must have two entries");
      e.begin = off[0];
      e.end = off[1];
    } catch (const std::exception& ex) {
      throw std::runtime_error(path + ": tensor '" + e.name + "': malformed header entry: " + ex.what());
    }
    uint64_t numel = 1;
    for (int64_t d : e.shape) {
      if (d < 0) throw std::runtime_error(path + ": tensor '" + e.name + "' has a negative dimension");
      if (d > 0 && numel > (uint64_t{1} << 60) / static_cast<uint64_t>(d)) {
        throw std::runtime_error(path + ": tensor '" + e.name + "' has an impossible shape " + shape_text(e.shape));
      }
      numel *= static_cast<uint64_t>(d);
    }
    if (e.end < e.begin || e.end - e.begin != numel * c10::elementSize(e.dtype) || e.end > data_size) {
      throw std::runtime_error(path + ": tensor '" + e.name + "': data_offsets [" + std::to_string(e.begin) + ", " +
                               std::to_string(e.end) + ") do not match its shape " + shape_text(e.shape) + " and dtype " +
                               safetensors_dtype(e.dtype) + " or lie past the end of the " + std::to_string(data_size) +
                               "-byte data section");
    }
    entries_.push_back(std::move(e));
  }
  // The data section is indexed exactly: sorted by offset, no overlaps, no holes.
  std::vector<const TensorEntry*> by_offset;
  for (const auto& e : entries_) by_offset.push_back(&e);
  std::sort(by_offset.begin(), by_offset.end(), [](auto* a, auto* b) { return a->begin < b->begin; });
  uint64_t expect = 0;
  const TensorEntry* prev = nullptr;
  for (const TensorEntry* e : by_offset) {
    if (e->begin != expect) {
      throw std::runtime_error(path + ": tensor '" + e->name + "' starts at data offset " + std::to_string(e->begin) +
                               " but " + (prev ? "'" + prev->name + "' ends" : std::string("the data section starts")) +
                               " at " + std::to_string(expect) + (e->begin < expect ? " (overlap)" : " (hole)"));
    }
    expect = e->end;
    prev = e;
  }
  if (expect != data_size) {
    throw std::runtime_error(path + ": the tensors cover " + std::to_string(expect) + " bytes but the data section has " +
                             std::to_string(data_size));
  }
  for (size_t i = 0; i < entries_.size(); ++i) index_[entries_[i].name] = i;
}

const TensorEntry* SafetensorsFile::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &entries_[it->second];
}

void SafetensorsFile::read_range(const TensorEntry& e, int64_t begin, int64_t end, at::Tensor out) const {
  TORCH_CHECK(begin >= 0 && begin <= end && end <= e.numel(), "read_range: [", begin, ", ", end, ") outside tensor '",
              e.name, "'");
  TORCH_CHECK(out.is_contiguous() && out.scalar_type() == at::kFloat && out.numel() == end - begin,
              "read_range: out must be contiguous float32 of ", end - begin, " elements");
  const size_t es = c10::elementSize(e.dtype);
  const uint64_t offset = data_start_ + e.begin + static_cast<uint64_t>(begin) * es;
  if (e.dtype == at::kFloat) {
    file_.read_at(offset, out.data_ptr(), static_cast<uint64_t>(end - begin) * es);
  } else {
    at::Tensor raw = at::empty({end - begin}, e.dtype);
    file_.read_at(offset, raw.data_ptr(), static_cast<uint64_t>(end - begin) * es);
    out.copy_(raw);
  }
}

ParamLocation SafetensorsFile::location(const TensorEntry& e, int64_t first) const {
  ParamLocation l;
  l.file = path();
  l.whole = true;
  l.offset = data_start_ + e.begin + static_cast<uint64_t>(first) * c10::elementSize(e.dtype);
  l.dtype = e.dtype;
  return l;
}

at::Tensor SafetensorsFile::read(const std::string& name) const {
  const TensorEntry* e = find(name);
  if (e == nullptr) throw std::runtime_error(path() + ": no tensor named '" + name + "'");
  at::Tensor t = at::empty(e->shape, e->dtype);
  file_.read_at(data_start_ + e->begin, t.data_ptr(), e->end - e->begin);
  return t;
}

// --- SafetensorsSet ----------------------------------------------------------------------------

SafetensorsSet::SafetensorsSet(const std::string& path) : path_(path) {
  namespace fs = std::filesystem;
  if (fs::is_directory(path)) {
    path_.clear();
    for (const char* name : {"model.safetensors.index.json", "model.safetensors",
                             "diffusion_pytorch_model.safetensors.index.json", "diffusion_pytorch_model.safetensors"}) {
      if (fs::exists(fs::path(path) / name)) {
        path_ = (fs::path(path) / name).string();
        break;
      }
    }
    if (path_.empty()) {
      throw std::runtime_error(path + ": a folder with none of model.safetensors.index.json, model.safetensors, "
                               "diffusion_pytorch_model.safetensors.index.json, diffusion_pytorch_model.safetensors");
    }
  }
  const std::string suffix = ".index.json";
  if (path_.size() > suffix.size() && path_.compare(path_.size() - suffix.size(), suffix.size(), suffix) == 0) {
    open_index(path_);
  } else {
    files_.push_back(std::make_unique<SafetensorsFile>(path_));
    for (const auto& e : files_[0]->entries()) where_[e.name] = {files_[0].get(), &e};
  }
}

const SafetensorsSet::Where* SafetensorsSet::find(const std::string& name) const {
  const auto it = where_.find(name);
  return it == where_.end() ? nullptr : &it->second;
}

void SafetensorsSet::open_index(const std::string& index_path) {
  std::ifstream in(index_path);
  if (!in) throw std::runtime_error("cannot open safetensors index '" + index_path + "'");
  nlohmann::json index;
  try {
    index = nlohmann::json::parse(in);
  } catch (const std::exception& e) {
    throw std::runtime_error(index_path + ": not valid JSON (" + e.what() + ")");
  }
  if (!index.contains("weight_map") || !index["weight_map"].is_object()) {
    throw std::runtime_error(index_path + ": no \"weight_map\" object");
  }
  const std::filesystem::path dir = std::filesystem::path(index_path).parent_path();
  std::map<std::string, SafetensorsFile*> opened;
  for (auto it = index["weight_map"].begin(); it != index["weight_map"].end(); ++it) {
    if (!it.value().is_string()) {
      throw std::runtime_error(index_path + ": weight_map entry '" + it.key() + "' is not a file name");
    }
    const std::string file = it.value().get<std::string>();
    if (!opened.count(file)) {
      files_.push_back(std::make_unique<SafetensorsFile>((dir / file).string()));
      opened[file] = files_.back().get();
    }
    const TensorEntry* e = opened[file]->find(it.key());
    if (e == nullptr) {
      throw std::runtime_error(index_path + ": maps tensor '" + it.key() + "' to " + opened[file]->path() +
                               ", which does not hold it");
    }
    where_[it.key()] = {opened[file], e};
  }
}

namespace {

// The model's parameters from a SafetensorsSet under their own names.
class SafetensorsSource : public ParamSource {
 public:
  explicit SafetensorsSource(const std::string& path) : set_(path) {}

  void check(const std::vector<ParamInfo>& params) override {
    std::map<std::string, bool> wanted;
    for (const auto& p : params) {
      wanted[p.name] = true;
      const SafetensorsSet::Where* w = set_.find(p.name);
      if (w == nullptr) {
        throw std::runtime_error(set_.path() + ": has no tensor '" + p.name + "' (the model's parameter, shape " +
                                 shape_text(p.shape) + "); it holds " + std::to_string(set_.tensors().size()) + " tensors" +
                                 (set_.tensors().empty() ? "" : ", e.g. '" + set_.tensors().begin()->first + "'"));
      }
      const TensorEntry* e = w->entry;
      if (e->shape != p.shape) {
        throw std::runtime_error(w->file->path() + ": tensor '" + p.name + "' has shape " + shape_text(e->shape) +
                                 " but the model expects " + shape_text(p.shape));
      }
      if (e->dtype != at::kFloat && e->dtype != at::kBFloat16 && e->dtype != at::kHalf && e->dtype != at::kDouble) {
        throw std::runtime_error(w->file->path() + ": tensor '" + p.name + "' has dtype " + safetensors_dtype(e->dtype) +
                                 "; parameters load from F32, BF16, F16 or F64");
      }
    }
    for (const auto& [name, w] : set_.tensors()) {
      if (!wanted.count(name)) {
        throw std::runtime_error(w.file->path() + ": tensor '" + name +
                                 "' is not a parameter of this model (wrong model config, or a file for another model)");
      }
    }
  }

  void read(const ParamInfo& param, int64_t begin, int64_t end, at::Tensor out) override {
    const SafetensorsSet::Where* w = set_.find(param.name);
    if (w == nullptr) throw std::runtime_error(set_.path() + ": has no tensor '" + param.name + "'");
    w->file->read_range(*w->entry, begin, end, out);
  }

  ParamLocation locate(const ParamInfo& param) const override {
    const SafetensorsSet::Where* w = set_.find(param.name);
    return w == nullptr ? ParamLocation{} : w->file->location(*w->entry);
  }

 private:
  SafetensorsSet set_;
};

}  // namespace

std::shared_ptr<ParamSource> safetensors_param_source(const std::string& path) {
  return std::make_shared<SafetensorsSource>(path);
}

namespace {

// Groups [first, last) into one safetensors file at `path`, one group's values at a time.
void write_groups(const std::string& path, const std::vector<std::vector<TensorEntry>>& groups, size_t first,
                  size_t last, const std::function<std::vector<at::Tensor>(size_t group)>& values,
                  const std::map<std::string, std::string>& metadata) {
  std::vector<TensorEntry> entries;
  for (size_t g = first; g < last; ++g) entries.insert(entries.end(), groups[g].begin(), groups[g].end());
  SafetensorsWriter writer(path, entries, metadata);
  for (size_t g = first; g < last; ++g) {
    const std::vector<at::Tensor> v = values(g);
    if (v.size() != groups[g].size()) {
      throw std::logic_error(path + ": group " + std::to_string(g) + " has " + std::to_string(groups[g].size()) +
                             " entries but " + std::to_string(v.size()) + " values");
    }
    for (size_t i = 0; i < v.size(); ++i) writer.write(groups[g][i].name, v[i]);
  }
  writer.finish();
}

}  // namespace

void write_safetensors_file(const std::string& path, const std::vector<std::vector<TensorEntry>>& groups,
                            const std::function<std::vector<at::Tensor>(size_t group)>& values,
                            const std::map<std::string, std::string>& metadata) {
  if (groups.empty()) throw std::invalid_argument(path + ": no tensors to write");
  write_groups(path, groups, 0, groups.size(), values, metadata);
}

std::vector<std::string> write_sharded_safetensors(const std::string& dir, const std::string& stem,
                                                   const std::vector<std::vector<TensorEntry>>& groups,
                                                   const std::function<std::vector<at::Tensor>(size_t group)>& values,
                                                   uint64_t max_file_bytes,
                                                   const std::map<std::string, std::string>& metadata) {
  const uint64_t limit = max_file_bytes > 0 ? max_file_bytes : uint64_t{5000000000};
  auto bytes_of = [](const std::vector<TensorEntry>& g) {
    uint64_t b = 0;
    for (const auto& e : g) b += static_cast<uint64_t>(e.numel()) * c10::elementSize(e.dtype);
    return b;
  };
  // Files as runs of groups [first, last).
  std::vector<std::pair<size_t, size_t>> files;
  uint64_t file_bytes = 0, total = 0;
  for (size_t g = 0; g < groups.size(); ++g) {
    const uint64_t b = bytes_of(groups[g]);
    if (files.empty() || (files.back().second > files.back().first && file_bytes + b > limit)) {
      files.emplace_back(g, g);
      file_bytes = 0;
    }
    files.back().second = g + 1;
    file_bytes += b;
    total += b;
  }
  if (files.empty()) throw std::invalid_argument(dir + ": no tensors to write");
  std::filesystem::create_directories(dir);
  std::vector<std::string> written;
  nlohmann::json weight_map = nlohmann::json::object();
  for (size_t f = 0; f < files.size(); ++f) {
    char name[64];
    std::snprintf(name, sizeof(name), "-%05zu-of-%05zu.safetensors", f + 1, files.size());
    const std::string file = stem + name;
    write_groups(dir + "/" + file, groups, files[f].first, files[f].second, values, metadata);
    for (size_t g = files[f].first; g < files[f].second; ++g) {
      for (const auto& e : groups[g]) weight_map[e.name] = file;
    }
    written.push_back(dir + "/" + file);
  }
  const nlohmann::json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
  write_file_atomic(dir + "/" + stem + ".safetensors.index.json", index.dump(2) + "\n");
  written.push_back(dir + "/" + stem + ".safetensors.index.json");
  return written;
}

void write_full_parameters(ShardedModel& model, const std::string& path, at::ScalarType dtype) {
  const bool writer_rank = model.comm().rank() == 0;
  std::unique_ptr<SafetensorsWriter> writer;
  if (writer_rank) {
    std::vector<TensorEntry> entries;
    for (const auto& buffer : model.flat_buffers()) {
      for (const auto& p : buffer.params) entries.push_back({p.name, dtype, p.shape});
    }
    writer = std::make_unique<SafetensorsWriter>(path, entries,
                                                 std::map<std::string, std::string>{{"format", "pt"}, {"producer", "zeroshard"}});
  }
  model.for_each_full_parameter([&](const std::string& name, const at::Tensor& t) {
    if (writer) writer->write(name, t);
  });
  if (writer) writer->finish();
}

}  // namespace zeroshard::io
