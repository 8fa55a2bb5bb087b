#!/usr/bin/env bash
# .ci/legs/avx512.sh — the kernel tests built for AVX-512 (xsimd default_arch avx512bw),
# whatever CPU CI has: configure with SPRIG_NATIVE=OFF and explicit -mavx512* flags, build
# only the kernel test targets, check that the flags reached the compiler and that xsimd picks
# an AVX-512 architecture with them; run the tests with ctest only when /proc/cpuinfo shows
# every flag used (the build would die with SIGILL otherwise).
#
# Needs (installed here when missing): cmake ninja-build g++ libxsimd-dev catch2.
# Build directory: build-ktests-avx512 (override with SPRIG_LEG_BUILD_DIR); SPRIG_LEG_COMPILE_ONLY=1
# skips running the tests as on a CPU without AVX-512.
set -euo pipefail
cd "$(dirname "$0")/../.."
leg=avx512
start=$SECONDS
# say, fail, install_missing (as root, or through sudo)
source .ci/leg_common.sh

# ---- packages ------------------------------------------------------------------------------
install_missing cmake ninja-build g++ libxsimd-dev catch2

# ---- which tests ---------------------------------------------------------------------------
mapfile -t targets < <(kernel_tests)
say "kernel test targets: ${targets[*]}"

arch_flags="-mavx512f -mavx512bw -mavx512dq -mavx512vl -mfma"
cpu_ok=1
for f in avx512f avx512bw avx512dq avx512vl fma; do
  grep -qw "$f" /proc/cpuinfo || cpu_ok=0
done
[[ ${SPRIG_LEG_COMPILE_ONLY:-0} == 1 ]] && cpu_ok=0  # to exercise the compile-only path

# ---- xsimd picks AVX-512 with these flags --------------------------------------------------
build=${SPRIG_LEG_BUILD_DIR:-build-ktests-avx512}
mkdir -p "$build"
cat > "$build/arch_check.cpp" <<'CPP'
#include <xsimd/xsimd.hpp>
#include <cstdio>
#include <type_traits>
static_assert(std::is_base_of_v<xsimd::avx512f, xsimd::default_arch>,
              "xsimd::default_arch is not an AVX-512 architecture with these flags");
int main() { std::printf("%s\n", xsimd::default_arch::name()); }
CPP
# shellcheck disable=SC2086
g++ -std=c++20 $arch_flags "$build/arch_check.cpp" -o "$build/arch_check" || fail "xsimd does not select AVX-512 with: $arch_flags"
say "static_assert passed: xsimd::default_arch derives from avx512f with: $arch_flags"

# ---- configure and build -------------------------------------------------------------------
cmake_args=(-S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release "-DCMAKE_CXX_FLAGS_RELEASE=-O2 -DNDEBUG"
            -DCMAKE_EXPORT_COMPILE_COMMANDS=ON
            -DSPRIG_NATIVE=OFF "-DSPRIG_EXTRA_ARCH_FLAGS=$arch_flags"
            -DSPRIG_BUILD_TESTS=ON -DSPRIG_BUILD_BENCHMARKS=OFF -DSPRIG_BUILD_EXAMPLES=OFF)
if ((!cpu_ok)); then
  # catch_discover_tests runs each test binary after linking to list its tests; on a CPU
  # without AVX-512 that is SIGILL. A no-op "emulator" skips the listing: compile only.
  cmake_args+=(-DCMAKE_CROSSCOMPILING_EMULATOR=/bin/true)
fi
build_tests "$build"

# The flags really reached the test compiles, and -march=native did not.
for t in "${targets[@]}"; do
  cmd=$(compile_command "$build" "$t")
  for f in $arch_flags; do [[ $cmd == *" $f"* ]] || fail "$t was compiled without $f"; done
  [[ $cmd != *"-march=native"* ]] || fail "$t was compiled with -march=native"
done
say "compiled with $arch_flags and without -march=native: ${targets[*]}"

if ((!cpu_ok)); then
  say "PASS (compile only: this CPU lacks one of avx512f/bw/dq/vl/fma, tests not run) in $((SECONDS - start)) s"
  exit 0
fi

say "CPU has AVX-512: default_arch = $("$build/arch_check"); running the kernel tests"
run_tests "$build" "${targets[@]}"
say "PASS (built and ran ${#targets[@]} kernel test executables with AVX-512) in $((SECONDS - start)) s"
