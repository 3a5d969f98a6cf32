#!/usr/bin/env bash
# Trains the flux1 series (FLUX.1 dev / schnell as released; configs/flux1/) with ZeRO-3 on this host, or on several hosts:
#   examples/train_flux1.sh --set flux1.dataset=DIR --set flux1.tokenizer=spiece.model \
#       --set flux1.pooled_file=pooled.safetensors                                      # 2 local ranks
#   examples/train_flux1.sh --set flux1.cache=CACHE     # after `zeroshard prepare` (configs/flux1/cache.yaml)
#   NNODES=2 NODE_RANK=$h MASTER_ADDR=10.0.0.1 examples/train_flux1.sh ... --set parallel.hybrid=true
# (see examples/launch.sh for the variables). DIR is a DiffSynth folder: metadata.csv with an
# `image` column and `prompt`, the jpg/png/webp files beside it; pooled.safetensors holds CLIP-L's
# pooled vector of each prompt (docs/flux1.md). The released model: --config configs/flux1/dev.yaml
# (or schnell.yaml) with flux1.dit_from, flux1.text_encoder_from, flux1.vae_from.
exec "$(dirname "$0")/launch.sh" --config "$(dirname "$0")/../configs/flux1/optim_grads_params.yaml" "$@"
