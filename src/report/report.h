// `zeroshard report`: one self-contained HTML page (inline SVG, no scripts) comparing runs:
// loss curves overlaid, step-time breakdown, per-rank memory beside the ZeRO formula,
// throughput over time.
#pragma once

#include <string>
#include <vector>

namespace zeroshard::report {

// Reads each run folder (metrics.jsonl, config.json, summary.json) and writes the page.
// Throws naming the folder and file when a run cannot be read.
void write_report(const std::vector<std::string>& run_dirs, const std::string& out_path);

}  // namespace zeroshard::report
