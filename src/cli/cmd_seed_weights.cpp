// `zeroshard seed-weights --config C --out DIR`: the model of a config with seeded weights, written
// in its released layout (Series::released_folders: folders, names through the series' name
// maps, sharded safetensors + index or one torch.save file, bf16 by default), so that runs at a published size read a
// user's files through the same code as a real checkpoint's. The model is built without bytes
// (nn::DeferredInit) and written one tensor (or one group of fused pieces) at a time: memory stays
// that of the largest tensor, whatever the model's size. The values are the training run's own
// seeded init (train.seed), so a run from the folders trains as a seeded run does.
#include "cli/command.h"
#include "cli/launch_or_run.h"
#include "io/file.h"
#include "io/safetensors.h"
#include "io/torch_pth.h"
#include "models/series.h"
#include "nn/init.h"
#include "nn/layers.h"
#include "train/config.h"
#include "util/heap.h"
#include "util/text.h"

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <set>

namespace zeroshard::cli {

namespace {

namespace fs = std::filesystem;

struct OurParam {
  std::string name;  // below the folder's prefix
  std::vector<int64_t> shape;
};

// One folder's tensors grouped so that each group goes through the name map on its own: a
// parameter alone, or the pieces their side fuses into one tensor (NameMap split rules).
struct FolderPlan {
  std::vector<std::vector<std::string>> ours;   // per group: our names (below the prefix)
  std::vector<std::vector<io::TensorEntry>> theirs;  // per group: their tensors, in to_theirs' order
  int64_t our_numel = 0, their_numel = 0, not_run_numel = 0;
};

FolderPlan plan_folder(const models::ReleasedFolder& f, const std::vector<OurParam>& params, at::ScalarType dtype) {
  FolderPlan plan;
  std::map<std::string, std::vector<int64_t>> shape_of;
  for (const auto& p : params) shape_of[p.name] = p.shape;
  std::set<std::string> done;
  for (const auto& p : params) {
    if (done.count(p.name)) continue;
    const nn::NameMap::Resolved r = f.map.resolve_ours(p.name);
    const std::vector<std::string> group = r.siblings.empty() ? std::vector<std::string>{p.name} : r.siblings;
    // Shapes only: the map on meta tensors (no bytes).
    std::map<std::string, at::Tensor> meta;
    for (const auto& n : group) {
      const auto it = shape_of.find(n);
      if (it == shape_of.end()) {
        throw std::logic_error("seed-weights: '" + f.prefix + n + "' is fused with '" + f.prefix + p.name +
                               "' in " + f.folder + " but the model has no such parameter");
      }
      meta[n] = at::empty(it->second, at::TensorOptions().dtype(at::kFloat).device(at::kMeta));
      done.insert(n);
      plan.our_numel += meta[n].numel();
    }
    std::vector<io::TensorEntry> entries;
    for (const auto& [name, t] : f.map.to_theirs(meta)) {
      entries.push_back({name, dtype, t.sizes().vec()});
      plan.their_numel += t.numel();
    }
    plan.ours.push_back(group);
    plan.theirs.push_back(std::move(entries));
  }
  // What the release holds that the model does not run: one group each, none of ours.
  for (const auto& t : f.not_run) {
    plan.ours.emplace_back();
    plan.theirs.push_back({{t.name, dtype, t.shape}});
    plan.their_numel += plan.theirs.back()[0].numel();
    plan.not_run_numel += plan.theirs.back()[0].numel();
  }
  return plan;
}

}  // namespace

Command add_seed_weights(CLI::App& app) {
  struct Args {
    std::string config_path, out, dtype = "released";
    std::vector<std::string> overrides, only;
    double max_file_mb = 0;
    bool dry_run = false;
  };
  auto a = std::make_shared<Args>();
  auto* sub = app.add_subcommand(
      "seed-weights",
      "Write a config's model with seeded weights in its released layout (folders, names, sharded safetensors + "
      "index or the torch.save files a release ships), one tensor at a time: stand-in files for real-size runs where "
      "the released ones cannot be downloaded");
  sub->add_option("-c,--config", a->config_path, "YAML config (its data keys may be left unset)")
      ->check(CLI::ExistingFile);
  sub->add_option("--set", a->overrides, "Override a config key (repeatable)");
  sub->add_option("-o,--out", a->out, "The folder to write the released layout in")->required();
  sub->add_option("--dtype", a->dtype,
                  "released (each folder's dtype as shipped: bf16, Wan2.1_VAE.pth float32), or bf16 or fp32 for all")
      ->check(CLI::IsMember({"released", "bf16", "fp32"}));
  sub->add_option("--max-file-mb", a->max_file_mb, "At most this many MiB per safetensors file (0: 5 GB)")
      ->check(CLI::NonNegativeNumber);
  sub->add_option("--only", a->only,
                  "Write only these folders (their prefix without the dot, e.g. dit, text_encoder, vae; "
                  "repeatable): when the disk holds one at a time. Another layout a release also ships is "
                  "written only when named: FLUX.1's dit_bfl and vae_bfl (flux1-dev.safetensors, ae.safetensors)");
  sub->add_flag("--dry-run", a->dry_run,
                "Print each folder's tensors' parameter count and size, write nothing (checks a config against the "
                "published counts in seconds)");
  return {sub, [a] {
            prepare_compute_process();  // minutes of seeded draws at real size
            util::StreamingHeap streaming;  // one tensor's temporaries after another (util/heap.h)
            const train::TrainConfig cfg = train::load_model_config(a->config_path, a->overrides);
            const models::Series& series = models::find_series(cfg.series);
            if (!series.seeded_model) {
              throw std::invalid_argument("seed-weights: model.series " + cfg.series +
                                          " has no released weights to stand in for");
            }
            const at::ScalarType dtype = a->dtype == "fp32" ? at::kFloat : at::kBFloat16;
            // A folder's own dtype (ReleasedFolder::dtype) unless --dtype names one for all.
            auto dtype_of = [&](const models::ReleasedFolder& f) {
              return a->dtype == "released" && f.dtype != at::ScalarType::Undefined ? f.dtype : dtype;
            };
            std::vector<models::ReleasedFolder> folders;
            if (series.released_folders) {
              folders = series.released_folders(cfg);
            } else {
              folders.push_back({"", "", "model", "model.init_from", {}, true, "", {}, {}});
            }
            // A folder's name for --only: its label, else its prefix without the dot ("model" for the
            // whole model).
            auto label = [](const models::ReleasedFolder& f) {
              if (!f.label.empty()) return f.label;
              return f.prefix.empty() ? std::string("model") : f.prefix.substr(0, f.prefix.size() - 1);
            };
            std::set<std::string> known;
            for (const auto& f : folders) known.insert(label(f));
            for (const auto& o : a->only) {
              if (!known.count(o)) {
                throw std::invalid_argument("seed-weights --only " + o + ": " + cfg.series + " writes " +
                                            util::join(std::vector<std::string>(known.begin(), known.end()), ", "));
              }
            }
            const models::SeededModel model = series.seeded_model(cfg);
            // Every parameter once (a tied one under its first name), LoRA adapters left out.
            std::vector<std::pair<std::string, at::Tensor>> params;
            std::set<const void*> seen;
            for (const auto& item : model.module->named_parameters(/*recurse=*/true)) {
              if (nn::is_lora_parameter(item.key())) continue;
              if (!seen.insert(item.value().unsafeGetTensorImpl()).second) continue;
              params.emplace_back(item.key(), item.value());
            }
            // Every folder checked before anything is written: each parameter lies in one folder (an
            // alternative layout holds its prefix's parameters again), no folder to write exists already.
            std::vector<std::vector<OurParam>> mine(folders.size());
            std::set<std::string> placed;
            for (size_t i = 0; i < folders.size(); ++i) {
              for (const auto& [name, t] : params) {
                if (!util::starts_with(name, folders[i].prefix)) continue;
                if (!folders[i].alternative && !placed.insert(name).second) continue;
                mine[i].push_back({name.substr(folders[i].prefix.size()), t.sizes().vec()});
              }
            }
            for (const auto& [name, t] : params) {
              if (!placed.count(name)) {
                throw std::logic_error("seed-weights: parameter '" + name + "' lies in no released folder of " +
                                       cfg.series);
              }
            }
            auto dir_of = [&](const models::ReleasedFolder& f) { return f.folder.empty() ? a->out : a->out + "/" + f.folder; };
            // What a run's key names: the index of the sharded safetensors, or the one file.
            auto index_of = [&](const models::ReleasedFolder& f) {
              return dir_of(f) + "/" + f.stem +
                     (f.torch_save ? ".pth" : f.single_file ? ".safetensors" : ".safetensors.index.json");
            };
            std::vector<size_t> todo;
            for (size_t i = 0; i < folders.size(); ++i) {
              const bool named = std::find(a->only.begin(), a->only.end(), label(folders[i])) != a->only.end();
              if (mine[i].empty() || (!named && (!a->only.empty() || folders[i].alternative))) continue;
              if (!a->dry_run && fs::exists(index_of(folders[i]))) {
                throw std::invalid_argument("seed-weights: " + index_of(folders[i]) +
                                            " exists; remove the folder or write elsewhere");
              }
              todo.push_back(i);
            }
            if (todo.empty()) throw std::invalid_argument("seed-weights: nothing to write (--only names no folder with parameters)");
            double total_bytes = 0;
            int64_t total_params = 0;
            std::vector<std::string> keys;
            for (size_t i : todo) {
              const models::ReleasedFolder& f = folders[i];
              const std::string dir = dir_of(f);
              const FolderPlan plan = plan_folder(f, mine[i], dtype_of(f));
              std::map<std::string, std::vector<int64_t>> shape_of;
              for (const auto& p : mine[i]) shape_of[p.name] = p.shape;
              const auto start = std::chrono::steady_clock::now();
              const auto seed = static_cast<uint64_t>(cfg.train.seed);
              if (a->dry_run) {
                const double bytes = static_cast<double>(plan.their_numel) * static_cast<double>(at::elementSize(dtype_of(f)));
                total_bytes += bytes;
                total_params += plan.their_numel;
                std::printf("%s -> %s: %lld parameters (%zu of ours, %lld written without being run), %s\n",
                            f.prefix.empty() ? "model" : (f.prefix + "*").c_str(), dir.c_str(),
                            static_cast<long long>(plan.their_numel), mine[i].size(),
                            static_cast<long long>(plan.not_run_numel), util::gigabytes(bytes).c_str());
                if (!f.note.empty()) std::printf("  note: %s\n", f.note.c_str());
                continue;
              }
              // One group of our tensors at a time: seeded in fp32, mapped, converted as written;
              // then the tensors the model does not run, seeded by their released names.
              auto values = [&](size_t g) {
                if (plan.ours[g].empty()) {
                  const io::TensorEntry& e = plan.theirs[g][0];
                  at::Tensor v = at::empty(e.shape, at::kFloat);
                  nn::init_normal(v, seed, f.folder + "/" + e.name, 0.02);
                  return std::vector<at::Tensor>{v};
                }
                std::map<std::string, at::Tensor> ours;
                for (const auto& n : plan.ours[g]) {
                  at::Tensor v = at::empty(shape_of.at(n), at::kFloat);
                  model.init(f.prefix + n, v);
                  ours[n] = v;
                }
                std::vector<at::Tensor> out;
                for (auto& [name, t] : f.map.to_theirs(ours)) out.push_back(t);
                return out;
              };
              std::vector<std::string> files;  // the weights' files (not the index)
              if (f.torch_save) {
                fs::create_directories(dir);
                io::write_torch_save(index_of(f), plan.theirs, values);
                files.push_back(index_of(f));
              } else if (f.single_file) {
                fs::create_directories(dir);
                io::write_safetensors_file(index_of(f), plan.theirs, values);
                files.push_back(index_of(f));
              } else {
                files = io::write_sharded_safetensors(dir, f.stem, plan.theirs, values,
                                                      static_cast<uint64_t>(a->max_file_mb * 1024 * 1024));
                files.pop_back();  // the index
              }
              for (const auto& [name, text] : f.files) io::write_file_atomic(dir + "/" + name, text);
              const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
              double bytes = 0;
              for (const auto& file : files) bytes += static_cast<double>(fs::file_size(file));
              total_bytes += bytes;
              total_params += plan.their_numel;
              std::printf("%s -> %s: %lld parameters (%zu of ours, %lld written without being run) in %zu file%s, %s, "
                          "%.1f s\n",
                          f.prefix.empty() ? "model" : (f.prefix + "*").c_str(), dir.c_str(),
                          static_cast<long long>(plan.their_numel), mine[i].size(),
                          static_cast<long long>(plan.not_run_numel), files.size(), files.size() == 1 ? "" : "s",
                          util::gigabytes(bytes).c_str(), seconds);
              if (!f.note.empty()) std::printf("  note: %s\n", f.note.c_str());
              keys.push_back("--set " + f.key + "=" + (f.key_takes_index ? index_of(f) : dir));
            }
            if (a->dry_run) {
              std::printf("%lld parameters, %s (%s); nothing written (--dry-run)\n", static_cast<long long>(total_params),
                          util::gigabytes(total_bytes).c_str(), a->dtype.c_str());
              return 0;
            }
            std::printf("%lld parameters, %s (%s) in %s; a run reads them with\n  %s\n",
                        static_cast<long long>(total_params), util::gigabytes(total_bytes).c_str(), a->dtype.c_str(), a->out.c_str(),
                        util::join(keys, " \\\n  ").c_str());
            return 0;
          }};
}

}  // namespace zeroshard::cli
