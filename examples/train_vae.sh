#!/usr/bin/env bash
# Trains the vae series (configs/vae/: causal 3-D-conv video VAE on generated clips) with ZeRO-3
# on this host, or on several hosts:
#   examples/train_vae.sh                                   # 2 local ranks
#   examples/train_vae.sh --set vae.chunk_frames=2          # any key of the config
#   NNODES=2 NODE_RANK=$h MASTER_ADDR=10.0.0.1 examples/train_vae.sh --set parallel.hybrid=true
# (see examples/launch.sh for the variables). Then: build/zeroshard sample <run> writes
# <run>/reconstruction.png (held-out clips above their reconstructions).
exec "$(dirname "$0")/launch.sh" --config "$(dirname "$0")/../configs/vae/optim_grads_params.yaml" "$@"
