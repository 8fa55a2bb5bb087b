#!/usr/bin/env bash
# bench/test_counts.sh BUILD_DIR — the test cases and assertions the Catch2 test executables
# of a build run (each executable once, with its default reporter), plus ctest's test count:
# the figures a change to the build must not lower (docs/build.md). The MPI build of the
# dist tests runs under mpirun, not here; test_dispatch runs with its automatic choice.
set -euo pipefail
build=${1:?usage: test_counts.sh BUILD_DIR}
cases=0 assertions=0 executables=0
for exe in "$build"/tests/test_*; do
  [[ -x $exe && ! -d $exe && $exe != *_mpi ]] || continue
  out=$("$exe" 2>&1 | tail -n 3) || { echo "test_counts: $exe failed" >&2; exit 1; }
  line=$(grep -Eo '[0-9]+ assertions? in [0-9]+ test cases?' <<<"$out" | tail -n 1)
  [[ -n $line ]] || { echo "test_counts: no summary from $exe" >&2; exit 1; }
  read -r a _ _ c _ <<<"$line"
  printf '%-36s %6d test cases %9d assertions\n' "$(basename "$exe")" "$c" "$a"
  cases=$((cases + c)) assertions=$((assertions + a)) executables=$((executables + 1))
done
echo "test_counts: ${executables} executables, ${cases} test cases, ${assertions} assertions"
echo "test_counts: ctest $(ctest --test-dir "$build" -N | grep 'Total Tests')"
