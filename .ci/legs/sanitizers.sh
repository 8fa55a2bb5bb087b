#!/usr/bin/env bash
# .ci/legs/sanitizers.sh — the whole test suite under AddressSanitizer + UndefinedBehaviorSanitizer
# (gcc, -fno-sanitize-recover=all: the first report fails the test), Debug so that
# SPRIG_ASSERT and libstdc++ assertions stay on, at -O0 with -g1 (line tables: reports keep
# file and line). The build is most of this leg: full -g made it 1.7x longer, and -O0 against
# -O1 took it from 2021 s to 462 s on 2 cores (Zen 4) while the tests went from 167 s to
# 376 s: 14 minutes against 36. SPRIG_NATIVE ON (the kernels' SIMD paths are what needs
# checking), benchmarks and examples OFF. The MPI tests run without leak detection (below).
#
# Needs (installed here when missing): cmake ninja-build g++ libxsimd-dev catch2 zlib1g-dev
# libopenblas-openmp-dev libeigen3-dev libcli11-dev.
# Build directory: build-asan-leg (override with SPRIG_LEG_BUILD_DIR). SPRIG_LEG_JOBS sets the
# parallelism (default 2). SPRIG_ASAN_EXCLUDE, a ctest -E regex, skips tests (none by default).
set -euo pipefail
cd "$(dirname "$0")/../.."
leg=sanitizers
start=$SECONDS
# say, fail, install_missing (as root, or through sudo)
source .ci/leg_common.sh
install_missing cmake ninja-build g++ libxsimd-dev catch2 zlib1g-dev libopenblas-openmp-dev libeigen3-dev libcli11-dev

build=${SPRIG_LEG_BUILD_DIR:-build-asan-leg}
jobs=${SPRIG_LEG_JOBS:-2}
san="-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer"
cmake_args=(-S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Debug
            "-DCMAKE_CXX_FLAGS=$san -D_GLIBCXX_ASSERTIONS" "-DCMAKE_CXX_FLAGS_DEBUG=-O0 -g1"
            "-DCMAKE_EXE_LINKER_FLAGS=-fsanitize=address,undefined"
            -DSPRIG_NATIVE=ON -DSPRIG_BUILD_TESTS=ON -DSPRIG_BUILD_BENCHMARKS=OFF -DSPRIG_BUILD_EXAMPLES=OFF)
say "configure: cmake ${cmake_args[*]}"
mkdir -p "$build"
cmake "${cmake_args[@]}" >"$build/configure.log" 2>&1 || { cat "$build/configure.log"; fail "configure"; }
say "build: cmake --build $build -j $jobs"
cmake --build "$build" -j "$jobs" || fail "build"
built=$SECONDS
say "built in $((built - start)) s"

# detect_leaks: every test must free what it allocates. halt_on_error/abort: the first
# report ends the test with a failure (ctest sees the non-zero exit).
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:strict_string_checks=1:detect_stack_use_after_return=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
export OMP_NUM_THREADS=2
ctest_args=(--test-dir "$build" --output-on-failure -j "$jobs" --timeout 900)
[[ -n ${SPRIG_ASAN_EXCLUDE:-} ]] && ctest_args+=(-E "$SPRIG_ASAN_EXCLUDE") && say "excluding tests matching: $SPRIG_ASAN_EXCLUDE"
say "ctest ${ctest_args[*]} -LE mpi"
ctest "${ctest_args[@]}" -LE mpi || fail "ctest (a test failed or a sanitizer reported an error; see above)"
# The MPI tests (label mpi, built where Open MPI is installed) with every check but leaks: Open
# MPI leaves its own allocations at exit, in components it has unloaded by then, so no
# suppression can name them (an empty MPI_Init/MPI_Finalize program reports 7 leaks).
if ctest --test-dir "$build" -N -L mpi | grep -q 'Total Tests: [1-9]'; then
  say "ctest ${ctest_args[*]} -L mpi, without leak detection"
  ASAN_OPTIONS=${ASAN_OPTIONS/detect_leaks=1/detect_leaks=0} ctest "${ctest_args[@]}" -L mpi ||
    fail "ctest -L mpi (a test failed or a sanitizer reported an error; see above)"
fi
say "PASS: the test suite is clean under ASan + UBSan (build $((built - start)) s, tests $((SECONDS - built)) s, total $((SECONDS - start)) s)"
