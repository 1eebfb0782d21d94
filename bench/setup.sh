#!/usr/bin/env bash
# Installs the benchmark peers into bench/.venv (never used by CI): llama.cpp through PyPI's
# llama-cpp-python (built from source for this CPU), PyPI's gguf writer, sentencepiece (reads the
# Llama 2 tokenizer.model into the GGUF vocab), and Debian's torch via --system-site-packages.
set -euo pipefail
cd "$(dirname "$0")"
/usr/bin/python3 -m venv --system-site-packages .venv
.venv/bin/pip install -q --upgrade pip
.venv/bin/pip install -q -c constraints.txt gguf numpy sentencepiece
# OpenMP build with native SIMD, the same thread model as unillm.
CMAKE_ARGS="-DGGML_NATIVE=ON -DGGML_OPENMP=ON" .venv/bin/pip install -q -c constraints.txt \
  --no-cache-dir llama-cpp-python
.venv/bin/python -c "import llama_cpp, gguf, sentencepiece; print('llama_cpp', llama_cpp.__version__)"
