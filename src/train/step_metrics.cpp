#include "train/step_metrics.h"

namespace zeroshard::train {

int64_t RankFigures::field_count() {
  int64_t n = 0;
  fields([&n](const char*, int64_t RankFigures::*) { ++n; }, [&n](const char*, double RankFigures::*) { ++n; });
  return n;
}

std::vector<int64_t> RankFigures::pack() const {
  std::vector<int64_t> out;
  fields([&](const char*, int64_t RankFigures::*m) { out.push_back(this->*m); },
         [&](const char*, double RankFigures::*m) { out.push_back(static_cast<int64_t>(this->*m * 1e9)); });
  return out;
}

RankFigures RankFigures::unpack(const int64_t* v) {
  RankFigures r;
  size_t i = 0;
  fields([&](const char*, int64_t RankFigures::*m) { r.*m = v[i++]; },
         [&](const char*, double RankFigures::*m) { r.*m = static_cast<double>(v[i++]) * 1e-9; });
  return r;
}

nlohmann::json RankFigures::to_json(int rank) const {
  nlohmann::json j = {{"rank", rank}};
  fields(
      [&](const char* name, int64_t RankFigures::*m) {
        if (std::string(name) != "stop_signal") j[name] = this->*m;
      },
      [&](const char* name, double RankFigures::*m) { j[name] = this->*m; });
  return j;
}

nlohmann::json StepMetrics::to_json() const {
  nlohmann::json per_rank = nlohmann::json::array();
  for (size_t r = 0; r < ranks.size(); ++r) per_rank.push_back(ranks[r].to_json(static_cast<int>(r)));
  // The top level has rank 0's memory, and this rank's own time split.
  const RankFigures& r0 = ranks.empty() ? local : ranks[0];
  nlohmann::json line = {{"step", step},
                         {"loss", static_cast<double>(loss)},
                         {"lr", lr},
                         {"grad_norm", grad_norm},
                         {"step_time_s", step_time_s},
                         {throughput_key, throughput},
                         {"compute_s", local.compute_s},
                         {"comm_exposed_s", local.comm_exposed_s},
                         {"optimizer_s", local.optimizer_s},
                         {"mem_params_bytes", r0.mem_params_bytes},
                         {"mem_grads_bytes", r0.mem_grads_bytes},
                         {"mem_optim_bytes", r0.mem_optim_bytes},
                         {"mem_gathered_peak_bytes", r0.mem_gathered_peak_bytes},
                         {"rss_peak_bytes", r0.rss_peak_bytes},
                         {"mem_saved_activations_bytes", r0.mem_saved_activations_bytes},
                         {"mem_step_peak_bytes", r0.mem_step_peak_bytes},
                         {"mem_mapped_bytes", r0.mem_mapped_bytes},
                         {"mem_converted_bytes", r0.mem_converted_bytes},
                         {"mem_pooled_bytes", r0.mem_pooled_bytes},
                         {"rss_anon_bytes", r0.rss_anon_bytes},
                         {"rss_file_bytes", r0.rss_file_bytes},
                         {"disk_read_bytes", r0.disk_read_bytes},
                         {"skipped", skipped},
                         {"ranks", per_rank}};
  if (tflops_per_rank > 0) {
    line["tflops_per_rank"] = tflops_per_rank;
    line["mfu"] = mfu;
  }
  for (auto it = series.begin(); it != series.end(); ++it) line[it.key()] = it.value();
  return line;
}

}  // namespace zeroshard::train
