// memory_demo — what one sparse layer costs in memory: a 784 -> 512 layer (the first layer
// of an MNIST-sized MLP) at 90% sparsity, stored as sprig::PaddedCSR with int32 and with
// int16 column indices, against the dense matrix and a tight CSR export.
//
//   memory_demo [outputs inputs sparsity]      defaults: 512 784 0.9
//
// The weight matrix is W[outputs x inputs] (Y = W X, activations feature-major). The
// program checks that the bytes it measures match the formulas in docs/guide.md (values and
// indices per slot, 3 int64 row arrays) and exits 1 if they do not.
#include <sprig/sprig.hpp>
#include "kernel_label.hpp"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace {

struct Row {
  const char* format;
  const char* index;
  std::int64_t bytes;
};

// Prints W's rows of the table; returns false if a measured size disagrees with the formula.
template <class T, class Index>
bool report(const sprig::PaddedCSR<T, Index>& W, std::int64_t dense_bytes, const char* index_name) {
  const std::int64_t rows = W.rows();
  const std::int64_t nnz = W.nnz(), slots = W.storage_size();
  const auto csr = W.to_csr();
  const std::int64_t csr_bytes = std::ssize(csr.values) * std::int64_t{sizeof(T)} +
                                 std::ssize(csr.col_indices) * std::int64_t{sizeof(Index)} +
                                 std::ssize(csr.row_ptr) * std::int64_t{sizeof(std::int64_t)};
  const sprig::PaddedCSRMemory mem = W.memory();
  const Row table[] = {{"CSR (tight)", index_name, csr_bytes}, {"Padded-CSR", index_name, mem.total()}};
  for (const Row& r : table)
    std::printf("%-13s %-6s %10lld  %9.2f  %7.1f%%  %5.2fx\n", r.format, r.index, static_cast<long long>(r.bytes),
                nnz ? static_cast<double>(r.bytes) / static_cast<double>(nnz) : 0.0,
                100.0 * static_cast<double>(r.bytes) / static_cast<double>(dense_bytes),
                r.bytes ? static_cast<double>(dense_bytes) / static_cast<double>(r.bytes) : 0.0);

  // docs/guide.md's arithmetic, checked against what the object really holds.
  const std::int64_t want_values = slots * std::int64_t{sizeof(T)}, want_index = slots * std::int64_t{sizeof(Index)};
  const std::int64_t want_rows = 3 * 8 * rows,
                     want_csr = nnz * std::int64_t{sizeof(T) + sizeof(Index)} + 8 * (rows + 1);
  const bool ok = mem.values == want_values && mem.col_indices == want_index && mem.row_arrays == want_rows &&
                  csr_bytes == want_csr;
  if (!ok)
    std::printf(
        "  MISMATCH with the formulas: values %lld (want %lld), indices %lld (want %lld), row arrays %lld "
        "(want %lld), CSR %lld (want %lld)\n",
        static_cast<long long>(mem.values), static_cast<long long>(want_values),
        static_cast<long long>(mem.col_indices), static_cast<long long>(want_index),
        static_cast<long long>(mem.row_arrays), static_cast<long long>(want_rows), static_cast<long long>(csr_bytes),
        static_cast<long long>(want_csr));
  return ok;
}

bool parse(const char* text, double& out) {
  char* end = nullptr;
  out = std::strtod(text, &end);
  return end != text && *end == '\0';
}

}  // namespace

int main(int argc, char** argv) {
  double outputs = 512, inputs = 784, sparsity = 0.9;
  if (argc != 1 && (argc != 4 || !parse(argv[1], outputs) || !parse(argv[2], inputs) || !parse(argv[3], sparsity))) {
    std::fprintf(stderr, "usage: %s [outputs inputs sparsity]   (defaults: 512 784 0.9)\n", argv[0]);
    return 2;
  }
  const auto rows = static_cast<std::int64_t>(outputs), cols = static_cast<std::int64_t>(inputs);
  if (rows < 1 || cols < 1 || rows != outputs || cols != inputs || !(sparsity >= 0.0 && sparsity < 1.0)) {
    std::fprintf(stderr, "outputs and inputs must be positive integers and sparsity in [0, 1)\n");
    return 2;
  }

  try {
    const std::int64_t dense_bytes = rows * cols * std::int64_t{sizeof(float)};
    const auto layer = sprig::PaddedCSR<float, std::int32_t>::random_density(rows, cols, 1.0 - sparsity, /*seed=*/42);
    const double ratio = layer.padding_ratio();
    std::printf("sprig memory demo: a %lld -> %lld layer at %.0f%% sparsity, float weights; %s\n",
                static_cast<long long>(cols), static_cast<long long>(rows), 100.0 * sparsity,
                examples::kernel_label().c_str());
    std::printf("W is %lld x %lld (outputs x inputs): %lld live weights of %lld (density %.4f)\n",
                static_cast<long long>(rows), static_cast<long long>(cols), static_cast<long long>(layer.nnz()),
                static_cast<long long>(rows * cols), layer.density());
    std::printf("padding ratio %.2f: %lld slots (nnz x %.2f = %.1f, each row rounded up to a whole slot)\n\n", ratio,
                static_cast<long long>(layer.storage_size()), 1.0 + ratio,
                static_cast<double>(layer.nnz()) * (1.0 + ratio));

    std::printf("%-13s %-6s %10s  %9s  %8s  %6s\n", "format", "index", "bytes", "per live", "of dense", "smaller");
    std::printf("%-13s %-6s %10lld  %9.2f  %7.1f%%  %5.2fx\n", "dense", "-", static_cast<long long>(dense_bytes),
                layer.nnz() ? static_cast<double>(dense_bytes) / static_cast<double>(layer.nnz()) : 0.0, 100.0, 1.0);
    bool ok = report(layer, dense_bytes, "int32");
    if (cols <= 32768)  // the same seed gives the same pattern and values with int16 columns
      ok = report(sprig::PaddedCSR<float, std::int16_t>::random_density(rows, cols, 1.0 - sparsity, 42), dense_bytes,
                  "int16") &&
           ok;
    else
      std::printf("(int16 indices cannot address %lld columns)\n", static_cast<long long>(cols));

    const sprig::PaddedCSRMemory m = layer.memory();
    std::printf("\nPadded-CSR int32 by array: values %lld B, column indices %lld B, row arrays %lld B, object %lld B\n",
                static_cast<long long>(m.values), static_cast<long long>(m.col_indices),
                static_cast<long long>(m.row_arrays), static_cast<long long>(m.object));
    return ok ? 0 : 1;
  } catch (const sprig::Error& e) {
    std::fprintf(stderr, "memory_demo: %s\n", e.what());
    return 1;
  }
}
