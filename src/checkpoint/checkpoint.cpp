// Reading checkpoints: the manifest, verified file access, and the two consumers — a
// ParamSource for fully_shard and the optimizer-state loader — both mapping tensors (not
// buffers), so any world size and strategy loads any checkpoint.
#include "checkpoint/checkpoint.h"

#include "io/file.h"
#include "io/safetensors.h"

#include <ATen/CPUGeneratorImpl.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <stdexcept>

namespace zeroshard::ckpt {

namespace fs = std::filesystem;

namespace {

std::string hex32(uint32_t x) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "0x%08x", x);
  return buf;
}

}  // namespace

struct Checkpoint::OpenFiles {
  std::map<std::string, std::unique_ptr<io::ReadOnlyFile>> files;
  std::set<std::string> verified;
};

Checkpoint::Checkpoint(const std::string& dir) : dir_(dir), open_(std::make_unique<OpenFiles>()) {
  const std::string path = (fs::path(dir) / kManifestName).string();
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open checkpoint manifest '" + path + "'");
  try {
    manifest_ = nlohmann::json::parse(in);
  } catch (const std::exception& e) {
    throw std::runtime_error(path + ": not valid JSON (" + e.what() + ")");
  }
  auto field = [&](const char* key) -> const nlohmann::json& {
    if (!manifest_.contains(key)) throw std::runtime_error(path + ": missing field '" + key + "'");
    return manifest_.at(key);
  };
  try {
    if (field("format").get<std::string>() != "zeroshard-checkpoint") {
      throw std::runtime_error("format is not 'zeroshard-checkpoint'");
    }
    if (field("version").get<int>() != 1) throw std::runtime_error("unsupported version " + field("version").dump());
    step_ = field("step").get<int64_t>();
    world_size_ = field("world_size").get<int>();
    replicas_ = manifest_.value("replicas", 1);
    if (replicas_ < 1) throw std::runtime_error("replicas " + std::to_string(replicas_) + " is not positive");
    strategy_ = field("strategy").get<std::string>();
    optimizer_steps_ = field("optimizer").at("steps_taken").get<int64_t>();
    model_only_ = manifest_.value("model_only", false);
    config_ = field("config");
    std::set<std::string> file_names;
    for (const auto& f : field("files")) {
      FileRecord r;
      r.rank = f.at("rank").get<int>();
      r.name = f.at("name").get<std::string>();
      r.bytes = f.at("bytes").get<uint64_t>();
      r.crc32 = f.at("crc32").get<uint32_t>();
      if (r.name.find('/') != std::string::npos) throw std::runtime_error("file name '" + r.name + "' has a '/'");
      if (r.rank != static_cast<int>(files_.size())) {
        throw std::runtime_error("files must be listed in rank order; entry " + std::to_string(files_.size()) +
                                 " is rank " + std::to_string(r.rank));
      }
      file_names.insert(r.name);
      files_.push_back(r);
    }
    if (static_cast<int>(files_.size()) != world_size_) {
      throw std::runtime_error("lists " + std::to_string(files_.size()) + " files for world size " +
                               std::to_string(world_size_));
    }
    for (const auto& t : field("tensors")) {
      TensorRecord rec;
      rec.name = t.at("name").get<std::string>();
      rec.shape = t.at("shape").get<std::vector<int64_t>>();
      rec.trainable = t.at("trainable").get<bool>();
      const std::string dtype = t.value("dtype", std::string("F32"));
      if (dtype == "BF16") rec.dtype = at::kBFloat16;
      else if (dtype != "F32") throw std::runtime_error("tensor '" + rec.name + "': dtype '" + dtype + "' is not F32 or BF16");
      rec.numel = 1;
      for (int64_t d : rec.shape) rec.numel *= d;
      int64_t covered = 0;
      for (const auto& p : t.at("pieces")) {
        Piece piece;
        piece.rank = p.at("rank").get<int>();
        piece.file = p.at("file").get<std::string>();
        piece.begin = p.at("begin").get<int64_t>();
        piece.end = p.at("end").get<int64_t>();
        piece.offset = p.at("offsets").get<std::map<std::string, uint64_t>>();
        if (!file_names.count(piece.file)) throw std::runtime_error("tensor '" + rec.name + "': unknown file '" + piece.file + "'");
        if (piece.begin != covered || piece.end <= piece.begin || piece.end > rec.numel) {
          throw std::runtime_error("tensor '" + rec.name + "': pieces do not tile [0, " + std::to_string(rec.numel) + ")");
        }
        covered = piece.end;
        rec.pieces.push_back(std::move(piece));
      }
      if (covered != rec.numel) {
        throw std::runtime_error("tensor '" + rec.name + "': pieces cover " + std::to_string(covered) + " of " +
                                 std::to_string(rec.numel) + " elements");
      }
      if (!index_.emplace(rec.name, tensors_.size()).second) throw std::runtime_error("tensor '" + rec.name + "' listed twice");
      tensors_.push_back(std::move(rec));
    }
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(path + ": malformed manifest: " + e.what());
  } catch (const std::runtime_error& e) {
    const std::string what = e.what();
    if (what.rfind(path, 0) == 0) throw;
    throw std::runtime_error(path + ": " + what);
  }
}

Checkpoint::~Checkpoint() = default;

const TensorRecord* Checkpoint::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

std::string Checkpoint::check_file(const FileRecord& f) const {
  const fs::path path = fs::path(dir_) / f.name;
  if (!fs::exists(path)) {
    return "missing shard file '" + path.string() + "' (rank " + std::to_string(f.rank) + " of " +
           std::to_string(world_size_) + ")";
  }
  io::ReadOnlyFile file(path.string());
  if (file.size() != f.bytes) {
    return "'" + path.string() + "' has " + std::to_string(file.size()) + " bytes but the manifest says " +
           std::to_string(f.bytes) + (file.size() < f.bytes ? " (truncated)" : " (replaced or appended to)");
  }
  const uint32_t crc = file.crc32();
  if (crc != f.crc32) {
    return "'" + path.string() + "' fails its CRC-32 check (" + hex32(crc) + ", manifest " + hex32(f.crc32) +
           "): the file is corrupt";
  }
  return "";
}

void Checkpoint::verify_once(const std::string& file) {
  if (open_->verified.count(file)) return;
  const FileRecord* rec = nullptr;
  for (const auto& f : files_) {
    if (f.name == file) rec = &f;
  }
  if (rec == nullptr) throw std::runtime_error(dir_ + ": manifest does not list file '" + file + "'");
  const std::string problem = check_file(*rec);
  if (!problem.empty()) {
    std::string held;
    int n = 0;
    for (const auto& t : tensors_) {
      for (const auto& p : t.pieces) {
        if (p.file == file && n < 3) {
          held += (n++ ? ", '" : "'") + t.name + "'";
          break;
        }
      }
    }
    throw std::runtime_error("checkpoint " + dir_ + ": " + problem + "; it holds pieces of " + held +
                             (n == 3 ? " and more" : ""));
  }
  open_->files[file] = std::make_unique<io::ReadOnlyFile>((fs::path(dir_) / file).string());
  open_->verified.insert(file);
}

void Checkpoint::read(const TensorRecord& t, const std::string& state, int64_t begin, int64_t end, at::Tensor out) {
  TORCH_CHECK(out.is_contiguous() && out.scalar_type() == at::kFloat && out.numel() == end - begin,
              "Checkpoint::read: out must be contiguous float32 of ", end - begin, " elements");
  // A frozen tensor of a bf16 run was saved in bf16: read its bytes, then widen (exact).
  const at::ScalarType saved = state == "param" ? t.dtype : at::kFloat;
  const at::Tensor raw = saved == at::kFloat ? out : at::empty({end - begin}, saved);
  auto* dst = static_cast<char*>(raw.data_ptr());
  const uint64_t elem = c10::elementSize(saved);
  for (const auto& p : t.pieces) {
    const int64_t lo = std::max(begin, p.begin), hi = std::min(end, p.end);
    if (lo >= hi) continue;
    auto off = p.offset.find(state);
    if (off == p.offset.end()) {
      throw std::runtime_error("checkpoint " + dir_ + ": tensor '" + t.name + "' has no '" + state + "' state" +
                               (t.trainable ? std::string() : std::string(" (it was frozen when saved)")));
    }
    verify_once(p.file);
    open_->files.at(p.file)->read_at(off->second + static_cast<uint64_t>(lo - p.begin) * elem,
                                     dst + static_cast<uint64_t>(lo - begin) * elem, static_cast<uint64_t>(hi - lo) * elem);
  }
  if (saved != at::kFloat) out.copy_(raw);
}

namespace {

class CheckpointSource : public ParamSource {
 public:
  CheckpointSource(Checkpoint* ck, bool frozen_read_elsewhere) : ck_(ck), frozen_elsewhere_(frozen_read_elsewhere) {}

  void check(const std::vector<ParamInfo>& params) override {
    const std::string where = "checkpoint " + ck_->dir();
    std::set<std::string> wanted;
    for (const auto& p : params) {
      wanted.insert(p.name);
      const TensorRecord* t = ck_->find(p.name);
      if (t == nullptr) {
        throw std::runtime_error(where + " has no tensor '" + p.name + "' (shape " + io::shape_text(p.shape) +
                                 " in this model): it was saved from another model");
      }
      if (t->shape != p.shape) {
        throw std::runtime_error(where + ": tensor '" + p.name + "' has shape " + io::shape_text(t->shape) +
                                 " but this model expects " + io::shape_text(p.shape) + " (a checkpoint of another model)");
      }
    }
    for (const auto& t : ck_->tensors()) {
      if (!wanted.count(t.name) && (t.trainable || !frozen_elsewhere_)) {
        throw std::runtime_error(where + ": tensor '" + t.name + "' is not a parameter of this model (another model?)");
      }
    }
  }

  void read(const ParamInfo& param, int64_t begin, int64_t end, at::Tensor out) override {
    ck_->read(*ck_->find(param.name), "param", begin, end, out);
  }

 private:
  Checkpoint* ck_;
  bool frozen_elsewhere_;
};

}  // namespace

std::shared_ptr<ParamSource> Checkpoint::param_source(bool frozen_read_elsewhere) {
  return std::make_shared<CheckpointSource>(this, frozen_read_elsewhere);
}

void Checkpoint::load_optimizer(ShardedModel& model, ShardedAdamW& optim) {
  if (model_only_) {
    throw std::runtime_error("checkpoint " + dir_ + " holds the parameters only (saved with train.save_model_only): "
                             "no optimizer state to resume from");
  }
  Communicator& comm = model.shard_comm();  // states are sliced like the parameters
  const int rank = comm.rank();
  size_t k = 0;
  for (const auto& info : model.flat_buffers()) {
    if (!info.trainable) continue;
    const int64_t begin = rank * info.shard_size;
    for (at::Tensor* state : {&optim.exp_avg(k), &optim.exp_avg_sq(k)}) {
      const std::string state_name = state == &optim.exp_avg(k) ? "exp_avg" : "exp_avg_sq";
      const bool full = state->numel() != info.shard_size;  // no_shard keeps the full buffer
      at::Tensor slice = full ? at::zeros({info.shard_size}, at::kFloat) : *state;
      slice.zero_();
      for (const auto& p : info.params) {
        const int64_t lo = std::max(p.offset, begin), hi = std::min(p.offset + p.numel, begin + info.shard_size);
        if (lo >= hi) continue;
        const TensorRecord* t = find(p.name);
        if (t == nullptr) throw std::runtime_error("checkpoint " + dir_ + " has no tensor '" + p.name + "'");
        read(*t, state_name, lo - p.offset, hi - p.offset, slice.narrow(0, lo - begin, hi - lo));
      }
      if (full) comm.all_gather(slice, *state);
    }
    ++k;
  }
  optim.set_steps_taken(optimizer_steps_);
}

void Checkpoint::restore_rng(int rank) {
  if (rank >= world_size_ || model_only_) return;  // more ranks than when saved: those keep their fresh state
  const FileRecord& f = files_.at(static_cast<size_t>(rank));
  verify_once(f.name);
  io::SafetensorsFile file((fs::path(dir_) / f.name).string());
  at::Generator gen = at::detail::getDefaultCPUGenerator();
  gen.set_state(file.read("rng.cpu"));
}

}  // namespace zeroshard::ckpt
