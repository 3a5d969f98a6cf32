#!/usr/bin/env bash
# Trains the flux2 series (FLUX.2 klein as released; configs/flux2/) with ZeRO-3 on this host, or on several hosts:
#   examples/train_flux2.sh --set flux2.dataset=DIR --set flux2.tokenizer=tokenizer.json   # 2 local ranks, tiny size
#   examples/train_flux2.sh --set flux2.cache=CACHE     # after `zeroshard prepare` (configs/flux2/cache.yaml)
#   NNODES=2 NODE_RANK=$h MASTER_ADDR=10.0.0.1 examples/train_flux2.sh ... --set parallel.hybrid=true
# (see examples/launch.sh for the variables). DIR is a DiffSynth folder: metadata.csv with an
# `image` column and `prompt`, the jpg/png/webp files beside it.
exec "$(dirname "$0")/launch.sh" --config "$(dirname "$0")/../configs/flux2/optim_grads_params.yaml" "$@"
