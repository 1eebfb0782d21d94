#!/usr/bin/env bash
# Configures and builds unillm (Release) into build/ with -j2 (override with JOBS=N).
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"${JOBS:-2}"
