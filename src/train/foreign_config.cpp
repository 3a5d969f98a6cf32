// accelerate YAML and Megatron flags -> zeroshard settings, and what they share with the
// DeepSpeed mapping (foreign_deepspeed.cpp). See docs/foreign_configs.md.
#include "train/foreign_config.h"

#include "train/foreign_detail.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <tuple>

namespace zeroshard::train {
namespace foreign {

namespace fs = std::filesystem;

void Mapper::set(const std::string& key, const std::string& zs_key, const std::string& value, const std::string& note) {
  ForeignConfig one;
  one.settings.push_back({zs_key, value, where(key), note, false});
  merge(out_, one);
}

void Mapper::automatic(const std::string& key, const std::string& zs_key) {
  out_.settings.push_back({zs_key, "", where(key), "\"auto\": zeroshard's value is kept", true});
}

void Mapper::honoured(const std::string& key, const std::string& note) {
  out_.settings.push_back({"", "", where(key), note, false});
}

void Mapper::refuse(const std::string& key, const std::string& shown_value, const std::string& why) const {
  throw std::invalid_argument(where(key) + " = " + shown_value + ": " + why);
}

std::string number_text(double v) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof(buf), v);
  return std::string(buf, r.ptr);
}

nlohmann::json load_json(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::invalid_argument("cannot read '" + path + "'");
  std::stringstream text;
  text << in.rdbuf();
  // One entry per open object: the keys seen in it and the key being parsed.
  struct Level {
    std::set<std::string> keys;
    std::string current;
  };
  std::vector<Level> stack;
  std::string duplicate;
  nlohmann::json::parser_callback_t cb = [&](int, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
    using E = nlohmann::json::parse_event_t;
    if (event == E::object_start) stack.emplace_back();
    if (event == E::object_end && !stack.empty()) stack.pop_back();
    if (event == E::key && !stack.empty()) {
      const std::string k = parsed.get<std::string>();
      if (!stack.back().keys.insert(k).second && duplicate.empty()) {
        for (size_t i = 0; i + 1 < stack.size(); ++i) duplicate += stack[i].current + ".";
        duplicate += k;
      }
      stack.back().current = k;
    }
    return true;
  };
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text.str(), cb);
  } catch (const nlohmann::json::parse_error& e) {
    throw std::invalid_argument(path + ": not valid JSON: " + e.what());
  }
  if (!duplicate.empty()) {
    throw std::invalid_argument(path + ": key '" + duplicate +
                                "' appears twice in one object; DeepSpeed rejects such a file, and which value "
                                "was meant is unclear: keep one");
  }
  return j;
}

}  // namespace foreign

using foreign::Mapper;
namespace fs = std::filesystem;

std::vector<std::string> ForeignConfig::overrides() const {
  std::vector<std::string> out;
  for (const auto& s : settings) {
    if (!s.key.empty() && !s.automatic) out.push_back(s.key + "=" + s.value);
  }
  return out;
}

std::vector<std::string> ForeignConfig::describe() const {
  std::vector<std::string> out;
  for (const auto& s : settings) {
    std::string line;
    if (s.key.empty()) line = "(honoured as it is)";
    else if (s.automatic) line = s.key + " = (zeroshard's value)";
    else line = s.key + " = " + s.value;
    line += "   # " + s.source;
    if (!s.note.empty()) line += " -- " + s.note;
    out.push_back(line);
  }
  if (nproc) out.push_back("--nproc = " + std::to_string(*nproc) + "   # " + nproc_source);
  return out;
}

void merge(ForeignConfig& into, const ForeignConfig& more) {
  for (const auto& s : more.settings) {
    bool merged = false;
    if (!s.key.empty() && !s.automatic) {
      for (auto& t : into.settings) {
        if (t.key != s.key || t.automatic) continue;
        if (t.value != s.value) {
          throw std::invalid_argument(s.key + ": " + t.source + " gives " + t.value + " but " + s.source + " gives " +
                                      s.value + "; make them agree");
        }
        t.source += "; " + s.source;
        merged = true;
        break;
      }
    }
    if (!merged) into.settings.push_back(s);
  }
  if (more.nproc) {
    if (into.nproc && *into.nproc != *more.nproc) {
      throw std::invalid_argument("number of processes: " + into.nproc_source + " gives " + std::to_string(*into.nproc) +
                                  " but " + more.nproc_source + " gives " + std::to_string(*more.nproc));
    }
    into.nproc = more.nproc;
    into.nproc_source = more.nproc_source;
  }
}

ForeignConfig read_deepspeed_config(const std::string& path) {
  ForeignConfig out;
  Mapper m(out, path);
  foreign::map_deepspeed(foreign::load_json(path), m);
  return out;
}

namespace {

std::string scalar(const YAML::Node& v, const std::string& key, Mapper& m) {
  if (!v.IsScalar()) m.refuse(key, "(not a plain value)", "expected a plain value");
  return v.Scalar();
}

bool yaml_bool(const YAML::Node& v, const std::string& key, Mapper& m) {
  const std::string s = scalar(v, key, m);
  if (s == "true" || s == "True") return true;
  if (s == "false" || s == "False") return false;
  m.refuse(key, s, "expected true or false");
}

int64_t yaml_int(const YAML::Node& v, const std::string& key, Mapper& m, int64_t lo, int64_t hi) {
  const std::string s = scalar(v, key, m);
  int64_t x = 0;
  const auto r = std::from_chars(s.data(), s.data() + s.size(), x);
  if (r.ec != std::errc() || r.ptr != s.data() + s.size()) m.refuse(key, s, "expected an integer");
  if (x < lo || x > hi) m.refuse(key, s, "out of range [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  return x;
}

// A key whose value must be one of `ok` (what zeroshard does, or a feature's "off").
void only(const YAML::Node& v, const std::string& key, Mapper& m, const std::set<std::string>& ok, const std::string& why,
          const std::string& note = "as in zeroshard") {
  const std::string s = v.IsScalar() ? v.Scalar() : (v.IsSequence() && v.size() == 0 ? "[]" : "(structure)");
  if (!ok.count(s)) m.refuse(key, s, why);
  m.honoured(key, note);
}

void check_unique_keys(const YAML::Node& map, const std::string& prefix, Mapper& m) {
  std::set<std::string> seen;
  for (const auto& kv : map) {
    const std::string k = kv.first.as<std::string>();
    if (!seen.insert(k).second) {
      m.refuse(prefix + k, "(given twice)", "the key appears twice; which value was meant is unclear: keep one");
    }
  }
}

void map_accelerate_deepspeed(const YAML::Node& d, const std::string& yaml_path, Mapper& m, ForeignConfig& out) {
  if (!d.IsMap()) m.refuse("deepspeed_config", "(not a mapping)", "expected a mapping");
  check_unique_keys(d, "deepspeed_config.", m);
  auto device = [&](const YAML::Node& v, const std::string& k) {
    only(v, k, m, {"none"},
         "zeroshard keeps parameters, gradients and optimizer state with each rank's shard; it does not offload "
         "them (use a higher zero_stage or more ranks)",
         "none, as in zeroshard");
  };
  using H = std::function<void(const YAML::Node&, const std::string&)>;
  const std::map<std::string, H> handlers = {
      {"zero_stage",
       [&](const YAML::Node& v, const std::string& k) {
         m.set(k, "parallel.zero_stage", std::to_string(yaml_int(v, k, m, 0, 3)));
       }},
      {"gradient_accumulation_steps",
       [&](const YAML::Node& v, const std::string& k) {
         if (scalar(v, k, m) == "auto") return m.automatic(k, "train.grad_accum");
         m.set(k, "train.grad_accum", std::to_string(yaml_int(v, k, m, 1, 1 << 20)));
       }},
      {"gradient_clipping",
       [&](const YAML::Node& v, const std::string& k) {
         const std::string s = scalar(v, k, m);
         if (s == "auto") return m.automatic(k, "train.clip_grad_norm");
         double c = 0;
         try {
           size_t used = 0;
           c = std::stod(s, &used);
           if (used != s.size()) throw std::invalid_argument(s);
         } catch (const std::exception&) {
           m.refuse(k, s, "expected a number");
         }
         if (c < 0) m.refuse(k, s, "a clipping norm is >= 0 (0: no clipping)");
         m.set(k, "train.clip_grad_norm", foreign::number_text(c));
       }},
      {"offload_optimizer_device", device},
      {"offload_param_device", device},
      {"offload_optimizer_nvme_path", [&](const YAML::Node&, const std::string& k) { m.honoured(k, "inert: no offload"); }},
      {"offload_param_nvme_path", [&](const YAML::Node&, const std::string& k) { m.honoured(k, "inert: no offload"); }},
      {"zero3_init_flag",
       [&](const YAML::Node& v, const std::string& k) {
         yaml_bool(v, k, m);
         m.honoured(k, "zeroshard always builds the model deferred and materializes only each rank's shard");
       }},
      {"zero3_save_16bit_model",
       [&](const YAML::Node& v, const std::string& k) {
         m.set(k, "run.save_16bit_model", yaml_bool(v, k, m) ? "true" : "false");
       }},
      {"deepspeed_multinode_launcher",
       [&](const YAML::Node& v, const std::string& k) {
         scalar(v, k, m);
         m.honoured(k, "only used by accelerate across machines; zeroshard's ranks come from its launcher");
       }},
      {"deepspeed_config_file",
       [&](const YAML::Node& v, const std::string& k) {
         // accelerate opens it relative to the working folder; also try next to the YAML.
         const std::string rel = scalar(v, k, m);
         std::string path = rel;
         if (!fs::exists(path)) {
           const std::string beside = (fs::path(yaml_path).parent_path() / rel).string();
           if (!fs::exists(beside)) {
             m.refuse(k, rel, "no such file (looked in the working folder and as '" + beside + "')");
           }
           path = beside;
         }
         merge(out, read_deepspeed_config(path));
       }},
  };
  for (const auto& kv : d) {
    const std::string name = kv.first.as<std::string>();
    const std::string key = "deepspeed_config." + name;
    auto it = handlers.find(name);
    if (it == handlers.end()) {
      m.refuse(key, kv.second.IsScalar() ? kv.second.Scalar() : "(structure)",
               "not an accelerate DeepSpeed setting zeroshard maps (see docs/foreign_configs.md)");
    }
    it->second(kv.second, key);
  }
}

}  // namespace

ForeignConfig read_accelerate_config(const std::string& path) {
  ForeignConfig out;
  Mapper m(out, path);
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::Exception& e) {
    throw std::invalid_argument(path + ": cannot read as YAML: " + e.what());
  }
  if (!root.IsMap()) throw std::invalid_argument(path + ": an accelerate config is a mapping of keys");
  check_unique_keys(root, "", m);
  const std::string dist = root["distributed_type"] ? root["distributed_type"].Scalar() : "NO";
  using H = std::function<void(const YAML::Node&, const std::string&)>;
  const std::map<std::string, H> handlers = {
      {"distributed_type",
       [&](const YAML::Node& v, const std::string& k) {
         const std::string s = scalar(v, k, m);
         if (s == "DEEPSPEED") return m.honoured(k, "the deepspeed_config below decides the strategy");
         if (s == "MULTI_GPU" || s == "MULTI_CPU") {
           return m.set(k, "parallel.strategy", "no_shard", "DDP: every rank holds the whole model");
         }
         if (s == "NO") return m.honoured(k, "one process");
         m.refuse(k, s, "zeroshard maps DEEPSPEED, MULTI_GPU, MULTI_CPU and NO (FSDP, MEGATRON_LM, XLA are not mapped)");
       }},
      {"deepspeed_config",
       [&](const YAML::Node& v, const std::string& k) {
         if (dist != "DEEPSPEED") m.refuse(k, "(mapping)", "given, but distributed_type is " + dist + ", not DEEPSPEED");
         map_accelerate_deepspeed(v, path, m, out);
       }},
      {"mixed_precision",
       [&](const YAML::Node& v, const std::string& k) {
         const std::string s = scalar(v, k, m);
         if (s == "bf16") return m.set(k, "mixed_precision.param_dtype", "bf16");
         if (s == "no" || s == "false") return m.set(k, "mixed_precision.param_dtype", "fp32");
         m.refuse(k, s, "zeroshard trains in fp32 or bf16 (no fp16 loss scaling, no fp8)");
       }},
      {"num_processes",
       [&](const YAML::Node& v, const std::string& k) {
         out.nproc = static_cast<int>(yaml_int(v, k, m, 1, 1 << 20));
         out.nproc_source = m.where(k);
       }},
      {"num_machines",
       [&](const YAML::Node& v, const std::string& k) {
         if (yaml_int(v, k, m, 1, 1 << 20) != 1) {
           m.refuse(k, v.Scalar(), "start ranks on several hosts with srun, mpirun or torchrun-style variables "
                                   "(docs/launchers.md), not with accelerate's machine settings");
         }
         m.honoured(k, "one machine");
       }},
      {"machine_rank", [&](const YAML::Node& v, const std::string& k) { only(v, k, m, {"0"}, "multi-machine setting; see num_machines"); }},
      {"main_process_ip",
       [&](const YAML::Node& v, const std::string& k) {
         m.refuse(k, scalar(v, k, m), "set MASTER_ADDR, or let srun/mpirun provide it (docs/launchers.md)");
       }},
      {"main_process_port",
       [&](const YAML::Node& v, const std::string& k) {
         m.refuse(k, scalar(v, k, m), "set MASTER_PORT, or let srun/mpirun derive it (docs/launchers.md)");
       }},
      {"compute_environment",
       [&](const YAML::Node& v, const std::string& k) { only(v, k, m, {"LOCAL_MACHINE"}, "only LOCAL_MACHINE is mapped"); }},
      {"debug",
       [&](const YAML::Node& v, const std::string& k) {
         m.set(k, "debug.check_desync", yaml_bool(v, k, m) ? "true" : "false",
               "accelerate's debug checks the ranks' collectives agree, as debug.check_desync does");
       }},
      {"downcast_bf16", [&](const YAML::Node& v, const std::string& k) { only(v, k, m, {"no"}, "a TPU setting"); }},
      {"enable_cpu_affinity",
       [&](const YAML::Node& v, const std::string& k) { only(v, k, m, {"false"}, "zeroshard does not pin ranks to NUMA nodes"); }},
      {"main_training_function",
       [&](const YAML::Node& v, const std::string& k) {
         only(v, k, m, {"main"}, "names a Python function; only accelerate's default is accepted", "names a Python function");
       }},
      {"rdzv_backend",
       [&](const YAML::Node& v, const std::string& k) {
         only(v, k, m, {"static"}, "zeroshard's ranks meet through their launcher's store", "zeroshard's own rendezvous");
       }},
      {"same_network",
       [&](const YAML::Node& v, const std::string& k) {
         yaml_bool(v, k, m);
         m.honoured(k, "multi-machine setting, inert on one machine");
       }},
      {"tpu_env", [&](const YAML::Node& v, const std::string& k) { only(v, k, m, {"[]"}, "a TPU setting", "no TPU"); }},
      {"tpu_use_cluster", [&](const YAML::Node& v, const std::string& k) { only(v, k, m, {"false"}, "a TPU setting", "no TPU"); }},
      {"tpu_use_sudo", [&](const YAML::Node& v, const std::string& k) { only(v, k, m, {"false"}, "a TPU setting", "no TPU"); }},
      {"use_cpu",
       [&](const YAML::Node& v, const std::string& k) {
         yaml_bool(v, k, m);
         m.honoured(k, "zeroshard trains on CPU tensors either way");
       }},
      {"gpu_ids", [&](const YAML::Node& v, const std::string& k) { only(v, k, m, {"all"}, "zeroshard does not select GPUs"); }},
      {"dynamo_backend",
       [&](const YAML::Node& v, const std::string& k) { only(v, k, m, {"NO", "no"}, "zeroshard does not compile with torch dynamo"); }},
  };
  for (const auto& kv : root) {
    const std::string name = kv.first.as<std::string>();
    auto it = handlers.find(name);
    if (it == handlers.end()) {
      m.refuse(name, kv.second.IsScalar() ? kv.second.Scalar() : "(structure)",
               "not an accelerate setting zeroshard maps (see docs/foreign_configs.md)");
    }
    it->second(kv.second, name);
  }
  return out;
}

const std::vector<std::string>& megatron_flag_names() {
  static const std::vector<std::string> names = {"use_megatron_fsdp", "data_parallel_sharding_strategy",
                                                 "micro_batch_size", "global_batch_size", "use_distributed_optimizer"};
  return names;
}

ForeignConfig megatron_flags(const std::vector<std::pair<std::string, std::string>>& flags) {
  ForeignConfig out;
  Mapper m(out, "command line");
  std::map<std::string, std::pair<std::string, std::string>> given;  // name -> (as written, value)
  for (const auto& [raw, value] : flags) {
    std::string name = raw.substr(raw.find_first_not_of('-') == std::string::npos ? raw.size() : raw.find_first_not_of('-'));
    for (char& c : name) {
      if (c == '-') c = '_';
    }
    const auto& known = megatron_flag_names();
    if (std::find(known.begin(), known.end(), name) == known.end()) {
      std::string list;
      for (const auto& k : known) list += (list.empty() ? "--" : ", --") + k;
      m.refuse(raw, value, "not a Megatron / ms-swift flag zeroshard maps (" + list + ")");
    }
    if (given.count(name)) m.refuse(raw, value, "given twice");
    given[name] = {raw, value};
  }
  auto flag_bool = [&](const std::string& name) -> std::optional<bool> {
    auto it = given.find(name);
    if (it == given.end()) return std::nullopt;
    const std::string& v = it->second.second;
    if (v == "true" || v == "True" || v == "1") return true;
    if (v == "false" || v == "False" || v == "0") return false;
    m.refuse(it->second.first, v, "expected true or false");
  };
  const auto fsdp = flag_bool("use_megatron_fsdp");
  const auto dist_opt = flag_bool("use_distributed_optimizer");
  if (auto it = given.find("data_parallel_sharding_strategy"); it != given.end()) {
    const auto& [raw, v] = it->second;
    static const std::set<std::string> names = {"no_shard", "optim", "optim_grads", "optim_grads_params"};
    if (!names.count(v)) m.refuse(raw, v, "expected no_shard, optim, optim_grads or optim_grads_params");
    if (fsdp == false && v != "no_shard") {
      m.refuse(raw, v, "applies to Megatron-FSDP, which --use_megatron_fsdp false turns off");
    }
    m.set(raw, "parallel.strategy", v, "Megatron-FSDP's strategies are zeroshard's, by the same names");
  } else if (fsdp == true) {
    m.set(given["use_megatron_fsdp"].first, "parallel.strategy", "no_shard",
          "Megatron-FSDP without --data_parallel_sharding_strategy uses its default, no_shard");
  }
  if (dist_opt.has_value()) {
    const std::string& raw = given["use_distributed_optimizer"].first;
    if (fsdp == true) {
      m.honoured(raw, "Megatron-FSDP requires it; the sharding is --data_parallel_sharding_strategy's");
    } else if (*dist_opt) {
      m.set(raw, "parallel.strategy", "optim", "Megatron's distributed optimizer shards the optimizer state (ZeRO-1)");
    } else if (!given.count("data_parallel_sharding_strategy")) {
      m.set(raw, "parallel.strategy", "no_shard", "plain DDP");
    }
  }
  for (const auto& [name, zs_key, lo] :
       {std::tuple<const char*, const char*, int64_t>{"micro_batch_size", "train.micro_batch_size", 1},
        {"global_batch_size", "train.global_batch_size", 1}}) {
    auto it = given.find(name);
    if (it == given.end()) continue;
    const auto& [raw, v] = it->second;
    int64_t x = 0;
    const auto r = std::from_chars(v.data(), v.data() + v.size(), x);
    if (r.ec != std::errc() || r.ptr != v.data() + v.size() || x < lo || x > (1 << 30)) {
      m.refuse(raw, v, "expected a positive integer");
    }
    m.set(raw, zs_key, std::to_string(x));
  }
  return out;
}

}  // namespace zeroshard::train
