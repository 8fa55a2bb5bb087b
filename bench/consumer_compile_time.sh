#!/usr/bin/env bash
# bench/consumer_compile_time.sh [ROUNDS] — what sprig costs a consumer's translation unit:
# examples/readme_training.cpp (a sparse MLP trained with AdamW and RigL) compiled as it is,
# through the umbrella <sprig/sprig.hpp>, and with only the five headers it uses; and, for
# scale, a TU that includes the umbrella and does nothing. g++ -std=c++20 -O2 -march=native
# -fopenmp, one compile at a time, ROUNDS (default 3) alternating rounds; prints each
# variant's median and range in seconds.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
rounds=${1:-3}
cxx=${CXX:-g++}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

cp examples/readme_training.cpp "$work/umbrella.cpp"
narrow='#include <sprig/core/matrix.hpp>\n#include <sprig/dst/model_builder.hpp>\n#include <sprig/dst/rigl.hpp>\n#include <sprig/nn/softmax_cross_entropy.hpp>\n#include <sprig/optim/adamw.hpp>'
sed "s|#include <sprig/sprig.hpp>|${narrow}|" examples/readme_training.cpp >"$work/narrow.cpp"
grep -q 'sprig/sprig.hpp' "$work/narrow.cpp" && { echo "consumer_compile_time: the umbrella include was not replaced" >&2; exit 1; }
printf '#include <sprig/sprig.hpp>\nint main() { return 0; }\n' >"$work/include_only.cpp"

flags=(-std=c++20 -O2 -march=native -fopenmp -Iinclude)
variants=(umbrella narrow include_only)
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
echo "compiler: $($cxx --version | head -n 1)"
echo "flags: ${flags[*]}, $rounds rounds"
declare -A times
for ((r = 0; r < rounds; ++r)); do
  for v in "${variants[@]}"; do
    t0=$(date +%s.%N)
    "$cxx" "${flags[@]}" -c "$work/$v.cpp" -o "$work/$v.o"
    times[$v]+="$(echo "$(date +%s.%N) - $t0" | bc) "
  done
done
# the narrow TU must link and behave like the umbrella one
"$cxx" "${flags[@]}" "$work/narrow.o" -o "$work/narrow"
"$work/narrow" >/dev/null || { echo "consumer_compile_time: the narrow program failed" >&2; exit 1; }
for v in "${variants[@]}"; do
  # shellcheck disable=SC2086
  printf '%-13s %s\n' "$v" "$(printf '%s\n' ${times[$v]} | sort -n | awk '{ a[NR] = $1 } END { printf "median %.1f s (range %.1f-%.1f)", a[int((NR + 1) / 2)], a[1], a[NR] }')"
done
