#!/usr/bin/env bash
# Trains the qwen_image series (Qwen-Image as released; configs/qwen_image/) with ZeRO-3 on this host, or on several hosts:
#   examples/train_qwen_image.sh --set qwen_image.dataset=DIR --set qwen_image.tokenizer=tokenizer.json   # 2 local ranks
#   examples/train_qwen_image.sh --set qwen_image.cache=CACHE     # after `zeroshard prepare` (configs/qwen_image/cache.yaml)
#   NNODES=2 NODE_RANK=$h MASTER_ADDR=10.0.0.1 examples/train_qwen_image.sh ... --set parallel.hybrid=true
# (see examples/launch.sh for the variables). DIR is a DiffSynth folder: metadata.csv with an
# `image` column and `prompt`, the jpg/png/webp files beside it. The tiny tokenizer of the tests
# (tests/models/qwen3/data/tiny_tokenizer) fits the tiny configs; configs/qwen_image/20b.yaml is
# the released size (Qwen-Image's tokenizer/tokenizer.json).
exec "$(dirname "$0")/launch.sh" --config "$(dirname "$0")/../configs/qwen_image/optim_grads_params.yaml" "$@"
