#!/usr/bin/env bash
# .ci/legs/fuzz.sh — three libFuzzer targets (clang, ASan + UBSan), each run for a bounded time
# from a seed corpus generated here (no network): the checkpoint readers on arbitrary bytes,
# PaddedCSR operation programs checked against a std::map model, and the safetensors reader
# and import on arbitrary bytes (tests/fuzz/). Prints the
# executions of each run; a finding (crash, sanitizer report, exception other than
# sprig::Error, failed model check, timeout, OOM) fails the leg and leaves its reproducer in
# the build directory.
#
# Needs (installed here when missing): clang-14 libclang-rt-14-dev g++ libxsimd-dev nlohmann-json3-dev.
# Build directory: build-fuzz-leg (override with SPRIG_LEG_BUILD_DIR). SPRIG_FUZZ_SECONDS sets
# the time per target (default 60).
set -euo pipefail
cd "$(dirname "$0")/../.."
leg=fuzz
start=$SECONDS
# say, fail, install_missing (as root, or through sudo)
source .ci/leg_common.sh
install_missing clang-14 libclang-rt-14-dev g++ libxsimd-dev nlohmann-json3-dev

build=${SPRIG_LEG_BUILD_DIR:-build-fuzz-leg}
seconds=${SPRIG_FUZZ_SECONDS:-60}
mkdir -p "$build" && build=$(cd "$build" && pwd)
CXX=${CXX:-clang++-14} tests/fuzz/build.sh "$build" || fail "build"
say "build: $((SECONDS - start)) s"
built=$SECONDS

export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
total=0
run() {
  local target=$1 seeds=$2 max_len=$3
  local work="$build/work-$target"
  rm -rf "$work" && mkdir -p "$work/corpus" "$work/artifacts"
  say "$target: ${seconds} s from $(ls "$seeds" | wc -l) seed files"
  if ! (cd "$work" && "$build/$target" -max_total_time="$seconds" -max_len="$max_len" -timeout=20 -rss_limit_mb=2560 \
          -print_final_stats=1 -artifact_prefix=artifacts/ corpus "$seeds") >"$work/log" 2>&1; then
    tail -n 60 "$work/log"
    fail "$target found a failing input: $(ls "$work/artifacts")"
  fi
  local execs cov
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/log")
  cov=$(grep -Eo 'cov: [0-9]+ ft: [0-9]+' "$work/log" | tail -1 || true)
  say "$target: ${execs} executions, no findings (${cov}, corpus $(ls "$work/corpus" | wc -l) files)"
  total=$((total + execs))
}
run fuzz_checkpoint_reader "$build/corpus/reader" 8192
run fuzz_padded_csr_ops "$build/corpus/ops" 1024
run fuzz_safetensors_reader "$build/corpus/safetensors" 8192
say "PASS: ${total} executions in total, no findings (build $((built - start)) s, fuzzing $((SECONDS - built)) s, total $((SECONDS - start)) s)"
