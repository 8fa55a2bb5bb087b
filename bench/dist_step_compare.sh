#!/usr/bin/env bash
# Data parallel against threads, side by side: for each model, 1 process x 2 threads and
# 2 MPI ranks x 1 thread (same global batch), --rounds rounds in alternating order; prints a
# markdown table of the median ms/step (min-max over rounds), the share of the step spent
# waiting for gradient sums, and the bytes a rank contributes per step.
#   bench/dist_step_compare.sh [build dir] [rounds]     # default build/dev, 5
set -euo pipefail
build=${1:-build/dev}
rounds=${2:-5}
exe="$build/bench/dist_step"
[[ -x "$exe" ]] || { echo "dist_step_compare: no $exe (build the dist_step target; needs MPI)" >&2; exit 2; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
mpirun=(mpirun --oversubscribe -np 2)
configs=(
  "mlp G=128|--model mlp --batch 128 --steps 200"
  "ffn G=128|--model ffn --batch 128 --steps 60"
  "ffn G=256|--model ffn --batch 256 --steps 40"
  "mlp G=128, RigL every 10 steps|--model mlp --batch 128 --steps 200 --algorithm rigl --delta-t 10"
)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for ((r = 0; r < rounds; ++r)); do
  for ((c = 0; c < ${#configs[@]}; ++c)); do
    args=${configs[c]#*|}
    order=(threads ranks)
    ((r % 2)) && order=(ranks threads)
    for how in "${order[@]}"; do
      if [[ $how == threads ]]; then
        "$exe" $args --threads 2 | tail -1 >>"$tmp/$c.threads"
      else
        "${mpirun[@]}" "$exe" $args --threads 1 | tail -1 >>"$tmp/$c.ranks"
      fi
    done
  done
done
field() { grep -o " $1=[0-9.]*" | cut -d= -f2; }
stats() { sort -g | awk '{ v[NR] = $1 } END { printf "%.3f (%.3f-%.3f)", v[int((NR + 1) / 2)], v[1], v[NR] }'; }
med() { sort -g | awk '{ v[NR] = $1 } END { printf "%.3f", v[int((NR + 1) / 2)] }'; }
echo "| model | 1 process x 2 threads ms/step | 2 ranks x 1 thread ms/step | ranks / threads | rank wait for gradient sums | gradient MB per rank-step | gathered MB per RigL update |"
echo "|---|---|---|---|---|---|---|"
for ((c = 0; c < ${#configs[@]}; ++c)); do
  t=$(field ms_per_step <"$tmp/$c.threads" | med)
  k=$(field ms_per_step <"$tmp/$c.ranks" | med)
  ratio=$(awk -v a="$k" -v b="$t" 'BEGIN { printf "%.2fx", a / b }')
  share=$(field comm_share <"$tmp/$c.ranks" | med | awk '{ printf "%.1f%%", 100 * $1 }')
  mb=$(field gradient_bytes_per_step <"$tmp/$c.ranks" | med | awk '{ printf "%.2f", $1 / 1e6 }')
  gmb=$(field gather_bytes_per_update <"$tmp/$c.ranks" | med | awk '{ printf "%.2f", $1 / 1e6 }')
  echo "| ${configs[c]%%|*} | $(field ms_per_step <"$tmp/$c.threads" | stats) | $(field ms_per_step <"$tmp/$c.ranks" | stats) | $ratio | $share | $mb | $gmb |"
done
echo
echo "$rounds rounds, alternating order; $(lscpu | sed -n 's/^Model name: *//p'), family $(lscpu | sed -n 's/^CPU family: *//p') model $(lscpu | sed -n 's/^Model: *//p'), $(getconf _NPROCESSORS_ONLN) cores; $(mpirun --version | head -1)"
