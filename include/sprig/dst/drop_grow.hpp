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
  // the walk skips them in step instead of a search per dropped weight
  std::vector<std::int64_t> regrow_slots;
  regrow_slots.reserve(regrow.size());
  for (std::int64_t p : regrow) regrow_slots.push_back(W.find(p / cols, p % cols));
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

// Marks, row by row, the columns that are kept (live and not dropped): the positions a grow
// step must skip. Valid for one row at a time, in any row order; holds references to W and
// drop, which must outlive it unchanged. kept() is O(1) per call on the same row and
// O(row nnz) on a change of row; cols x 8 bytes of marks.
template <Value T, ColumnIndex Index>
class KeptColumns {
public:
  KeptColumns(const PaddedCSR<T, Index>& W, const DropSet& drop)
      : W_(W), drop_(drop), mark_(static_cast<std::size_t>(W.cols()), -1) {}

  bool kept(std::int64_t row, std::int64_t col) {
    if (row != current_) load(row);
    return mark_[static_cast<std::size_t>(col)] == row;
  }
  // g[c] = value at every kept column c of `row` (g: one row of a dense rows x cols array).
  // A dropped slot's write goes to a scratch variable instead: no branch on the drop flags.
  template <class V>
  void overwrite_kept(std::int64_t row, V* g, V value) const {
    const std::int64_t start = W_.row_start(row);
    const Index* cols = W_.col_indices().data();
    const std::uint8_t* flag = drop_.slot_flag.data();
    V scratch;
    for (std::int64_t s = start, e = start + W_.row_nnz(row); s < e; ++s)
      *(flag[s] ? &scratch : g + static_cast<std::size_t>(cols[s])) = value;
  }

private:
  // Every live column of the row is written, a dropped one with its old mark, selected with
  // masks instead of a branch on the flags (a quarter set, at random).
  void load(std::int64_t row) {
    current_ = row;
    const std::int64_t start = W_.row_start(row);
    const Index* cols = W_.col_indices().data();
    const std::uint8_t* flag = drop_.slot_flag.data();
    for (std::int64_t s = start, e = start + W_.row_nnz(row); s < e; ++s) {
      std::int64_t& m = mark_[static_cast<std::size_t>(cols[s])];
      const std::int64_t keep = -static_cast<std::int64_t>(flag[s] == 0);  // all ones if kept
      m = (row & keep) | (m & ~keep);
    }
  }
  const PaddedCSR<T, Index>& W_;
  const DropSet& drop_;
  std::vector<std::int64_t> mark_;
  std::int64_t current_ = -1;
};

// SET's grow step: k positions uniformly at random (without replacement) among those not
// kept, ascending, from `rng` alone (deterministic for its key). draw_distinct_below
// (sampling.hpp) over all positions, the kept ones filtered row by row against the kept
// columns: expected O(k log k + nnz) per round and few rounds while the kept fraction is small
// and k at most half the free positions; otherwise it enumerates the free positions
// (O(rows * cols) time and 8 bytes each, a partial Fisher-Yates), since rejection needs ever
// more rounds as k nears the free count. Throws ArgumentError unless 0 <= k <= free.
template <Value T, ColumnIndex Index>
std::vector<std::int64_t> random_free_linear_positions(const PaddedCSR<T, Index>& W, const DropSet& drop,
                                                       std::int64_t k, CounterRng& rng) {
  const std::int64_t cols = W.cols();
  const std::int64_t total = W.rows() * cols;
  const std::int64_t kept = W.nnz() - drop.size();
  const std::int64_t free = total - kept;
  if (k < 0 || k > free)
    throw ArgumentError(sprig::detail::message("dst::random_free_linear_positions: k = ", k, " outside [0, ", free,
                                               " free positions]"));
  KeptColumns<T, Index> kept_cols(W, drop);
  std::vector<std::int64_t> chosen;
  if (2 * kept <= total && 2 * k <= free) {
    chosen = draw_distinct_below(rng, total, k, [&](std::int64_t p) { return kept_cols.kept(p / cols, p % cols); });
  } else {
    std::vector<std::int64_t> candidates;
    candidates.reserve(static_cast<std::size_t>(free));
    for (std::int64_t i = 0; i < W.rows(); ++i)
      for (std::int64_t c = 0; c < cols; ++c)
        if (!kept_cols.kept(i, c)) candidates.push_back(i * cols + c);
    for (std::int64_t q = 0; q < k; ++q) {  // partial Fisher-Yates
      const auto j = q + static_cast<std::int64_t>(rng.uniform_below(static_cast<std::uint64_t>(free - q)));
      std::swap(candidates[q], candidates[j]);
    }
    chosen.assign(candidates.begin(), candidates.begin() + k);
    std::sort(chosen.begin(), chosen.end());
  }
  return chosen;
}

// SET's grow step under constant fan-in: in every row, per_row columns uniformly at random
// (without replacement) among the row's columns that are not kept, as ascending linear
// positions. Rows are drawn in order from the one `rng` (deterministic for its key): by
// rejection against the row's kept columns while they are at most half the row and per_row
// at most half its free columns, otherwise by a partial Fisher-Yates over the free columns.
// O(rows + nnz + sum over rows of per_row log per_row) expected, or O(cols) for a row drawn
// by enumeration; cols x 8 bytes of scratch. Throws ArgumentError unless 0 <= per_row <= the
// free columns of every row (naming the first row short of them).
template <Value T, ColumnIndex Index>
std::vector<std::int64_t> random_free_linear_positions_per_row(const PaddedCSR<T, Index>& W, const DropSet& drop,
                                                               std::int64_t per_row, CounterRng& rng) {
  const char* fn = "dst::random_free_linear_positions_per_row";
  const std::int64_t cols = W.cols();
  if (per_row < 0) throw ArgumentError(sprig::detail::message(fn, ": per_row = ", per_row, " < 0"));
  std::vector<std::int64_t> out;
  if (per_row == 0) return out;
  out.reserve(static_cast<std::size_t>(per_row * W.rows()));
  KeptColumns<T, Index> kept(W, drop);
  std::vector<std::int64_t> candidates;
  const std::uint8_t* flag = drop.slot_flag.data();
  for (std::int64_t i = 0; i < W.rows(); ++i) {
    std::int64_t kept_n = 0;
    for (std::int64_t s = W.row_start(i), e = s + W.row_nnz(i); s < e; ++s) kept_n += flag[s] == 0;
    const std::int64_t free = cols - kept_n;
    if (per_row > free)
      throw ArgumentError(
          sprig::detail::message(fn, ": row ", i, " has ", free, " free columns, fewer than per_row = ", per_row));
    const std::int64_t base = i * cols;
    if (2 * kept_n <= cols && 2 * per_row <= free) {
      for (std::int64_t c : draw_distinct_below(rng, cols, per_row, [&](std::int64_t c) { return kept.kept(i, c); }))
        out.push_back(base + c);
      continue;
    }
    candidates.clear();
    for (std::int64_t c = 0; c < cols; ++c)
      if (!kept.kept(i, c)) candidates.push_back(c);
    for (std::int64_t q = 0; q < per_row; ++q) {  // partial Fisher-Yates
      const auto j = q + static_cast<std::int64_t>(rng.uniform_below(static_cast<std::uint64_t>(free - q)));
      std::swap(candidates[q], candidates[j]);
    }
    std::sort(candidates.begin(), candidates.begin() + per_row);
    for (std::int64_t q = 0; q < per_row; ++q) out.push_back(base + candidates[q]);
  }
  return out;
}

// A candidate of the gradient top-k: magnitude_key(g) and the linear position.
template <Value T>
struct KeyedPosition {
  decltype(sprig::magnitude_key(T(0))) key;
  std::int64_t position;
};

// The k positions with the largest |dense gradient| among those not kept (ties: the smaller
// position), or all of them if fewer, as keyed candidates in ascending position. Streams the
// gradient in blocks of `block_rows` rows: `block_gradient(r0, n, out)` must write rows
// [r0, r0 + n) of dL/dW (dense, n x cols) into `out`. Extra memory: one block plus 2k + cols
// candidates of 16 bytes (T = float), never rows x cols. NaN gradients are never chosen.
// O(rows * cols) besides block_gradient; throws ArgumentError if block_rows < 1.
//
// Linear: candidates are appended without branches (a slot written at every position, kept
// by advancing past it) while their key is above the running k-th; whenever the buffer is
// full it is cut back to the best k (key_of_rank finds the k-th), compacting in place, so the
// buffer stays in position order and equal keys keep the earlier (smaller) positions. Once it
// has been cut, only keys above the k-th can enter: a later equal key has a larger position.
template <Value T, ColumnIndex Index, class BlockGradient>
std::vector<KeyedPosition<T>> top_gradient_candidates(const PaddedCSR<T, Index>& W, const DropSet& drop, std::int64_t k,
                                                      std::int64_t block_rows, BlockGradient&& block_gradient,
                                                      Matrix<T>& block) {
  if (block_rows < 1)
    throw ArgumentError(sprig::detail::message("dst::top_gradient_candidates: block_rows ", block_rows, " < 1"));
  if (k <= 0) return {};
  using Key = decltype(sprig::magnitude_key(T(0)));
  constexpr Key kExcluded = std::bit_cast<Key>(std::numeric_limits<T>::infinity()) + 1;  // NaN keys and above
  const std::int64_t cols = W.cols();
  const auto capacity = static_cast<std::size_t>(2 * k + cols);
  std::vector<KeyedPosition<T>> cand(capacity + 1);  // + 1: the write past the last kept candidate
  std::size_t n = 0;
  Key lowest = 0;  // keys in [lowest, kExcluded) enter; above the k-th once the buffer was cut
  auto cut = [&] {
    const Key kth = sprig::key_of_rank<Key>(
        n, [&](std::size_t q) { return cand[q].key; },
        static_cast<std::int64_t>(n) - k + 1);  // the k-th largest
    std::int64_t ties = k;                      // of the k-th's key, how many are taken (the first ones)
    for (std::size_t q = 0; q < n; ++q) ties -= cand[q].key > kth;
    std::size_t out = 0;
    for (std::size_t q = 0; q < n; ++q) {
      const Key key = cand[q].key;
      bool take = key > kth;
      if (key == kth) [[unlikely]] {
        take = ties > 0;
        ties -= take;
      }
      cand[out] = cand[q];
      out += take;
    }
    n = out;
    lowest = kth + 1;
  };
  KeptColumns<T, Index> kept(W, drop);
  for (std::int64_t r0 = 0; r0 < W.rows(); r0 += block_rows) {
    const std::int64_t rows = std::min(block_rows, W.rows() - r0);
    if (block.rows() < rows || block.cols() != cols) block.resize(block_rows, cols);
    MatrixView<T> out = block.view().block(0, 0, rows, cols);
    block_gradient(r0, rows, out);
    for (std::int64_t i = 0; i < rows; ++i) {
      T* g = out.row(i);
      kept.overwrite_kept(r0 + i, g, std::numeric_limits<T>::quiet_NaN());  // never a candidate
      const std::int64_t base = (r0 + i) * cols;
      const Key lo = lowest;
      KeyedPosition<T>* c = cand.data() + n;
      for (std::int64_t j = 0; j < cols; ++j) {
        const Key key = sprig::magnitude_key(g[j]);
        *c = {key, base + j};
        c += key >= lo && key < kExcluded;
      }
      n = static_cast<std::size_t>(c - cand.data());
      if (n + static_cast<std::size_t>(cols) > capacity) cut();  // room for the next row
    }
  }
  if (std::cmp_greater(n, k)) cut();
  cand.resize(n);
  return cand;
}

// RigL's grow step: the positions of top_gradient_candidates as linear positions, ascending
// (what a topology update consumes).
template <Value T, ColumnIndex Index, class BlockGradient>
std::vector<std::int64_t> top_gradient_linear_positions(const PaddedCSR<T, Index>& W, const DropSet& drop,
                                                        std::int64_t k, std::int64_t block_rows,
                                                        BlockGradient&& block_gradient, Matrix<T>& block) {
  auto cand = top_gradient_candidates(W, drop, k, block_rows, block_gradient, block);
  std::vector<std::int64_t> out(cand.size());
  for (std::size_t q = 0; q < cand.size(); ++q) out[q] = cand[q].position;
  return out;
}

// RigL's grow step under constant fan-in: in every row, the per_row columns with the largest
// |dense gradient| among the row's columns that are not kept (ties: the smaller column), as
// ascending linear positions; a row with fewer non-NaN candidates gives all of them (NaN
// gradients are never chosen; update() then rejects the short list). The gradient is
// streamed in blocks of `block_rows` rows as for top_gradient_candidates. Extra memory: one
// block plus cols candidates and keys. O(rows * cols) besides block_gradient; throws
// ArgumentError if block_rows < 1 or per_row < 0.
//
// Per row, one branch-free pass appends (key, column) for the keys at or above an estimate
// of the row's cut taken from the previous row (its key of rank 2 per_row); when fewer than
// per_row pass, the row is scanned again without it. The per_row-th largest candidate key
// (KeyRankSelector) then selects in column order: the keys above it and the first ones equal
// to it. The estimate only filters out keys that cannot be chosen: the result does not
// depend on it.
template <Value T, ColumnIndex Index, class BlockGradient>
std::vector<std::int64_t> top_gradient_linear_positions_per_row(const PaddedCSR<T, Index>& W, const DropSet& drop,
                                                                std::int64_t per_row, std::int64_t block_rows,
                                                                BlockGradient&& block_gradient, Matrix<T>& block) {
  const char* fn = "dst::top_gradient_linear_positions_per_row";
  if (block_rows < 1) throw ArgumentError(sprig::detail::message(fn, ": block_rows ", block_rows, " < 1"));
  if (per_row < 0) throw ArgumentError(sprig::detail::message(fn, ": per_row = ", per_row, " < 0"));
  std::vector<std::int64_t> out;
  if (per_row == 0) return out;
  using Key = decltype(sprig::magnitude_key(T(0)));
  constexpr Key kExcluded = std::bit_cast<Key>(std::numeric_limits<T>::infinity()) + 1;  // NaN keys and above
  const std::int64_t cols = W.cols();
  out.reserve(static_cast<std::size_t>(per_row * W.rows()));
  std::vector<KeyedPosition<T>> cand(static_cast<std::size_t>(cols) + 1);  // + 1: the write past the last
  std::vector<Key> keys(static_cast<std::size_t>(cols));
  sprig::KeyRankSelector<Key> selector;
  KeptColumns<T, Index> kept(W, drop);
  Key estimate = 0;
  for (std::int64_t r0 = 0; r0 < W.rows(); r0 += block_rows) {
    const std::int64_t rows = std::min(block_rows, W.rows() - r0);
    if (block.rows() < rows || block.cols() != cols) block.resize(block_rows, cols);
    MatrixView<T> g_block = block.view().block(0, 0, rows, cols);
    block_gradient(r0, rows, g_block);
    for (std::int64_t i = 0; i < rows; ++i) {
      T* g = g_block.row(i);
      kept.overwrite_kept(r0 + i, g, std::numeric_limits<T>::quiet_NaN());  // never a candidate
      auto scan = [&](Key lo) {  // candidates in column order (position = column here)
        KeyedPosition<T>* c = cand.data();
        for (std::int64_t j = 0; j < cols; ++j) {
          const Key key = sprig::magnitude_key(g[j]);
          *c = {key, j};
          c += key >= lo && key < kExcluded;
        }
        return static_cast<std::size_t>(c - cand.data());
      };
      std::size_t n = scan(estimate);
      if (std::cmp_less(n, per_row) && estimate > 0) n = scan(0);
      const std::int64_t base = (r0 + i) * cols;
      if (std::cmp_less_equal(n, per_row)) {  // every candidate
        for (std::size_t q = 0; q < n; ++q) out.push_back(base + cand[q].position);
        estimate = 0;
        continue;
      }
      for (std::size_t q = 0; q < n; ++q) keys[q] = cand[q].key;
      // the next row's estimate: the key of rank 2 per_row here, or none when there are not
      // that many candidates
      estimate = std::cmp_greater(n, 2 * per_row) ? selector.template select<true>(keys.data(), n, 2 * per_row) : 0;
      const Key kth = selector.template select<true>(keys.data(), n, per_row);
      std::int64_t ties = per_row;  // of kth's key, how many are taken (the first columns)
      for (std::size_t q = 0; q < n; ++q) ties -= cand[q].key > kth;
      for (std::size_t q = 0; q < n; ++q) {
        const Key key = cand[q].key;
        if (key > kth) {
          out.push_back(base + cand[q].position);
        } else if (key == kth && ties > 0) [[unlikely]] {
          out.push_back(base + cand[q].position);
          --ties;
        }
      }
    }
  }
  return out;
}

}  // namespace sprig::dst
