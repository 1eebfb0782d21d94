#!/usr/bin/env bash
# Builds and runs the default test suite (everything not labelled `slow`).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh
cd build
# ctest runs tests side by side: sleeping (not spinning) OpenMP waits keep them from starving
# each other on a 2-core machine.
export OMP_WAIT_POLICY=PASSIVE
ctest --output-on-failure -LE slow -j"${JOBS:-2}" --timeout 600
