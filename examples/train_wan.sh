#!/usr/bin/env bash
# Trains the wan series (configs/wan/) with ZeRO-3 on this host, or on several hosts:
#   examples/train_wan.sh                                   # 2 local ranks
#   examples/train_wan.sh --set parallel.strategy=optim     # any key of the config
#   NNODES=2 NODE_RANK=$h MASTER_ADDR=10.0.0.1 examples/train_wan.sh --set parallel.hybrid=true
# (see examples/launch.sh for the variables). Samples decode only through a trained VAE: add
# --set wan.vae_from=<a vae run's export> (docs/benchmarks.md shows the commands).
exec "$(dirname "$0")/launch.sh" --config "$(dirname "$0")/../configs/wan/optim_grads_params.yaml" "$@"
