#!/usr/bin/env bash
# The main job on the bundled model: build, convert the original llama2.c stories260K checkpoint
# into a Hugging Face dir, and generate from it (greedy, then sampled).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh
out=build/demo/stories260K
rm -rf "$out"
build/unillm convert llama2c --checkpoint tests/data/stories260K/stories260K.bin \
  --tokenizer tests/data/stories260K/tok512.bin --out "$out"
echo "--- greedy, from BOS (reproduces llama2.c's published sample):"
build/unillm generate --model "$out" --prompt-ids 1 --temperature 0 --max-new-tokens 256
echo "--- sampled from a prompt:"
build/unillm generate --model assets/stories260K --prompt "Once upon a time, there was a dog" \
  --temperature 0.8 --top-p 0.95 --max-new-tokens 120 --seed 7
echo "--- continued pretraining of stories260K on tinyshakespeare (LLaMA-Factory YAML), then generate:"
build/unillm train examples/train_full/stories260K_full_pt.yaml
build/unillm generate --model saves/stories260K/full/pt --prompt "ROMEO:" --temperature 0.8 \
  --max-new-tokens 80 --seed 7
