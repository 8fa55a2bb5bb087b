// sprig/core/padded_csr/random.hpp — PaddedCSR's random pattern factories (uniform per row, uniform overall).
// Part of core/padded_csr.hpp, which includes it; the contracts are stated at the declarations
// there.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "../padded_csr.hpp"

namespace sprig {

template <Value T, ColumnIndex Index>
PaddedCSR<T, Index> PaddedCSR<T, Index>::random_per_row(std::int64_t rows, std::int64_t cols, std::int64_t nnz_per_row,
                                                        std::uint64_t seed, double padding_ratio) {
  const char* fn = "PaddedCSR::random_per_row";
  PaddedCSR m;
  m.init_shape(fn, rows, cols, padding_ratio);
  if (nnz_per_row < 0 || nnz_per_row > cols)
    throw ArgumentError(detail::message(fn, ": nnz_per_row ", nnz_per_row, " outside [0, cols = ", cols, "]"));
  std::vector<std::int64_t> counts(static_cast<std::size_t>(rows), nnz_per_row);
  m.layout_from_counts(counts);
  std::vector<std::uint8_t> taken(static_cast<std::size_t>(cols), 0);
  std::vector<std::int64_t> picked;
  for (std::int64_t i = 0; i < rows; ++i) {
    CounterRng rng(seed, kInitStream, static_cast<std::uint64_t>(i));
    sample_distinct(rng, cols, nnz_per_row, taken, picked);
    std::int64_t s = m.row_start_[i];
    for (std::int64_t c : picked) m.put(s++, static_cast<Index>(c), static_cast<T>(rng.uniform(-1.0, 1.0)));
  }
  m.nnz_ = rows * nnz_per_row;
  return m;
}

template <Value T, ColumnIndex Index>
PaddedCSR<T, Index> PaddedCSR<T, Index>::random_total(std::int64_t rows, std::int64_t cols, std::int64_t nnz_total,
                                                      std::uint64_t seed, double padding_ratio) {
  const char* fn = "PaddedCSR::random_total";
  PaddedCSR m;
  m.init_shape(fn, rows, cols, padding_ratio);
  const std::int64_t positions = rows * cols;
  if (nnz_total < 0 || nnz_total > positions)
    throw ArgumentError(detail::message(fn, ": nnz_total ", nnz_total, " outside [0, rows*cols = ", positions, "]"));
  // Distinct linear positions drawn uniformly (the complement when denser than half, where
  // drawing would take ever more rounds). Sort-and-merge beats a hash set ~7x here.
  const bool complement = nnz_total > positions / 2;
  const std::int64_t draw = complement ? positions - nnz_total : nnz_total;
  CounterRng rng(seed, kInitStream, ~std::uint64_t{0});
  std::vector<std::int64_t> linear = draw_distinct_below(rng, positions, draw, [](std::int64_t) { return false; });
  if (complement) {
    std::vector<std::int64_t> kept;
    kept.reserve(static_cast<std::size_t>(nnz_total));
    std::int64_t q = 0;
    for (std::int64_t p = 0; p < positions; ++p) {
      if (q < draw && linear[q] == p) {
        ++q;
        continue;
      }
      kept.push_back(p);
    }
    linear.swap(kept);
  }
  std::vector<std::int64_t> counts(static_cast<std::size_t>(rows), 0);
  for (std::int64_t p : linear) ++counts[p / cols];
  m.layout_from_counts(counts);
  std::int64_t q = 0;
  for (std::int64_t i = 0; i < rows; ++i) {
    std::int64_t s = m.row_start_[i];
    for (std::int64_t e = 0; e < counts[i]; ++e, ++q)
      m.put(s++, static_cast<Index>(linear[q] % cols), static_cast<T>(rng.uniform(-1.0, 1.0)));
  }
  m.nnz_ = nnz_total;
  return m;
}

template <Value T, ColumnIndex Index>
PaddedCSR<T, Index> PaddedCSR<T, Index>::random_density(std::int64_t rows, std::int64_t cols, double density,
                                                        std::uint64_t seed, double padding_ratio) {
  if (!(density >= 0.0 && density <= 1.0))
    throw ArgumentError(detail::message("PaddedCSR::random_density: density ", density, " outside [0, 1]"));
  if (rows < 0 || cols < 0)
    throw ShapeError(detail::message("PaddedCSR::random_density: negative shape ", rows, "x", cols));
  return random_total(rows, cols, std::llround(density * static_cast<double>(rows) * static_cast<double>(cols)), seed,
                      padding_ratio);
}

template <Value T, ColumnIndex Index>
void PaddedCSR<T, Index>::sample_distinct(CounterRng& rng, std::int64_t n, std::int64_t k,
                                          std::vector<std::uint8_t>& taken, std::vector<std::int64_t>& picked) {
  picked.clear();
  for (std::int64_t j = n - k; j < n; ++j) {
    const auto t = static_cast<std::int64_t>(rng.uniform_below(static_cast<std::uint64_t>(j) + 1));
    const std::int64_t v = taken[t] ? j : t;
    taken[v] = 1;
    picked.push_back(v);
  }
  std::sort(picked.begin(), picked.end());
  for (std::int64_t v : picked) taken[v] = 0;
}

}  // namespace sprig
