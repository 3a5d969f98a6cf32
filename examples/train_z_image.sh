#!/usr/bin/env bash
# Trains the z_image series (Z-Image as released; configs/z_image/) with ZeRO-3 on this host, or on several hosts:
#   examples/train_z_image.sh --set z_image.dataset=DIR --set z_image.tokenizer=tokenizer.json   # 2 local ranks
#   examples/train_z_image.sh --set z_image.cache=CACHE     # after `zeroshard prepare` (configs/z_image/cache.yaml)
#   NNODES=2 NODE_RANK=$h MASTER_ADDR=10.0.0.1 examples/train_z_image.sh ... --set parallel.hybrid=true
# (see examples/launch.sh for the variables). DIR is a DiffSynth folder: metadata.csv with an
# `image` column and `prompt`, the jpg/png/webp files beside it.
exec "$(dirname "$0")/launch.sh" --config "$(dirname "$0")/../configs/z_image/optim_grads_params.yaml" "$@"
