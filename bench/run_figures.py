#!/usr/bin/env python3
"""One run's figures from its metrics.jsonl, as the frozen-storage benchmarks print them.

  python3 bench/run_figures.py RUN/metrics.jsonl LABEL

Step times, the median after the first step, the final loss; per rank: peak RSS, private (and the
engine's pooled unit buffers in it) and file-page RSS at the last step, parameter bytes kept and
mapped, bytes read from storage per step.
"""
import json
import statistics
import sys

rows = [json.loads(line) for line in open(sys.argv[1])]
label = sys.argv[2]
gb = lambda b: "%.2f GB" % (b / 1e9)
later = rows[1:] or rows
print("%-7s steps %s | median step (after the first) %.1f s | final loss %s" % (
    label, [round(r["step_time_s"], 1) for r in rows], statistics.median(r["step_time_s"] for r in later),
    rows[-1]["loss"]))
for r in rows[-1]["ranks"]:
    print("  rank %d: peak RSS %s, at the last step private %s (of it %s pooled unit buffers) + file pages %s; "
          "params kept %s, mapped %s; read from storage per step %s" % (
              r["rank"], gb(r["rss_peak_bytes"]), gb(r["rss_anon_bytes"]), (gb(r["mem_pooled_bytes"]) if "mem_pooled_bytes" in r else "n/a"),
              gb(r["rss_file_bytes"]), gb(r["mem_params_bytes"]), gb(r["mem_mapped_bytes"]),
              [gb(x["ranks"][r["rank"]]["disk_read_bytes"]) for x in rows]))
