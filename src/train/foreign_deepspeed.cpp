// DeepSpeed JSON -> zeroshard settings (see docs/foreign_configs.md for the table).
#include "train/foreign_detail.h"

#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <stdexcept>

namespace zeroshard::train::foreign {
namespace {

using json = nlohmann::json;

bool is_auto(const json& v) { return v.is_string() && v.get<std::string>() == "auto"; }

std::string shown(const json& v) { return v.dump(); }

int64_t as_int(const json& v, const std::string& key, Mapper& m, int64_t lo, int64_t hi) {
  double x = 0;
  if (v.is_number_integer() || v.is_number_unsigned()) x = static_cast<double>(v.get<int64_t>());
  else if (v.is_number_float()) x = v.get<double>();
  else m.refuse(key, shown(v), "expected an integer or \"auto\"");
  if (x != std::floor(x)) m.refuse(key, shown(v), "expected a whole number");
  if (x < static_cast<double>(lo) || x > static_cast<double>(hi)) {
    m.refuse(key, shown(v), "out of range [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  }
  return static_cast<int64_t>(x);
}

double as_float(const json& v, const std::string& key, Mapper& m) {
  if (!v.is_number()) m.refuse(key, shown(v), "expected a number or \"auto\"");
  return v.get<double>();
}

bool as_bool(const json& v, const std::string& key, Mapper& m) {
  if (!v.is_boolean()) m.refuse(key, shown(v), "expected true, false or \"auto\"");
  return v.get<bool>();
}

// A switch whose one value is what zeroshard always does: honoured at that value, refused at
// the other.
void switch_key(const json& v, const std::string& key, Mapper& m, bool zeroshard_value, const std::string& note,
                const std::string& why_not) {
  if (is_auto(v)) return m.honoured(key, "\"auto\": " + note);
  if (as_bool(v, key, m) != zeroshard_value) m.refuse(key, shown(v), why_not);
  m.honoured(key, note);
}

// A feature zeroshard does not have: its "off" value is honoured, anything else refused.
void absent_feature(const json& v, const std::string& key, Mapper& m, const json& off, const std::string& why) {
  if (is_auto(v) || v == off) return m.honoured(key, "off, as in zeroshard");
  m.refuse(key, shown(v), why);
}

void no_knob(const json& v, const std::string& key, Mapper& m, const std::string& why) {
  if (is_auto(v)) return m.honoured(key, "\"auto\": zeroshard decides");
  m.refuse(key, shown(v), why);
}

void for_each(const json& obj, const std::string& prefix, Mapper& m,
              const std::map<std::string, std::function<void(const json&, const std::string&)>>& handlers,
              const std::string& unknown_why) {
  if (!obj.is_object()) m.refuse(prefix, shown(obj), "expected an object");
  for (const auto& [k, v] : obj.items()) {
    const std::string key = prefix.empty() ? k : prefix + "." + k;
    auto it = handlers.find(k);
    if (it == handlers.end()) m.refuse(key, shown(v), unknown_why);
    it->second(v, key);
  }
}

// offload_optimizer / offload_param: only device "none" (the other fields then do nothing).
void offload_block(const json& v, const std::string& key, Mapper& m) {
  if (!v.is_object()) m.refuse(key, shown(v), "expected an object");
  const json device = v.contains("device") ? v["device"] : json("none");
  if (!(device == "none" || is_auto(device) || device.is_null())) {
    m.refuse(key + ".device", shown(device),
             "zeroshard keeps each rank's parameters, gradients and optimizer state with its shard; it does not "
             "offload them to cpu or nvme (use a higher parallel.zero_stage or more ranks)");
  }
  for (const auto& [k, sub] : v.items()) {
    m.honoured(key + "." + k, k == "device" ? "none, as in zeroshard" : "inert: no offload");
  }
}

void map_zero(const json& z, const std::string& prefix, Mapper& m, int reduce_bytes_per_element,
              const std::string& reduce_bytes_why) {
  using H = std::function<void(const json&, const std::string&)>;
  const std::map<std::string, H> handlers = {
      {"stage",
       [&](const json& v, const std::string& k) {
         if (is_auto(v)) return m.automatic(k, "parallel.zero_stage");
         m.set(k, "parallel.zero_stage", std::to_string(as_int(v, k, m, 0, 3)));
       }},
      {"offload_optimizer", [&](const json& v, const std::string& k) { offload_block(v, k, m); }},
      {"offload_param", [&](const json& v, const std::string& k) { offload_block(v, k, m); }},
      {"cpu_offload",
       [&](const json& v, const std::string& k) {
         absent_feature(v, k, m, false, "zeroshard does not offload the optimizer state to the CPU");
       }},
      {"cpu_offload_params",
       [&](const json& v, const std::string& k) {
         absent_feature(v, k, m, false, "zeroshard does not offload parameters");
       }},
      {"cpu_offload_use_pin_memory", [&](const json&, const std::string& k) { m.honoured(k, "inert: no offload"); }},
      {"overlap_comm",
       [&](const json& v, const std::string& k) {
         switch_key(v, k, m, true, "zeroshard always overlaps gradient reductions with the backward",
                    "zeroshard always overlaps gradient reductions with the backward (results are the same either "
                    "way); remove the key");
       }},
      {"contiguous_gradients",
       [&](const json& v, const std::string& k) {
         switch_key(v, k, m, true, "zeroshard's gradients are always one flat buffer per unit",
                    "zeroshard's gradients are always contiguous flat buffers; remove the key");
       }},
      {"reduce_scatter",
       [&](const json& v, const std::string& k) {
         switch_key(v, k, m, true, "zeroshard reduce-scatters gradients",
                    "zeroshard always reduce-scatters gradients (not all-reduce); remove the key");
       }},
      {"allgather_partitions",
       [&](const json& v, const std::string& k) {
         switch_key(v, k, m, true, "zeroshard all-gathers the updated partitions",
                    "zeroshard always all-gathers updated partitions; remove the key");
       }},
      {"round_robin_gradients",
       [&](const json& v, const std::string& k) {
         absent_feature(v, k, m, false, "zeroshard has no round-robin gradient partitioning");
       }},
      {"elastic_checkpoint",
       [&](const json& v, const std::string& k) {
         absent_feature(v, k, m, false, "zeroshard checkpoints are resharded on load anyway; remove the key");
       }},
      {"load_from_fp32_weights",
       [&](const json& v, const std::string& k) {
         switch_key(v, k, m, true, "zeroshard resumes from the fp32 masters in its checkpoints",
                    "zeroshard always resumes from the fp32 masters; remove the key");
       }},
      {"zero_quantized_weights",
       [&](const json& v, const std::string& k) { absent_feature(v, k, m, false, "ZeRO++ weight quantization is not implemented"); }},
      {"zero_quantized_gradients",
       [&](const json& v, const std::string& k) { absent_feature(v, k, m, false, "ZeRO++ gradient quantization is not implemented"); }},
      {"zero_hpz_partition_size",
       [&](const json& v, const std::string& k) {
         absent_feature(v, k, m, 1, "ZeRO++ hierarchical partitioning is not mapped; zeroshard's counterpart is "
                                    "parallel.hybrid with parallel.shard_group_size");
       }},
      {"mics_shard_size",
       [&](const json& v, const std::string& k) {
         absent_feature(v, k, m, -1, "MiCS is not mapped; zeroshard's counterpart is parallel.hybrid with "
                                     "parallel.shard_group_size");
       }},
      {"reduce_bucket_size",
       [&, reduce_bytes_per_element, reduce_bytes_why](const json& v, const std::string& k) {
         if (is_auto(v)) return m.automatic(k, "parallel.reduce_bucket_bytes");
         const int64_t elements = as_int(v, k, m, 0, std::numeric_limits<int64_t>::max() / 8);
         const int64_t bytes = elements * reduce_bytes_per_element;
         if (bytes > std::numeric_limits<int32_t>::max()) {
           m.refuse(k, shown(v),
                    "DeepSpeed counts elements: that is " + std::to_string(bytes) + " bytes, past the largest "
                    "parallel.reduce_bucket_bytes (" + std::to_string(std::numeric_limits<int32_t>::max()) + ")");
         }
         m.set(k, "parallel.reduce_bucket_bytes", std::to_string(bytes),
               "DeepSpeed counts elements: " + std::to_string(elements) + " x " + std::to_string(reduce_bytes_per_element) +
                   " bytes (" + reduce_bytes_why + ")");
       }},
      {"allgather_bucket_size",
       [&](const json& v, const std::string& k) {
         no_knob(v, k, m, "zeroshard all-gathers one buffer per unit and has no all-gather bucket; remove the key");
       }},
      {"stage3_prefetch_bucket_size",
       [&](const json& v, const std::string& k) {
         if (is_auto(v)) return m.automatic(k, "parallel.max_live_units");
         if (as_int(v, k, m, 0, std::numeric_limits<int64_t>::max()) == 0) {
           return m.set(k, "parallel.prefetch", "false", "a prefetch bucket of 0 turns prefetching off");
         }
         m.refuse(k, shown(v),
                  "zeroshard bounds prefetching in whole units (parallel.max_live_units, gathered units at once), not in "
                  "elements, and units differ in size; set it to \"auto\" or 0 (no prefetch) and use "
                  "parallel.max_live_units");
       }},
      {"stage3_param_persistence_threshold",
       [&](const json& v, const std::string& k) {
         if (is_auto(v)) return m.automatic(k, "parallel.persistence_threshold");
         m.set(k, "parallel.persistence_threshold", std::to_string(as_int(v, k, m, 0, std::numeric_limits<int32_t>::max())),
               "elements, as in DeepSpeed, but per unit's flat buffer rather than per parameter");
       }},
      {"stage3_gather_16bit_weights_on_model_save",
       [&](const json& v, const std::string& k) {
         if (is_auto(v)) return m.automatic(k, "run.save_16bit_model");
         m.set(k, "run.save_16bit_model", as_bool(v, k, m) ? "true" : "false");
       }},
      {"stage3_gather_fp16_weights_on_model_save",
       [&](const json& v, const std::string& k) {
         if (is_auto(v)) return m.automatic(k, "run.save_16bit_model");
         m.set(k, "run.save_16bit_model", as_bool(v, k, m) ? "true" : "false", "the old name of stage3_gather_16bit_...");
       }},
      {"stage3_max_live_parameters",
       [&](const json& v, const std::string& k) {
         no_knob(v, k, m, "zeroshard bounds gathered parameters in units (parallel.max_live_units), not elements; "
                          "remove the key and set parallel.max_live_units");
       }},
      {"stage3_max_reuse_distance",
       [&](const json& v, const std::string& k) {
         no_knob(v, k, m, "zeroshard frees a gathered unit after its use and has no reuse distance; remove the key");
       }},
      {"sub_group_size",
       [&](const json& v, const std::string& k) {
         no_knob(v, k, m, "zeroshard's optimizer steps one flat buffer at a time and has no sub-groups; remove the key");
       }},
      {"ignore_unused_parameters",
       [&](const json& v, const std::string& k) {
         no_knob(v, k, m, "not mapped: zeroshard has no switch for unused parameters; remove the key");
       }},
  };
  for_each(z, prefix, m, handlers, "not a ZeRO setting zeroshard maps (see docs/foreign_configs.md)");
}

void map_optimizer(const json& o, const std::string& prefix, Mapper& m) {
  if (!o.is_object()) m.refuse(prefix, shown(o), "expected an object");
  const std::string type = o.value("type", std::string(""));
  if (type != "AdamW" && type != "Adam" && type != "adamw" && type != "adam") {
    m.refuse(prefix + ".type", shown(o.value("type", json())),
             "zeroshard trains with AdamW only (train.lr, train.beta1/beta2, train.eps, train.weight_decay)");
  }
  m.honoured(prefix + ".type", "zeroshard's optimizer is AdamW (decoupled weight decay)");
  for (const auto& [k, v] : o.items()) {
    if (k == "type") continue;
    if (k != "params") m.refuse(prefix + "." + k, shown(v), "not an optimizer setting zeroshard maps");
  }
  if (!o.contains("params")) return;
  const json& p = o["params"];
  if (!p.is_object()) m.refuse(prefix + ".params", shown(p), "expected an object");
  for (const auto& [k, v] : p.items()) {
    const std::string key = prefix + ".params." + k;
    auto scalar = [&](const std::string& zs_key) {
      if (is_auto(v)) return m.automatic(key, zs_key);
      m.set(key, zs_key, number_text(as_float(v, key, m)));
    };
    if (k == "lr") scalar("train.lr");
    else if (k == "eps") scalar("train.eps");
    else if (k == "weight_decay") scalar("train.weight_decay");
    else if (k == "betas") {
      if (is_auto(v)) {
        m.automatic(key, "train.beta1");
        m.automatic(key, "train.beta2");
      } else {
        if (!v.is_array() || v.size() != 2) m.refuse(key, shown(v), "expected [beta1, beta2]");
        m.set(key, "train.beta1", number_text(as_float(v[0], key, m)));
        m.set(key, "train.beta2", number_text(as_float(v[1], key, m)));
      }
    } else if (k == "adam_w_mode") {
      switch_key(v, key, m, true, "decoupled weight decay, as zeroshard's AdamW",
                 "adam_w_mode false is Adam with L2 regularisation; zeroshard implements AdamW only");
    } else if (k == "torch_adam") {
      m.honoured(key, "an implementation choice inside DeepSpeed; the update is the same");
    } else if (k == "bias_correction") {
      switch_key(v, key, m, true, "zeroshard's AdamW corrects the moment bias",
                 "zeroshard's AdamW always corrects the moment bias");
    } else if (k == "amsgrad") {
      absent_feature(v, key, m, false, "zeroshard's AdamW has no AMSGrad");
    } else {
      m.refuse(key, shown(v), "not an AdamW parameter zeroshard maps");
    }
  }
}

// A block whose "enabled": false (or "auto") turns it off; the rest of it is then inert.
bool disabled_block(const json& v, const std::string& key, Mapper& m) {
  if (!v.is_object()) m.refuse(key, shown(v), "expected an object");
  const json enabled = v.value("enabled", json(false));
  if (is_auto(enabled) || enabled == false) {
    const std::string note = is_auto(enabled) ? "\"auto\" resolves to off: zeroshard has no such mode" : "inert: the block is off";
    for (const auto& [k, sub] : v.items()) m.honoured(key + "." + k, note);
    return true;
  }
  return false;
}

}  // namespace

void map_deepspeed(const json& ds, Mapper& m) {
  if (!ds.is_object()) m.refuse("(top level)", shown(ds).substr(0, 40), "a DeepSpeed config is a JSON object");
  // reduce_bucket_size counts elements of the reduced dtype.
  int reduce_bytes = 4;
  std::string reduce_why = "fp32 gradient reductions, zeroshard's default";
  if (ds.contains("communication_data_type") && ds["communication_data_type"] == "bf16") {
    reduce_bytes = 2;
    reduce_why = "bf16 gradient reductions, communication_data_type";
  }
  using H = std::function<void(const json&, const std::string&)>;
  auto int_key = [&](const std::string& zs_key, int64_t lo, int64_t hi) -> H {
    return [&m, zs_key, lo, hi](const json& v, const std::string& k) {
      if (is_auto(v)) return m.automatic(k, zs_key);
      m.set(k, zs_key, std::to_string(as_int(v, k, m, lo, hi)));
    };
  };
  const int64_t big = std::numeric_limits<int32_t>::max();
  const std::map<std::string, H> handlers = {
      {"train_micro_batch_size_per_gpu", int_key("train.micro_batch_size", 1, 1 << 20)},
      {"gradient_accumulation_steps", int_key("train.grad_accum", 1, 1 << 20)},
      {"train_batch_size", int_key("train.global_batch_size", 1, 1 << 30)},
      {"steps_per_print", int_key("train.log_every", 1, big)},
      {"gradient_clipping",
       [&](const json& v, const std::string& k) {
         if (is_auto(v)) return m.automatic(k, "train.clip_grad_norm");
         const double c = as_float(v, k, m);
         if (c < 0) m.refuse(k, shown(v), "a clipping norm is >= 0 (0: no clipping)");
         m.set(k, "train.clip_grad_norm", number_text(c), c == 0 ? "0: no clipping, as in DeepSpeed" : "");
       }},
      {"bf16",
       [&](const json& v, const std::string& k) {
         if (!v.is_object()) m.refuse(k, shown(v), "expected an object");
         for (const auto& [sub, sv] : v.items()) {
           if (sub != "enabled") m.refuse(k + "." + sub, shown(sv), "not a bf16 setting zeroshard maps");
         }
         const json e = v.value("enabled", json(false));
         if (is_auto(e)) return m.automatic(k + ".enabled", "mixed_precision.param_dtype");
         m.set(k + ".enabled", "mixed_precision.param_dtype", as_bool(e, k + ".enabled", m) ? "bf16" : "fp32",
               "bf16 gathers and compute with fp32 masters; gradients are reduced in mixed_precision.reduce_dtype "
               "(fp32 unless communication_data_type says bf16)");
       }},
      {"fp16",
       [&](const json& v, const std::string& k) {
         if (!disabled_block(v, k, m)) {
           m.refuse(k + ".enabled", shown(v["enabled"]),
                    "zeroshard has no fp16 training with loss scaling; use \"bf16\": {\"enabled\": true}");
         }
       }},
      {"amp",
       [&](const json& v, const std::string& k) {
         if (!disabled_block(v, k, m)) m.refuse(k + ".enabled", shown(v["enabled"]), "NVIDIA apex AMP is not supported");
       }},
      {"communication_data_type",
       [&](const json& v, const std::string& k) {
         if (is_auto(v)) return m.automatic(k, "mixed_precision.reduce_dtype");
         if (v == "fp32" || v == "bf16") return m.set(k, "mixed_precision.reduce_dtype", v.get<std::string>());
         m.refuse(k, shown(v), "zeroshard reduces gradients in fp32 or bf16 (mixed_precision.reduce_dtype)");
       }},
      {"zero_optimization",
       [&](const json& v, const std::string& k) { map_zero(v, k, m, reduce_bytes, reduce_why); }},
      {"optimizer", [&](const json& v, const std::string& k) { map_optimizer(v, k, m); }},
      {"scheduler",
       [&](const json& v, const std::string& k) {
         m.refuse(k, shown(v.value("type", json("?"))),
                  "zeroshard's schedule is a linear warmup then cosine decay to train.min_lr (train.warmup_steps, "
                  "train.lr, train.min_lr, train.steps), which no DeepSpeed scheduler block reproduces exactly; "
                  "remove the block and set those keys");
       }},
      {"zero_allow_untested_optimizer",
       [&](const json&, const std::string& k) { m.honoured(k, "a DeepSpeed safety switch; zeroshard's optimizer is its own"); }},
      {"wall_clock_breakdown",
       [&](const json&, const std::string& k) {
         m.honoured(k, "logging only: zeroshard writes each rank's time split to metrics.jsonl anyway");
       }},
      {"prescale_gradients",
       [&](const json& v, const std::string& k) {
         absent_feature(v, k, m, false, "zeroshard divides the summed gradients once, after the reduction");
       }},
      {"gradient_predivide_factor",
       [&](const json& v, const std::string& k) {
         absent_feature(v, k, m, 1.0, "zeroshard divides the summed gradients once, after the reduction");
       }},
      {"tensorboard",
       [&](const json& v, const std::string& k) {
         if (!v.is_object()) m.refuse(k, shown(v), "expected an object");
         for (const auto& [sub, sv] : v.items()) {
           if (sub == "enabled") {
             m.set(k + ".enabled", "run.tensorboard", as_bool(sv, k + ".enabled", m) ? "true" : "false");
           } else if ((sub == "output_path" || sub == "job_name") && (sv == "" || sv.is_null())) {
             m.honoured(k + "." + sub, "empty");
           } else {
             m.refuse(k + "." + sub, shown(sv), "zeroshard writes its event files into run.dir");
           }
         }
       }},
      {"activation_checkpointing",
       [&](const json& v, const std::string& k) {
         if (!v.is_object()) m.refuse(k, shown(v), "expected an object");
         for (const auto& [sub, sv] : v.items()) {
           if (sv == false || sv.is_null()) {
             m.honoured(k + "." + sub, "off; zeroshard's checkpointing is train.activation_checkpointing");
           } else {
             m.refuse(k + "." + sub, shown(sv),
                      "configures DeepSpeed's checkpointing API (partitioned/CPU activations), which zeroshard does "
                      "not have; use train.activation_checkpointing: true");
           }
         }
       }},
      {"zero3_init_flag",
       [&](const json& v, const std::string& k) {
         m.refuse(k, shown(v), "an accelerate key, which DeepSpeed ignores in its own file: move it to the accelerate "
                               "YAML's deepspeed_config, or remove it");
       }},
      {"zero3_save_16bit_model",
       [&](const json& v, const std::string& k) {
         m.refuse(k, shown(v), "an accelerate key, which DeepSpeed ignores in its own file: use "
                               "zero_optimization.stage3_gather_16bit_weights_on_model_save");
       }},
  };
  for_each(ds, "", m, handlers,
           "not a DeepSpeed setting zeroshard maps or honours (see docs/foreign_configs.md); remove it");
}

}  // namespace zeroshard::train::foreign
