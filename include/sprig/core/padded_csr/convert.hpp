// sprig/core/padded_csr/convert.hpp — PaddedCSR's conversions from dense, CSR and COO, and to tight CSR.
// Part of core/padded_csr.hpp, which includes it; the contracts are stated at the declarations
// there.
#pragma once

#include <algorithm>
#include <numeric>
#include <span>
#include <utility>
#include <vector>

#include "../padded_csr.hpp"

namespace sprig {

template <Value T, ColumnIndex Index>
PaddedCSR<T, Index> PaddedCSR<T, Index>::from_dense(std::type_identity_t<ConstMatrixView<T>> dense, T threshold,
                                                    double padding_ratio) {
  if (!(threshold >= T(0)))
    throw ArgumentError(detail::message("PaddedCSR::from_dense: threshold ", threshold, " must be >= 0"));
  PaddedCSR m;
  m.init_shape("PaddedCSR::from_dense", dense.rows(), dense.cols(), padding_ratio);
  auto keep = [threshold](T x) { return !(std::abs(x) <= threshold); };
  std::vector<std::int64_t> counts(static_cast<std::size_t>(m.rows_), 0);
  for (std::int64_t i = 0; i < m.rows_; ++i) counts[i] = std::count_if(dense.row(i), dense.row(i) + m.cols_, keep);
  m.layout_from_counts(counts);
  for (std::int64_t i = 0; i < m.rows_; ++i) {
    std::int64_t s = m.row_start_[i];
    for (std::int64_t j = 0; j < m.cols_; ++j)
      if (keep(dense(i, j))) m.put(s++, static_cast<Index>(j), dense(i, j));
  }
  m.nnz_ = std::accumulate(counts.begin(), counts.end(), std::int64_t{0});
  return m;
}

template <Value T, ColumnIndex Index>
template <std::integral I>
PaddedCSR<T, Index> PaddedCSR<T, Index>::from_csr(std::int64_t rows, std::int64_t cols,
                                                  std::span<const std::int64_t> row_ptr, std::span<const I> col_indices,
                                                  std::span<const T> values, double padding_ratio) {
  const char* fn = "PaddedCSR::from_csr";
  PaddedCSR m;
  m.init_shape(fn, rows, cols, padding_ratio);
  if (std::ssize(row_ptr) != rows + 1)
    throw ShapeError(detail::message(fn, ": row_ptr has ", row_ptr.size(), " entries, expected rows + 1 = ", rows + 1));
  if (row_ptr[0] != 0) throw ArgumentError(detail::message(fn, ": row_ptr[0] is ", row_ptr[0], ", expected 0"));
  for (std::int64_t i = 0; i < rows; ++i)
    if (row_ptr[i + 1] < row_ptr[i])
      throw ArgumentError(
          detail::message(fn, ": row_ptr decreases at row ", i, " (", row_ptr[i], " > ", row_ptr[i + 1], ")"));
  const std::int64_t nnz = row_ptr[rows];
  if (std::ssize(col_indices) != nnz || std::ssize(values) != nnz)
    throw ShapeError(detail::message(fn, ": row_ptr[rows] = ", nnz, " but col_indices has ", col_indices.size(),
                                     " and values has ", values.size(), " entries"));
  std::vector<std::int64_t> counts(static_cast<std::size_t>(rows));
  for (std::int64_t i = 0; i < rows; ++i) counts[i] = row_ptr[i + 1] - row_ptr[i];
  m.layout_from_counts(counts);
  std::vector<std::pair<std::int64_t, T>> row;
  for (std::int64_t i = 0; i < rows; ++i) {
    row.clear();
    for (std::int64_t p = row_ptr[i]; p < row_ptr[i + 1]; ++p)
      row.emplace_back(static_cast<std::int64_t>(col_indices[p]), values[p]);
    m.fill_row_checked(fn, i, row);
  }
  m.nnz_ = nnz;
  return m;
}

template <Value T, ColumnIndex Index>
template <std::integral I, std::integral J>
PaddedCSR<T, Index> PaddedCSR<T, Index>::from_coo(std::int64_t rows, std::int64_t cols, std::span<const I> row_indices,
                                                  std::span<const J> col_indices, std::span<const T> values,
                                                  double padding_ratio) {
  const char* fn = "PaddedCSR::from_coo";
  PaddedCSR m;
  m.init_shape(fn, rows, cols, padding_ratio);
  const auto n = std::ssize(values);
  if (std::ssize(row_indices) != n || std::ssize(col_indices) != n)
    throw ShapeError(detail::message(fn, ": row_indices, col_indices and values have ", row_indices.size(), ", ",
                                     col_indices.size(), " and ", n, " entries; they must agree"));
  std::vector<std::int64_t> counts(static_cast<std::size_t>(rows), 0);
  for (std::int64_t p = 0; p < n; ++p) {
    const auto r = static_cast<std::int64_t>(row_indices[p]);
    if (r < 0 || r >= rows)
      throw ArgumentError(detail::message(fn, ": entry ", p, " has row ", r, " outside [0, ", rows, ")"));
    ++counts[r];
  }
  // Bucket the entries by row (counting sort), then validate and sort each row.
  std::vector<std::int64_t> offset(static_cast<std::size_t>(rows) + 1, 0);
  for (std::int64_t i = 0; i < rows; ++i) offset[i + 1] = offset[i] + counts[i];
  std::vector<std::int64_t> order(static_cast<std::size_t>(n));
  {
    std::vector<std::int64_t> next(offset.begin(), offset.end() - 1);
    for (std::int64_t p = 0; p < n; ++p) order[next[static_cast<std::int64_t>(row_indices[p])]++] = p;
  }
  m.layout_from_counts(counts);
  std::vector<std::pair<std::int64_t, T>> row;
  for (std::int64_t i = 0; i < rows; ++i) {
    row.clear();
    for (std::int64_t q = offset[i]; q < offset[i + 1]; ++q)
      row.emplace_back(static_cast<std::int64_t>(col_indices[order[q]]), values[order[q]]);
    m.fill_row_checked(fn, i, row);
  }
  m.nnz_ = n;
  return m;
}

template <Value T, ColumnIndex Index>
CSRArrays<T, Index> PaddedCSR<T, Index>::to_csr() const {
  check_has_values("PaddedCSR::to_csr");
  CSRArrays<T, Index> out;
  out.rows = rows_;
  out.cols = cols_;
  out.row_ptr.assign(static_cast<std::size_t>(rows_) + 1, 0);
  out.col_indices.reserve(static_cast<std::size_t>(nnz_));
  out.values.reserve(static_cast<std::size_t>(nnz_));
  std::vector<std::int64_t> order;
  for (std::int64_t i = 0; i < rows_; ++i) {
    const std::int64_t s = row_start_[i];
    order.resize(static_cast<std::size_t>(row_nnz_[i]));
    std::iota(order.begin(), order.end(), s);
    std::sort(order.begin(), order.end(),
              [&](std::int64_t a, std::int64_t b) { return col_indices_[a] < col_indices_[b]; });
    for (std::int64_t q : order) {
      out.col_indices.push_back(col_indices_[q]);
      out.values.push_back(values_[q]);
    }
    out.row_ptr[i + 1] = std::ssize(out.col_indices);
  }
  return out;
}

}  // namespace sprig
