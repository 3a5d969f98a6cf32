#!/usr/bin/env bash
# Installs what is missing, builds, and runs every test (unit, multi-process, end to end).
set -euo pipefail
cd "$(dirname "$0")"
scripts/install_deps.sh
scripts/install_test_deps.sh
scripts/build.sh
cd build
# Two slots: tests that start rank processes take both (tests/CMakeLists.txt, PROCESSORS 2).
ctest --output-on-failure --timeout 900 -j2 "$@"
