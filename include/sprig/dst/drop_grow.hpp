// sprig/dst/drop_grow.hpp — the per-layer drop and grow steps shared by the DST algorithms,
// on real sparse storage (no mask, no dense weight).
//
// Semantics follow the reference RigL optimizers: drop the k live weights of smallest
// magnitude, grow k positions chosen among all positions that were not kept (so a
// just-dropped position may be chosen again; it then simply stays, keeping its value and
// optimizer state). Positions that are really new start with value 0 and zero state. The
// live count of the layer is unchanged; row counts change freely (rows grow past their
// capacity and relocate).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <unordered_set>
#include <vector>

#include "../core/matrix.hpp"
#include "../core/padded_csr.hpp"
#include "../core/rng.hpp"
#include "../core/slot_log.hpp"
#include "top_k.hpp"

namespace sprig::dst {

// The k live slots with the smallest |w|; ties broken by smaller (row, col) first. O(nnz).
template <Value T, ColumnIndex Index>
std::vector<std::int64_t> smallest_magnitude_slots(const PaddedCSR<T, Index>& W, std::int64_t k) {
  if (k < 0 || k > W.nnz())
    throw ArgumentError(sprig::detail::message("smallest_magnitude_slots: k = ", k, " outside [0, nnz = ", W.nnz(), "]"));
  struct Entry {
    T magnitude;
    std::int64_t position;
    std::int64_t slot;
  };
  std::vector<Entry> live;
  live.reserve(static_cast<std::size_t>(W.nnz()));
  W.for_each_live([&](std::int64_t i, std::int64_t c, T v, std::int64_t s) { live.push_back({std::abs(v), i * W.cols() + c, s}); });
  auto less = [](const Entry& a, const Entry& b) {
    return a.magnitude != b.magnitude ? a.magnitude < b.magnitude : a.position < b.position;
  };
  if (k < std::ssize(live)) std::nth_element(live.begin(), live.begin() + k, live.end(), less);
  std::vector<std::int64_t> slots(static_cast<std::size_t>(k));
  for (std::int64_t q = 0; q < k; ++q) slots[q] = live[q].slot;
  return slots;
}

// Linear positions (row * cols + col) of the given live slots, in the same order.
template <Value T, ColumnIndex Index>
std::vector<std::int64_t> positions_of(const PaddedCSR<T, Index>& W, std::span<const std::int64_t> slots) {
  // slot -> row through the row regions sorted by start (regions need not be in row order)
  std::vector<std::int64_t> order(static_cast<std::size_t>(W.rows()));
  for (std::int64_t i = 0; i < W.rows(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](std::int64_t a, std::int64_t b) { return W.row_start(a) < W.row_start(b); });
  std::vector<std::int64_t> out;
  out.reserve(slots.size());
  for (std::int64_t s : slots) {
    auto it = std::upper_bound(order.begin(), order.end(), s, [&](std::int64_t v, std::int64_t r) { return v < W.row_start(r); });
    if (it == order.begin() || s >= W.row_start(*(it - 1)) + W.row_nnz(*(it - 1)))
      throw ArgumentError(sprig::detail::message("positions_of: slot ", s, " is not live"));
    out.push_back(*(it - 1) * W.cols() + static_cast<std::int64_t>(W.col_indices()[s]));
  }
  return out;
}

struct DropGrowStats {
  std::int64_t dropped = 0;   // weights really removed
  std::int64_t grown = 0;     // weights really added (value 0, zero state)
  std::int64_t regrown = 0;   // dropped and chosen again: kept with value and state
};

// Removes `drop_slots` and adds `grow` (positions not live after the drop, distinct), logging
// every slot move in `log`. A grow position that is among the dropped ones cancels that drop.
template <Value T, ColumnIndex Index>
DropGrowStats apply_drop_grow(PaddedCSR<T, Index>& W, std::span<const std::int64_t> drop_slots,
                              std::span<const ScoredPosition> grow, SlotLog& log) {
  const std::vector<std::int64_t> drop_positions = positions_of(W, drop_slots);
  std::unordered_set<std::int64_t> grow_positions;
  grow_positions.reserve(grow.size() * 2);
  for (const ScoredPosition& p : grow) grow_positions.insert(p.row * W.cols() + p.col);
  std::vector<std::int64_t> really_drop;
  std::unordered_set<std::int64_t> regrow;
  really_drop.reserve(drop_slots.size());
  for (std::size_t q = 0; q < drop_slots.size(); ++q) {
    if (grow_positions.count(drop_positions[q]))
      regrow.insert(drop_positions[q]);
    else
      really_drop.push_back(drop_slots[q]);
  }
  W.erase_slots(really_drop, &log);
  DropGrowStats stats;
  stats.dropped = std::ssize(really_drop);
  stats.regrown = std::ssize(regrow);
  for (const ScoredPosition& p : grow) {
    if (regrow.count(p.row * W.cols() + p.col)) continue;
    W.insert_new(p.row, p.col, T(0), &log);
    ++stats.grown;
  }
  return stats;
}

// Per row, a marker of the columns that are kept (live and not in the drop set): the
// positions a grow step must skip. kept_cols(row) is valid until the next call for another row.
template <Value T, ColumnIndex Index>
class KeptColumns {
public:
  KeptColumns(const PaddedCSR<T, Index>& W, const std::unordered_set<std::int64_t>& dropped_positions)
      : W_(W), dropped_(dropped_positions), mark_(static_cast<std::size_t>(W.cols()), -1) {}

  bool kept(std::int64_t row, std::int64_t col) {
    if (row != current_) load(row);
    return mark_[static_cast<std::size_t>(col)] == row;
  }

private:
  void load(std::int64_t row) {
    current_ = row;
    const auto r = W_.row(row);
    for (std::size_t q = 0; q < r.cols.size(); ++q) {
      const std::int64_t c = r.cols[q];
      if (!dropped_.count(row * W_.cols() + c)) mark_[static_cast<std::size_t>(c)] = row;
    }
  }
  const PaddedCSR<T, Index>& W_;
  const std::unordered_set<std::int64_t>& dropped_;
  std::vector<std::int64_t> mark_;
  std::int64_t current_ = -1;
};

// k positions uniformly at random (without replacement) among those not kept, by rejection
// from the counter-based stream `rng`. Expected O(k) draws while the kept fraction is small;
// falls back to enumerating free positions when it is not.
template <Value T, ColumnIndex Index>
std::vector<ScoredPosition> random_free_positions(const PaddedCSR<T, Index>& W,
                                                  const std::unordered_set<std::int64_t>& dropped_positions,
                                                  std::int64_t k, CounterRng& rng) {
  const std::int64_t total = W.rows() * W.cols();
  const std::int64_t kept = W.nnz() - std::ssize(dropped_positions);
  const std::int64_t free = total - kept;
  if (k > free)
    throw ArgumentError(sprig::detail::message("random_free_positions: k = ", k, " exceeds the ", free, " free positions"));
  std::vector<ScoredPosition> out;
  out.reserve(static_cast<std::size_t>(k));
  if (free >= 4 * k + 64 && 2 * kept <= total) {
    // rejection: live positions as a hash set for O(1) lookups
    std::unordered_set<std::int64_t> live;
    live.reserve(static_cast<std::size_t>(W.nnz()) * 2);
    W.for_each_live([&](std::int64_t i, std::int64_t c, T, std::int64_t) { live.insert(i * W.cols() + c); });
    std::unordered_set<std::int64_t> chosen;
    while (std::ssize(out) < k) {
      const auto pos = static_cast<std::int64_t>(rng.uniform_below(static_cast<std::uint64_t>(total)));
      if ((live.count(pos) && !dropped_positions.count(pos)) || !chosen.insert(pos).second) continue;
      out.push_back({0.0, pos / W.cols(), pos % W.cols()});
    }
  } else {
    // enumerate the free positions, then a partial Fisher-Yates shuffle picks k of them
    std::vector<std::int64_t> candidates;
    candidates.reserve(static_cast<std::size_t>(free));
    KeptColumns<T, Index> kept_cols(W, dropped_positions);
    for (std::int64_t i = 0; i < W.rows(); ++i)
      for (std::int64_t c = 0; c < W.cols(); ++c)
        if (!kept_cols.kept(i, c)) candidates.push_back(i * W.cols() + c);
    for (std::int64_t q = 0; q < k; ++q) {
      const auto j = q + static_cast<std::int64_t>(rng.uniform_below(static_cast<std::uint64_t>(free - q)));
      std::swap(candidates[q], candidates[j]);
      out.push_back({0.0, candidates[q] / W.cols(), candidates[q] % W.cols()});
    }
  }
  return out;
}

}  // namespace sprig::dst

namespace sprig::dst {

// The k positions with the largest |dense gradient| among those not kept, streaming the
// gradient in blocks of `block_rows` rows: `block_gradient(r0, n, out)` must write rows
// [r0, r0 + n) of dL/dW (dense, n x cols) into `out`. Extra memory: one block plus k entries,
// never rows x cols.
template <Value T, ColumnIndex Index, class BlockGradient>
std::vector<ScoredPosition> top_gradient_positions(const PaddedCSR<T, Index>& W,
                                                   const std::unordered_set<std::int64_t>& dropped_positions,
                                                   std::int64_t k, std::int64_t block_rows,
                                                   BlockGradient&& block_gradient, Matrix<T>& block) {
  if (block_rows < 1) throw ArgumentError(sprig::detail::message("top_gradient_positions: block_rows ", block_rows, " < 1"));
  TopK top(k, W.cols());
  KeptColumns<T, Index> kept(W, dropped_positions);
  for (std::int64_t r0 = 0; r0 < W.rows(); r0 += block_rows) {
    const std::int64_t n = std::min(block_rows, W.rows() - r0);
    if (block.rows() < n || block.cols() != W.cols()) block.resize(block_rows, W.cols());
    MatrixView<T> out = block.view().block(0, 0, n, W.cols());
    block_gradient(r0, n, out);
    for (std::int64_t i = 0; i < n; ++i) {
      const T* g = out.row(i);
      const double threshold = top.threshold();
      for (std::int64_t c = 0; c < W.cols(); ++c) {
        const double score = std::abs(static_cast<double>(g[c]));
        if (score < threshold) continue;  // cannot enter; equal scores may still win on position
        if (!kept.kept(r0 + i, c)) top.push(score, r0 + i, c);
      }
    }
  }
  return top.sorted();
}

}  // namespace sprig::dst
