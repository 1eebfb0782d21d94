#!/usr/bin/env bash
# Creates the reference venv, builds and runs the default test suite (everything not labelled
# `slow`), then builds the clang fuzz tree (build-fuzz/) and fuzzes each parser a few seconds.
set -euo pipefail
cd "$(dirname "$0")/.."
# The PEFT cross-check needs transformers + peft from PyPI in .venv-ref (pinned; made once).
scripts/setup-reference-venv.sh
scripts/build.sh
(
  cd build
  # ctest runs tests side by side: sleeping (not spinning) OpenMP waits keep them from starving
  # each other on a 2-core machine.
  export OMP_WAIT_POLICY=PASSIVE
  ctest --output-on-failure -LE slow -j"${JOBS:-2}" --timeout 600
)
# libFuzzer targets (clang, ASan + UBSan), only they are built: docs/fuzzing.md. Inputs they find
# stay in build-fuzz/tests/fuzz/corpus/; FUZZ_SECONDS sets the time per target.
CC=clang CXX=clang++ cmake -S . -B build-fuzz -DUNILLM_BUILD_FUZZ=ON -DUNILLM_BUILD_BENCH=OFF -DUNILLM_WITH_DNNL=OFF \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DUNILLM_FUZZ_SECONDS="${FUZZ_SECONDS:-4}" >/dev/null
cmake --build build-fuzz --target fuzz_targets -j"${JOBS:-2}"
cd build-fuzz
ctest --output-on-failure -L fuzz -j"${JOBS:-2}"
