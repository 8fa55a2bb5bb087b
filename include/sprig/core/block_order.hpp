// sprig/core/block_order.hpp — a row's live entries in column-block order, block b = columns
// [b << shift, (b + 1) << shift): the test for it, and the permutation that moves one
// per-slot array along when a row is put in that order (PaddedCSR::group_columns, and the
// gradient and optimizer state that follow it in SparseParameter::group_columns). The column
// blocks the kernels work through rely on it (kernels/panels.hpp: ColumnBlocks).
#pragma once

#include <cstddef>
#include <climits>
#include <cstdint>
#include <iterator>
#include <span>

namespace sprig::detail {

// Whether no entry of c[0, n) lies in an earlier block than the one before it. A branch-free
// count in 32 bits and shifts in the Index's own width, so it vectorises (with 64-bit counts
// and shifts, or an or-reduced flag, it did not; docs/design.md, "Measurements behind the
// code"); a row too long for a 32-bit count takes a 64-bit one.
template <class Index>
bool in_block_order(const Index* c, std::int64_t n, int shift) noexcept {
  if (shift >= static_cast<int>(8 * sizeof(Index)) - 1) return true;  // one block holds every column
  if (n > INT32_MAX) {
    for (std::int64_t q = 1; q < n; ++q)
      if ((c[q] >> shift) < (c[q - 1] >> shift)) return false;
    return true;
  }
  std::int32_t descents = 0;
  for (std::int64_t q = 1; q < n; ++q) descents += (c[q] >> shift) < (c[q - 1] >> shift);
  return descents == 0;
}

// a[start + j] = old a[start + order[j]] for j < order.size(); `scratch` holds the old range.
template <class Vec, class Scratch>
void permute_range(Vec& a, std::int64_t start, std::span<const std::int64_t> order, Scratch& scratch) {
  const auto s = static_cast<std::size_t>(start);
  scratch.assign(a.begin() + start, a.begin() + start + std::ssize(order));
  for (std::size_t j = 0; j < order.size(); ++j) a[s + j] = scratch[static_cast<std::size_t>(order[j])];
}

}  // namespace sprig::detail
