#!/usr/bin/env bash
# The FLUX text towers at their released sizes in `zeroshard prepare` (issue 36), each read in
# place from seeded files in the released layout (model.frozen_storage=file: weights cannot be
# downloaded here), on a folder of 4 images at 256x256, W = 2 (2 rounds of one prompt per rank):
#   flux2: FLUX.2 [dev]'s Mistral Small 3.1 language model (22,901,314,560 parameters, 45.8 GB in
#          bf16) with the FLUX.2 VAE; the tokenizer.json in Small 3.1's released format that
#          tests/text/make_release_tokenizers.mjs builds;
#   flux1: FLUX.1 [dev]'s CLIP ViT-L/14 text model and T5 v1.1 XXL encoder (bf16) with the FLUX.1
#          VAE; CLIP's released tokenizer files (the same script), a stand-in T5 spiece.model
#          trained by spm_train (T5 runs all 512 positions whatever the tokens).
#
#   TOWERS="flux1 flux2" bench/prepare_text_towers.sh     # ~57 GB of disk while it runs
#
# Prints, per series: the seeding time, then the prepare's wall time and the peak RSS of its
# largest process (GNU time; a rank's RSS counts the mapped file pages it touched).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-runs/prepare_text_towers}
B=build/zeroshard
mkdir -p "$OUT/media"
[ -f "$OUT/media/metadata.csv" ] || bench/captioned_images.sh "$OUT/media" 320x256 256x256 256x320 256x256
[ -f "$OUT/tok/mistral/tokenizer.json" ] || node tests/text/make_release_tokenizers.mjs "$OUT/tok" > /dev/null

prepare() {  # series config seeded-folders --set...
  local s=$1 config=$2 only=$3
  shift 3
  if [ ! -f "$OUT/$s.seeded" ]; then
    rm -rf "$OUT/weights-$s"
    /usr/bin/time -f "seed-weights --only $only: %e s, peak RSS %M KB" \
      $B seed-weights --config "$config" --out "$OUT/weights-$s" $(for o in $only; do echo --only "$o"; done)
    touch "$OUT/$s.seeded"
  fi
  du -sh "$OUT/weights-$s"/*
  rm -rf "$OUT/cache-$s"
  /usr/bin/time -f "$s prepare, 4 prompts on 2 ranks: %e s, peak RSS of the largest process %M KB" \
    $B prepare --config "$config" --nproc 2 --set "$s.dataset=$OUT/media" --set "$s.cache=$OUT/cache-$s" \
    --set "$s.height=256" --set "$s.width=256" --set model.frozen_storage=file --set parallel.comm_timeout_s=3600 "$@"
}

for s in ${TOWERS:-flux1 flux2}; do
  case $s in
    flux2)
      prepare flux2 configs/flux2/dev.yaml text_encoder \
        --set flux2.tokenizer="$OUT/tok/mistral/tokenizer.json" \
        --set flux2.text_encoder_from="$OUT/weights-flux2/text_encoder"
      ;;
    flux1)
      if [ ! -f "$OUT/tok/t5/spm.model" ]; then
        mkdir -p "$OUT/tok/t5"
        cat /usr/share/common-licenses/* > "$OUT/tok/t5/corpus.txt"
        spm_train --input="$OUT/tok/t5/corpus.txt" --model_prefix="$OUT/tok/t5/spm" --vocab_size=2000 --hard_vocab_limit=false \
          --model_type=unigram --pad_id=0 --eos_id=1 --unk_id=2 --bos_id=-1 > /dev/null 2>&1
      fi
      prepare flux1 configs/flux1/dev.yaml "text_encoder clip" \
        --set flux1.tokenizer="$OUT/tok/t5/spm.model" --set flux1.clip_tokenizer="$OUT/tok/clip" \
        --set flux1.text_encoder_from="$OUT/weights-flux1/text_encoder_2" \
        --set flux1.clip_from="$OUT/weights-flux1/text_encoder"
      ;;
  esac
done
