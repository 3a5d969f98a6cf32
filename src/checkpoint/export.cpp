// Offline tools on a checkpoint (no ranks): consolidated safetensors export and inspect.
#include "checkpoint/checkpoint.h"

#include "io/safetensors.h"

#include <cstdio>
#include <sstream>

namespace zeroshard::ckpt {

void export_safetensors(const std::string& checkpoint_dir, const std::string& out_path, at::ScalarType dtype,
                        const std::string& state) {
  if (dtype != at::kFloat && dtype != at::kBFloat16) {
    throw std::invalid_argument("export: dtype must be fp32 or bf16");
  }
  if (state != "param" && state != "exp_avg" && state != "exp_avg_sq") {
    throw std::invalid_argument("export: state must be param, exp_avg or exp_avg_sq, got '" + state + "'");
  }
  Checkpoint ck(checkpoint_dir);
  std::vector<io::TensorEntry> entries;
  std::vector<const TensorRecord*> records;
  for (const auto& t : ck.tensors()) {
    if (state != "param" && !t.trainable) continue;  // frozen tensors have no optimizer state
    entries.push_back({t.name, dtype, t.shape});
    records.push_back(&t);
  }
  io::SafetensorsWriter writer(out_path, entries,
                               {{"format", "pt"}, {"producer", "zeroshard"}, {"step", std::to_string(ck.step())},
                                {"state", state}});
  for (const TensorRecord* t : records) {  // one tensor in memory at a time
    at::Tensor full = at::empty({t->numel}, at::kFloat);
    ck.read(*t, state, 0, t->numel, full);
    writer.write(t->name, full.view(t->shape));
  }
  writer.finish();
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
      << "saved by     world size " << ck.world_size() << ", strategy " << ck.strategy() << "\n"
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
      std::string shape = "[";
      for (size_t i = 0; i < t.shape.size(); ++i) shape += (i ? ", " : "") + std::to_string(t.shape[i]);
      shape += "]";
      char line[512];
      std::snprintf(line, sizeof(line), "  %-44s %-16s F32 %-9s %zu piece%s\n", t.name.c_str(), shape.c_str(),
                    t.trainable ? "trainable" : "frozen", t.pieces.size(), t.pieces.size() == 1 ? "" : "s");
      out << line;
    }
  }
  out << (ok ? "all files OK\n" : "DAMAGED: see FAILED above\n");
  *text = out.str();
  return ok;
}

}  // namespace zeroshard::ckpt
