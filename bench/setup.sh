#!/usr/bin/env bash
# Installs the benchmark peers into bench/.venv (never used by CI): llama.cpp through PyPI's
# llama-cpp-python (built from source for this CPU), PyPI's gguf writer, sentencepiece (reads the
# Llama 2 tokenizer.model into the GGUF vocab), and Debian's torch via --system-site-packages.
set -euo pipefail
cd "$(dirname "$0")"
# The GEMM providers compared by gemm_providers.cpp (gemm_providers.md): oneDNN and BLIS (OpenMP).
apt-get install -y -qq --no-install-recommends libdnnl-dev libblis-openmp-dev >/dev/null
/usr/bin/python3 -m venv --system-site-packages .venv
.venv/bin/pip install -q --upgrade pip
.venv/bin/pip install -q -c constraints.txt gguf numpy sentencepiece
# OpenMP build with native SIMD, the same thread model as unillm.
CMAKE_ARGS="-DGGML_NATIVE=ON -DGGML_OPENMP=ON" .venv/bin/pip install -q -c constraints.txt \
  --no-cache-dir llama-cpp-python
.venv/bin/python -c "import llama_cpp, gguf, sentencepiece; print('llama_cpp', llama_cpp.__version__)"

# llama.cpp's own llama-server (serve_bench.py), built natively from the llama.cpp sources that
# the pinned llama-cpp-python sdist vendors (the same llama.cpp as above): bench/llama-server/.
if [[ ! -x llama-server/build/bin/llama-server ]]; then
  rm -rf llama-server && mkdir -p llama-server
  .venv/bin/pip download -q --no-binary :all: --no-deps -c constraints.txt llama-cpp-python -d llama-server
  tar xzf llama-server/llama_cpp_python-*.tar.gz -C llama-server
  src=$(echo llama-server/llama_cpp_python-*/vendor/llama.cpp)
  cmake -S "$src" -B llama-server/build -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DGGML_OPENMP=ON \
    -DLLAMA_CURL=OFF -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF >/dev/null
  cmake --build llama-server/build --target llama-server -j"$(nproc)" >/dev/null
fi
llama-server/build/bin/llama-server --version 2>&1 | head -1

# LLaMA-Factory peer (bench/lf_bench.py) in its own venv, bench/.venv-lf, on the same Debian torch
# 1.13 (never a PyPI torch). Skip with LF=0. peft 0.12 declares torch>=1.13.0, which Debian's
# "1.13.0a0" does not satisfy for pip, so peft and llamafactory go in with --no-deps after their
# dependencies; constraints-lf.txt pins torch==1.13.0a0 so that nothing can pull a PyPI torch.
if [[ "${LF:-1}" != 0 ]]; then
  /usr/bin/python3 -m venv --system-site-packages .venv-lf
  .venv-lf/bin/pip install -q --upgrade pip
  .venv-lf/bin/pip install -q -c constraints-lf.txt transformers tokenizers datasets accelerate trl \
    tyro gradio "pandas>=2.0.0" scipy einops sentencepiece tiktoken protobuf uvicorn pydantic fastapi \
    sse-starlette "matplotlib>=3.7.0" fire packaging pyyaml numpy av librosa psutil safetensors \
    huggingface_hub tqdm
  .venv-lf/bin/pip install -q --no-deps -c constraints-lf.txt peft llamafactory
  .venv-lf/bin/pip check | grep -v -i "torch" || true   # only peft's torch>=1.13.0 may show
  OMP_NUM_THREADS=1 .venv-lf/bin/llamafactory-cli version
fi
