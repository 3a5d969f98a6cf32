#!/usr/bin/env bash
# What the tests need beyond the build (./test.sh runs it): the npm packages of the tokenizer
# parity checks (tests/text/package.json, exact versions from package-lock.json). A no-op once
# installed.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v node > /dev/null || ! command -v npm > /dev/null; then
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends nodejs npm
fi
if [ ! -f tests/text/node_modules/.package-lock.json ] || ! cmp -s tests/text/package-lock.json tests/text/node_modules/.zs-lock; then
  (cd tests/text && npm ci --no-audit --no-fund --loglevel=error && cp package-lock.json node_modules/.zs-lock)
fi
