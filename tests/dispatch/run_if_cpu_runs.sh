#!/bin/sh
# run_if_cpu_runs.sh TARGET PROGRAM [ARGS...]: runs PROGRAM when this CPU executes the
# dispatch target TARGET (its flags in /proc/cpuinfo), else exits 77, which ctest reports
# as skipped.
target=$1
shift
case $target in
  sse4_2) need="sse4_2" ;;
  avx2) need="avx2 fma" ;;
  avx512) need="avx2 fma avx512f avx512cd avx512dq avx512bw avx512vl" ;;
  *) echo "run_if_cpu_runs.sh: unknown target $target" >&2; exit 2 ;;
esac
flags=$(grep -m1 '^flags' /proc/cpuinfo)
for f in $need; do
  case " $flags " in
    *" $f "*) ;;
    *) echo "skipped: this CPU lacks $f for target $target"; exit 77 ;;
  esac
done
exec "$@"
