#!/usr/bin/env bash
# Peak memory of `unillm preprocess` and of training from `input_dir` as the corpus grows
# (docs/corpora.md): a synthetic text corpus of SIZE_MB (generated here, never committed) and a
# small one are preprocessed, then 3 steps are trained from each; peak RSS comes from GNU time.
# With RAW=1 the small corpus is also trained from raw text (dataset:), for contrast.
# Usage: bench/corpus_memory.sh [BUILD_DIR] [SIZE_MB]   (defaults: build, 400). Not run by CI.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$here/build}
size_mb=${2:-400}
bin=$build/unillm
model=$here/assets/stories260K
work=${WORK:-$(mktemp -d /tmp/unillm-corpus-bench.XXXXXX)}
[[ -x $bin ]] || { echo "no $bin: build the unillm target first" >&2; exit 1; }
[[ -x /usr/bin/time ]] || { echo "needs GNU time (/usr/bin/time): apt-get install time" >&2; exit 1; }
mkdir -p "$work"

# Documents of 20-400 words drawn from tinyshakespeare's vocabulary, one per line, fixed seed.
gen() {  # gen MB FILE
  python3 - "$1" "$2" "$here/data/tinyshakespeare.txt" <<'EOF'
import random, sys
mb, out, src = int(sys.argv[1]), sys.argv[2], sys.argv[3]
words = sorted(set(open(src).read().split()))
rng = random.Random(1234)
target, written = mb * 1024 * 1024, 0
with open(out, "w") as f:
    while written < target:
        line = " ".join(rng.choices(words, k=rng.randint(20, 400))) + "\n"
        f.write(line)
        written += len(line.encode())
EOF
}

peak() {  # peak LABEL CMD... → prints "LABEL  peak_MB  seconds"
  local label=$1; shift
  /usr/bin/time -f "%M %e" -o "$work/time.txt" "$@" >"$work/$label.log" 2>&1 || {
    echo "$label failed:" >&2; tail -5 "$work/$label.log" >&2; exit 1; }
  read -r kb secs <"$work/time.txt"
  printf "%-28s %8.1f MB %8.1f s\n" "$label" "$(echo "$kb / 1024" | bc -l)" "$secs"
}

config() {  # config OUT DATA_LINES... → a pt config on stdout
  local out=$1; shift
  cat <<EOF
model_name_or_path: $model
stage: pt
finetuning_type: full
do_train: true
cutoff_len: 256
per_device_train_batch_size: 8
learning_rate: 1.0e-3
max_steps: 3
logging_steps: 1
save_strategy: 'no'
seed: 1
output_dir: $out
overwrite_output_dir: true
EOF
  printf '%s\n' "$@"
}

echo "generating ${size_mb} MB and 4 MB of text in $work ..."
[[ -f $work/big.txt ]] || gen "$size_mb" "$work/big.txt"
[[ -f $work/small.txt ]] || gen 4 "$work/small.txt"
printf "%-28s %11s %10s\n" "run" "peak RSS" "wall"
peak "preprocess 4 MB" "$bin" preprocess --quiet --model "$model" --input "$work/small.txt" --output "$work/small"
peak "preprocess ${size_mb} MB" "$bin" preprocess --quiet --model "$model" --input "$work/big.txt" --output "$work/big"
ls -l "$work"/small.bin "$work"/big.bin "$work"/big.idx | awk '{printf "  %s %.1f MB\n", $9, $5/1048576}'
config "$work/out-small" "input_dir: $work/small" "split: 1,0,0" >"$work/small.yaml"
config "$work/out-big" "input_dir: $work/big" "split: 949,50,1" >"$work/big.yaml"
peak "train 3 steps, 4 MB corpus" "$bin" train "$work/small.yaml" --quiet
peak "train 3 steps, ${size_mb} MB corpus" "$bin" train "$work/big.yaml" --quiet
if [[ ${RAW:-0} == 1 ]]; then
  echo '{"small": {"file_name": "small.txt"}}' >"$work/dataset_info.json"
  config "$work/out-raw" "dataset: small" "dataset_dir: $work" >"$work/raw.yaml"
  peak "train 3 steps, 4 MB raw text" "$bin" train "$work/raw.yaml" --quiet
fi
echo "files kept in $work (remove it when done)"
