// DeepSpeed JSON, accelerate YAML and Megatron flags mapped to zeroshard settings, or refused
// by name. Files under tests/train/foreign/ carry the keys of DiffSynth-Studio's accelerate
// zero2/zero3 YAMLs and of typical DeepSpeed JSONs (written for these tests).
#include "train/foreign_config.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#ifndef ZS_SOURCE_DIR
#error "build with -DZS_SOURCE_DIR=\"<repository root>\""
#endif

namespace zeroshard::train {
namespace {

namespace fs = std::filesystem;

std::string file(const std::string& name) { return std::string(ZS_SOURCE_DIR) + "/tests/train/foreign/" + name; }

std::map<std::string, std::string> mapped(const ForeignConfig& c) {
  std::map<std::string, std::string> m;
  for (const auto& o : c.overrides()) {
    const auto eq = o.find('=');
    EXPECT_EQ(m.count(o.substr(0, eq)), 0u) << "key twice in overrides: " << o;
    m[o.substr(0, eq)] = o.substr(eq + 1);
  }
  return m;
}

const ForeignSetting* find(const ForeignConfig& c, const std::string& key) {
  for (const auto& s : c.settings) {
    if (s.key == key) return &s;
  }
  return nullptr;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "(no error)";
}

// A DeepSpeed JSON written to a temporary file.
struct TempJson {
  std::string path;
  explicit TempJson(const std::string& text) {
    char tmpl[] = "/tmp/zs-ds-XXXXXX";
    const int fd = mkstemp(tmpl);
    close(fd);
    path = tmpl;
    std::ofstream(path) << text;
  }
  ~TempJson() { fs::remove(path); }
};

std::string ds_error(const std::string& text) {
  TempJson f(text);
  const std::string msg = error_of([&] { read_deepspeed_config(f.path); });
  return std::regex_replace(msg, std::regex(f.path), "ds.json");
}

// Every key the mappers emit must exist in the config registry (src/train/config*.cpp),
// except the ones this issue adds and the lead registers.
TEST(ForeignConfig, EmittedKeysExistInTheRegistry) {
  std::stringstream registry;
  for (const auto& entry : fs::directory_iterator(std::string(ZS_SOURCE_DIR) + "/src/train")) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("config", 0) == 0 && entry.path().extension() == ".cpp") {
      std::ifstream in(entry.path());
      registry << in.rdbuf();
    }
  }
  const std::set<std::string> pending = {"run.save_16bit_model", "run.tensorboard"};
  std::vector<ForeignSetting> all;
  for (const ForeignConfig& c :
       {read_deepspeed_config(file("ds_zero2.json")), read_deepspeed_config(file("ds_zero3.json")),
        read_accelerate_config(file("accelerate_zero3.yaml")), read_accelerate_config(file("accelerate_with_file.yaml")),
        megatron_flags({{"--use_megatron_fsdp", "true"}, {"--data_parallel_sharding_strategy", "optim_grads_params"},
                        {"--micro_batch_size", "4"}, {"--global_batch_size", "16"}})}) {
    all.insert(all.end(), c.settings.begin(), c.settings.end());
  }
  ASSERT_GT(all.size(), 20u);
  for (const auto& s : all) {
    if (s.key.empty() || pending.count(s.key)) continue;
    EXPECT_NE(registry.str().find("\"" + s.key + "\""), std::string::npos) << s.key << " from " << s.source;
  }
}

TEST(ForeignConfig, DeepSpeedExplicitValues) {
  const ForeignConfig c = read_deepspeed_config(file("ds_zero2.json"));
  const std::map<std::string, std::string> expected = {
      {"parallel.zero_stage", "2"},
      {"mixed_precision.param_dtype", "bf16"},
      {"mixed_precision.reduce_dtype", "bf16"},
      {"train.micro_batch_size", "4"},
      {"train.grad_accum", "2"},
      {"train.global_batch_size", "16"},
      {"train.clip_grad_norm", "1"},
      // 5e7 elements x 2 bytes: the reductions are bf16 (communication_data_type).
      {"parallel.reduce_bucket_bytes", "100000000"},
      {"train.lr", "1e-04"},  // shortest text that reads back the same double
      {"train.beta1", "0.9"},
      {"train.beta2", "0.95"},
      {"train.eps", "1e-08"},
      {"train.weight_decay", "0.01"}};
  EXPECT_EQ(mapped(c), expected);
  EXPECT_EQ(find(c, "parallel.zero_stage")->source, file("ds_zero2.json") + ": zero_optimization.stage");
  EXPECT_NE(find(c, "parallel.reduce_bucket_bytes")->note.find("DeepSpeed counts elements"), std::string::npos);
  // Honoured switches are listed, not dropped.
  bool overlap = false;
  for (const auto& s : c.settings) overlap |= s.source == file("ds_zero2.json") + ": zero_optimization.overlap_comm";
  EXPECT_TRUE(overlap);
  // Without communication_data_type the bucket counts fp32 elements.
  TempJson fp32(R"({"zero_optimization": {"stage": 1, "reduce_bucket_size": 5e8}})");
  EXPECT_EQ(mapped(read_deepspeed_config(fp32.path)).at("parallel.reduce_bucket_bytes"), "2000000000");
}

TEST(ForeignConfig, DeepSpeedAutoKeepsZeroshardsValue) {
  const ForeignConfig c = read_deepspeed_config(file("ds_zero3.json"));
  const std::map<std::string, std::string> expected = {{"parallel.zero_stage", "3"},
                                                       {"parallel.persistence_threshold", "100000"},
                                                       {"run.save_16bit_model", "true"},
                                                       {"train.log_every", "20"}};
  EXPECT_EQ(mapped(c), expected);
  for (const char* key : {"train.micro_batch_size", "train.grad_accum", "train.global_batch_size",
                          "train.clip_grad_norm", "mixed_precision.param_dtype", "parallel.reduce_bucket_bytes",
                          "parallel.max_live_units", "train.lr", "train.beta1", "train.eps"}) {
    const ForeignSetting* s = find(c, key);
    ASSERT_NE(s, nullptr) << key;
    EXPECT_TRUE(s->automatic) << key;
  }
  const auto lines = c.describe();
  EXPECT_NE(std::find(lines.begin(), lines.end(),
                      "train.micro_batch_size = (zeroshard's value)   # " + file("ds_zero3.json") +
                          ": train_micro_batch_size_per_gpu -- \"auto\": zeroshard's value is kept"),
            lines.end());
}

TEST(ForeignConfig, DeepSpeedRefusalsNameTheKeyAndWhy) {
  EXPECT_EQ(error_of([] { read_deepspeed_config(file("ds_zero3_offload.json")); }).find(
                file("ds_zero3_offload.json") + ": zero_optimization.offload_optimizer.device = \"cpu\": zeroshard keeps"),
            0u);
  const std::string dup = error_of([] { read_deepspeed_config(file("ds_duplicate.json")); });
  EXPECT_NE(dup.find("key 'zero_optimization.stage3_prefetch_bucket_size' appears twice"), std::string::npos) << dup;
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"fp16": {"enabled": true, "loss_scale": 0}})", "ds.json: fp16.enabled = true: zeroshard has no fp16"},
      {R"({"zero_optimization": {"stage": 3, "offload_param": {"device": "nvme", "nvme_path": "/x"}}})",
       "ds.json: zero_optimization.offload_param.device = \"nvme\""},
      {R"({"zero_optimization": {"cpu_offload": true}})", "ds.json: zero_optimization.cpu_offload = true"},
      {R"({"zero_optimization": {"stage3_prefetch_bucket_size": 5e7}})",
       "ds.json: zero_optimization.stage3_prefetch_bucket_size = 50000000.0: zeroshard bounds prefetching in whole units"},
      {R"({"zero_optimization": {"stage3_max_live_parameters": 1e9}})",
       "ds.json: zero_optimization.stage3_max_live_parameters = 1000000000.0"},
      {R"({"zero_optimization": {"sub_group_size": 1e9}})", "ds.json: zero_optimization.sub_group_size"},
      {R"({"zero_optimization": {"allgather_bucket_size": 2e8}})", "ds.json: zero_optimization.allgather_bucket_size"},
      {R"({"zero_optimization": {"overlap_comm": false}})", "ds.json: zero_optimization.overlap_comm = false"},
      {R"({"zero_optimization": {"reduce_bucket_size": 1e9}})", "past the largest parallel.reduce_bucket_bytes"},
      {R"({"zero_optimization": {"stage": 4}})", "ds.json: zero_optimization.stage = 4: out of range [0, 3]"},
      {R"({"zero_optimization": {"zero_quantized_weights": true}})", "ZeRO++ weight quantization"},
      {R"({"zero_optimization": {"stagee": 3}})", "ds.json: zero_optimization.stagee = 3: not a ZeRO setting"},
      {R"({"communication_data_type": "fp16"})", "ds.json: communication_data_type = \"fp16\""},
      {R"({"optimizer": {"type": "Lamb", "params": {"lr": 1e-3}}})", "ds.json: optimizer.type = \"Lamb\""},
      {R"({"optimizer": {"type": "Adam", "params": {"adam_w_mode": false}}})",
       "ds.json: optimizer.params.adam_w_mode = false"},
      {R"({"scheduler": {"type": "WarmupDecayLR", "params": {"warmup_num_steps": "auto"}}})",
       "ds.json: scheduler = \"WarmupDecayLR\": zeroshard's schedule is a linear warmup then cosine"},
      {R"({"activation_checkpointing": {"partition_activations": true}})",
       "ds.json: activation_checkpointing.partition_activations = true"},
      {R"({"bf16": {"enabled": true, "immediate_grad_update": true}})", "ds.json: bf16.immediate_grad_update"},
      {R"({"prescale_gradients": true})", "ds.json: prescale_gradients = true"},
      {R"({"gradient_predivide_factor": 2.0})", "ds.json: gradient_predivide_factor = 2.0"},
      {R"({"zero3_init_flag": true})", "ds.json: zero3_init_flag = true: an accelerate key"},
      {R"({"tensorboard": {"enabled": true, "output_path": "logs/"}})", "ds.json: tensorboard.output_path"},
      {R"({"elasticity": {"enabled": true}})", "ds.json: elasticity = {\"enabled\":true}: not a DeepSpeed setting"},
      {R"({"train_micro_batch_size_per_gpu": 1.5})", "ds.json: train_micro_batch_size_per_gpu = 1.5: expected a whole"},
      {R"({"gradient_clipping": -1})", "ds.json: gradient_clipping = -1"},
      {R"([1, 2])", "a DeepSpeed config is a JSON object"},
      {R"({"bf16": )", "ds.json: not valid JSON"},
  };
  for (const auto& [text, fragment] : cases) {
    const std::string msg = ds_error(text);
    EXPECT_NE(msg.find(fragment), std::string::npos) << text << "\n  -> " << msg;
  }
  // Blocks that are off, or ask for what zeroshard does, pass.
  EXPECT_EQ(ds_error(R"({"fp16": {"enabled": false, "loss_scale": 0}, "amp": {"enabled": false},
                         "zero_optimization": {"stage3_prefetch_bucket_size": 0, "round_robin_gradients": false}})"),
            "(no error)");
  TempJson off(R"({"zero_optimization": {"stage3_prefetch_bucket_size": 0}})");
  EXPECT_EQ(mapped(read_deepspeed_config(off.path)).at("parallel.prefetch"), "false");
}

TEST(ForeignConfig, AccelerateZero3) {
  const ForeignConfig c = read_accelerate_config(file("accelerate_zero3.yaml"));
  const std::map<std::string, std::string> expected = {{"parallel.zero_stage", "3"},
                                                       {"train.grad_accum", "1"},
                                                       {"run.save_16bit_model", "true"},
                                                       {"mixed_precision.param_dtype", "bf16"},
                                                       {"debug.check_desync", "false"}};
  EXPECT_EQ(mapped(c), expected);
  ASSERT_TRUE(c.nproc.has_value());
  EXPECT_EQ(*c.nproc, 8);
  EXPECT_EQ(c.nproc_source, file("accelerate_zero3.yaml") + ": num_processes");
  EXPECT_EQ(find(c, "parallel.zero_stage")->source, file("accelerate_zero3.yaml") + ": deepspeed_config.zero_stage");
  // Every key of the file is accounted for, mapped or honoured: its 17 top-level keys less
  // deepspeed_config (a block) and num_processes (the world size), plus the block's 6.
  EXPECT_EQ(c.settings.size(), 17u - 2u + 6u);
}

TEST(ForeignConfig, AccelerateZero2) {
  const ForeignConfig c = read_accelerate_config(file("accelerate_zero2.yaml"));
  EXPECT_EQ(mapped(c).at("parallel.zero_stage"), "2");
  EXPECT_EQ(mapped(c).at("train.grad_accum"), "4");
  EXPECT_EQ(*c.nproc, 2);
  const std::string msg = error_of([] { read_accelerate_config(file("accelerate_zero2_offload.yaml")); });
  EXPECT_EQ(msg.find(file("accelerate_zero2_offload.yaml") + ": deepspeed_config.offload_optimizer_device = cpu: "),
            0u)
      << msg;
}

TEST(ForeignConfig, AccelerateWithADeepSpeedFile) {
  // The JSON is found beside the YAML (the test runs elsewhere); its "auto" bf16 is filled by
  // accelerate's mixed_precision.
  const ForeignConfig c = read_accelerate_config(file("accelerate_with_file.yaml"));
  const auto m = mapped(c);
  EXPECT_EQ(m.at("parallel.zero_stage"), "3");
  EXPECT_EQ(m.at("mixed_precision.param_dtype"), "bf16");
  EXPECT_EQ(m.at("debug.check_desync"), "true");
  EXPECT_EQ(m.at("run.save_16bit_model"), "true");
  EXPECT_EQ(find(c, "parallel.zero_stage")->source,
            std::string(ZS_SOURCE_DIR) + "/tests/train/foreign/ds_zero3.json: zero_optimization.stage");
  const std::string msg = error_of([] { read_accelerate_config(file("accelerate_disagrees.yaml")); });
  EXPECT_NE(msg.find("mixed_precision.param_dtype: "), std::string::npos) << msg;
  EXPECT_NE(msg.find("ds_zero2.json: bf16.enabled gives bf16 but "), std::string::npos) << msg;
  EXPECT_NE(msg.find("accelerate_disagrees.yaml: mixed_precision gives fp32"), std::string::npos) << msg;
}

TEST(ForeignConfig, AccelerateRefusals) {
  auto yaml_error = [](const std::string& text) {
    char tmpl[] = "/tmp/zs-acc-XXXXXX";
    const int fd = mkstemp(tmpl);
    close(fd);
    std::ofstream(tmpl) << text;
    std::string msg = error_of([&] { read_accelerate_config(tmpl); });
    fs::remove(tmpl);
    return std::regex_replace(msg, std::regex(tmpl), "acc.yaml");
  };
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"mixed_precision: fp16\n", "acc.yaml: mixed_precision = fp16: zeroshard trains in fp32 or bf16"},
      {"distributed_type: FSDP\nfsdp_config:\n  fsdp_sharding_strategy: FULL_SHARD\n", "acc.yaml: distributed_type = FSDP"},
      {"num_machines: 2\n", "acc.yaml: num_machines = 2: start ranks on several hosts with srun"},
      {"main_process_port: 29500\n", "acc.yaml: main_process_port = 29500: set MASTER_PORT"},
      {"distributed_type: DEEPSPEED\ndeepspeed_config:\n  zero_stage: 3\n  offload_param_device: nvme\n",
       "acc.yaml: deepspeed_config.offload_param_device = nvme"},
      {"distributed_type: DEEPSPEED\ndeepspeed_config:\n  zero_stage: five\n", "deepspeed_config.zero_stage = five"},
      {"distributed_type: DEEPSPEED\ndeepspeed_config:\n  deepspeed_config_file: nowhere.json\n",
       "acc.yaml: deepspeed_config.deepspeed_config_file = nowhere.json: no such file"},
      {"distributed_type: MULTI_GPU\ndeepspeed_config:\n  zero_stage: 2\n", "given, but distributed_type is MULTI_GPU"},
      {"mixed_precision: bf16\nmixed_precision: 'no'\n", "acc.yaml: mixed_precision = (given twice)"},
      {"dynamo_config:\n  dynamo_backend: INDUCTOR\n", "acc.yaml: dynamo_config = (structure): not an accelerate setting"},
      {"enable_cpu_affinity: true\n", "acc.yaml: enable_cpu_affinity = true"},
  };
  for (const auto& [text, fragment] : cases) {
    const std::string msg = yaml_error(text);
    EXPECT_NE(msg.find(fragment), std::string::npos) << text << "\n  -> " << msg;
  }
  EXPECT_EQ(yaml_error("distributed_type: MULTI_GPU\nnum_processes: 4\n"), "(no error)");
}

TEST(ForeignConfig, MegatronFlags) {
  ForeignConfig c = megatron_flags({{"--use_megatron_fsdp", "true"},
                                    {"--data_parallel_sharding_strategy", "optim_grads_params"},
                                    {"--micro_batch_size", "2"},
                                    {"--global-batch-size", "16"}});
  const std::map<std::string, std::string> expected = {{"parallel.strategy", "optim_grads_params"},
                                                       {"train.micro_batch_size", "2"},
                                                       {"train.global_batch_size", "16"}};
  EXPECT_EQ(mapped(c), expected);
  EXPECT_EQ(find(c, "train.global_batch_size")->source, "command line: --global-batch-size");
  EXPECT_EQ(mapped(megatron_flags({{"use-megatron-fsdp", "true"}})).at("parallel.strategy"), "no_shard");
  EXPECT_EQ(mapped(megatron_flags({{"--use_distributed_optimizer", "true"}})).at("parallel.strategy"), "optim");
  EXPECT_EQ(mapped(megatron_flags({{"--use_megatron_fsdp", "true"}, {"--use_distributed_optimizer", "true"},
                                   {"--data_parallel_sharding_strategy", "optim_grads"}}))
                .at("parallel.strategy"),
            "optim_grads");
  EXPECT_NE(error_of([] { megatron_flags({{"--use_megatron_fsdp", "false"}, {"--data_parallel_sharding_strategy", "optim"}}); })
                .find("applies to Megatron-FSDP"),
            std::string::npos);
  EXPECT_NE(error_of([] { megatron_flags({{"--use_distributed_optimizer", "true"}, {"--data_parallel_sharding_strategy", "optim_grads"}}); })
                .find("parallel.strategy: command line: --data_parallel_sharding_strategy gives optim_grads but command "
                      "line: --use_distributed_optimizer gives optim"),
            std::string::npos);
  EXPECT_NE(error_of([] { megatron_flags({{"--data_parallel_sharding_strategy", "full_shard"}}); }).find("expected no_shard"),
            std::string::npos);
  EXPECT_NE(error_of([] { megatron_flags({{"--tensor_model_parallel_size", "2"}}); })
                .find("--tensor_model_parallel_size = 2: not a Megatron / ms-swift flag zeroshard maps (--use_megatron_fsdp"),
            std::string::npos);
  EXPECT_NE(error_of([] { megatron_flags({{"--micro_batch_size", "0"}}); }).find("expected a positive integer"),
            std::string::npos);
}

TEST(ForeignConfig, MergedSourcesMustAgree) {
  ForeignConfig a = read_accelerate_config(file("accelerate_zero2.yaml"));  // zero stage 2
  const std::string msg = error_of([&] { merge(a, read_deepspeed_config(file("ds_zero3.json"))); });
  EXPECT_NE(msg.find("parallel.zero_stage: " + file("accelerate_zero2.yaml") + ": deepspeed_config.zero_stage gives 2 but " +
                     file("ds_zero3.json") + ": zero_optimization.stage gives 3"),
            std::string::npos)
      << msg;
  ForeignConfig b = read_deepspeed_config(file("ds_zero2.json"));
  merge(b, megatron_flags({{"--micro_batch_size", "4"}}));  // agrees: both sources listed
  EXPECT_EQ(find(b, "train.micro_batch_size")->source,
            file("ds_zero2.json") + ": train_micro_batch_size_per_gpu; command line: --micro_batch_size");
}

}  // namespace
}  // namespace zeroshard::train
