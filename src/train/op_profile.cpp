#include "train/op_profile.h"

#include <torch/csrc/autograd/profiler_legacy.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>
#include <vector>

namespace zeroshard::train {

namespace prof = torch::autograd::profiler;

namespace {
std::string fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}
// The innermost (up to) three ranges around an operator — scopes, autograd nodes, other
// operators — outermost first ("a < b < c"): what called it.
template <typename Stack>
std::string caller_chain(const Stack& stack) {
  std::string chain;
  const size_t from = stack.size() > 3 ? stack.size() - 3 : 0;
  for (size_t i = from; i < stack.size(); ++i) chain += std::string(chain.empty() ? "" : " < ") + stack[i].push->name();
  return chain.empty() ? "(top level)" : chain;
}
}  // namespace

OpProfile::OpProfile() {
  prof::enableProfilerLegacy(prof::ProfilerConfig(prof::ProfilerState::CPU, /*report_input_shapes=*/false,
                                                  /*profile_memory=*/false));
  running_ = true;
}

OpProfile::~OpProfile() {
  if (running_) prof::disableProfilerLegacy();
}

nlohmann::json OpProfile::finish(double step_s, double comm_exposed_s) {
  const prof::thread_event_lists lists = prof::disableProfilerLegacy();
  running_ = false;
  static const std::set<std::string> kGemm = {"aten::mm",  "aten::addmm", "aten::bmm", "aten::baddbmm",
                                              "aten::addmv", "aten::mv",  "aten::dot"};
  std::map<std::string, double> by_class, by_op, copy_by_caller;  // seconds
  struct Open {
    const prof::LegacyEvent* push;
    double children_us = 0;
    std::string klass;  // the scope class it imposes on what runs inside ("" none)
  };
  for (const auto& events : lists) {
    std::vector<Open> stack;
    for (const auto& e : events) {
      const std::string name = e.name();
      if (e.kind() == prof::EventKind::PushRange) {
        std::string klass = !stack.empty() ? stack.back().klass : std::string();
        if (name == "zs::attention") klass = "attention_s";
        if (name == "zs::optimizer") klass = "optimizer_s";
        if (name == "zs::grad_copy" || name == "zs::param_cast") klass = "engine_s";
        stack.push_back({&e, 0.0, klass});
      } else if (e.kind() == prof::EventKind::PopRange && !stack.empty()) {
        const Open o = stack.back();
        stack.pop_back();
        const double us = o.push->cpuElapsedUs(e);
        const double self = std::max(0.0, us - o.children_us) * 1e-6;
        if (!stack.empty()) stack.back().children_us += us;
        const std::string op = o.push->name();
        std::string klass = o.klass;
        if (klass.empty()) {
          klass = kGemm.count(op) ? "gemm_s" : op.rfind("aten::", 0) == 0 ? "elementwise_s" : "autograd_s";
        }
        by_class[klass] += self;
        by_op[op] += self;
        if (op == "aten::copy_") copy_by_caller[caller_chain(stack)] += self;
      }
    }
  }
  nlohmann::json out = {{"step_s", step_s}};
  double sum = 0;
  for (const char* k : {"gemm_s", "attention_s", "optimizer_s", "engine_s", "elementwise_s", "autograd_s"}) {
    out[k] = by_class[k];
    sum += by_class[k];
  }
  out["comm_exposed_s"] = comm_exposed_s;
  out["overhead_s"] = std::max(0.0, step_s - sum - comm_exposed_s);
  auto top = [](const std::map<std::string, double>& m) {
    std::vector<std::pair<std::string, double>> v(m.begin(), m.end());
    std::sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
    if (v.size() > 12) v.resize(12);
    return v;
  };
  out["top_ops"] = top(by_op);
  out["copy_callers"] = top(copy_by_caller);
  return out;
}

std::string OpProfile::summary(const nlohmann::json& p) {
  const double step = p.at("step_s").get<double>();
  std::string line = "profile: step " + fixed(step, 3) + " s =";
  for (const char* k : {"gemm_s", "attention_s", "elementwise_s", "engine_s", "optimizer_s", "autograd_s",
                        "comm_exposed_s", "overhead_s"}) {
    const double v = p.at(k).get<double>();
    std::string name(k);
    name.resize(name.size() - 2);
    line += " " + name + " " + fixed(v, 3) + " (" + fixed(step > 0 ? 100.0 * v / step : 0.0, 1) + "%)";
  }
  return line;
}

}  // namespace zeroshard::train
