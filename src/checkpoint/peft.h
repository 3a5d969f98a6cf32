// LoRA adapters in the format PEFT writes and loads (`PeftModel.save_pretrained` /
// `from_pretrained`), so adapters trained here go to PEFT / transformers / diffusers and back:
//
//   <dir>/adapter_model.safetensors  base_model.model.<module>.lora_A.weight  [r, in]
//                                    base_model.model.<module>.lora_B.weight  [out, r]
//   <dir>/adapter_config.json        {"peft_type": "LORA", "r", "lora_alpha", "target_modules", ...}
//
// <module> is the adapted Linear's qualified name in the model the adapter belongs to: our
// modules carry the released parameter names, so it is our name less the series' adapter root
// (models::Series::adapter_root: "dit." for the diffusion pipelines, whose adapters belong to
// the DiT; empty for the language models). Our adapter parameters are <module>.lora_a /
// <module>.lora_b with the same shapes, and the same scale alpha / r applied to x A^T B^T (PEFT
// without use_rslora). PEFT's adapter name ("default") never appears in the file.
#pragma once

#include "zeroshard/param_source.h"

#include <ATen/ATen.h>

#include <memory>
#include <string>
#include <vector>

namespace zeroshard::ckpt {

inline const char* kPeftWeights = "adapter_model.safetensors";
inline const char* kPeftConfig = "adapter_config.json";

// What zeroshard honours of an adapter_config.json.
struct PeftAdapterConfig {
  int64_t r = 0;
  double lora_alpha = 0;
  std::vector<std::string> target_modules;  // last name components, as lora.targets
};

// "layers.0.attention.wq.lora_a" (adapter root "") -> "base_model.model.layers.0.attention.wq.lora_A.weight";
// "dit.blocks.0.qkv.lora_b" (root "dit.") -> "base_model.model.blocks.0.qkv.lora_B.weight".
// Throws naming the parameter when it is no adapter or lies outside the root.
std::string peft_key(const std::string& our_name, const std::string& adapter_root);

// Reads and checks <dir>/adapter_config.json (dir may also be the adapter_model.safetensors
// path): a LoRA adapter with settings zeroshard reproduces exactly. Refused, naming the key and
// why: another peft_type, use_rslora / use_dora / fan_in_fan_out true, bias other than "none",
// lora_dropout > 0 (zeroshard has no adapter dropout), modules_to_save, rank_pattern /
// alpha_pattern, layers_to_transform, a target_modules regex string.
PeftAdapterConfig read_peft_config(const std::string& path);

// The adapter folder of `path` (itself, or the folder of its adapter_model.safetensors).
std::string peft_dir(const std::string& path);

// Our LoRA parameters from a PEFT adapter (lora.init_from). `rank`, `alpha`, `targets` are the
// run's lora.* keys: they must equal the adapter's r, lora_alpha, target_modules (else throws
// naming both). check() demands exactly the model's adapters with their shapes, and no other
// tensor in the file; the other parameters are not this source's (combine_param_sources).
std::shared_ptr<ParamSource> peft_adapter_source(const std::string& path, const std::string& adapter_root,
                                                 int64_t rank, double alpha, const std::vector<std::string>& targets);

// A checkpoint's adapters as a PEFT adapter folder out_dir (created): the trainable tensors
// named *.lora_a / *.lora_b, in `dtype` (kFloat or kBFloat16), and adapter_config.json from the
// checkpoint's lora.* config. Returns the two files written. Throws when the checkpoint has no
// adapters.
std::vector<std::string> export_peft_adapter(const std::string& checkpoint_dir, const std::string& out_dir,
                                             const std::string& adapter_root, at::ScalarType dtype);

}  // namespace zeroshard::ckpt
