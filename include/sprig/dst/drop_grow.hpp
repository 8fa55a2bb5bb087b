// sprig/dst/drop_grow.hpp — the per-layer drop and grow steps shared by the DST algorithms,
// on real sparse storage (no mask, no dense weight).
//
// Semantics follow the reference RigL optimizers: drop the k live weights of smallest
// magnitude, grow k positions chosen among all positions that were not kept (so a
// just-dropped position may be chosen again; it then simply stays, keeping its value and
// optimizer state). Positions that are really new start with value 0 and zero state. The
// live count of the layer is unchanged; row counts change freely (rows grow past their
// capacity and relocate). The *_per_row forms are the constant-fan-in variants: the same
// count dropped and grown in every row, so every row keeps its count.
//
// Everything here is sequential and deterministic: the same matrix, counts and CounterRng
// give the same positions for any thread count. Linear positions are row * cols + col.
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <functional>
#include <iterator>
#include <limits>
#include <span>
#include <utility>
#include <vector>

#include "../core/matrix.hpp"
#include "../core/padded_csr.hpp"
#include "../core/rank_select.hpp"
#include "../core/rng.hpp"
#include "../core/sampling.hpp"
#include "../core/slot_log.hpp"

namespace sprig::dst {

// The weights a drop step removes from one layer: the k live slots of smallest |w| (ties:
// smaller (row, col) first), as their linear positions (ascending) and a per-slot flag for
// O(1) "is this slot dropped" tests. 8 bytes per dropped weight plus 1 per slot: the slots
// themselves are found again by a walk over the flags (for_each_dropped_slot), so the
// update's peak holds no slot or row lists. Valid for the layout select_drop saw.
struct DropSet {
  std::vector<std::int64_t> positions;  // ascending
  std::vector<std::uint8_t> slot_flag;  // 1 at dropped slots, size storage_size()
  std::int64_t size() const noexcept { return std::ssize(positions); }
};

// Calls fn(slot, row) for every dropped slot of `drop` in descending slot order (the order
// erase_slot needs: erasing a slot moves its row's last live slot, which lies above it and
// was visited already, so the flags below stay valid while fn erases). Precondition: W has
// the layout select_drop saw, up to erasures made by fn (not checked). Rows are found by a
// walk over the row regions in descending start order (regions need not be in row order).
// O(storage + rows log rows); throws nothing itself.
template <Value T, ColumnIndex Index, class Fn>
void for_each_dropped_slot(const PaddedCSR<T, Index>& W, const DropSet& drop, Fn&& fn) {
  if (drop.size() == 0) return;
  std::vector<std::int64_t> by_start(static_cast<std::size_t>(W.rows()));
  for (std::int64_t i = 0; i < W.rows(); ++i) by_start[static_cast<std::size_t>(i)] = i;
  std::sort(by_start.begin(), by_start.end(),
            [&](std::int64_t a, std::int64_t b) { return W.row_start(a) > W.row_start(b); });
  std::size_t r = 0;
  auto visit = [&](std::int64_t s) {
    while (W.row_start(by_start[r]) > s) ++r;
    fn(s, by_start[r]);
  };
  // 8 flags (bytes of 0 or 1) at a time, their set bytes from the highest down: a branch per
  // dropped slot and per word instead of an unpredictable one per slot (a quarter of the
  // flags set, at random)
  const std::uint8_t* flag = drop.slot_flag.data();
  std::int64_t s = std::ssize(drop.slot_flag);
  for (; s % 8 != 0; --s)
    if (flag[s - 1]) visit(s - 1);
  for (; s > 0; s -= 8) {
    std::uint64_t word = 0;  // byte b = flag[s - 8 + b] (compilers make it one load)
    for (int b = 0; b < 8; ++b) word |= std::uint64_t{flag[s - 8 + b]} << (8 * b);
    while (word != 0) {
      const int byte = (63 - std::countl_zero(word)) / 8;
      visit(s - 8 + byte);
      word &= ~(std::uint64_t{0xFF} << (8 * byte));
    }
  }
}

// Moved to core/rank_select.hpp (namespace sprig); these dst:: names remain for one release.
template <Value T>
[[deprecated("use sprig::magnitude_key")]] auto magnitude_key(T v) noexcept {
  return sprig::magnitude_key(v);
}
template <class Key, class KeyOf>
[[deprecated("use sprig::key_of_rank")]] Key key_of_rank(std::size_t n, KeyOf&& key_of, std::int64_t r) {
  return sprig::key_of_rank<Key>(n, std::forward<KeyOf>(key_of), r);
}
template <class Key>
using KeyRankSelector [[deprecated("use sprig::KeyRankSelector")]] = sprig::KeyRankSelector<Key>;

// The drop step: the k live weights of smallest |w| (ties: smaller position first).
// Three passes over the live weights with one key array as scratch (sizeof(T) bytes per live
// weight): the k-th smallest magnitude m (key_of_rank), then every weight below m is dropped
// and, of those equal to m, the ones of smallest position, as many as k still needs.
// O(storage + ties log ties). Throws ArgumentError, naming `caller`, unless 0 <= k <= nnz,
// or if a live weight is NaN (magnitudes cannot be ranked).
template <Value T, ColumnIndex Index>
DropSet select_drop(const PaddedCSR<T, Index>& W, std::int64_t k, const char* caller = "dst::select_drop") {
  if (k < 0 || k > W.nnz())
    throw ArgumentError(sprig::detail::message(caller, ": k = ", k, " outside [0, nnz = ", W.nnz(), "]"));
  DropSet d;
  d.slot_flag.assign(static_cast<std::size_t>(W.storage_size()), 0);
  if (k == 0) return d;
  const std::int64_t cols = W.cols();
  using Key = decltype(sprig::magnitude_key(T(0)));
  Key threshold;  // the key of the k-th smallest magnitude
  {
    std::vector<Key> keys;
    keys.reserve(static_cast<std::size_t>(W.nnz()));
    W.for_each_live([&](std::int64_t i, std::int64_t c, T v, std::int64_t) {
      if (std::isnan(v))
        throw ArgumentError(
            sprig::detail::message(caller, ": the weight at (", i, ", ", c, ") is NaN; magnitudes cannot be ranked"));
      keys.push_back(sprig::magnitude_key(v));
    });
    threshold = sprig::key_of_rank<Key>(
        keys.size(), [&](std::size_t q) { return keys[q]; }, k);
  }
  // The weights below m, without branches on the comparison (it goes either way at random);
  // the ties at m are rare.
  std::int64_t below = 0;
  std::vector<std::int64_t> ties;  // positions at the threshold magnitude
  W.for_each_live([&](std::int64_t i, std::int64_t c, T v, std::int64_t) {
    const Key m = sprig::magnitude_key(v);
    below += m < threshold;
    if (m == threshold) [[unlikely]]
      ties.push_back(i * cols + c);
  });
  std::sort(ties.begin(), ties.end());
  ties.resize(static_cast<std::size_t>(k - below));  // ties dropped: the smallest positions
  // positions written at the next free place on every weight and kept by advancing past
  // them: one spare entry for the write past the last kept one
  d.positions.resize(static_cast<std::size_t>(k) + 1);
  std::int64_t* out = d.positions.data();
  std::uint8_t* flag = d.slot_flag.data();
  W.for_each_live([&](std::int64_t i, std::int64_t c, T v, std::int64_t s) {
    const Key m = sprig::magnitude_key(v);
    bool drop = m < threshold;
    if (m == threshold) [[unlikely]]
      drop = std::binary_search(ties.begin(), ties.end(), i * cols + c);
    *out = i * cols + c;
    out += drop;
    flag[s] = static_cast<std::uint8_t>(drop);
  });
  d.positions.pop_back();
  sort_below(d.positions, W.rows() * cols);
  return d;
}

// The constant-fan-in drop step: in every row, the per_row live weights of smallest |w| of
// that row (ties: smaller column first), so each row loses the same count. Positions
// ascending, flags as select_drop's. Per row: the per_row-th smallest magnitude key
// (KeyRankSelector), then one pass that drops every key below it and, of those equal to it,
// the ones of smallest column; the positions are radix-sorted once at the end (sort_below).
// O(storage + nnz) time, O(largest row) scratch.
// Throws ArgumentError, naming `caller`, if per_row < 0 or a row holds fewer than per_row
// live weights (naming the row), or if a live weight is NaN.
template <Value T, ColumnIndex Index>
DropSet select_drop_per_row(const PaddedCSR<T, Index>& W, std::int64_t per_row,
                            const char* caller = "dst::select_drop_per_row") {
  if (per_row < 0) throw ArgumentError(sprig::detail::message(caller, ": per_row = ", per_row, " < 0"));
  DropSet d;
  d.slot_flag.assign(static_cast<std::size_t>(W.storage_size()), 0);
  if (per_row == 0) return d;
  const std::int64_t cols = W.cols();
  using Key = decltype(sprig::magnitude_key(T(0)));
  // positions written at the next free place on every weight and kept by advancing past the
  // ones below the threshold (fewer than per_row per row): one spare entry for the last write
  d.positions.resize(static_cast<std::size_t>(per_row * W.rows()) + 1);
  std::int64_t* out = d.positions.data();
  std::vector<Key> keys;
  sprig::KeyRankSelector<Key> selector;
  std::vector<std::pair<std::int64_t, std::int64_t>> ties;  // (column, slot) at the threshold key
  const Index* col_of = W.col_indices().data();
  const T* value = W.values().data();
  std::uint8_t* flag = d.slot_flag.data();
  for (std::int64_t i = 0; i < W.rows(); ++i) {
    const std::int64_t start = W.row_start(i), end = start + W.row_nnz(i);
    if (W.row_nnz(i) < per_row)
      throw ArgumentError(sprig::detail::message(caller, ": row ", i, " holds ", W.row_nnz(i),
                                                 " live weights, fewer than the ", per_row, " to drop from every row"));
    keys.clear();
    for (std::int64_t s = start; s < end; ++s) {
      if (std::isnan(value[s]))
        throw ArgumentError(sprig::detail::message(caller, ": the weight at (", i, ", ", col_of[s],
                                                   ") is NaN; magnitudes cannot be ranked"));
      keys.push_back(sprig::magnitude_key(value[s]));
    }
    const Key threshold = selector.template select<false>(keys.data(), keys.size(), per_row);
    std::int64_t below = 0;
    ties.clear();
    const std::int64_t base = i * cols;
    for (std::int64_t s = start; s < end; ++s) {
      const Key m = sprig::magnitude_key(value[s]);
      const bool drop = m < threshold;  // no branch: it goes either way at random
      *out = base + col_of[s];
      out += drop;
      below += drop;
      flag[s] = static_cast<std::uint8_t>(drop);
      if (m == threshold) [[unlikely]]
        ties.emplace_back(col_of[s], s);
    }
    const auto need = static_cast<std::size_t>(per_row - below);  // >= 1: the threshold's own key
    if (ties.size() > need)
      std::nth_element(ties.begin(), ties.begin() + static_cast<std::ptrdiff_t>(need), ties.end());
    for (std::size_t q = 0; q < need; ++q) {  // ties dropped: the smallest columns
      *out++ = base + ties[q].first;
      flag[ties[q].second] = 1;
    }
  }
  d.positions.pop_back();
  sort_below(d.positions, W.rows() * cols);  // rows ascend already; within a row, slot order
  return d;
}

// What apply_drop_grow_at did to one layer.
struct DropGrowStats {
  std::int64_t dropped = 0;  // weights really removed
  std::int64_t grown = 0;    // weights really added (value 0, zero state)
  std::int64_t regrown = 0;  // dropped and chosen again: kept with value and state
};

// Removes the dropped weights and adds weights of value 0 at `grow_pos`, logging every slot
// move in `log` and flushing it (SlotLog::flush_if_full) between whole operations, so that a
// sink replays them on the layer's per-slot arrays. A grow position among the dropped ones
// cancels that drop (the weight stays with its value and state). Rows that need more room
// are given capacity for their new count plus the matrix's padding ratio first, all in one
// reserve_rows, so each relocates at most once and storage grows by exactly their room.
// Preconditions (not checked beyond what PaddedCSR checks): `drop` from select_drop on W as
// it is; grow_pos ascending, distinct, in [0, rows * cols), none kept. O(storage + k log k)
// plus the relocated rows; throws what PaddedCSR's insert and reserve throw.
template <Value T, ColumnIndex Index>
DropGrowStats apply_drop_grow_at(PaddedCSR<T, Index>& W, const DropSet& drop, std::vector<std::int64_t> grow_pos,
                                 SlotLog& log) {
  const std::int64_t cols = W.cols();
  // positions both dropped and grown: a merge that advances without branching on the
  // comparison (it goes either way at random)
  std::vector<std::int64_t> regrow;
  {
    const std::int64_t *a = drop.positions.data(), *a_end = a + drop.positions.size();
    const std::int64_t *b = grow_pos.data(), *b_end = b + grow_pos.size();
    while (a != a_end && b != b_end) {
      const std::int64_t x = *a, y = *b;
      if (x == y) [[unlikely]]
        regrow.push_back(x);
      a += x <= y;
      b += y <= x;
    }
  }
  DropGrowStats stats;
  stats.regrown = std::ssize(regrow);
  // regrown weights stay: their slots, descending like the walk over the dropped ones, so
  // the walk skips them in step instead of a search per dropped weight. Found by one pass
  // over each row that regrows, its regrown columns marked: a search per regrown weight
  // (O(row nnz) each) cost most of an update where many dropped weights regrow.
  std::vector<std::int64_t> regrow_slots;
  regrow_slots.reserve(regrow.size());
  {
    std::vector<std::int64_t> mark(regrow.empty() ? 0 : static_cast<std::size_t>(cols), -1);  // row of a regrown column
    const Index* col = W.col_indices().data();
    for (std::size_t q = 0; q < regrow.size();) {
      const std::int64_t row = regrow[q] / cols, row_end = (row + 1) * cols;
      for (; q < regrow.size() && regrow[q] < row_end; ++q)
        mark[static_cast<std::size_t>(regrow[q] - row * cols)] = row;
      for (std::int64_t s = W.row_start(row), e = s + W.row_nnz(row); s < e; ++s)
        if (mark[static_cast<std::size_t>(col[s])] == row) regrow_slots.push_back(s);
    }
  }
  std::sort(regrow_slots.begin(), regrow_slots.end(), std::greater<>());
  // drops in descending slot order: each erase moves the row's last live slot (never one
  // still to be erased) into the hole
  std::size_t skip = 0;
  for_each_dropped_slot(W, drop, [&](std::int64_t s, std::int64_t row) {
    if (skip < regrow_slots.size() && regrow_slots[skip] == s) {
      ++skip;
      return;
    }
    W.erase_slot(row, s, &log);
    ++stats.dropped;
    log.flush_if_full();
  });
  // grow positions without the regrown ones (both lists ascending)
  {
    std::size_t r = 0, out = 0;
    for (std::int64_t p : grow_pos) {
      while (r < regrow.size() && regrow[r] < p) ++r;
      if (r < regrow.size() && regrow[r] == p) continue;
      grow_pos[out++] = p;
    }
    grow_pos.resize(out);
  }
  std::vector<std::int64_t> need(static_cast<std::size_t>(W.rows()), 0);
  {
    std::int64_t row = 0, row_end = cols;  // positions ascend: rows by a walk, not a division each
    for (std::int64_t p : grow_pos) {
      while (p >= row_end) {
        ++row;
        row_end += cols;
      }
      ++need[static_cast<std::size_t>(row)];
    }
  }
  std::vector<std::pair<std::int64_t, std::int64_t>> room;  // rows that must relocate, new capacity
  for (std::int64_t i = 0; i < W.rows(); ++i)
    if (need[i] > 0 && W.row_nnz(i) + need[i] > W.row_capacity(i))
      room.emplace_back(i, PaddedCSR<T, Index>::capacity_for(W.row_nnz(i) + need[i], W.padding_ratio()));
  W.reserve_rows(room, &log);
  log.flush_if_full();
  for (std::int64_t p : grow_pos) {
    W.insert_new(p / cols, p % cols, T(0), &log);
    ++stats.grown;
    log.flush_if_full();
  }
  return stats;
}

}  // namespace sprig::dst

// The grow steps (where new weights go), in a header of their own.
#include "grow_positions.hpp"
