#!/usr/bin/env bash
# Speed/quality frontier of block-sparse hidden layers on Fashion-MNIST: fashion_mnist with
# unstructured sparse layers and with each block shape, at each sparsity, over seeds, one
# thread, a fixed topology unless the extra options name an algorithm (any --algorithm
# updates every shape, on the block grid for blocks), then writes
#   OUT/block_sweep.md    table per sparsity: accuracy (mean +- std), ms/step, weight bytes,
#                         and which shapes are on the frontier (no other shape is both faster
#                         and more accurate)
#   OUT/block_sweep.dat   one line per run, for gnuplot
#   OUT/block_sweep.png   accuracy against ms/step, one point per (shape, sparsity)
#   OUT/logs/<shape>_<sparsity>_<seed>.log   each run's output
#
# Usage: examples/block_sweep.sh [BUILD_DIR] [OUT_DIR] [extra fashion_mnist options...]
#   env: SHAPES="unstructured 1x4 4x1 4x4 8x1 8x8 16x1" SPARSITIES="0.9 0.95" SEEDS="1 2 3"
#   BUILD_DIR defaults to ./build, OUT_DIR to examples/results/block.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:-build}"
out="${2:-$root/examples/results/block}"
shift 2 || shift $# || true
[[ "$build" = /* ]] || build="$root/$build"
exe="$build/examples/fashion_mnist"
[[ -x "$exe" ]] || { echo "block_sweep: $exe not found (cmake --build $build --target fashion_mnist)" >&2; exit 1; }
shapes=(${SHAPES:-unstructured 1x4 4x1 4x4 8x1 8x8 16x1})
sparsities=(${SPARSITIES:-0.9 0.95})
seeds=(${SEEDS:-1 2 3})
mkdir -p "$out/logs"

dat="$out/block_sweep.dat"
echo "# shape sparsity seed test_accuracy ms_per_step weight_bytes dense_weight_bytes" > "$dat"
for s in "${sparsities[@]}"; do
  for shape in "${shapes[@]}"; do
    for seed in "${seeds[@]}"; do
      log="$out/logs/${shape}_${s}_${seed}.log"
      block=()
      [[ $shape == unstructured ]] || block=(--block "$shape")
      echo "block_sweep: $shape sparsity $s seed $seed ..." >&2
      "$exe" --sparsity "$s" --seed "$seed" --threads 1 "${block[@]}" "$@" 2>/dev/null > "$log"
      result="$(grep '^RESULT ' "$log" | tail -1)"
      [[ -n "$result" ]] || { echo "block_sweep: no RESULT line in $log" >&2; exit 1; }
      acc="$(sed -E 's/.*test_accuracy=([^ ]+).*/\1/' <<<"$result")"
      wb="$(sed -E 's/.* weight_bytes=([^ ]+).*/\1/' <<<"$result")"
      dwb="$(sed -E 's/.*dense_weight_bytes=([^ ]+).*/\1/' <<<"$result")"
      ms="$(sed -E 's/.*ms_per_step=([^ ]+).*/\1/' <<<"$result")"
      echo "$shape $s $seed $acc $ms $wb $dwb" >> "$dat"
    done
  done
done

cpu="$(lscpu | sed -nE 's/^Model name: *//p' | head -1), family $(lscpu | sed -nE 's/^CPU family: *//p' | head -1) model $(lscpu | sed -nE 's/^Model: *//p' | head -1)"
first="$out/logs/${shapes[0]}_${sparsities[0]}_${seeds[0]}.log"
python3 - "$dat" "$out/block_sweep.md" "$cpu" "$(grep '^model:' "$first" | head -1)" "$(grep '^optimizer:' "$first" | head -1)" "examples/block_sweep.sh $*" "$(grep '^topology:' "$first" | head -1)" <<'EOF'
import statistics as st, sys, collections
dat, md, cpu, model, opt, cmd, topology = sys.argv[1:8]
runs = collections.defaultdict(list)
order = []
for line in open(dat):
    if line.startswith('#'): continue
    shape, s, seed, acc, ms, wb, dwb = line.split()
    if (s, shape) not in runs: order.append((s, shape))
    runs[(s, shape)].append((float(acc), float(ms), int(wb), int(dwb)))
with open(md, 'w') as f:
    f.write('# Block-sparse hidden layers on Fashion-MNIST: accuracy against step time\n\n')
    f.write(f'`{cmd}`; {cpu}; one thread per run, runs one after another.\n')
    f.write(f'{model.replace("model: ", "")}\n{opt}\n')
    f.write((f'{topology} (on the block grid for blocks)' if topology else 'A fixed random topology for every shape (no DST)') + ', the same seeds. Accuracy: final test accuracy, mean +- std over the seeds; ms/step: forward + backward + optimizer averaged over each run, median over the seeds. Frontier: no other shape at this sparsity is both faster and at least as accurate.\n\n')
    for s in dict.fromkeys(k[0] for k in order):
        rows = []
        for (ss, shape) in order:
            if ss != s: continue
            r = runs[(ss, shape)]
            acc = [a for a, *_ in r]
            rows.append((shape, st.mean(acc), st.stdev(acc) if len(acc) > 1 else 0.0, st.median(m for _, m, _, _ in r), r[0][2], r[0][3], len(r)))
        base = next((x for x in rows if x[0] == 'unstructured'), None)
        f.write(f'## sparsity {s}\n\n| shape | test accuracy | vs unstructured | ms/step | speed-up vs unstructured | weight bytes (% of dense) | frontier |\n|---|---:|---:|---:|---:|---:|---|\n')
        for shape, acc, sd, ms, wb, dwb, n in rows:
            front = not any(o[3] < ms and o[1] >= acc for o in rows if o[0] != shape)
            d = f'{100*(acc-base[1]):+.2f}' if base else '-'
            sp = f'{base[3]/ms:.2f}x' if base else '-'
            f.write(f'| {shape} | {100*acc:.2f} +- {100*sd:.2f} % | {d} | {ms:.3f} | {sp} | {wb} ({100*wb/dwb:.1f}%) | {"yes" if front else ""} |\n')
        f.write('\n')
EOF
gnuplot -e "datafile='$dat'; outfile='$out/block_sweep.png'; sparsities='${sparsities[*]}'" "$root/examples/block_sweep.gp"
cat "$out/block_sweep.md"
