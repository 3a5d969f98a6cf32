#include "report/report.h"

#include "io/file.h"
#include "report/svg.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace zeroshard::report {

namespace fs = std::filesystem;

namespace {

struct Run {
  std::string dir, label, strategy;
  int world_size = 1;
  int64_t num_params = 0;
  std::vector<nlohmann::json> metrics;
};

nlohmann::json read_json(const fs::path& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("report: cannot open '" + path.string() + "'");
  try {
    return nlohmann::json::parse(in);
  } catch (const std::exception& e) {
    throw std::runtime_error("report: '" + path.string() + "' is not valid JSON: " + e.what());
  }
}

Run load_run(const std::string& dir) {
  Run run;
  run.dir = dir;
  const fs::path metrics = fs::path(dir) / "metrics.jsonl";
  std::ifstream in(metrics);
  if (!in) throw std::runtime_error("report: '" + dir + "' is not a run folder (no metrics.jsonl)");
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    try {
      run.metrics.push_back(nlohmann::json::parse(line));
    } catch (const std::exception&) {
      break;  // a line cut by a crash ends the usable part
    }
  }
  if (run.metrics.empty()) throw std::runtime_error("report: '" + metrics.string() + "' has no steps");
  const nlohmann::json config = read_json(fs::path(dir) / "config.json");
  run.strategy = config.value("parallel", nlohmann::json::object()).value("strategy", std::string("?"));
  run.world_size = config.value("world_size", 1);
  if (fs::exists(fs::path(dir) / "summary.json")) {
    run.num_params = read_json(fs::path(dir) / "summary.json").value("num_params", int64_t{0});
  }
  return run;
}

double median_of(const std::vector<nlohmann::json>& metrics, const char* key) {
  std::vector<double> v;
  for (const auto& m : metrics) {
    if (m.contains(key) && m[key].is_number()) v.push_back(m[key].get<double>());
  }
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Per-rank model-state bytes of the ZeRO paper for fp32 AdamW.
double zero_formula_bytes(const std::string& strategy, double psi, int w) {
  if (strategy == "no_shard") return 16 * psi;
  if (strategy == "optim") return 8 * psi + 8 * psi / w;
  if (strategy == "optim_grads") return 4 * psi + 12 * psi / w;
  if (strategy == "optim_grads_params") return 16 * psi / w;
  return -1;
}

Series series_of(const Run& run, const char* key) {
  Series s;
  s.name = run.label;
  for (const auto& m : run.metrics) {
    if (m.contains(key) && m[key].is_number()) s.points.emplace_back(m.at("step").get<double>(), m.at(key).get<double>());
  }
  return s;
}

}  // namespace

void write_report(const std::vector<std::string>& run_dirs, const std::string& out_path) {
  if (run_dirs.empty()) throw std::invalid_argument("report: give at least one run folder");
  std::vector<Run> runs;
  for (const auto& d : run_dirs) {
    try {
      runs.push_back(load_run(d));
      for (const auto& m : runs.back().metrics) {  // the fields every chart needs
        (void)m.at("step").get<double>();
        (void)m.at("loss").get<double>();
      }
    } catch (const nlohmann::json::exception& e) {
      throw std::runtime_error("report: '" + d + "/metrics.jsonl' lacks a field the report needs: " + e.what());
    }
    runs.back().label = "run " + std::to_string(runs.size()) + ": " + runs.back().strategy + ", W=" +
                        std::to_string(runs.back().world_size);
  }
  const double mib = 1024.0 * 1024.0;

  std::ostringstream html;
  html << "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>zeroshard report</title>\n"
       << "<style>body{font-family:sans-serif;margin:24px;max-width:1000px}table{border-collapse:collapse}"
       << "td,th{border:1px solid #ccc;padding:4px 8px;font-size:13px;text-align:right}th{background:#f4f4f4}"
       << "td:first-child{text-align:left}p.note{color:#555;font-size:13px}</style></head><body>\n"
       << "<h1>zeroshard report</h1>\n";

  html << "<section id=\"runs\"><h2>Runs</h2><table><tr><th>run</th><th>folder</th><th>strategy</th><th>W</th><th>steps</th>"
       << "<th>final loss</th><th>last validation loss</th><th>median step (s)</th><th>median tokens/s</th>"
       << "<th>parameters</th></tr>\n";
  for (size_t i = 0; i < runs.size(); ++i) {
    const auto& r = runs[i];
    char step_time[32];
    std::snprintf(step_time, sizeof(step_time), "%.3f", median_of(r.metrics, "step_time_s"));
    std::string val = "-";
    for (const auto& m : r.metrics) {
      if (m.contains("val_loss") && m["val_loss"].is_number()) val = m["val_loss"].dump();
    }
    html << "<tr><td>" << i + 1 << "</td><td>" << escape(r.dir) << "</td><td>" << escape(r.strategy) << "</td><td>"
         << r.world_size << "</td><td>" << r.metrics.back().at("step").get<int64_t>() << "</td><td>"
         << r.metrics.back().at("loss").dump() << "</td><td>" << val << "</td><td>" << step_time << "</td><td>"
         << static_cast<int64_t>(median_of(r.metrics, "tokens_per_s")) << "</td><td>" << r.num_params << "</td></tr>\n";
  }
  html << "</table></section>\n";

  std::vector<Series> loss;
  for (const auto& r : runs) loss.push_back(series_of(r, "loss"));
  LineChartOptions lo;
  lo.x_label = "step";
  lo.y_label = "loss";
  html << "<section id=\"loss\"><h2>Loss</h2>\n" << line_chart(loss, lo)
       << "<p class=\"note\">Each run has its own color and dash pattern, the first drawn widest: runs with identical "
          "losses (e.g. the four strategies at one world size) show as one curve with every color visible.</p>"
          "</section>\n";

  // Validation loss (train.eval_every) of the runs that have one.
  std::vector<Series> val;
  for (const auto& r : runs) {
    Series v = series_of(r, "val_loss");
    if (!v.points.empty()) val.push_back(v);
  }
  if (!val.empty()) {
    LineChartOptions vo;
    vo.x_label = "step";
    vo.y_label = "validation loss";
    html << "<section id=\"val-loss\"><h2>Validation loss</h2>\n" << line_chart(val, vo)
         << "<p class=\"note\">Mean loss over the held-out validation tokens (data.valid_fraction), every "
            "train.eval_every steps and after the last one.</p></section>\n";
  }

  std::vector<Bar> time_bars;
  for (size_t i = 0; i < runs.size(); ++i) {
    const auto& r = runs[i];
    time_bars.push_back({"run " + std::to_string(i + 1),
                         {median_of(r.metrics, "compute_s"), median_of(r.metrics, "comm_exposed_s"),
                          median_of(r.metrics, "optimizer_s")},
                         -1});
  }
  html << "<section id=\"step-time\"><h2>Step time breakdown (rank 0, medians)</h2>\n"
       << stacked_bar_chart(time_bars, {"compute", "exposed communication", "optimizer"}, "seconds", "")
       << "<p class=\"note\">Exposed communication: time the compute thread waited for collectives (what overlap did not "
          "hide). Run numbers follow the table above.</p></section>\n";

  std::vector<Bar> mem_bars;
  for (size_t i = 0; i < runs.size(); ++i) {
    const auto& r = runs[i];
    const auto& last = r.metrics.back();
    if (!last.contains("ranks")) continue;
    const double formula = zero_formula_bytes(r.strategy, static_cast<double>(r.num_params), r.world_size);
    for (const auto& rank : last.at("ranks")) {
      mem_bars.push_back({"run " + std::to_string(i + 1) + " r" + std::to_string(rank.value("rank", 0)),
                          {rank.value("mem_params_bytes", 0.0) / mib, rank.value("mem_grads_bytes", 0.0) / mib,
                           rank.value("mem_optim_bytes", 0.0) / mib},
                          r.num_params > 0 ? formula / mib : -1});
    }
  }
  html << "<section id=\"memory\"><h2>Model state per rank</h2>\n"
       << stacked_bar_chart(mem_bars, {"parameters", "gradients", "AdamW state"}, "MiB", "ZeRO formula")
       << "<p class=\"note\">Formula per rank for Ψ parameters and W ranks: no_shard 16Ψ, optim 8Ψ + 8Ψ/W, optim_grads "
          "4Ψ + 12Ψ/W, optim_grads_params 16Ψ/W (bytes).</p></section>\n";

  std::vector<Series> throughput;
  for (const auto& r : runs) throughput.push_back(series_of(r, "tokens_per_s"));
  LineChartOptions to;
  to.x_label = "step";
  to.y_label = "tokens/s";
  html << "<section id=\"throughput\"><h2>Throughput</h2>\n" << line_chart(throughput, to) << "</section>\n";
  html << "</body></html>\n";
  io::write_file_atomic(out_path, html.str());
}

}  // namespace zeroshard::report
