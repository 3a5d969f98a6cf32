#!/usr/bin/env bash
# Starts `zeroshard train` on this host with torchrun's variables: every rank here by default,
# or this host's share of a multi-host job through the environment rendezvous.
#
#   examples/launch.sh --config configs/moe/optim_grads_params.yaml          # one host, 2 ranks
#   NNODES=2 NODE_RANK=0 MASTER_ADDR=10.0.0.1 examples/launch.sh --config ...  # on host 0
#   NNODES=2 NODE_RANK=1 MASTER_ADDR=10.0.0.1 examples/launch.sh --config ...  # on host 1
#
# NPROC_PER_NODE (default 2) ranks per host, MASTER_PORT (default 29500); the run folder must
# be on storage every host sees (checkpoints are written by all ranks). Add
# --set parallel.hybrid=true to shard inside each host and replicate across hosts.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${ZEROSHARD:-$ROOT/build/zeroshard}
NPROC_PER_NODE=${NPROC_PER_NODE:-2}
NNODES=${NNODES:-1}
if [ "$NNODES" = 1 ]; then
  exec "$BIN" train --nproc "$NPROC_PER_NODE" "$@"
fi
: "${NODE_RANK:?set NODE_RANK (0 .. NNODES-1)}" "${MASTER_ADDR:?set MASTER_ADDR (the address of node 0)}"
pids=()
for ((l = 0; l < NPROC_PER_NODE; l++)); do
  RANK=$((NODE_RANK * NPROC_PER_NODE + l)) WORLD_SIZE=$((NNODES * NPROC_PER_NODE)) LOCAL_RANK=$l \
    LOCAL_WORLD_SIZE=$NPROC_PER_NODE MASTER_ADDR=$MASTER_ADDR MASTER_PORT=${MASTER_PORT:-29500} \
    "$BIN" train "$@" &
  pids+=($!)
done
trap 'kill -TERM "${pids[@]}" 2>/dev/null' TERM
rc=0
for p in "${pids[@]}"; do wait "$p" || rc=$?; done
exit $rc
