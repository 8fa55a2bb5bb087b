#!/usr/bin/env bash
# tests/fuzz/build.sh OUT_DIR — builds sprig's libFuzzer targets and the seed-corpus writer
# with clang++ (Debian clang-14 + libclang-rt-14-dev) from the repository's headers, and
# writes the seed corpora to OUT_DIR/corpus/{reader,ops,safetensors}.
#   OUT_DIR/fuzz_checkpoint_reader   checkpoint readers on arbitrary bytes
#   OUT_DIR/fuzz_padded_csr_ops      PaddedCSR operation programs against a std::map model
#   OUT_DIR/fuzz_safetensors_reader  the safetensors reader and import on arbitrary bytes
#                                    (needs nlohmann-json: Debian nlohmann-json3-dev)
# The targets are built with ASan + UBSan (-fno-sanitize-recover=all): a sanitizer report,
# an exception other than sprig::Error, or an abort from a failed check is a finding.
# CXX overrides the compiler (default: clang++-14, else clang++).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
out=${1:?usage: build.sh OUT_DIR}
mkdir -p "$out"
cxx=${CXX:-$(command -v clang++-14 || command -v clang++)}
common=(-std=c++20 -g -O1 -fno-omit-frame-pointer -I "$root/include" -Wall -Wextra)
san=(-fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all)
echo "fuzz build: $cxx ($("$cxx" --version | head -1))"
"$cxx" "${common[@]}" "$here/make_corpus.cpp" -o "$out/make_corpus"
for t in fuzz_checkpoint_reader fuzz_padded_csr_ops fuzz_safetensors_reader; do
  "$cxx" "${common[@]}" "${san[@]}" "$here/$t.cpp" -o "$out/$t" &
done
wait %1 && wait %2 && wait %3
rm -rf "$out/corpus"
"$out/make_corpus" "$out/corpus"
