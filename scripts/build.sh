#!/usr/bin/env bash
# Configures and builds zeroshard in ./build (ccache, the shared libtorch precompiled header, the
# engine's sources in unity batches: CMakeLists.txt).
# ZEROSHARD_WERROR=ON turns warnings into errors (CI does).
set -euo pipefail
cd "$(dirname "$0")/.."
export CCACHE_SLOPPINESS="${CCACHE_SLOPPINESS:-pch_defines,time_macros,include_file_mtime,include_file_ctime}"
JOBS="${JOBS:-2}"
# A new build folder uses Ninja (it starts a library's files while the libraries before it link,
# where make waits for each target); an existing one keeps the generator it was made with.
GENERATOR=()
if [ ! -f build/CMakeCache.txt ] && command -v ninja > /dev/null; then GENERATOR=(-G Ninja); fi
cmake -S . -B build "${GENERATOR[@]}" -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-RelWithDebInfo}" \
  -DZEROSHARD_WERROR="${ZEROSHARD_WERROR:-OFF}" > build.cmake.log 2>&1 || { cat build.cmake.log; exit 1; }
cmake --build build -j "$JOBS" ${TARGETS:+--target $TARGETS}
