#!/usr/bin/env bash
# Trains the llama series (configs/llama/) with ZeRO-3 on this host, or on several hosts:
#   examples/train_llama.sh                                   # 2 local ranks
#   examples/train_llama.sh --set parallel.strategy=optim     # any key of the config
#   NNODES=2 NODE_RANK=$h MASTER_ADDR=10.0.0.1 examples/train_llama.sh --set parallel.hybrid=true
# (see examples/launch.sh for the variables).
exec "$(dirname "$0")/launch.sh" --config "$(dirname "$0")/../configs/llama/optim_grads_params.yaml" "$@"
