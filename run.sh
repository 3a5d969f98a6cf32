#!/usr/bin/env bash
# Installs what is missing, builds, and runs the default job: a small Llama trained on 2
# local ranks with optim_grads_params (ZeRO-3) on text every Debian system ships.
# Extra arguments go to `zeroshard train`, e.g. ./run.sh --set train.steps=50
set -euo pipefail
cd "$(dirname "$0")"
scripts/install_deps.sh
TARGETS=zeroshard scripts/build.sh  # only the main job's binary; ./test.sh builds the rest
exec build/zeroshard train --nproc 2 "$@"
