#!/usr/bin/env bash
# Two builds of compare_kernels (for example -O3 and -O2) timed in alternation: per kernel and
# shape, the median and the minimum over rounds of each build's sprig time, and their ratios
# B / A (medians, and minima: on a noisy machine the minimum is the steadier estimate), with
# the geometric mean of each ratio per kernel. With --block RxC the block kernels are rows
# of their own (fwd/4x4, ...).
#
#   bench/opt_level_compare.sh BUILD_A BUILD_B [rounds] [compare_kernels options...]
#   bench/opt_level_compare.sh build/dev build/o2 7 --threads 1 --density 0.1 --clock cpu
#
# BUILD_A and BUILD_B are build trees (their bench/compare_kernels is run). Without options
# the grid is compare_kernels --quick --no-eigen --threads 1 --density 0.1 --clock cpu.
set -euo pipefail
a=$1/bench/compare_kernels
b=$2/bench/compare_kernels
rounds=${3:-7}
shift $(($# < 3 ? $# : 3))
opts=("$@")
((${#opts[@]})) || opts=(--quick --no-eigen --threads 1 --density 0.1 --clock cpu)
for exe in "$a" "$b"; do [[ -x $exe ]] || { echo "opt_level_compare: no $exe" >&2; exit 2; }; done
lscpu | sed -n 's/^Model name: *//p; s/^CPU family: *//p; s/^Model: *//p' | paste -sd' ' | sed 's/^/cpu: /'
echo "A: $a"
echo "B: $b"
echo "compare_kernels ${opts[*]} --csv, $rounds rounds alternating A and B"
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
for ((r = 1; r <= rounds; ++r)); do
  for side in A B; do
    exe=$a
    [[ $side == B ]] && exe=$b
    "$exe" "${opts[@]}" --csv 2>/dev/null | awk -F, -v s="$side" '$7 != "openblas" && $7 != "eigen" && NR > 1 {
      print s "," $1 ($7 == "sprig" ? "" : "/" $7) "," $2 "x" $3 "," $5 "," $6 "," $8 }' >>"$tmp"
  done
done
# median per (side, kernel, shape, B, threads), then B / A
printf "%-8s %-10s %5s %2s | %8s %17s | %8s %17s | %6s %6s\n" kern shape B t "A ms" "(min-max)" "B ms" "(min-max)" B/A min
sort -t, -k1,1 -k2,2 -k3,3 -k4,4n -k5,5n -k6,6g "$tmp" | awk -F, '
  { key = $2 "," $3 "," $4 "," $5; k = $1 SUBSEP key; v[k, ++n[k]] = $6; keys[key] = 1 }
  function median(k,   m) { m = n[k]; return m % 2 ? v[k, (m + 1) / 2] : (v[k, m / 2] + v[k, m / 2 + 1]) / 2 }
  END {
    for (key in keys) {
      split(key, f, ",")
      ka = "A" SUBSEP key; kb = "B" SUBSEP key
      printf "%-8s %-10s %5s %2s | %8.4f (%7.4f-%7.4f) | %8.4f (%7.4f-%7.4f) | %6.3f %6.3f\n", f[1], f[2], f[3], f[4],
             median(ka), v[ka, 1], v[ka, n[ka]], median(kb), v[kb, 1], v[kb, n[kb]], median(kb) / median(ka),
             v[kb, 1] / v[ka, 1]
    }
  }' | sort -k1,1 -k2,2 -k3,3n | tee "$tmp.table"
awk '{ k[$1] = 1; lm[$1] += log($(NF - 1)); ln[$1] += log($NF); c[$1]++ }
  END { for (x in k) printf "%s: geometric mean B/A %.3f (medians), %.3f (minima)\n", x, exp(lm[x] / c[x]), exp(ln[x] / c[x]) }' "$tmp.table" | sort
rm -f "$tmp.table"
