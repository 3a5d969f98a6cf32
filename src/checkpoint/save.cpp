// Writing checkpoints: every rank its shard file, rank 0 the manifest, then the folder is
// renamed into place and `latest` moved (see checkpoint.h for the layout).
#include "checkpoint/checkpoint.h"

#include "io/file.h"
#include "io/run_lock.h"
#include "io/safetensors.h"

#include <ATen/CPUGeneratorImpl.h>

#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <stdexcept>

namespace zeroshard::ckpt {

namespace fs = std::filesystem;

namespace {

std::string step_name(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "step_%08lld", static_cast<long long>(step));
  return buf;
}

std::string rank_file_name(int rank, int world) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "rank%05d-of-%05d.safetensors", rank, world);
  return buf;
}

// This rank's slice of an optimizer state tensor (a shard already, or the full buffer).
at::Tensor local_slice(const at::Tensor& t, int64_t shard_size, int rank) {
  return t.numel() == shard_size ? t : t.narrow(0, rank * shard_size, shard_size);
}

// Keeps the newest keep_last complete checkpoints (and always `keep`).
void prune(const std::string& root, int64_t keep_last, const std::string& keep) {
  if (keep_last <= 0) return;
  static const std::regex pattern("step_[0-9]{8}");
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(root)) {
    const std::string n = e.path().filename().string();
    if (e.is_directory() && std::regex_match(n, pattern)) names.push_back(n);
  }
  std::sort(names.begin(), names.end());
  const int64_t excess = static_cast<int64_t>(names.size()) - keep_last;
  for (int64_t i = 0; i < excess; ++i) {
    if (names[i] != keep) fs::remove_all(fs::path(root) / names[i]);
  }
}

}  // namespace

void recover_interrupted_saves(const std::string& root) {
  if (!fs::exists(root)) return;
  for (const auto& e : fs::directory_iterator(root)) {
    const fs::path p = e.path();
    if (p.extension() == ".partial") {
      fs::remove_all(p);  // never complete: the previous checkpoint is what `latest` names
    } else if (p.extension() == ".replaced") {
      // A save of an existing step died between moving the old folder aside and moving the
      // new one in: the old one is still complete, put it back.
      const fs::path original = p.parent_path() / p.stem();
      if (fs::exists(original)) fs::remove_all(p);
      else fs::rename(p, original);
    }
  }
}

std::string save_checkpoint(const std::string& root, ShardedModel& model, ShardedAdamW& optim,
                            const SaveOptions& options) {
  // Files follow the shard layout: one per rank of a copy of the model. Under hybrid
  // sharding every copy holds the same shards, so only copy 0 writes (its rank 0 is job rank 0).
  Communicator& job = model.comm();
  Communicator& comm = model.shard_comm();
  const int rank = comm.rank(), world = comm.world_size();
  const std::string name = step_name(options.step);
  const fs::path final_dir = fs::path(root) / name;
  const fs::path partial_dir = fs::path(root) / (name + ".partial");
  if (job.rank() == 0) {
    fs::create_directories(root);
    recover_interrupted_saves(root);
    fs::create_directories(partial_dir);
  }
  job.barrier();
  if (model.replica() != 0) {
    job.barrier();  // copy 0's ranks finish the checkpoint
    return final_dir.string();
  }

  // 1. This rank's file: per flat buffer its shard of the master values and AdamW state.
  const auto buffers = model.flat_buffers();
  std::vector<io::TensorEntry> entries;
  std::vector<at::Tensor> tensors;
  std::map<size_t, size_t> read_when_written;  // tensor index -> its file-backed buffer
  size_t optim_index = 0;
  for (size_t b = 0; b < buffers.size(); ++b) {
    const auto& info = buffers[b];
    entries.push_back({info.key() + ".param", info.dtype, {info.shard_size}});  // frozen under bf16: bf16
    // A file-backed buffer's slice is read from its files when written (one buffer at a time).
    if (info.file_backed) read_when_written[tensors.size()] = b;
    tensors.push_back(info.file_backed ? at::Tensor() : model.local_shard(b));
    if (info.trainable && !options.model_only) {
      entries.push_back({info.key() + ".exp_avg", at::kFloat, {info.shard_size}});
      tensors.push_back(local_slice(optim.exp_avg(optim_index), info.shard_size, rank));
      entries.push_back({info.key() + ".exp_avg_sq", at::kFloat, {info.shard_size}});
      tensors.push_back(local_slice(optim.exp_avg_sq(optim_index), info.shard_size, rank));
      ++optim_index;
    }
  }
  if (!options.model_only) {
    at::Tensor rng = at::detail::getDefaultCPUGenerator().get_state();
    entries.push_back({"rng.cpu", at::kByte, {rng.numel()}});
    tensors.push_back(rng);
  }
  const std::string file_name = rank_file_name(rank, world);
  io::SafetensorsWriter writer((partial_dir / file_name).string(), entries,
                               {{"format", "zeroshard-checkpoint-shard"}, {"rank", std::to_string(rank)},
                                {"world_size", std::to_string(world)}, {"step", std::to_string(options.step)}});
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (job.rank() == options.kill_rank_midway && i == tensors.size() / 2) {
      std::fprintf(stderr, "rank %d: injected SIGKILL in the middle of saving %s\n", rank, name.c_str());
      std::fflush(stderr);
      std::raise(SIGKILL);
    }
    writer.write(entries[i].name, tensors[i].defined() ? tensors[i] : model.local_shard(read_when_written.at(i)));
  }
  const auto& written = writer.entries();
  writer.finish();

  // 2. Rank 0 learns every file's size, checksum and data offset, and writes the manifest.
  at::Tensor mine = at::tensor({static_cast<int64_t>(writer.bytes()), static_cast<int64_t>(writer.crc32()),
                                static_cast<int64_t>(writer.data_start())},
                               at::kLong);
  at::Tensor all = at::empty({3 * world}, at::kLong);
  comm.all_gather(mine, all);
  if (rank == 0) {
    const int64_t* a = all.data_ptr<int64_t>();
    std::map<std::string, uint64_t> entry_begin;  // identical names and shapes on every rank
    for (const auto& e : written) entry_begin[e.name] = e.begin;
    nlohmann::json files = nlohmann::json::array();
    for (int r = 0; r < world; ++r) {
      files.push_back({{"rank", r}, {"name", rank_file_name(r, world)}, {"bytes", a[3 * r]},
                       {"crc32", static_cast<uint32_t>(a[3 * r + 1])}});
    }
    nlohmann::json buffer_list = nlohmann::json::array(), tensor_list = nlohmann::json::array();
    for (size_t b = 0; b < buffers.size(); ++b) {
      const auto& info = buffers[b];
      buffer_list.push_back({{"key", info.key()}, {"unit", info.unit}, {"trainable", info.trainable},
                             {"numel", info.numel}, {"padded", info.padded}, {"shard_size", info.shard_size},
                             {"padding", info.padded - info.numel}});
      for (const auto& p : info.params) {
        nlohmann::json pieces = nlohmann::json::array();
        for (int r = 0; r < world; ++r) {
          const int64_t lo = std::max(p.offset, r * info.shard_size);
          const int64_t hi = std::min(p.offset + p.numel, (r + 1) * info.shard_size);
          if (lo >= hi) continue;
          nlohmann::json offsets = nlohmann::json::object();
          for (const char* state : {"param", "exp_avg", "exp_avg_sq"}) {
            auto it = entry_begin.find(info.key() + "." + state);
            if (it == entry_begin.end()) continue;
            const uint64_t elem = std::string(state) == "param" ? c10::elementSize(info.dtype) : sizeof(float);
            offsets[state] = static_cast<uint64_t>(a[3 * r + 2]) + it->second +
                             static_cast<uint64_t>(lo - r * info.shard_size) * elem;
          }
          pieces.push_back({{"rank", r}, {"file", rank_file_name(r, world)}, {"begin", lo - p.offset},
                            {"end", hi - p.offset}, {"offsets", offsets}});
        }
        tensor_list.push_back({{"name", p.name}, {"shape", p.shape}, {"dtype", info.dtype == at::kBFloat16 ? "BF16" : "F32"}, {"trainable", info.trainable},
                               {"buffer", b}, {"buffer_offset", p.offset}, {"pieces", pieces}});
      }
    }
    nlohmann::json manifest = {
        {"format", "zeroshard-checkpoint"},
        {"version", 1},
        {"step", options.step},
        {"world_size", world},
        {"replicas", model.num_replicas()},  // hybrid: copies of these files' shards that trained
        {"strategy", strategy_name(model.strategy())},
        {"optimizer", {{"type", options.model_only ? "none" : "adamw"}, {"steps_taken", optim.steps_taken()}}},
        {"model_only", options.model_only},
        {"data", {{"next_step", options.step + 1},
                  {"position", "the sampler is a pure function of (data.seed, step): resuming at next_step continues "
                               "the same batch sequence"}}},
        {"rng", {{"cpu", options.model_only ? "not saved (model only)" : "tensor 'rng.cpu' of each rank's file"}}},
        {"config", options.config},
        {"files", files},
        {"buffers", buffer_list},
        {"tensors", tensor_list}};
    io::write_file_atomic((partial_dir / kManifestName).string(), manifest.dump(1) + "\n");

    // 3. Into place, then `latest`: each step is atomic, the old checkpoint is never touched
    //    before the new one is complete.
    fs::path replaced;
    if (fs::exists(final_dir)) {  // the same step saved again (e.g. a resumed run)
      replaced = fs::path(root) / (name + ".replaced");
      fs::remove_all(replaced);
      fs::rename(final_dir, replaced);
    }
    fs::rename(partial_dir, final_dir);
    io::fsync_directory(root);
    io::write_file_atomic((fs::path(root) / kLatestName).string(), name + "\n");
    if (!replaced.empty()) fs::remove_all(replaced);
    prune(root, options.keep_last, name);
  }
  job.barrier();
  return final_dir.string();
}

std::string resolve_checkpoint(const std::string& path) {
  const fs::path p(path);
  for (const fs::path& root : {p, p / "checkpoints"}) {
    // A job that still runs there (it holds its run folder's lock) may be in the middle of a
    // save: its `.partial` folder is no debris then, and is left alone.
    const bool in_use = root.has_parent_path() && io::current_lock_holder(root.parent_path().string()).has_value();
    if (fs::exists(root / kLatestName) && !in_use) recover_interrupted_saves(root.string());
  }
  if (fs::exists(p / kManifestName)) return p.string();
  for (const fs::path& root : {p, p / "checkpoints"}) {
    if (fs::exists(root / kLatestName)) {
      std::ifstream in(root / kLatestName);
      std::string name;
      in >> name;
      if (name.empty()) throw std::runtime_error((root / kLatestName).string() + " is empty");
      const fs::path dir = root / name;
      if (!fs::exists(dir / kManifestName)) {
        throw std::runtime_error((root / kLatestName).string() + " names '" + name + "', but " +
                                 (dir / kManifestName).string() + " does not exist");
      }
      return dir.string();
    }
  }
  throw std::runtime_error("no checkpoint at '" + path + "': expected a checkpoint folder (with manifest.json), a "
                           "checkpoints folder (with latest) or a run folder (with checkpoints/latest)");
}

}  // namespace zeroshard::ckpt
