#!/bin/sh
# check_baseline_code.sh PROGRAM: fails if a global or weak function of a dispatching
# program holds AVX or wider instructions (any VEX/EVEX "v..." mnemonic) without naming an
# AVX architecture (xsimd's avx, avx2, avx512...) in its symbol: such a copy could be the one
# the linker kept for code that runs on an SSE4.2 CPU (kernels/dispatch_target.hpp, "Link
# order"). Functions of an AVX architecture are reached from the AVX targets only.
# Compiler-made local clones (.isra, .constprop) stay in their target's object and are fine.
set -eu
bin=$1
globals=$(mktemp)
trap 'rm -f "$globals"' EXIT
nm --defined-only "$bin" | awk '$2 ~ /^[TW]$/ { print $3 }' | sort -u > "$globals"
objdump -d --no-show-raw-insn "$bin" | awk -v globals="$globals" '
  BEGIN { while ((getline s < globals) > 0) global[s] = 1 }
  /^[0-9a-f]+ <.*>:$/ { name = substr($2, 2, length($2) - 3); next }
  {
    n = split($0, f, "\t")
    if (n < 2) next
    split(f[2], w, " ")
    if (w[1] ~ /^v/ && w[1] !~ /^(verr|verw|vmcall|vmlaunch|vmresume|vmxoff|vmread|vmwrite|vmptrld|vmclear)$/ &&
        (name in global) && name !~ /avx/ && !(name in bad)) {
      bad[name] = 1
      print "baseline function with " w[1] ": " name
      count++
    }
  }
  END { if (count) { print count " function(s) would not run on an SSE4.2 CPU"; exit 1 }
        print "ok: every global function with AVX instructions belongs to an AVX target" }'
