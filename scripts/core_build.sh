#!/usr/bin/env bash
# Builds zeroshard with no optional part (cmake -DZEROSHARD_CORE=ON: libtorch, Gloo, a compiler
# and the header-only libraries suffice) in ./build-core, runs its unit label, and checks the core
# binary end to end (tests/core_binary_check.sh). ./test.sh runs it as the CoreBuild test.
#   BUILD_DIR   the build folder (default build-core)
#   CMAKE_ARGS  more configure arguments, e.g. "-DCMAKE_PREFIX_PATH=/opt/libtorch" for another libtorch
#   JOBS        parallel compiles (default 2)
set -euo pipefail
cd "$(dirname "$0")/.."
export CCACHE_SLOPPINESS="${CCACHE_SLOPPINESS:-pch_defines,time_macros,include_file_mtime,include_file_ctime}"
BUILD="${BUILD_DIR:-build-core}"
GENERATOR=()
if [ ! -f "$BUILD/CMakeCache.txt" ] && command -v ninja > /dev/null; then GENERATOR=(-G Ninja); fi
# shellcheck disable=SC2086  # CMAKE_ARGS is a list of arguments
cmake -S . -B "$BUILD" "${GENERATOR[@]}" -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-RelWithDebInfo}" -DZEROSHARD_CORE=ON \
  -DZEROSHARD_BUILD_BENCH=OFF -DZEROSHARD_WERROR="${ZEROSHARD_WERROR:-OFF}" ${CMAKE_ARGS:-} > "$BUILD.cmake.log" 2>&1 \
  || { cat "$BUILD.cmake.log"; exit 1; }
cmake --build "$BUILD" -j "${JOBS:-2}" --target zeroshard zs_unit_tests zs_base_tests
(cd "$BUILD" && ctest --output-on-failure --timeout 600 -L unit -j "${JOBS:-2}")
tests/core_binary_check.sh "$BUILD/zeroshard"
