#!/usr/bin/env bash
# A dispatching compare_kernels (built with -DSPRIG_DISPATCH=ON -DSPRIG_NATIVE=OFF) forced to
# each target in turn (SPRIG_KERNEL_ARCH), timed against a build compiled natively for that
# target, alternating the two round by round (bench/opt_level_compare.sh): B / A near 1 means
# the dispatched kernels run at native speed.
#
#   bench/dispatch_compare.sh DISPATCH_BUILD AVX512_BUILD AVX2_BUILD SSE4_2_BUILD [rounds] [options...]
#   bench/dispatch_compare.sh build/dispatch build/dev build/native_avx2 build/native_sse4_2 7
#
# The native builds: -march=native on an AVX-512 machine, and -DSPRIG_NATIVE=OFF with
# -DSPRIG_EXTRA_ARCH_FLAGS="-mavx2 -mfma" or "-msse4.2". A target this CPU cannot run is
# reported and left out. Options as opt_level_compare.sh (default: its quick grid).
set -euo pipefail
here=$(dirname "${BASH_SOURCE[0]}")
dispatch=$1
declare -A native=([avx512]=$2 [avx2]=$3 [sse4_2]=$4)
rounds=${5:-7}
shift $(($# < 5 ? $# : 5))
for target in avx512 avx2 sse4_2; do
  echo "== target ${target}: A = ${native[$target]} (native), B = ${dispatch} (SPRIG_KERNEL_ARCH=${target})"
  if ! SPRIG_KERNEL_ARCH=$target "$dispatch/bench/compare_kernels" --quick --no-eigen --threads 1 --density 0.1 \
      --reps 1 --csv >/dev/null 2>&1; then
    echo "skipped: this CPU does not run ${target}"
    continue
  fi
  SPRIG_KERNEL_ARCH=$target "$here/opt_level_compare.sh" "${native[$target]}" "$dispatch" "$rounds" "$@"
done
