#!/usr/bin/env bash
# Z-Image 6B LoRA (configs/z_image/6b_lora.yaml: rank 32 on the 7 DiffSynth targets of all 34
# blocks) at 256x256 under ZeRO-3, bf16, W = 2, from a prepared cache: the DiT's frozen base seeded
# in memory against the same values read in place from the released layout
# (model.frozen_storage=file). The layout is written first by `zeroshard seed-weights --only dit`
# (transformer/diffusion_pytorch_model-0000k-of-0000n.safetensors + index, bf16): weights cannot be
# downloaded here.
#
#   STEPS=3 bench/seed_weights_z_image.sh          # ~13 GB of disk
#
# The cache's towers run at reduced depth (2 Qwen3 layers, a 1024-token vocabulary; the real
# FLUX.1 VAE), as in docs/benchmarks.md "Z-Image at real size": the cached shapes are the real ones
# and the training run never loads the towers. Prints one line per run (run.py's figures).
set -euo pipefail
cd "$(dirname "$0")/.."
STEPS=${STEPS:-3}
OUT=${OUT:-runs/seed_weights_z_image}
B=build/zeroshard
SIZE="--set z_image.height=256 --set z_image.width=256"
mkdir -p "$OUT/media"

if [ ! -f "$OUT/cache/index.json" ]; then
  ffmpeg -loglevel error -y -f lavfi -i testsrc2=size=320x256 -frames:v 1 "$OUT/media/a.png"
  ffmpeg -loglevel error -y -f lavfi -i mandelbrot=size=256x256 -frames:v 1 "$OUT/media/b.jpg"
  printf 'image,prompt\na.png,a test pattern with colour bars\nb.jpg,a mandelbrot set in blue\n' > "$OUT/media/metadata.csv"
  $B prepare --config configs/z_image/6b.yaml --nproc 2 --set z_image.dataset="$OUT/media" \
    --set z_image.tokenizer=tests/models/qwen3/data/tiny_tokenizer/tokenizer.json --set z_image.cache="$OUT/cache" \
    $SIZE --set z_image.text_layers=2 --set z_image.text_vocab=1024
fi

if [ ! -f "$OUT/weights/transformer/diffusion_pytorch_model.safetensors.index.json" ]; then
  rm -rf "$OUT/weights"
  /usr/bin/time -v $B seed-weights --config configs/z_image/6b.yaml --only dit --out "$OUT/weights" \
    2> "$OUT/seed.time"
  grep -E "Maximum resident|Elapsed" "$OUT/seed.time"
fi
du -sh "$OUT/weights/transformer"

for storage in ${STORAGES:-memory file}; do
  rm -rf "$OUT/$storage"
  FROM=""
  [ "$storage" = file ] && FROM="--set z_image.dit_from=$OUT/weights/transformer"
  $B train --config configs/z_image/6b_lora.yaml --nproc 2 --set z_image.cache="$OUT/cache" $SIZE $FROM \
    --set model.frozen_storage=$storage --set train.steps="$STEPS" --set train.save_final=false \
    --set train.save_on_signal=false --set run.progress=false --set run.dir="$OUT/$storage"
  /usr/bin/python3 bench/run_figures.py "$OUT/$storage/metrics.jsonl" "$storage"
done
