// Offline tools on a checkpoint (no ranks): consolidated safetensors export and inspect.
#include "checkpoint/checkpoint.h"

#include "io/file.h"
#include "io/safetensors.h"
#include "util/text.h"

#include <cstdio>
#include <filesystem>
#include <sstream>

namespace zeroshard::ckpt {

std::vector<std::string> export_safetensors(const std::string& checkpoint_dir, const std::string& out_path,
                                            at::ScalarType dtype, const std::string& state, uint64_t max_file_bytes,
                                            bool trainable_only, bool merge_lora) {
  if (dtype != at::kFloat && dtype != at::kBFloat16) {
    throw std::invalid_argument("export: dtype must be fp32 or bf16");
  }
  if (state != "param" && state != "exp_avg" && state != "exp_avg_sq") {
    throw std::invalid_argument("export: state must be param, exp_avg or exp_avg_sq, got '" + state + "'");
  }
  Checkpoint ck(checkpoint_dir);
  if (state != "param" && ck.model_only()) {
    throw std::invalid_argument("export --state " + state + ": " + checkpoint_dir +
                                " holds the parameters only (saved with train.save_model_only)");
  }
  // merge_lora: the adapters' scale, as the run's Linear layers apply it (lora.alpha / lora.rank).
  double lora_scale = 0.0;
  auto is_adapter = [](const std::string& n) { return util::ends_with(n, ".lora_a") || util::ends_with(n, ".lora_b"); };
  if (merge_lora) {
    if (state != "param" || trainable_only) {
      throw std::invalid_argument("export --merge-lora writes the weights (--state param) of the whole model");
    }
    const nlohmann::json lora = ck.config().contains("lora") ? ck.config()["lora"] : nlohmann::json::object();
    const int64_t rank = lora.value("rank", int64_t{0});
    if (rank <= 0) {
      throw std::invalid_argument("export --merge-lora: " + checkpoint_dir + " was not a LoRA run (lora.rank " +
                                  std::to_string(rank) + "): there are no adapters to fold in");
    }
    lora_scale = lora.value("alpha", 16.0) / static_cast<double>(rank);
  }
  // Tensors in manifest order, cut into files of at most max_file_bytes.
  std::vector<std::vector<const TensorRecord*>> groups(1);
  uint64_t group_bytes = 0;
  for (const auto& t : ck.tensors()) {
    // Frozen tensors have no optimizer state; a LoRA run's trainable ones are its adapters.
    if ((state != "param" || trainable_only) && !t.trainable) continue;
    if (merge_lora && is_adapter(t.name)) continue;
    const uint64_t bytes = static_cast<uint64_t>(t.numel) * c10::elementSize(dtype);
    if (max_file_bytes > 0 && !groups.back().empty() && group_bytes + bytes > max_file_bytes) {
      groups.emplace_back();
      group_bytes = 0;
    }
    groups.back().push_back(&t);
    group_bytes += bytes;
  }
  if (groups[0].empty()) {
    throw std::invalid_argument("export: " + checkpoint_dir + " has no trainable tensors to export");
  }
  std::map<std::string, std::string> metadata = {
      {"format", "pt"}, {"producer", "zeroshard"}, {"step", std::to_string(ck.step())}, {"state", state}};
  if (merge_lora) metadata["lora"] = "merged";
  auto write_file = [&](const std::string& path, const std::vector<const TensorRecord*>& tensors) {
    std::vector<io::TensorEntry> entries;
    for (const TensorRecord* t : tensors) entries.push_back({t->name, dtype, t->shape});
    io::SafetensorsWriter writer(path, entries, metadata);
    for (const TensorRecord* t : tensors) {  // one tensor in memory at a time
      at::Tensor full = at::empty({t->numel}, at::kFloat);
      ck.read(*t, state, 0, t->numel, full);
      if (merge_lora && util::ends_with(t->name, ".weight")) {
        const std::string module = t->name.substr(0, t->name.size() - 7);
        const TensorRecord* a = ck.find(module + ".lora_a");
        const TensorRecord* b = ck.find(module + ".lora_b");
        if ((a == nullptr) != (b == nullptr)) {
          throw std::runtime_error("export --merge-lora: " + checkpoint_dir + " has only one of " + module +
                                   ".lora_a / .lora_b");
        }
        if (a != nullptr) {
          at::Tensor A = at::empty({a->numel}, at::kFloat), B = at::empty({b->numel}, at::kFloat);
          ck.read(*a, "param", 0, a->numel, A);
          ck.read(*b, "param", 0, b->numel, B);
          // W + scale * B @ A in float64: one rounding to float32 for the merged weight.
          const at::Tensor delta =
              at::mm(B.view(b->shape).to(at::kDouble), A.view(a->shape).to(at::kDouble)) * lora_scale;
          full = (full.view(t->shape).to(at::kDouble) + delta).to(at::kFloat).reshape({-1});
        }
      }
      writer.write(t->name, full.view(t->shape));
    }
    writer.finish();
  };
  if (max_file_bytes == 0) {
    write_file(out_path, groups[0]);
    return {out_path};
  }
  const std::filesystem::path out(out_path);
  std::string stem = out.filename().string();
  if (stem.size() > 12 && stem.compare(stem.size() - 12, 12, ".safetensors") == 0) stem.resize(stem.size() - 12);
  std::vector<std::string> written;
  nlohmann::json weight_map = nlohmann::json::object();
  uint64_t total = 0;
  for (size_t g = 0; g < groups.size(); ++g) {
    char name[64];
    std::snprintf(name, sizeof(name), "-%05zu-of-%05zu.safetensors", g + 1, groups.size());
    const std::string file = stem + name;
    write_file((out.parent_path() / file).string(), groups[g]);
    written.push_back((out.parent_path() / file).string());
    for (const TensorRecord* t : groups[g]) {
      weight_map[t->name] = file;
      total += static_cast<uint64_t>(t->numel) * c10::elementSize(dtype);
    }
  }
  nlohmann::json index = {{"metadata", {{"total_size", total}, {"producer", "zeroshard"}, {"step", ck.step()},
                                        {"state", state}}},
                          {"weight_map", weight_map}};
  const std::string index_path = out_path + ".index.json";
  io::write_file_atomic(index_path, index.dump(2) + "\n");
  written.push_back(index_path);
  return written;
}

bool describe(const std::string& checkpoint_dir, std::string* text, bool list_tensors) {
  Checkpoint ck(checkpoint_dir);
  std::ostringstream out;
  int64_t params = 0, trainable = 0;
  for (const auto& t : ck.tensors()) {
    params += t.numel;
    if (t.trainable) trainable += t.numel;
  }
  const auto& model = ck.config().contains("model") ? ck.config()["model"] : nlohmann::json::object();
  out << "checkpoint   " << ck.dir() << "\n"
      << "step         " << ck.step() << " (optimizer steps " << ck.optimizer_steps() << ")\n"
      << (ck.model_only() ? "content      parameters only (train.save_model_only): no optimizer or RNG state\n"
                          : "")
      << "saved by     world size " << ck.world_size() << ", strategy " << ck.strategy()
      << (ck.replicas() > 1 ? " (hybrid: " + std::to_string(ck.replicas()) + " copies, one saved)" : std::string())
      << "\n"
      << "model        " << (model.contains("series") ? model["series"].get<std::string>() : std::string("?")) << ", "
      << params << " parameters (" << trainable << " trainable) in " << ck.tensors().size() << " tensors\n"
      << "files:\n";
  bool ok = true;
  for (const auto& f : ck.files()) {
    const std::string problem = ck.check_file(f);
    char line[512];
    std::snprintf(line, sizeof(line), "  %-36s %12llu bytes  crc32 %08x  ", f.name.c_str(),
                  static_cast<unsigned long long>(f.bytes), f.crc32);
    out << line << (problem.empty() ? "OK" : "FAILED: " + problem) << "\n";
    ok = ok && problem.empty();
  }
  if (list_tensors) {
    out << "tensors:\n";
    for (const auto& t : ck.tensors()) {
      const std::string shape = io::shape_text(t.shape);
      char line[512];
      std::snprintf(line, sizeof(line), "  %-44s %-16s %-3s %-9s %zu piece%s\n", t.name.c_str(), shape.c_str(),
                    t.dtype == at::kBFloat16 ? "BF16" : "F32", t.trainable ? "trainable" : "frozen", t.pieces.size(), t.pieces.size() == 1 ? "" : "s");
      out << line;
    }
  }
  out << (ok ? "all files OK\n" : "DAMAGED: see FAILED above\n");
  *text = out.str();
  return ok;
}

}  // namespace zeroshard::ckpt
