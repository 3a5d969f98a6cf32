#!/usr/bin/env bash
# Trains the wan series (Wan 2.1 as released; configs/wan/) with ZeRO-3 on this host, or on several hosts:
#   examples/train_wan.sh --set wan.dataset=DIR --set wan.tokenizer=spiece.model      # 2 local ranks
#   examples/train_wan.sh --set wan.cache=CACHE                 # after `zeroshard prepare` (configs/wan/cache.yaml)
#   NNODES=2 NODE_RANK=$h MASTER_ADDR=10.0.0.1 examples/train_wan.sh ... --set parallel.hybrid=true
# (see examples/launch.sh for the variables). DIR is a DiffSynth folder: metadata.csv with a
# `video` or `image` column and `prompt`, the media beside it.
exec "$(dirname "$0")/launch.sh" --config "$(dirname "$0")/../configs/wan/optim_grads_params.yaml" "$@"
