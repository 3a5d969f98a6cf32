#!/usr/bin/env bash
# model.frozen_storage=memory against file on a Qwen3 of a published size (default 8B): LoRA on the
# attention projections under ZeRO-3, bf16, W = 2, from a Hugging Face folder in bf16.
#
# The folder is written first with the project's own code (weights cannot be downloaded here):
# a one-step LoRA run from the seeded init with lr = 0 (its adapters stay zero), exported with
# `zeroshard export --format hf --dtype bf16`, which writes the released layout (config.json,
# model-0000k-of-0000n.safetensors + index). The runs then read that folder like a user's.
#
#   SIZE=8b STEPS=3 SEQ=256 bench/frozen_storage_qwen3.sh      # needs ~2 x the bf16 size of disk
#
# Prints one line per run: median step time, peak RSS per rank, the last step's private and
# file-page RSS per rank, bytes read from storage per step, the parameter bytes each rank keeps.
set -euo pipefail
cd "$(dirname "$0")/.."
SIZE=${SIZE:-8b}
STEPS=${STEPS:-3}
SEQ=${SEQ:-256}
OUT=${OUT:-runs/frozen_storage_$SIZE}
B=build/zeroshard
mkdir -p "$OUT"
LORA="--set lora.rank=16 --set lora.alpha=32 --set lora.targets=q_proj,k_proj,v_proj,o_proj"
COMMON="--set data.datasets=$OUT/licenses --set train.seq_len=$SEQ --set train.micro_batch_size=1 \
  --set mixed_precision.param_dtype=bf16 --set parallel.strategy=optim_grads_params --set run.progress=false"

[ -f "$OUT/licenses.idx" ] || $B prepare --config configs/qwen3/base.yaml --set data.output="$OUT/licenses"

if [ ! -f "$OUT/hf/model.safetensors.index.json" ]; then
  rm -rf "$OUT/seed"
  /usr/bin/time -v $B train --nproc 2 --config "configs/qwen3/$SIZE.yaml" $LORA $COMMON --set train.steps=1 \
    --set train.lr=0 --set train.min_lr=0 --set run.dir="$OUT/seed" 2> "$OUT/seed.time"
  $B export --format hf --dtype bf16 --max-file-mb 4000 "$OUT/seed" "$OUT/hf"
  rm -rf "$OUT/seed/checkpoints"
fi
du -sh "$OUT/hf"

for storage in ${STORAGES:-memory file}; do
  rm -rf "$OUT/$storage"
  $B train --nproc 2 --config "configs/qwen3/$SIZE.yaml" $LORA $COMMON --set model.from_hf="$OUT/hf" \
    --set model.frozen_storage=$storage --set train.steps="$STEPS" --set train.save_final=false \
    --set train.save_on_signal=false --set run.dir="$OUT/$storage"
  /usr/bin/python3 - "$OUT/$storage/metrics.jsonl" "$storage" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
gb = lambda b: "%.2f GB" % (b / 1e9)
later = rows[1:] or rows
print("%-7s steps %s | median step (after the first) %.1f s | final loss %s" % (
    sys.argv[2], [round(r["step_time_s"], 1) for r in rows], statistics.median(r["step_time_s"] for r in later), rows[-1]["loss"]))
for r in rows[-1]["ranks"]:
    print("  rank %d: peak RSS %s, at the last step private %s + file pages %s; params kept %s, mapped %s; "
          "read from storage per step %s" % (r["rank"], gb(r["rss_peak_bytes"]), gb(r["rss_anon_bytes"]),
          gb(r["rss_file_bytes"]), gb(r["mem_params_bytes"]), gb(r["mem_mapped_bytes"]),
          [gb(x["ranks"][r["rank"]]["disk_read_bytes"]) for x in rows]))
EOF
done
