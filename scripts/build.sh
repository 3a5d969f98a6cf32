#!/usr/bin/env bash
# Configures and builds zeroshard in ./build (ccache + the shared libtorch precompiled header).
# ZEROSHARD_WERROR=ON turns warnings into errors (CI does).
set -euo pipefail
cd "$(dirname "$0")/.."
export CCACHE_SLOPPINESS="${CCACHE_SLOPPINESS:-pch_defines,time_macros,include_file_mtime,include_file_ctime}"
JOBS="${JOBS:-2}"
cmake -S . -B build -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-RelWithDebInfo}" -DZEROSHARD_WERROR="${ZEROSHARD_WERROR:-OFF}" > build.cmake.log 2>&1 \
  || { cat build.cmake.log; exit 1; }
cmake --build build -j "$JOBS" ${TARGETS:+--target $TARGETS}
