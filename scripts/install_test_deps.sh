#!/usr/bin/env bash
# What the tests need beyond the build (./test.sh runs it): the real launchers and schedulers of
# the launcher tests (Slurm with munge, Open MPI), python3-protobuf (the TensorBoard event-file
# reader), and the npm packages of the tokenizer parity checks (tests/text/package.json, exact
# versions from package-lock.json). A no-op once installed.
set -euo pipefail
cd "$(dirname "$0")/.."
DEBS=(slurm-wlm munge openmpi-bin python3-protobuf)
missing=()
for p in "${DEBS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}"
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
if ! command -v node > /dev/null || ! command -v npm > /dev/null; then
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends nodejs npm
fi
if [ ! -f tests/text/node_modules/.package-lock.json ] || ! cmp -s tests/text/package-lock.json tests/text/node_modules/.zs-lock; then
  (cd tests/text && npm ci --no-audit --no-fund --loglevel=error && cp package-lock.json node_modules/.zs-lock)
fi
