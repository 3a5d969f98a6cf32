// `zeroshard reference-check CASE_DIR`: checks one implementation against a reference case
// computed in float64 with the upstream code (../shared/fixtures/README.md has the format):
//   config.json          `_kind` (which forward), `_tolerance` {output, grad}, the upstream config
//   model.safetensors    the weights under the released key names
//   inputs.safetensors   the inputs (+ `probe` / `probe.<i>` / `probe_<name>` shaped like the outputs)
//   expected.safetensors outputs, `loss`, `grad.input.<name>`, `grad.param.<key>`
// A kind (registered by its series) builds the model from the case's config with the released
// parameter names and runs its forward; everything else — loading the weights strictly (every
// file key used, every parameter found), the loss sum(output * probe) when the kind returns none,
// backward, and the comparison max|diff| / max|ref| per tensor against `_tolerance` — is here,
// the same for every kind.
#pragma once

#include <torch/nn/module.h>

#include <nlohmann/json.hpp>

#include <functional>
#include <map>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

namespace zeroshard::reference {

struct ReferenceCase {
  std::string dir;
  nlohmann::json config;
  // inputs.safetensors, in the run's float dtype (fp32, or fp64 with --dtype fp64) for float
  // tensors (which require grad, probes excepted) and int64 for integer ones.
  std::map<std::string, at::Tensor> inputs;
  at::ScalarType dtype = at::kFloat;

  // The input `name`; throws naming the case and the inputs it has when absent.
  const at::Tensor& input(const std::string& name) const;
  // config[key]; throws naming the case and key when absent.
  const nlohmann::json& field(const std::string& key) const;
  // config[key] when present and not null, else `fallback`.
  template <class T>
  T get(const std::string& key, const T& fallback) const {
    return config.contains(key) && !config[key].is_null() ? config[key].get<T>() : fallback;
  }
};

struct ReferenceModel {
  std::shared_ptr<torch::nn::Module> module;
  // This module's parameter (or buffer) name -> its key in model.safetensors. Empty: identity
  // (the module is built with the released names).
  std::function<std::string(const std::string&)> released_name;
  // Runs the forward on the case's inputs. Returns the tensors to compare, by their names in
  // expected.safetensors ("output", "output.<i>", "logits", "aux_loss", ...). "loss" (the scalar
  // whose gradients the case holds) may be returned; if not, it is sum(out * probe) over every
  // returned name with a probe ("output" <-> "probe", "output.<i>" <-> "probe.<i>", "pooled" <->
  // "probe_pooled").
  std::function<std::map<std::string, at::Tensor>(ReferenceCase&)> run;
};

struct ReferenceKind {
  std::string kind;  // config.json `_kind`
  std::string what;  // one line for `--list`
  std::function<ReferenceModel(const ReferenceCase&)> build;
};

// Every kind the series register (src/models/series_list.cpp).
const std::vector<ReferenceKind>& reference_kinds();

struct CheckOptions {
  at::ScalarType dtype = at::kFloat;  // kDouble: run in float64 (a convention bug then stands out)
  bool verbose = true;                // one line per tensor
};

// Loads the case, runs it, prints the comparison to `out`; returns true when every tensor of
// expected.safetensors is within tolerance. Throws (naming the file, key or tensor) when the case
// cannot be run at all.
bool reference_check(const std::string& case_dir, std::ostream& out, const CheckOptions& options = {});

}  // namespace zeroshard::reference
