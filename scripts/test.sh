#!/usr/bin/env bash
# Builds and runs the default test suite (everything not labelled `slow`).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh
cd build
ctest --output-on-failure -LE slow -j"${JOBS:-2}" --timeout 600
