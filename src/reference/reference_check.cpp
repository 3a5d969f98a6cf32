#include "reference/reference_check.h"

#include "io/safetensors.h"
#include "util/text.h"

#include <torch/torch.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <stdexcept>

namespace zeroshard::reference {

namespace fs = std::filesystem;

const at::Tensor& ReferenceCase::input(const std::string& name) const {
  const auto it = inputs.find(name);
  if (it == inputs.end()) {
    std::string have;
    for (const auto& [k, v] : inputs) have += (have.empty() ? "" : ", ") + k;
    throw std::invalid_argument(dir + "/inputs.safetensors: no input '" + name + "' (it has: " + have + ")");
  }
  return it->second;
}

const nlohmann::json& ReferenceCase::field(const std::string& key) const {
  if (!config.contains(key)) throw std::invalid_argument(dir + "/config.json: no field '" + key + "'");
  return config[key];
}

namespace {

std::map<std::string, at::Tensor> read_all(const std::string& path) {
  const io::SafetensorsFile file(path);
  std::map<std::string, at::Tensor> out;
  for (const auto& e : file.entries()) out[e.name] = file.read(e.name);
  return out;
}

bool is_probe(const std::string& name) {
  return name == "probe" || util::starts_with(name, "probe.") || util::starts_with(name, "probe_");
}

// The probe paired with output `name`: "output" <-> "probe", "<x>.<i>" <-> "probe.<i>", any
// other output "<x>" <-> "probe_<x>" (CLIP's "pooled" <-> "probe_pooled").
std::string probe_for(const std::string& name) {
  if (name == "output") return "probe";
  const auto dot = name.rfind('.');
  return dot == std::string::npos ? "probe_" + name : "probe" + name.substr(dot);
}

// Copies every parameter and buffer from model.safetensors; a tensor sharing storage with an
// earlier one (tied weights) is filled through that one.
std::map<std::string, at::Tensor> load_weights(const ReferenceCase& c, const ReferenceModel& m) {
  const std::string path = c.dir + "/model.safetensors";
  const io::SafetensorsFile file(path);
  std::set<std::string> unused;
  for (const auto& e : file.entries()) unused.insert(e.name);
  std::map<std::string, at::Tensor> by_key;  // released key -> parameter (for grad.param.<key>)
  std::vector<std::string> missing;
  std::set<const void*> seen;
  torch::NoGradGuard no_grad;
  auto load = [&](const std::string& name, at::Tensor& t) {
    if (!t.defined()) return;
    const std::string key = m.released_name ? m.released_name(name) : name;
    const void* storage = t.storage().unsafeGetStorageImpl();
    if (!seen.insert(storage).second) {  // tied: loaded through its first name
      if (unused.erase(key) > 0) {
        // The file stores the tied copy too: it must agree with the first.
        const at::Tensor saved = file.read(key).to(t.scalar_type());
        if (!saved.equal(t)) throw std::invalid_argument(path + ": tied tensor '" + key + "' differs from its twin");
      }
      by_key.emplace(key, t);
      return;
    }
    const io::TensorEntry* e = file.find(key);
    if (e == nullptr) {
      missing.push_back(key + " (parameter " + name + ", shape " + io::shape_text(t.sizes().vec()) + ")");
      return;
    }
    if (e->shape != t.sizes().vec()) {
      throw std::invalid_argument(path + ": '" + key + "' has shape " + io::shape_text(e->shape) + ", the model's " +
                                  name + " has " + io::shape_text(t.sizes().vec()));
    }
    t.copy_(file.read(key));
    unused.erase(key);
    by_key.emplace(key, t);
  };
  for (auto& p : m.module->named_parameters(true)) load(p.key(), p.value());
  for (auto& b : m.module->named_buffers(true)) load(b.key(), b.value());
  if (!missing.empty() || !unused.empty()) {
    std::string msg = path + ": the weights do not match the model built from config.json";
    for (const auto& k : missing) msg += "\n  missing from the file: " + k;
    for (const auto& k : unused) msg += "\n  in the file, not in the model: " + k;
    throw std::invalid_argument(msg);
  }
  return by_key;
}

struct Row {
  std::string name, note;
  double max_ref = 0, max_diff = 0, rel = 0, tol = 0;
  bool ok = false;
};

}  // namespace

bool reference_check(const std::string& dir, std::ostream& out, const CheckOptions& options) {
  ReferenceCase c;
  c.dir = dir;
  c.dtype = options.dtype;
  {
    const std::string path = dir + "/config.json";
    std::ifstream in(path);
    if (!in) throw std::invalid_argument(path + ": cannot open (is " + dir + " a reference case folder?)");
    try {
      c.config = nlohmann::json::parse(in);
    } catch (const std::exception& e) {
      throw std::invalid_argument(path + ": not valid JSON: " + e.what());
    }
  }
  const std::string kind = c.config.value("_kind", std::string());
  const ReferenceKind* k = nullptr;
  for (const auto& r : reference_kinds()) {
    if (r.kind == kind) k = &r;
  }
  if (k == nullptr) {
    std::string known;
    for (const auto& r : reference_kinds()) known += (known.empty() ? "" : ", ") + r.kind;
    throw std::invalid_argument(dir + "/config.json: _kind '" + kind + "' is not a known reference kind (known: " +
                                known + ")");
  }
  if (!c.config.contains("_tolerance") || !c.config["_tolerance"].contains("output") ||
      !c.config["_tolerance"].contains("grad")) {
    throw std::invalid_argument(dir + "/config.json: no _tolerance {output, grad}");
  }
  const double tol_output = c.config["_tolerance"]["output"].get<double>();
  const double tol_grad = c.config["_tolerance"]["grad"].get<double>();

  for (auto& [name, t] : read_all(dir + "/inputs.safetensors")) {
    if (at::isFloatingType(t.scalar_type())) {
      t = t.to(c.dtype);
      if (!is_probe(name)) t.requires_grad_(true);
    }
    c.inputs[name] = t;
  }
  const auto expected = read_all(dir + "/expected.safetensors");

  ReferenceModel m = k->build(c);
  m.module->to(c.dtype);
  const auto params = load_weights(c, m);
  m.module->train(false);
  for (auto& p : m.module->parameters()) p.mutable_grad() = at::Tensor();

  std::map<std::string, at::Tensor> got = m.run(c);
  if (got.count("loss") == 0) {
    at::Tensor loss;
    for (const auto& [name, t] : got) {
      const std::string probe = probe_for(name);
      if (probe.empty() || c.inputs.count(probe) == 0) continue;
      const at::Tensor term = (t * c.inputs.at(probe)).sum();
      loss = loss.defined() ? loss + term : term;
    }
    if (!loss.defined()) throw std::invalid_argument(dir + ": the kind returned no loss and no output with a probe");
    got["loss"] = loss;
  }
  got.at("loss").backward();

  // What we computed, by expected's names.
  auto ours = [&](const std::string& name) -> at::Tensor {
    if (util::starts_with(name, "grad.input.")) {
      const std::string in = name.substr(11);
      const auto it = c.inputs.find(in);
      if (it == c.inputs.end()) return {};
      return it->second.grad().defined() ? it->second.grad() : at::zeros_like(it->second);
    }
    if (util::starts_with(name, "grad.param.")) {
      const auto it = params.find(name.substr(11));
      if (it == params.end()) return {};
      const at::Tensor& g = it->second.grad();  // sparse: a tied embedding's rows, its head unused
      return !g.defined() ? at::zeros_like(it->second) : g.is_sparse() ? g.to_dense() : g;
    }
    const auto it = got.find(name);
    return it == got.end() ? at::Tensor() : it->second.detach();
  };
  // Gradients that are zero in exact arithmetic: a case lists them (_fixture.zero_true_grad) when
  // its float64 reference left rounding noise (~1e-15) instead of an exact 0 there.
  std::set<std::string> zero_true;
  if (c.config.contains("_fixture") && c.config["_fixture"].contains("zero_true_grad")) {
    for (const auto& n : c.config["_fixture"]["zero_true_grad"]) {
      const std::string key = n.get<std::string>();
      zero_true.insert(util::starts_with(key, "grad.") ? key : "grad.param." + key);
    }
  }
  double largest_grad = 0;
  for (const auto& [name, t] : expected) {
    if (util::starts_with(name, "grad.")) largest_grad = std::max(largest_grad, t.abs().max().item<double>());
  }
  std::vector<Row> rows;
  for (const auto& [name, ref_t] : expected) {
    Row r;
    r.name = name;
    const bool grad = util::starts_with(name, "grad.");
    r.tol = grad ? tol_grad : tol_output;
    const at::Tensor mine = ours(name);
    if (!mine.defined()) {
      r.note = "not computed";
    } else if (mine.sizes() != ref_t.sizes()) {
      r.note = "shape " + io::shape_text(mine.sizes().vec()) + ", expected " + io::shape_text(ref_t.sizes().vec());
    } else {
      const at::Tensor ref = ref_t.to(at::kDouble), diff = (mine.to(at::kDouble) - ref).abs();
      r.max_ref = ref.numel() ? ref.abs().max().item<double>() : 0.0;
      r.max_diff = diff.numel() ? diff.max().item<double>() : 0.0;
      const bool nonfinite = !mine.to(at::kDouble).isfinite().all().item<bool>();
      // A reference that is zero (exactly, or by construction) is compared against the case's
      // largest gradient (fixtures README).
      const bool zero = r.max_ref == 0 || zero_true.count(name) > 0;
      const double scale = !zero ? r.max_ref : grad ? largest_grad : 1.0;
      r.rel = scale > 0 ? r.max_diff / scale : r.max_diff;
      if (zero) r.note = "zero reference: relative to the largest gradient";
      if (nonfinite) r.note = "non-finite values";
      r.ok = !nonfinite && r.rel <= r.tol;
    }
    rows.push_back(r);
  }
  size_t failed = 0;
  double worst_out = 0, worst_grad = 0;
  for (const auto& r : rows) {
    if (!r.ok) ++failed;
    (util::starts_with(r.name, "grad.") ? worst_grad : worst_out) = std::max(
        util::starts_with(r.name, "grad.") ? worst_grad : worst_out, r.rel);
    if (options.verbose || !r.ok) {
      char line[512];
      std::snprintf(line, sizeof(line), "%-4s %-60s max|ref| %-11.4g max|diff| %-11.4g rel %-11.4g tol %-8.2g %s\n",
                    r.ok ? "ok" : "FAIL", r.name.c_str(), r.max_ref, r.max_diff, r.rel, r.tol, r.note.c_str());
      out << line;
    }
  }
  char summary[512];
  std::snprintf(summary, sizeof(summary),
                "%s: %s (%s, %s): %zu tensors, %zu beyond tolerance; worst rel output %.3g (tol %.2g), grad %.3g "
                "(tol %.2g)\n",
                failed == 0 ? "PASS" : "FAIL", dir.c_str(), kind.c_str(), c.dtype == at::kDouble ? "fp64" : "fp32",
                rows.size(), failed, worst_out, tol_output, worst_grad, tol_grad);
  out << summary;
  return failed == 0;
}

}  // namespace zeroshard::reference
