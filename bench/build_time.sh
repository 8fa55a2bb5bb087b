#!/usr/bin/env bash
# bench/build_time.sh [PRESET] [TARGET...] — build a CMake preset from scratch and print the
# wall time, the CPU time (user + system of every compiler and linker) and the 15 slowest
# build steps from .ninja_log. With TARGETs, builds only those (for example fashion_mnist).
#
#   bench/build_time.sh ci                  # the README's test build
#   bench/build_time.sh ci fashion_mnist    # the main job's build step
#   SPRIG_BUILD_TIME_TEST=1 bench/build_time.sh ci   # then ctest, timed too
#
# The build directory (build/<preset>) is removed first. ccache is disabled for the run
# (CCACHE_DISABLE=1) so the figures are those of a machine without a cache, unless
# SPRIG_BUILD_TIME_CCACHE=1. Output: one "build_time:" line per figure, then the table.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
preset=${1:-ci}
shift || true
dir=build/${preset}
[[ ${SPRIG_BUILD_TIME_CCACHE:-0} == 1 ]] || export CCACHE_DISABLE=1

rm -rf "$dir"
t0=$(date +%s.%N)
cmake --preset "$preset" >/dev/null
t1=$(date +%s.%N)
# CPU time of the children: bash's `times` after the build, minus before.
read -r cu0 cs0 < <(awk '{print $14+$16, $15+$17}' /proc/$$/stat)
# -j nproc rather than ninja's nproc + 2: the per-step times below are then each compile's own.
jobs=(-j "$(nproc)")
if (($#)); then
  cmake --build --preset "$preset" "${jobs[@]}" --target "$@"
else
  cmake --build --preset "$preset" "${jobs[@]}"
fi
t2=$(date +%s.%N)
tck=$(getconf CLK_TCK)
# /proc/self/stat fields 16 and 17 are the reaped children's user and system ticks.
read -r cu1 cs1 < <(awk '{print $14+$16, $15+$17}' /proc/$$/stat)
cpu=$(awk -v a="$cu0" -v b="$cs0" -v c="$cu1" -v d="$cs1" -v t="$tck" 'BEGIN { printf "%.0f", (c + d - a - b) / t }')
printf 'build_time: cpu %s (%s logical CPUs)\n' "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)" "$(nproc)"
printf 'build_time: compiler %s\n' "$(${CXX:-c++} --version | head -n 1)"
printf 'build_time: preset %s, targets: %s\n' "$preset" "${*:-all}"
printf 'build_time: configure %.0f s\n' "$(echo "$t1 - $t0" | bc)"
printf 'build_time: build wall %.0f s, cpu %s s\n' "$(echo "$t2 - $t1" | bc)" "$cpu"
printf 'build_time: build steps %s\n' "$(awk 'NR > 1' "$dir/.ninja_log" | wc -l)"
if [[ ${SPRIG_BUILD_TIME_TEST:-0} == 1 ]]; then
  t3=$(date +%s.%N)
  ctest --preset "$preset" 2>&1 | tail -n 3
  printf 'build_time: test wall %.0f s\n' "$(echo "$(date +%s.%N) - $t3" | bc)"
fi
echo "build_time: 15 slowest steps (seconds, output)"
# .ninja_log v5: start_ms end_ms mtime output hash; a rebuilt output appears once per build.
awk 'NR > 1 { d[$4] = ($2 - $1) / 1000 } END { for (o in d) printf "%8.1f  %s\n", d[o], o }' "$dir/.ninja_log" |
  sort -rn | head -n 15
