#!/usr/bin/env bash
# The main job on the bundled model: build; convert the original llama2.c stories260K checkpoint
# into a Hugging Face dir and generate from it; LoRA-SFT it on LLaMA-Factory's alpaca demo set
# from a LLaMA-Factory YAML (about a minute on 2 cores), merge the adapter, and generate.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh
out=build/demo/stories260K
rm -rf "$out"
build/unillm convert llama2c --checkpoint tests/data/stories260K/stories260K.bin \
  --tokenizer tests/data/stories260K/tok512.bin --out "$out"
echo "--- greedy, from BOS (reproduces llama2.c's published sample):"
build/unillm generate --model "$out" --prompt-ids 1 --temperature 0 --max-new-tokens 256
echo "--- LoRA SFT on data/alpaca_en_demo.json (template alpaca), held-out eval before and after:"
build/unillm train examples/train_lora/stories260K_lora_sft.yaml
echo "--- merge the adapter into the base model (unillm export):"
build/unillm export examples/merge_lora/stories260K_lora_sft.yaml
prompt=$'Below is an instruction that describes a task. Write a response that appropriately completes the request.\n\n### Instruction:\nWrite a short story about a cat.\n\n### Response:\n'
echo "--- generate from the merged model:"
build/unillm generate --model saves/stories260K/lora/merged --prompt "$prompt" \
  --temperature 0.7 --top-p 0.9 --max-new-tokens 120 --seed 7
echo "--- the same prompt through chat with the adapter (template alpaca):"
echo "Write a short story about a cat." |
  build/unillm chat --model assets/stories260K --adapter saves/stories260K/lora/sft \
    --template alpaca --temperature 0.7 --top-p 0.9 --max-new-tokens 120 --seed 7
