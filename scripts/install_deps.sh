#!/usr/bin/env bash
# Installs the Debian 12 packages zeroshard needs; a no-op when all are present.
set -euo pipefail
PKGS=(build-essential cmake ninja-build ccache libtorch-dev libgloo-dev libyaml-cpp-dev libcli11-dev
      nlohmann-json3-dev libgtest-dev libbenchmark-dev libopenblas0-pthread libopenblas0-openmp python3-torch chromium
      iproute2 pkg-config libpcre2-dev libicu-dev libsentencepiece-dev sentencepiece
      libjpeg-dev libpng-dev libwebp-dev libavformat-dev libavcodec-dev libswscale-dev libavutil-dev ffmpeg
      python3-pil python3-torchvision python3-pandas libprotobuf-dev protobuf-compiler)
# libopenblas0-openmp: loaded instead of the pthreads build at run time (src/cli/thread_env.h);
# iproute2: `ip netns` for the two-host tests; sentencepiece: spm_train for the tokenizer tests;
# ffmpeg, python3-pil/-torchvision/-pandas: the media tests' reference decoders;
# libprotobuf-dev, protobuf-compiler: TensorBoard event files (src/io/tensorboard_event.proto)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
echo "installing: ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
