// tests/drop_grow_test_support.hpp — forms of the drop/grow steps that only the tests use:
// slot and (row, col) record views of what sprig/dst/drop_grow.hpp computes as flags and
// linear positions, so that the tests can compare them with simple oracles.
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>
#include <span>
#include <vector>

#include <sprig/core/sampling.hpp>
#include <sprig/dst/drop_grow.hpp>

namespace sprig::dst::testing {

// A matrix position with the score that selected it (|gradient| for RigL, 0 for random).
struct ScoredPosition {
  double score;
  std::int64_t row;
  std::int64_t col;
};

// The dropped slots and their rows as lists, in descending slot order.
struct DropSlots {
  std::vector<std::int64_t> slots;
  std::vector<std::int64_t> rows;  // rows[q] owns slots[q]
};
template <Value T, ColumnIndex Index>
DropSlots drop_slots(const PaddedCSR<T, Index>& W, const DropSet& drop) {
  DropSlots out;
  out.slots.reserve(static_cast<std::size_t>(drop.size()));
  out.rows.reserve(static_cast<std::size_t>(drop.size()));
  for_each_dropped_slot(W, drop, [&](std::int64_t s, std::int64_t row) {
    out.slots.push_back(s);
    out.rows.push_back(row);
  });
  return out;
}

// The k live slots with the smallest |w| (see select_drop), in descending slot order.
template <Value T, ColumnIndex Index>
std::vector<std::int64_t> smallest_magnitude_slots(const PaddedCSR<T, Index>& W, std::int64_t k) {
  return drop_slots(W, select_drop(W, k)).slots;
}

// Linear positions (row * cols + col) of the given live slots, in the same order.
template <Value T, ColumnIndex Index>
std::vector<std::int64_t> positions_of(const PaddedCSR<T, Index>& W, std::span<const std::int64_t> slots) {
  // slot -> row through the row regions sorted by start (regions need not be in row order)
  std::vector<std::int64_t> order(static_cast<std::size_t>(W.rows()));
  for (std::int64_t i = 0; i < W.rows(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(),
            [&](std::int64_t a, std::int64_t b) { return W.row_start(a) < W.row_start(b); });
  std::vector<std::int64_t> out;
  out.reserve(slots.size());
  for (std::int64_t s : slots) {
    auto it = std::upper_bound(order.begin(), order.end(), s,
                               [&](std::int64_t v, std::int64_t r) { return v < W.row_start(r); });
    if (it == order.begin() || s >= W.row_start(*(it - 1)) + W.row_nnz(*(it - 1)))
      throw ArgumentError(sprig::detail::message("positions_of: slot ", s, " is not live"));
    out.push_back(*(it - 1) * W.cols() + static_cast<std::int64_t>(W.col_indices()[s]));
  }
  return out;
}

// Linear positions (row * cols + col) of scored positions, ascending.
template <Value T, ColumnIndex Index>
std::vector<std::int64_t> sorted_positions(const PaddedCSR<T, Index>& W, std::vector<ScoredPosition> grow) {
  std::vector<std::int64_t> pos(grow.size());
  for (std::size_t q = 0; q < grow.size(); ++q) pos[q] = grow[q].row * W.cols() + grow[q].col;
  grow = {};
  sort_below(pos, W.rows() * W.cols());
  return pos;
}

// apply_drop_grow_at with the grow positions as (row, col) records, in any order.
template <Value T, ColumnIndex Index>
DropGrowStats apply_drop_grow(PaddedCSR<T, Index>& W, const DropSet& drop, std::span<const ScoredPosition> grow,
                              SlotLog& log) {
  return apply_drop_grow_at(W, drop, sorted_positions(W, std::vector<ScoredPosition>(grow.begin(), grow.end())), log);
}

// random_free_linear_positions as (row, col) records with score 0.
template <Value T, ColumnIndex Index>
std::vector<ScoredPosition> random_free_positions(const PaddedCSR<T, Index>& W, const DropSet& drop, std::int64_t k,
                                                  CounterRng& rng) {
  const std::vector<std::int64_t> chosen = random_free_linear_positions(W, drop, k, rng);
  std::vector<ScoredPosition> out;
  out.reserve(chosen.size());
  for (std::int64_t p : chosen) out.push_back({0.0, p / W.cols(), p % W.cols()});
  return out;
}

// top_gradient_candidates as (|g|, row, col) records, larger score first, ties by smaller
// position (the order of a TopK).
template <Value T, ColumnIndex Index, class BlockGradient>
std::vector<ScoredPosition> top_gradient_positions(const PaddedCSR<T, Index>& W, const DropSet& drop, std::int64_t k,
                                                   std::int64_t block_rows, BlockGradient&& block_gradient,
                                                   Matrix<T>& block) {
  const std::int64_t cols = W.cols();
  const auto cand = top_gradient_candidates(W, drop, k, block_rows, block_gradient, block);
  std::vector<ScoredPosition> out;
  out.reserve(cand.size());
  for (const auto& c : cand)
    out.push_back({static_cast<double>(std::bit_cast<T>(c.key)), c.position / cols, c.position % cols});
  std::stable_sort(out.begin(), out.end(),
                   [](const ScoredPosition& a, const ScoredPosition& b) { return a.score > b.score; });
  return out;
}

}  // namespace sprig::dst::testing
