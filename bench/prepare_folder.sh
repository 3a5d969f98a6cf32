#!/usr/bin/env bash
# `zeroshard prepare` (wan, the tiny configs/wan/base.yaml towers) on a generated DiffSynth folder
# of N small clips as users keep them: lengths 2-24 frames, sizes 40x36 to 96x64, 8/12/24 fps,
# every 50th row a fault (a missing file, a text file named .mp4, a truncated mp4), prepared in
# skip mode at W = 2 under ZeRO-3 with num_frames 13 (clips of 13, 9, 5 and 1 frames in one
# folder). Prints the folder's generation time, then prepare's wall time and time per record.
#
#   N=1000 bench/prepare_folder.sh          # ~30 MB of disk under runs/prepare_folder
set -euo pipefail
cd "$(dirname "$0")/.."
N=${N:-1000}
OUT=${OUT:-runs/prepare_folder}
B=build/zeroshard
mkdir -p "$OUT/data"
if [ ! -f "$OUT/data/metadata.csv" ]; then
  start=$(date +%s%N)
  # A tiny umT5-style SentencePiece model (the tests' recipe).
  words="a video of the cat walking on beach sunset camera slowly pans red blue green dog running field"
  python3 -c "
import sys
w = sys.argv[1].split()
for i in range(300):
    print(' '.join(w[(i * 7 + j * 5 + i * j) % len(w)] for j in range(8)))" "$words" > "$OUT/corpus.txt"
  spm_train --input="$OUT/corpus.txt" --model_prefix="$OUT/spm" --vocab_size=40 --hard_vocab_limit=false \
    --model_type=unigram --character_coverage=1.0 --pad_id=0 --eos_id=1 --unk_id=2 --bos_id=-1 > /dev/null 2>&1
  w=($words)
  sources=(testsrc testsrc2 mandelbrot rgbtestsrc smptebars)
  sizes=(40x36 48x40 64x48 96x64 80x80)
  rates=(8 12 24)
  echo "video,prompt" > "$OUT/data/metadata.csv"
  for ((i = 0; i < N; i++)); do
    name=$(printf 'clip%05d.mp4' "$i")
    if ((i % 50 == 17)); then
      echo "$name,a missing clip" >> "$OUT/data/metadata.csv"; continue
    fi
    if ((i % 50 == 33)); then
      echo "not a video" > "$OUT/data/$name"; echo "$name,a text file" >> "$OUT/data/metadata.csv"; continue
    fi
    frames=$((2 + (i * 7) % 23))
    ffmpeg -loglevel error -y -f lavfi -i "${sources[i % 5]}=size=${sizes[(i / 5) % 5]}:rate=${rates[i % 3]}" \
      -frames:v "$frames" -pix_fmt yuv420p "$OUT/data/$name"
    if ((i % 50 == 49)); then
      truncate -s $(($(stat -c %s "$OUT/data/$name") / 3)) "$OUT/data/$name"
    fi
    echo "$name,${w[i % 18]} ${w[(i * 3) % 18]} ${w[(i * 5 + 1) % 18]}" >> "$OUT/data/metadata.csv"
  done
  echo "generated $N rows in $((($(date +%s%N) - start) / 1000000)) ms"
fi
rm -rf "$OUT/cache"
start=$(date +%s%N)
$B prepare --config configs/wan/base.yaml --nproc 2 --set wan.dataset="$OUT/data" --set wan.tokenizer="$OUT/spm.model" \
  --set wan.cache="$OUT/cache" --set wan.num_frames=13 --set wan.on_bad_file=skip --set parallel.strategy=optim_grads_params \
  --set run.progress=false > "$OUT/prepare.log"
ms=$((($(date +%s%N) - start) / 1000000))
head -1 "$OUT/prepare.log"
grep -E '^  frames ' "$OUT/prepare.log"
echo "left out: $(grep -c '^  left out' "$OUT/prepare.log")"
echo "prepare: $ms ms wall, $((ms / N)) ms per record (W = 2, $(nproc) cores, $(lscpu | sed -n 's/^Model name: *//p'))"
