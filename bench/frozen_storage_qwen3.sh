#!/usr/bin/env bash
# model.frozen_storage=memory against file on a Qwen3 of a published size (default 8B): LoRA on the
# attention projections under ZeRO-3, bf16, W = 2, from a Hugging Face folder in bf16.
#
# The folder is written first by `zeroshard seed-weights --dtype bf16` (weights cannot be
# downloaded here): the seeded values in the released layout (config.json,
# model-0000k-of-0000n.safetensors + index), one tensor in memory at a time. The runs then read
# that folder like a user's.
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
  rm -rf "$OUT/hf"
  /usr/bin/time -v $B seed-weights --config "configs/qwen3/$SIZE.yaml" --max-file-mb 4000 --out "$OUT/hf" \
    2> "$OUT/seed.time"
  grep -E "Maximum resident|Elapsed" "$OUT/seed.time"
fi
du -sh "$OUT/hf"

for storage in ${STORAGES:-memory file}; do
  rm -rf "$OUT/$storage"
  $B train --nproc 2 --config "configs/qwen3/$SIZE.yaml" $LORA $COMMON --set model.from_hf="$OUT/hf" \
    --set model.frozen_storage=$storage --set train.steps="$STEPS" --set train.save_final=false \
    --set train.save_on_signal=false --set run.dir="$OUT/$storage"
  /usr/bin/python3 bench/run_figures.py "$OUT/$storage/metrics.jsonl" "$storage"
done
