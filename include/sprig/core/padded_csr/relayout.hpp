// sprig/core/padded_csr/relayout.hpp — PaddedCSR's bulk rearrangements of storage: reserve_rows, compact, group_columns.
// Part of core/padded_csr.hpp, which includes it; the contracts are stated at the declarations
// there.
#pragma once

#include <algorithm>
#include <span>
#include <utility>
#include <vector>

#include "../padded_csr.hpp"

namespace sprig {

template <Value T, ColumnIndex Index>
void PaddedCSR<T, Index>::reserve_rows(std::span<const std::pair<std::int64_t, std::int64_t>> row_capacity,
                                       SlotLog* log) {
  std::int64_t extra = 0;
  std::vector<bool> seen(static_cast<std::size_t>(rows_), false);
  for (const auto& [row, capacity] : row_capacity) {
    if (row < 0 || row >= rows_)
      throw ArgumentError(detail::message("PaddedCSR::reserve_rows: row ", row, " outside [0, ", rows_, ")"));
    if (seen[static_cast<std::size_t>(row)])
      throw ArgumentError(detail::message("PaddedCSR::reserve_rows: row ", row, " listed twice"));
    seen[static_cast<std::size_t>(row)] = true;
    const std::int64_t c = wanted_capacity(row, capacity);
    if (c > row_capacity_[row]) extra += c;
  }
  if (extra == 0) return;
  const std::size_t total = col_indices_.size() + static_cast<std::size_t>(extra);
  if (!structure_only_) values_.reserve(total);
  col_indices_.reserve(total);
  if (log) log->resize(static_cast<std::int64_t>(total));  // one resize event: state arrays grow once
  for (const auto& [row, capacity] : row_capacity) {
    const std::int64_t c = wanted_capacity(row, capacity);
    if (c > row_capacity_[row]) relocate_row(row, c, log, /*log_resize=*/false);
  }
  ++topology_version_;
}

template <Value T, ColumnIndex Index>
void PaddedCSR<T, Index>::compact(double padding_ratio, SlotLog* log) {
  check_ratio("PaddedCSR::compact", padding_ratio);
  padding_ratio_ = padding_ratio;
  std::vector<std::int64_t> new_start(static_cast<std::size_t>(rows_)), new_cap(static_cast<std::size_t>(rows_));
  std::int64_t total = 0;
  for (std::int64_t i = 0; i < rows_; ++i) {
    new_start[i] = total;
    new_cap[i] = capacity_for(row_nnz_[i], padding_ratio);
    total += new_cap[i];
  }
  AlignedVector<T> values(structure_only_ ? 0 : static_cast<std::size_t>(total), T(0));
  AlignedVector<Index> cols(static_cast<std::size_t>(total), kPadding);
  std::vector<std::int64_t> sources(static_cast<std::size_t>(total), -1);
  for (std::int64_t i = 0; i < rows_; ++i)
    for (std::int64_t q = 0; q < row_nnz_[i]; ++q) {
      if (!structure_only_) values[new_start[i] + q] = values_[row_start_[i] + q];
      cols[new_start[i] + q] = col_indices_[row_start_[i] + q];
      sources[new_start[i] + q] = row_start_[i] + q;
    }
  values_.swap(values);
  col_indices_.swap(cols);
  row_start_.swap(new_start);
  row_capacity_.swap(new_cap);
  dead_slots_ = 0;
  ++topology_version_;
  if (log) log->remap(std::move(sources));
}

template <Value T, ColumnIndex Index>
template <class Follow>
bool PaddedCSR<T, Index>::group_columns(int shift, Follow&& follow) {
  if (shift < 0 || shift > 62)
    throw ArgumentError(detail::message("PaddedCSR::group_columns: shift ", shift, " outside [0, 62]"));
  const std::int64_t blocks = cols_ == 0 ? 1 : ((cols_ - 1) >> shift) + 1;
  std::vector<std::int64_t> next(static_cast<std::size_t>(blocks) + 1), order;
  AlignedVector<T> v;
  AlignedVector<Index> c;
  bool moved = false;
  for (std::int64_t i = 0; i < rows_; ++i) {
    const std::int64_t s = row_start_[i], n = row_nnz_[i];
    const Index* cols = col_indices_.data() + s;
    if (detail::in_block_order(cols, n, shift)) continue;
    std::fill(next.begin(), next.end(), 0);
    for (std::int64_t q = 0; q < n; ++q)
      ++next[static_cast<std::size_t>((static_cast<std::int64_t>(cols[q]) >> shift) + 1)];
    for (std::int64_t b = 0; b < blocks; ++b) next[b + 1] += next[b];
    order.resize(static_cast<std::size_t>(n));
    for (std::int64_t q = 0; q < n; ++q)
      order[next[static_cast<std::size_t>(static_cast<std::int64_t>(cols[q]) >> shift)]++] = q;
    detail::permute_range(col_indices_, s, order, c);
    if (!values_.empty()) detail::permute_range(values_, s, order, v);  // a structure-only W^T has none
    follow(s, std::span<const std::int64_t>(order));
    moved = true;
  }
  if (moved) ++topology_version_;
  return moved;
}

}  // namespace sprig
