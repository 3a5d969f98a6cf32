#!/usr/bin/env bash
# Trains the flux series (configs/flux/) with ZeRO-3 on this host, or on several hosts:
#   examples/train_flux.sh                                   # 2 local ranks
#   examples/train_flux.sh --set parallel.strategy=optim     # any key of the config
#   NNODES=2 NODE_RANK=$h MASTER_ADDR=10.0.0.1 examples/train_flux.sh --set parallel.hybrid=true
# (see examples/launch.sh for the variables). Samples decode only through a trained VAE: add
# --set flux.vae_from=<a vae run's export> (docs/benchmarks.md shows the commands).
exec "$(dirname "$0")/launch.sh" --config "$(dirname "$0")/../configs/flux/optim_grads_params.yaml" "$@"
