// `zeroshard export` and `zeroshard inspect`: a checkpoint's tensors as safetensors (or its LoRA
// adapters as a PEFT adapter, or its base with the adapters merged in), and what a checkpoint
// holds (no ranks: streamed from the shard files).
#include "checkpoint/checkpoint.h"
#include "checkpoint/peft.h"
#include "cli/command.h"
#include "models/series.h"
#include "sample/sample.h"
#include "train/config.h"

#include <cstdio>
#include <filesystem>

namespace zeroshard::cli {

Command add_export(CLI::App& app) {
  struct Args {
    std::string from, out, dtype = "fp32", state = "param", format = "safetensors";
    double max_file_mb = 0;
    bool trainable_only = false, merge_lora = false, peft = false;
  };
  auto a = std::make_shared<Args>();
  auto* sub = app.add_subcommand("export",
                                 "Write a checkpoint's weights (or AdamW moments) as safetensors: one file, or several "
                                 "plus an index (streamed, no ranks); or a LoRA run's adapters as a PEFT adapter");
  sub->add_option("checkpoint", a->from, "A checkpoint folder, checkpoints folder or run folder")->required();
  sub->add_option("output", a->out, "The .safetensors file to write (--format hf, --peft: the folder)")->required();
  sub->add_option("--format", a->format,
                  "safetensors (our names, one file or --max-file-mb parts) or hf (a Hugging Face model folder: "
                  "config.json, sharded safetensors + index, generation_config.json, tokenizer files)")
      ->check(CLI::IsMember({"safetensors", "hf"}));
  sub->add_option("--dtype", a->dtype, "fp32 or bf16")->check(CLI::IsMember({"fp32", "bf16"}));
  sub->add_option("--max-file-mb", a->max_file_mb,
                  "Split into files of at most this many MiB plus OUTPUT.index.json (0: one file)")
      ->check(CLI::NonNegativeNumber);
  sub->add_flag("--trainable-only", a->trainable_only,
                "Only the trained tensors: a LoRA run's adapters, without the frozen base");
  sub->add_flag("--merge-lora", a->merge_lora,
                "A LoRA run's base with the adapters folded in (W + alpha/r * B A), without the adapter tensors");
  sub->add_flag("--peft", a->peft,
                "A LoRA run's adapters as PEFT writes them: OUTPUT/adapter_model.safetensors "
                "(base_model.model.<module>.lora_A/B.weight) and OUTPUT/adapter_config.json");
  sub->add_option("--state", a->state, "param (the weights), exp_avg or exp_avg_sq (AdamW moments)")
      ->check(CLI::IsMember({"param", "exp_avg", "exp_avg_sq"}));
  return {sub, [a] {
            const std::string dir = ckpt::resolve_checkpoint(a->from);
            if (a->format == "hf") {
              if (a->state != "param" || a->trainable_only || a->peft || a->merge_lora) {
                throw std::invalid_argument("export --format hf writes the model's weights (a LoRA run's adapters merged "
                                            "in); --state, --trainable-only, --peft and --merge-lora apply to --format safetensors");
              }
              ckpt::Checkpoint ck(dir);
              const train::TrainConfig cfg = sample::model_config_of(ck);
              const models::Series& series = models::find_series(cfg.series);
              if (!series.export_hf) {
                throw std::invalid_argument(dir + ": model.series " + cfg.series + " has no Hugging Face folder form");
              }
              models::HfExportOptions o;
              o.out_dir = a->out;
              o.dtype = a->dtype;
              o.max_shard_bytes = static_cast<uint64_t>(a->max_file_mb * 1024 * 1024);
              const auto files = series.export_hf(ck, cfg, o);
              std::printf("exported %s as a Hugging Face folder (%s):\n", dir.c_str(), a->dtype.c_str());
              for (const auto& f : files) std::printf("  %s\n", f.c_str());
              return 0;
            }
            const at::ScalarType dtype = a->dtype == "bf16" ? at::kBFloat16 : at::kFloat;
            std::vector<std::string> files;
            if (a->peft) {
              if (a->merge_lora || a->trainable_only || a->state != "param" || a->max_file_mb > 0) {
                throw std::invalid_argument("export --peft writes the adapters alone; drop --merge-lora, "
                                            "--trainable-only, --state and --max-file-mb");
              }
              const ckpt::Checkpoint ck(dir);
              const nlohmann::json& model = ck.config().contains("model") ? ck.config()["model"] : nlohmann::json();
              const std::string series = model.is_object() ? model.value("series", std::string()) : std::string();
              const std::string root = series.empty() ? std::string() : models::find_series(series).adapter_root;
              files = ckpt::export_peft_adapter(dir, a->out, root, dtype);
            } else {
              // OUT's folder is made as needed (out/model.safetensors, as the README shows it).
              const std::filesystem::path parent = std::filesystem::path(a->out).parent_path();
              if (!parent.empty()) std::filesystem::create_directories(parent);
              files = ckpt::export_safetensors(dir, a->out, dtype, a->state,
                                               static_cast<uint64_t>(a->max_file_mb * 1024 * 1024), a->trainable_only,
                                               a->merge_lora);
            }
            std::printf("exported %s (%s, %s%s):\n", dir.c_str(), a->peft ? "PEFT adapter" : a->state.c_str(),
                        a->dtype.c_str(), a->merge_lora ? ", LoRA merged" : "");
            for (const auto& f : files) std::printf("  %s\n", f.c_str());
            return 0;
          }};
}

Command add_inspect(CLI::App& app) {
  struct Args {
    std::string path;
    bool brief = false;
  };
  auto a = std::make_shared<Args>();
  auto* sub = app.add_subcommand("inspect", "Print what a checkpoint holds and verify its files' sizes and CRC-32");
  sub->add_option("checkpoint", a->path, "A checkpoint folder, checkpoints folder or run folder")->required();
  sub->add_flag("--brief", a->brief, "Omit the tensor list");
  return {sub, [a] {
            std::string text;
            const bool ok = ckpt::describe(ckpt::resolve_checkpoint(a->path), &text, !a->brief);
            std::fputs(text.c_str(), stdout);
            return ok ? 0 : 2;
          }};
}

}  // namespace zeroshard::cli
