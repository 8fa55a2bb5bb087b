#!/usr/bin/env bash
# Prune a pretrained dense GPT and fine-tune it, with char_gpt (docs/transformers.md, "Pruning a
# pretrained model"):
#   1. train a dense GPT (config small, DENSE_STEPS steps) and export it (dense safetensors);
#      skipped when OUT/dense.safetensors exists (or DENSE=FILE names one);
#   2. import it pruned by magnitude to attention ATTN / FFN FFN sparsity (one-shot, per group),
#      print the validation loss right after pruning, fine-tune FINETUNE_STEPS steps with
#      ALGORITHM (static: the pruned pattern kept; rigl, set, snfs also work; granet and gmp
#      prune one-shot to INITIAL only, then gradually to ATTN / FFN while fine-tuning) and
#      export the compressed (sparse-bitmask) model;
#   3. train the same sparse model from scratch for FINETUNE_STEPS steps at the same learning
#      rate, as the baseline;
#   then print the four validation losses and the file sizes, and write OUT/prune_pretrained.md.
#
# Usage: examples/prune_pretrained.sh [BUILD_DIR] [OUT_DIR] [extra char_gpt options...]
#   env: DENSE_STEPS=2000 FINETUNE_STEPS=500 ATTN=0.7 FFN=0.9 ALGORITHM=static
#        FINETUNE_LR=2e-3 THREADS=1 DENSE=<a dense export to start from>
#        INITIAL=0.5 (granet, gmp: where the gradual pruning starts)
#   BUILD_DIR defaults to ./build, OUT_DIR to examples/results/prune_pretrained. The extra
#   options go to every run (for example --config mini40m or --eval-windows 32).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:-build}"
out="${2:-$root/examples/results/prune_pretrained}"
shift 2 || shift $# || true
[[ "$build" = /* ]] || build="$root/$build"
exe="$build/examples/char_gpt"
[[ -x "$exe" ]] || { echo "prune_pretrained: $exe not found (cmake --build $build --target char_gpt)" >&2; exit 1; }
dense_steps="${DENSE_STEPS:-2000}"
steps="${FINETUNE_STEPS:-500}"
attn="${ATTN:-0.7}"
ffn="${FFN:-0.9}"
algorithm="${ALGORITHM:-static}"
lr="${FINETUNE_LR:-2e-3}"
threads="${THREADS:-1}"
initial="${INITIAL:-0.5}"
gradual=()  # granet and gmp prune from --initial-sparsity, the others start at ATTN / FFN
pruned_to="attention $attn / FFN $ffn"
if [[ "$algorithm" == granet || "$algorithm" == gmp ]]; then
  gradual=(--initial-sparsity "$initial")
  pruned_to="$initial (where $algorithm starts)"
fi
mkdir -p "$out"
dense="${DENSE:-$out/dense.safetensors}"

# result <log> <key>: the value of key= in the log's RESULT line
result() {
  local line
  line="$(grep '^RESULT ' "$1" | tail -1)"
  [[ -n "$line" ]] || { echo "prune_pretrained: no RESULT line in $1" >&2; exit 1; }
  sed -E "s/.*[ ]$2=([^ ]+).*/\\1/; s/^RESULT $2=([^ ]+).*/\\1/" <<<"$line"
}
run() {  # run <log> <char_gpt options...>
  local log="$1"
  shift
  echo "prune_pretrained: char_gpt $*" >&2
  "$exe" --threads "$threads" --sample 0 "$@" 2>"$log.progress" >"$log" ||
    { echo "prune_pretrained: char_gpt failed, see $log and $log.progress" >&2; tail -3 "$log.progress" >&2; exit 1; }
}

if [[ ! -f "$dense" ]]; then
  run "$out/dense.log" --steps "$dense_steps" --export "$dense" "$@"
  dense_loss="$(result "$out/dense.log" val_loss)"
else
  echo "prune_pretrained: using $dense (delete it to train again)" >&2
  run "$out/dense.log" --import "$dense" --eval-only "$@"
  dense_loss="$(result "$out/dense.log" val_loss)"
fi
dense_bytes="$(stat -c %s "$dense")"

run "$out/finetune.log" --import "$dense" --prune-attn "$attn" --prune-ffn "$ffn" --steps "$steps" \
  --algorithm "$algorithm" "${gradual[@]}" --lr "$lr" --export "$out/pruned.safetensors" --export-form compressed "$@"
pruned_loss="$(result "$out/finetune.log" import_val_loss)"
finetuned_loss="$(result "$out/finetune.log" val_loss)"
compressed_bytes="$(result "$out/finetune.log" export_bytes)"

run "$out/scratch.log" --attn-sparsity "$attn" --ffn-sparsity "$ffn" --steps "$steps" --algorithm "$algorithm" \
  "${gradual[@]}" --lr "$lr" --export "$out/scratch.safetensors" --export-form compressed "$@"
scratch_loss="$(result "$out/scratch.log" val_loss)"

cpu="$(lscpu | sed -nE 's/^Model name: *//p' | head -1)"
{
  echo "# Pruning a pretrained char_gpt: attention $attn / FFN $ffn"
  echo
  echo "\`examples/prune_pretrained.sh $*\` (DENSE_STEPS=$dense_steps FINETUNE_STEPS=$steps ALGORITHM=$algorithm" \
    "FINETUNE_LR=$lr THREADS=$threads${gradual:+ INITIAL=$initial}), $(date -u +%Y-%m-%d), $cpu"
  echo
  echo "| model | validation loss | file | bytes |"
  echo "|---|---:|---|---:|"
  echo "| dense, $dense_steps steps | $dense_loss | dense safetensors | $dense_bytes |"
  echo "| pruned by magnitude to $pruned_to, no fine-tuning | $pruned_loss | | |"
  echo "| pruned, fine-tuned $steps steps ($algorithm) | $finetuned_loss | compressed sparse-bitmask | $compressed_bytes |"
  echo "| same sparsity from scratch, $steps steps ($algorithm) | $scratch_loss | | |"
  echo
  awk -v c="$compressed_bytes" -v d="$dense_bytes" -v f="$finetuned_loss" -v dl="$dense_loss" -v s="$scratch_loss" \
    'BEGIN { printf "compressed / dense bytes: %.1f%%; fine-tuned - dense: %+.4f nats; fine-tuned - from scratch: %+.4f nats\n", 100 * c / d, f - dl, f - s }'
} | tee "$out/prune_pretrained.md"
