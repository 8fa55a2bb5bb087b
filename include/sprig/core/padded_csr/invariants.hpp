// sprig/core/padded_csr/invariants.hpp — PaddedCSR::check_invariants, the structural checker the tests and debug builds use.
// Part of core/padded_csr.hpp, which includes it; the contracts are stated at the declarations
// there.
#pragma once

#include <algorithm>
#include <numeric>
#include <vector>

#include "../padded_csr.hpp"

namespace sprig {

template <Value T, ColumnIndex Index>
void PaddedCSR<T, Index>::check_invariants() const {
  auto fail = [](auto&&... parts) { throw Error(detail::message("PaddedCSR invariant violated: ", parts...)); };
  if (rows_ < 0 || cols_ < 0) fail("negative shape ", rows_, "x", cols_);
  if (std::ssize(row_start_) != rows_ || std::ssize(row_nnz_) != rows_ || std::ssize(row_capacity_) != rows_)
    fail("row arrays have ", row_start_.size(), "/", row_nnz_.size(), "/", row_capacity_.size(),
         " entries, rows = ", rows_);
  if (!structure_only_ && col_indices_.size() != values_.size())
    fail("values has ", values_.size(), " slots but col_indices has ", col_indices_.size());
  if (structure_only_ && !values_.empty()) fail("a structure-only matrix holds ", values_.size(), " values");
  const std::int64_t cap = std::ssize(col_indices_);
  std::vector<std::int64_t> order(static_cast<std::size_t>(rows_));
  std::iota(order.begin(), order.end(), 0);
  std::int64_t live = 0, owned = 0;
  for (std::int64_t i = 0; i < rows_; ++i) {
    if (row_capacity_[i] < 1) fail("row ", i, " has capacity ", row_capacity_[i], " < 1");
    if (row_nnz_[i] < 0 || row_nnz_[i] > row_capacity_[i])
      fail("row ", i, " has nnz ", row_nnz_[i], " outside [0, capacity ", row_capacity_[i], "]");
    if (row_start_[i] < 0 || row_start_[i] + row_capacity_[i] > cap)
      fail("row ", i, " region [", row_start_[i], ", ", row_start_[i] + row_capacity_[i], ") exceeds storage of ", cap,
           " slots");
    live += row_nnz_[i];
    owned += row_capacity_[i];
  }
  if (live != nnz_) fail("row nnz sum to ", live, " but nnz() is ", nnz_);
  if (cap - owned != dead_slots_) fail(cap - owned, " slots are owned by no row but dead_slots() is ", dead_slots_);
  std::sort(order.begin(), order.end(), [&](std::int64_t a, std::int64_t b) { return row_start_[a] < row_start_[b]; });
  for (std::size_t q = 1; q < order.size(); ++q) {
    const std::int64_t a = order[q - 1], b = order[q];
    if (row_start_[a] + row_capacity_[a] > row_start_[b]) fail("regions of rows ", a, " and ", b, " overlap");
  }
  std::vector<std::uint8_t> owned_slot(static_cast<std::size_t>(cap), 0);
  std::vector<std::int64_t> seen(static_cast<std::size_t>(cols_), -1);
  for (std::int64_t i = 0; i < rows_; ++i) {
    for (std::int64_t s = row_start_[i]; s < row_start_[i] + row_capacity_[i]; ++s) {
      owned_slot[s] = 1;
      const std::int64_t c = col_indices_[s];
      if (s < row_start_[i] + row_nnz_[i]) {
        if (c < 0 || c >= cols_) fail("row ", i, " slot ", s, " holds column ", c, " outside [0, ", cols_, ")");
        if (seen[c] == i) fail("row ", i, " holds column ", c, " twice");
        seen[c] = i;
      } else if (c != kPadding || value_at(s) != T(0)) {
        fail("padding slot ", s, " of row ", i, " holds column ", c, " and value ", value_at(s),
             " (expected -1 and 0)");
      }
    }
  }
  for (std::int64_t s = 0; s < cap; ++s)
    if (!owned_slot[s] && (col_indices_[s] != kPadding || value_at(s) != T(0)))
      fail("dead slot ", s, " holds column ", col_indices_[s], " and value ", value_at(s), " (expected -1 and 0)");
}

}  // namespace sprig
