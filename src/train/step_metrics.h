// One optimizer step's figures: what each rank measured (RankFigures, all-gathered every step,
// which also carries each rank's stop request) and the line rank 0 writes to metrics.jsonl
// (StepMetrics). Each field is named once, in a table the JSON and the gather both walk.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace zeroshard::train {

struct RankFigures {
  int64_t mem_params_bytes = 0;
  int64_t mem_grads_bytes = 0;
  int64_t mem_optim_bytes = 0;
  int64_t mem_gathered_peak_bytes = 0;
  int64_t rss_peak_bytes = 0;
  int64_t stop_signal = 0;  // 0, or the SIGINT/SIGTERM this rank received (not written to metrics)
  int64_t mem_saved_activations_bytes = 0;
  int64_t mem_step_peak_bytes = 0;
  double compute_s = 0;
  double comm_exposed_s = 0;
  double optimizer_s = 0;
  int64_t comm_bytes_sent = 0;
  int64_t comm_collectives = 0;
  // model.frozen_storage=file: frozen bytes used in place from mapped files, and the compute
  // bytes of those converted from them (fp32 file under bf16, fused or renamed tensors);
  // resident bytes at the step's end, private and of mapped files; bytes read from storage
  // during the step.
  int64_t mem_mapped_bytes = 0;
  int64_t mem_converted_bytes = 0;
  int64_t mem_pooled_bytes = 0;  // freed unit buffers kept for reuse (private, resident)
  int64_t rss_anon_bytes = 0;
  int64_t rss_file_bytes = 0;
  int64_t disk_read_bytes = 0;

  // Calls f(name, member) for every int64 field and g(name, member) for every seconds field.
  template <class F, class G>
  static void fields(F&& f, G&& g) {
    f("mem_params_bytes", &RankFigures::mem_params_bytes);
    f("mem_grads_bytes", &RankFigures::mem_grads_bytes);
    f("mem_optim_bytes", &RankFigures::mem_optim_bytes);
    f("mem_gathered_peak_bytes", &RankFigures::mem_gathered_peak_bytes);
    f("rss_peak_bytes", &RankFigures::rss_peak_bytes);
    f("stop_signal", &RankFigures::stop_signal);
    f("mem_saved_activations_bytes", &RankFigures::mem_saved_activations_bytes);
    f("mem_step_peak_bytes", &RankFigures::mem_step_peak_bytes);
    g("compute_s", &RankFigures::compute_s);
    g("comm_exposed_s", &RankFigures::comm_exposed_s);
    g("optimizer_s", &RankFigures::optimizer_s);
    f("comm_bytes_sent", &RankFigures::comm_bytes_sent);
    f("comm_collectives", &RankFigures::comm_collectives);
    f("mem_mapped_bytes", &RankFigures::mem_mapped_bytes);
    f("mem_converted_bytes", &RankFigures::mem_converted_bytes);
    f("mem_pooled_bytes", &RankFigures::mem_pooled_bytes);
    f("rss_anon_bytes", &RankFigures::rss_anon_bytes);
    f("rss_file_bytes", &RankFigures::rss_file_bytes);
    f("disk_read_bytes", &RankFigures::disk_read_bytes);
  }
  static int64_t field_count();
  // As int64 (seconds in nanoseconds) for the all-gather, and back.
  std::vector<int64_t> pack() const;
  static RankFigures unpack(const int64_t* values);
  // The per-rank entry of metrics.jsonl ("ranks": [...]), with "rank".
  nlohmann::json to_json(int rank) const;
};

struct StepMetrics {
  int64_t step = 0;
  float loss = 0;
  double lr = 0, grad_norm = 0, step_time_s = 0;
  std::string throughput_key;  // tokens_per_s, clips_per_s, ...
  double throughput = 0;
  // The model's FLOPs (Task::flops_per_item) per second per rank, in TFLOP/s, and that over
  // one rank's peak (run.peak_tflops, or measured): 0 when the series does not count FLOPs.
  double tflops_per_rank = 0, mfu = 0;
  bool skipped = false;
  RankFigures local;                // this rank's (rank 0's in the line's top level)
  std::vector<RankFigures> ranks;   // every rank's
  nlohmann::json series;            // the series' own figures (aux_loss, recon_loss, towers_s ...)

  // The metrics.jsonl line: step, loss (round-trip exact), lr, grad_norm, step_time_s, the
  // throughput, rank 0's time split and memory, skipped, every rank under "ranks", the series'.
  nlohmann::json to_json() const;
};

}  // namespace zeroshard::train
