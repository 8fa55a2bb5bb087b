#!/usr/bin/env bash
# Sparsity sweep of the main job: runs fashion_mnist at sparsity 0, 0.5, 0.8, 0.9, 0.95, 0.98
# with the same seed and epochs, then writes
#   examples/results/sweep.md    table: test accuracy, weight memory, ms per step
#   examples/results/sweep.dat   the same numbers for gnuplot
#   examples/results/sweep.png   accuracy and weight memory against sparsity
#   examples/results/sweep_<s>.log / .csv   each run's output and curves
#
# Usage: examples/sweep_sparsity.sh [BUILD_DIR] [extra fashion_mnist options...]
#   BUILD_DIR defaults to ./build; e.g. examples/sweep_sparsity.sh build-nn --epochs 3
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:-build}"
shift || true
[[ "$build" = /* ]] || build="$root/$build"
exe="$build/examples/fashion_mnist"
[[ -x "$exe" ]] || { echo "sweep_sparsity: $exe not found (cmake --build $build --target fashion_mnist)" >&2; exit 1; }
out="$root/examples/results"
mkdir -p "$out"

sparsities=(0 0.5 0.8 0.9 0.95 0.98)
dat="$out/sweep.dat"
echo "# sparsity test_accuracy weight_bytes dense_weight_bytes ms_per_step" > "$dat"
for s in "${sparsities[@]}"; do
  echo "sweep_sparsity: sparsity $s ..." >&2
  "$exe" --sparsity "$s" --csv "$out/sweep_$s.csv" "$@" 2>/dev/null | tee "$out/sweep_$s.log" | tail -1 >&2
  result="$(grep '^RESULT ' "$out/sweep_$s.log" | tail -1)"
  [[ -n "$result" ]] || { echo "sweep_sparsity: no RESULT line at sparsity $s" >&2; exit 1; }
  acc="$(sed -E 's/.*test_accuracy=([^ ]+).*/\1/' <<<"$result")"
  wb="$(sed -E 's/.*weight_bytes=([^ ]+).*/\1/' <<<"${result/dense_weight_bytes/dwb}")"
  dwb="$(sed -E 's/.*dense_weight_bytes=([^ ]+).*/\1/' <<<"$result")"
  ms="$(sed -E 's/.*ms_per_step=([^ ]+).*/\1/' <<<"$result")"
  echo "$s $acc $wb $dwb $ms" >> "$dat"
done

# "model: 784-1024-1024-10, hidden layers sparse (density 0.100), output dense; batch 128, adamw, 1 thread(s), ..."
model_line="$(grep '^model:' "$out/sweep_0.9.log" | head -1 | sed -E 's/^model: ([^,]+), hidden layers [^;]*; /MLP \1; /')"
opt_line="$(grep '^optimizer:' "$out/sweep_0.9.log" | head -1)"
{
  echo "# Fashion-MNIST sparsity sweep"
  echo
  echo "\`examples/sweep_sparsity.sh $*\` on $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) core(s)."
  echo "${model_line}; ${opt_line#optimizer: }."
  echo "Sparsity 0 is the same model with every layer dense (OpenBLAS GEMM); otherwise the"
  echo "hidden layers are PaddedCSR (int32 indices, 20% row padding) and the output layer is dense."
  echo "The 10-wide output layer runs on sprig's narrow kernels (kernels/narrow_dense.hpp) in both."
  echo "Weight memory counts every byte the weights occupy (values, column indices, row arrays,"
  echo "padding, biases); ms/step is forward + backward + optimizer, averaged over the run."
  echo
  echo "| sparsity | test accuracy | weight memory (bytes) | % of dense | ms/step | speed-up vs dense |"
  echo "|---:|---:|---:|---:|---:|---:|"
  awk 'NR > 1 { if (!base) base = $5; printf "| %s | %.2f%% | %d | %.1f%% | %.2f | %.2fx |\n", $1, 100 * $2, $3, 100 * $3 / $4, $5, base / $5 }' "$dat"
} > "$out/sweep.md"

gnuplot -e "datafile='$dat'; outfile='$out/sweep.png'" "$root/examples/sweep_sparsity.gp"
cat "$out/sweep.md"
