#!/usr/bin/env bash
# Creates the reference venv (default: .venv-ref at the repository root) for the `reference`
# tests that need Hugging Face libraries: transformers, tokenizers, safetensors, peft and
# accelerate, the openai client (openai_check.py), llama.cpp's gguf-py (gguf_check.py), TRL
# (pref_trl_check.py), jieba + rouge-chinese + nltk (metrics_check.py) and mixture-of-depth
# (mod_check.py), pinned by
# tests/reference/constraints.txt, over Debian's python3-torch (the venv sees the system
# site-packages). Idempotent: an existing venv that imports them all with the pinned peft, gguf,
# trl and nltk is kept.
#   scripts/setup-reference-venv.sh [VENV_DIR]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
venv=${1:-$root/.venv-ref}
constraints=$root/tests/reference/constraints.txt
if ! /usr/bin/python3 -c "import torch" 2>/dev/null; then
  echo "setup-reference-venv: /usr/bin/python3 cannot import torch (apt-get install python3-torch python3-venv)" >&2
  exit 1
fi
check='import importlib.metadata, transformers, peft, accelerate, safetensors, jinja2, openai, gguf, trl.trainer.dpo_trainer, jieba, rouge_chinese, nltk.translate.bleu_score; print("transformers", transformers.__version__, "peft", peft.__version__, "openai", openai.__version__, "gguf", importlib.metadata.version("gguf"), "trl", trl.__version__)'
# pip freeze is read whole first: `pip freeze | grep -q` under pipefail fails when grep stops
# early and pip gets SIGPIPE.
frozen=$([ -x "$venv/bin/pip" ] && "$venv/bin/pip" freeze 2>/dev/null || true)
if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c "$check" >/dev/null 2>&1 &&
   grep -qxF "$(grep -E '^peft==' "$constraints")" <<<"$frozen" &&
   grep -qxF "$(grep -E '^gguf==' "$constraints")" <<<"$frozen" &&
   grep -qxF "$(grep -E '^trl==' "$constraints")" <<<"$frozen" &&
   grep -qxF "$(grep -E '^nltk==' "$constraints")" <<<"$frozen" &&
   grep -qxF "$(grep -E '^galore-torch==' "$constraints")" <<<"$frozen" &&
   grep -qxF "$(grep -E '^apollo-torch==' "$constraints")" <<<"$frozen" &&
   grep -qxF "$(grep -E '^badam==' "$constraints")" <<<"$frozen" &&
   grep -qxF "$(grep -E '^mixture-of-depth==' "$constraints")" <<<"$frozen" &&
   [ -f "$venv/peft017/peft-0.17.1.dist-info/METADATA" ]; then
  echo "setup-reference-venv: $venv is ready"
  exit 0
fi
/usr/bin/python3 -m venv --system-site-packages "$venv"
pip=("$venv/bin/pip" install --disable-pip-version-check --quiet -c "$constraints")
"${pip[@]}" transformers tokenizers safetensors Jinja2 openai gguf
# peft/accelerate declare torch>=1.13.0; pip reads Debian's 1.13.0a0 as below it (see constraints).
"${pip[@]}" --no-deps peft accelerate
# TRL 0.8.6 (torch>=1.4 is met by Debian's) with datasets, and rich, which it imports undeclared.
"${pip[@]}" trl rich
# LLaMA-Factory's sft/metric.py packages (metrics_check.py).
"${pip[@]}" jieba rouge-chinese nltk
# GaLore / APOLLO (low_rank_check.py), without their bitsandbytes requirement.
"${pip[@]}" --no-deps galore-torch apollo-torch
# BAdam's BlockOptimizer (badam_check.py).
"${pip[@]}" --no-deps badam
# The mixture-of-depth package LLaMA-Factory's mixture_of_depths uses (mod_check.py); pure Python
# over torch and transformers, which it does not pin.
"${pip[@]}" --no-deps mixture-of-depth
# PEFT 0.17.1's OFT (oft_check.py), beside the venv's peft 0.13.2 that the other checks need: a
# separate --target dir that only oft_check.py puts on sys.path. Pinned here rather than in
# constraints.txt, where a second peft pin would clash with peft==0.13.2.
"$venv/bin/pip" install --disable-pip-version-check --quiet --no-deps --upgrade --target "$venv/peft017" peft==0.17.1
"$venv/bin/python" -c "$check"
echo "setup-reference-venv: $venv is ready"
