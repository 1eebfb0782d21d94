#!/usr/bin/env bash
# Creates the reference venv, builds and runs the default test suite (everything not labelled
# `slow`).
set -euo pipefail
cd "$(dirname "$0")/.."
# The PEFT cross-check needs transformers + peft from PyPI in .venv-ref (pinned; made once).
scripts/setup-reference-venv.sh
scripts/build.sh
cd build
# ctest runs tests side by side: sleeping (not spinning) OpenMP waits keep them from starving
# each other on a 2-core machine.
export OMP_WAIT_POLICY=PASSIVE
ctest --output-on-failure -LE slow -j"${JOBS:-2}" --timeout 600
