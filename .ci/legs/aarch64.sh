#!/usr/bin/env bash
# .ci/legs/aarch64.sh — the kernel tests cross-compiled for aarch64 (xsimd NEON path) and run
# under qemu-user. Plain compiler command lines, no CMake: the include path holds only
# sprig's include/ and a folder with two symlinks (xsimd, catch2) into /usr/include, because
# adding all of /usr/include would pull x86 system headers into the cross build.
# A tiny program checks that xsimd::default_arch is neon64 there (static_assert) and prints
# its name under qemu. OpenMP is on (-fopenmp), so the 1/2/3-thread bitwise tests run too.
#
# Needs (installed here when missing): cmake g++-aarch64-linux-gnu libc6-dev-arm64-cross
# libgomp1-arm64-cross qemu-user libxsimd-dev catch2.
# Build directory: build-ktests-aarch64 (override with SPRIG_LEG_BUILD_DIR).
set -euo pipefail
cd "$(dirname "$0")/../.."
leg=aarch64
start=$SECONDS
# say, fail, install_missing (as root, or through sudo)
source .ci/leg_common.sh
install_missing cmake g++-aarch64-linux-gnu libc6-dev-arm64-cross libgomp1-arm64-cross qemu-user libxsimd-dev catch2

cxx=aarch64-linux-gnu-g++
# Through ccache where it is installed, with the repository as base directory (a fresh clone
# hits an earlier clone's objects; cmake/SprigCcache.cmake does the same for CMake builds).
ccache=()
if command -v ccache >/dev/null && [[ ${CCACHE_DISABLE:-0} != 1 ]]; then
  ccache=(env "CCACHE_BASEDIR=$PWD" CCACHE_NOHASHDIR=1 ccache)
fi
sysroot=/usr/aarch64-linux-gnu
# Passive OpenMP waits: spinning idle threads are emulated instruction by instruction.
run() { OMP_WAIT_POLICY=passive qemu-aarch64 -L "$sysroot" "$@"; }

mapfile -t tests < <(kernel_tests)
say "kernel tests: ${tests[*]}"

build=${SPRIG_LEG_BUILD_DIR:-build-ktests-aarch64}
sysinc=$build/sysinc
mkdir -p "$sysinc"
ln -sfn /usr/include/xsimd "$sysinc/xsimd"
ln -sfn /usr/include/catch2 "$sysinc/catch2"
# Release-like, with the library's debug assertions left on (NDEBUG not defined): under
# qemu there is time for them, and they check every view index the kernels compute.
flags=(-std=c++20 -O2 -fopenmp -Wall -Wextra -Wpedantic -isystem "$sysinc" -Iinclude)
say "compiler: $($cxx --version | head -n 1)"
say "flags: ${flags[*]}"

# ---- xsimd's architecture there ------------------------------------------------------------
cat > "$build/arch_check.cpp" <<'CPP'
#include <xsimd/xsimd.hpp>
#include <cstdio>
#include <type_traits>
static_assert(std::is_same_v<xsimd::default_arch, xsimd::neon64>, "xsimd::default_arch is not neon64");
static_assert(xsimd::batch<float>::size == 4, "a NEON register holds 4 floats");
int main() { std::printf("%s\n", xsimd::default_arch::name()); }
CPP
$cxx "${flags[@]}" "$build/arch_check.cpp" -o "$build/arch_check" || fail "xsimd::default_arch is not neon64"
arch=$(run "$build/arch_check") || fail "qemu-aarch64 could not run a cross-compiled program"
say "static_assert passed: default_arch is xsimd::neon64 (its name() under qemu: $arch)"

# ---- build (2 jobs) ------------------------------------------------------------------------
cat > "$build/catch_main.cpp" <<'CPP'
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
CPP
compile() {  # name source...
  local out=$1
  shift
  if ! "${ccache[@]}" $cxx "${flags[@]}" "$@" -o "$build/$out" >"$build/$out.log" 2>&1; then
    cat "$build/$out.log"
    return 1
  fi
}
say "compiling catch_main.o"
compile catch_main.o -c "$build/catch_main.cpp" || fail "compile catch main"
# Every translation unit compiles on its own (two at a time), then each test links: a test's
# tests/parts/<test>_<k>.cpp are more translation units of the same executable.
units=()
for t in "${tests[@]}"; do
  units+=("tests/$t.cpp")
  for p in tests/parts/"$t"_*.cpp; do [[ -f $p ]] && units+=("$p"); done
done
object_of() { local u=${1#tests/}; echo "obj_${u//\//_}.o"; }
# two_at_a_time compile ARGS...: runs compile in the background, at most two at once;
# all_done waits for the rest. A failure ends the leg.
pids=()
two_at_a_time() {
  "$@" &
  pids+=($!)
  if ((${#pids[@]} == 2)); then
    wait "${pids[0]}" || fail "$* (or the job before it)"
    pids=("${pids[@]:1}")
  fi
}
all_done() {
  local p
  for p in "${pids[@]}"; do wait "$p" || fail "a compile or link"; done
  pids=()
}
for u in "${units[@]}"; do
  say "compiling $u: $cxx ${flags[*]} -c $u"
  two_at_a_time compile "$(object_of "$u")" -c "$u"
done
all_done
for t in "${tests[@]}"; do
  objs=("$build/$(object_of "tests/$t.cpp")")
  for p in tests/parts/"$t"_*.cpp; do [[ -f $p ]] && objs+=("$build/$(object_of "$p")"); done
  say "linking $t"
  two_at_a_time compile "$t" "${objs[@]}" "$build/catch_main.o"
done
all_done
for t in "${tests[@]}"; do [[ -x $build/$t ]] || fail "$t was not built"; done
say "built in $((SECONDS - start)) s"
built=$SECONDS

# ---- run under qemu ------------------------------------------------------------------------
passed=0
failed=()
for t in "${tests[@]}"; do
  say "running: qemu-aarch64 -L $sysroot $build/$t"
  t0=$SECONDS
  if run "$build/$t" >"$build/$t.out" 2>&1; then
    passed=$((passed + 1))
    say "$t: $(grep -E 'All tests passed|test cases' "$build/$t.out" | tail -n 1) ($((SECONDS - t0)) s)"
  else
    cat "$build/$t.out"
    failed+=("$t")
    say "$t FAILED ($((SECONDS - t0)) s)"
  fi
done
((${#failed[@]} == 0)) || fail "${failed[*]} (${passed} of ${#tests[@]} executables passed)"
say "tests: $((SECONDS - built)) s"
say "PASS (${passed} kernel test executables built for aarch64/neon64 and passed under qemu) in $((SECONDS - start)) s"
