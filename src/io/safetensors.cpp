#include "io/safetensors.h"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <filesystem>
#include <stdexcept>

namespace zeroshard::io {

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

SafetensorsWriter::SafetensorsWriter(std::string path, std::vector<TensorEntry> entries,
                                     std::map<std::string, std::string> metadata)
    : path_(std::move(path)), tmp_path_(path_ + ".tmp"), entries_(std::move(entries)) {
  nlohmann::json header = nlohmann::json::object();
  uint64_t offset = 0;
  for (auto& e : entries_) {
    int64_t numel = 1;
    for (int64_t d : e.shape) numel *= d;
    e.begin = offset;
    e.end = offset + static_cast<uint64_t>(numel) * c10::elementSize(e.dtype);
    offset = e.end;
    header[e.name] = {{"dtype", safetensors_dtype(e.dtype)}, {"shape", e.shape}, {"data_offsets", {e.begin, e.end}}};
  }
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::string text = header.dump();
  while (text.size() % 8 != 0) text.push_back(' ');  // keep the data section 8-byte aligned
  out_.open(tmp_path_, std::ios::binary | std::ios::trunc);
  if (!out_) throw std::runtime_error("cannot create '" + tmp_path_ + "'");
  uint64_t n = text.size();
  unsigned char le[8];
  for (int i = 0; i < 8; ++i) le[i] = static_cast<unsigned char>((n >> (8 * i)) & 0xff);
  out_.write(reinterpret_cast<const char*>(le), 8);
  out_.write(text.data(), static_cast<std::streamsize>(text.size()));
}

SafetensorsWriter::~SafetensorsWriter() {
  if (!finished_) {
    out_.close();
    std::remove(tmp_path_.c_str());
  }
}

void SafetensorsWriter::write(const std::string& name, const at::Tensor& t) {
  if (next_ >= entries_.size()) throw std::logic_error("safetensors: more tensors than declared ('" + name + "')");
  const TensorEntry& e = entries_[next_];
  if (e.name != name || t.sizes().vec() != e.shape || t.scalar_type() != e.dtype) {
    throw std::logic_error("safetensors: tensor '" + name + "' does not match the declared entry '" + e.name + "'");
  }
  at::Tensor c = t.contiguous();
  out_.write(static_cast<const char*>(c.data_ptr()), static_cast<std::streamsize>(c.nbytes()));
  ++next_;
}

void SafetensorsWriter::finish() {
  if (next_ != entries_.size()) throw std::logic_error("safetensors: not every declared tensor was written");
  out_.flush();
  if (!out_) throw std::runtime_error("write to '" + tmp_path_ + "' failed");
  out_.close();
  std::filesystem::rename(tmp_path_, path_);
  finished_ = true;
}

void write_full_parameters(ShardedModel& model, const std::string& path) {
  std::vector<TensorEntry> entries;
  std::vector<at::Tensor> tensors;
  const bool writer = model.comm().rank() == 0;
  model.for_each_full_parameter([&](const std::string& name, const at::Tensor& t) {
    if (!writer) return;
    entries.push_back({name, t.scalar_type(), t.sizes().vec()});
    tensors.push_back(t.clone());
  });
  if (!writer) return;
  SafetensorsWriter w(path, entries, {{"format", "pt"}, {"producer", "zeroshard"}});
  for (size_t i = 0; i < entries.size(); ++i) w.write(entries[i].name, tensors[i]);
  w.finish();
}

std::vector<TensorEntry> read_safetensors_header(const std::string& path, uint64_t* data_start) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open safetensors file '" + path + "'");
  const auto file_size = std::filesystem::file_size(path);
  unsigned char le[8];
  if (!in.read(reinterpret_cast<char*>(le), 8)) throw std::runtime_error(path + ": shorter than the 8-byte header length");
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(le[i]) << (8 * i);
  if (n > file_size - 8 || n > (100u << 20)) {
    throw std::runtime_error(path + ": header length " + std::to_string(n) + " exceeds the file size");
  }
  std::string text(n, '\0');
  in.read(text.data(), static_cast<std::streamsize>(n));
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(text);
  } catch (const std::exception& e) {
    throw std::runtime_error(path + ": header is not valid JSON: " + e.what());
  }
  const uint64_t data_size = file_size - 8 - n;
  std::vector<TensorEntry> out;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") continue;
    TensorEntry e;
    e.name = it.key();
    try {
      e.dtype = parse_dtype(it.value().at("dtype").get<std::string>(), path, e.name);
      e.shape = it.value().at("shape").get<std::vector<int64_t>>();
      auto off = it.value().at("data_offsets").get<std::vector<uint64_t>>();
      if (off.size() != 2) throw std::runtime_error("data_offsets must have two entries");
      e.begin = off[0];
      e.end = off[1];
    } catch (const nlohmann::json::exception& ex) {
      throw std::runtime_error(path + ": tensor '" + e.name + "': malformed entry: " + ex.what());
    }
    uint64_t numel = 1;
    for (int64_t d : e.shape) {
      if (d < 0) throw std::runtime_error(path + ": tensor '" + e.name + "' has a negative dimension");
      numel *= static_cast<uint64_t>(d);
    }
    if (e.end < e.begin || e.end - e.begin != numel * c10::elementSize(e.dtype) || e.end > data_size) {
      throw std::runtime_error(path + ": tensor '" + e.name + "': data_offsets [" + std::to_string(e.begin) + ", " +
                               std::to_string(e.end) + ") do not match its shape and dtype or lie past the end of the " +
                               std::to_string(data_size) + "-byte data section");
    }
    out.push_back(std::move(e));
  }
  if (data_start) *data_start = 8 + n;
  return out;
}

at::Tensor read_safetensors_tensor(const std::string& path, const std::string& name) {
  uint64_t start = 0;
  for (const auto& e : read_safetensors_header(path, &start)) {
    if (e.name != name) continue;
    at::Tensor t = at::empty(e.shape, e.dtype);
    std::ifstream in(path, std::ios::binary);
    in.seekg(static_cast<std::streamoff>(start + e.begin));
    if (!in.read(static_cast<char*>(t.data_ptr()), static_cast<std::streamsize>(e.end - e.begin))) {
      throw std::runtime_error(path + ": tensor '" + name + "': short read");
    }
    return t;
  }
  throw std::runtime_error(path + ": no tensor named '" + name + "'");
}

}  // namespace zeroshard::io
