#!/usr/bin/env bash
# The small MLP's step on the examples' automatic threads, on 1 and on every core, quiet and
# beside a busy loop of 2 shell processes, in --rounds alternating rounds; prints a markdown
# table of median (min-max over rounds) of each run's median and mean ms/step.
#   bench/threads_busy_compare.sh [build dir] [rounds] [threads_step options...]
set -euo pipefail
build=${1:-build/dev}
rounds=${2:-5}
shift $(($# < 2 ? $# : 2))
exe="$build/bench/threads_step"
[[ -x "$exe" ]] || { echo "threads_busy_compare: no $exe (build the threads_step target)" >&2; exit 2; }
cores=$(getconf _NPROCESSORS_ONLN)
tmp=$(mktemp -d)
loops=()
stop_loops() { ((${#loops[@]})) && kill "${loops[@]}" 2>/dev/null; loops=(); }
trap 'stop_loops; rm -rf "$tmp"' EXIT
for phase in quiet busy; do
  if [[ $phase == busy ]]; then
    for k in 1 2; do sh -c 'while :; do :; done' & loops+=($!); done
    sleep 1
  fi
  for ((r = 0; r < rounds; ++r)); do
    for t in 0 1 "$cores"; do "$exe" --threads "$t" "$@" | tail -1 >>"$tmp/$phase.$t"; done
  done
  stop_loops
done
field() { grep -o " $1=[0-9.]*" | cut -d= -f2; }
stats() { sort -g | awk '{ v[NR] = $1 } END { printf "%.3f (%.3f-%.3f)", v[int((NR + 1) / 2)], v[1], v[NR] }'; }
echo "| machine | threads | chosen | median ms/step | mean ms/step |"
echo "|---|---|---|---|---|"
for phase in quiet busy; do
  for t in 0 1 "$cores"; do
    f="$tmp/$phase.$t"
    label=$t; [[ $t == 0 ]] && label="automatic"
    echo "| $phase | $label | $(field threads <"$f" | sort -u | tr '\n' ' ')| $(field median_ms <"$f" | stats) | $(field mean_ms <"$f" | stats) |"
  done
done
echo
echo "$(head -1 "$tmp/quiet.0" | grep -o 'model=[^ ]* sparsity=[^ ]* batch=[^ ]*'); busy = 2 shell loops; $rounds rounds; $(lscpu | sed -n 's/^Model name: *//p'), family $(lscpu | sed -n 's/^CPU family: *//p') model $(lscpu | sed -n 's/^Model: *//p'), $cores cores"
