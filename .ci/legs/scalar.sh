#!/usr/bin/env bash
# .ci/legs/scalar.sh — the kernel tests on the scalar path: configure with -DSPRIG_SIMD=OFF
# (sprig::sprig then defines SPRIG_NO_SIMD=1 and every kernel skips xsimd), check that the
# define reached the test compiles, build only the kernel test targets and run them.
#
# Needs (installed here when missing): cmake ninja-build g++ libxsimd-dev catch2.
# Build directory: build-ktests-scalar (override with SPRIG_LEG_BUILD_DIR).
set -euo pipefail
cd "$(dirname "$0")/../.."
leg=scalar
start=$SECONDS
# say, fail, install_missing (as root, or through sudo)
source .ci/leg_common.sh
# libxsimd-dev: the top-level CMakeLists finds xsimd even when the kernels do not use it.
install_missing cmake ninja-build g++ libxsimd-dev catch2

mapfile -t targets < <(kernel_tests)
say "kernel test targets: ${targets[*]}"

build=${SPRIG_LEG_BUILD_DIR:-build-ktests-scalar}
cmake_args=(-S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release "-DCMAKE_CXX_FLAGS_RELEASE=-O2 -DNDEBUG"
            -DCMAKE_EXPORT_COMPILE_COMMANDS=ON
            -DSPRIG_SIMD=OFF -DSPRIG_NATIVE=OFF
            -DSPRIG_BUILD_TESTS=ON -DSPRIG_BUILD_BENCHMARKS=OFF -DSPRIG_BUILD_EXAMPLES=OFF)
build_tests "$build"

for t in "${targets[@]}"; do
  cmd=$(compile_command "$build" "$t")
  [[ $cmd == *"-DSPRIG_NO_SIMD=1"* ]] || fail "$t was compiled without -DSPRIG_NO_SIMD=1"
done
say "compiled with -DSPRIG_NO_SIMD=1: ${targets[*]}"

run_tests "$build" "${targets[@]}"
say "PASS (built and ran ${#targets[@]} kernel test executables on the scalar path) in $((SECONDS - start)) s"
