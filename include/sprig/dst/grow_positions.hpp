// sprig/dst/grow_positions.hpp — the grow steps of dynamic sparse training: which positions
// a layer grows into (SET: uniformly among the free ones; RigL: the largest dense-gradient
// magnitudes), plain and constant-fan-in. Part of dst/drop_grow.hpp, which includes it and
// states the semantics they share (positions not kept are candidates; linear position =
// row * cols + col; sequential and deterministic for any thread count).
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "drop_grow.hpp"
#include "split_scoring.hpp"

namespace sprig::dst {

namespace detail {
// range.end clipped to `rows`; throws ArgumentError naming `fn` unless 0 <= begin <= end.
inline std::int64_t checked_row_end(std::int64_t rows, RowRange range, const char* fn) {
  const std::int64_t end = std::min(range.end, rows);
  if (range.begin < 0 || range.begin > end)
    throw ArgumentError(
        sprig::detail::message(fn, ": rows [", range.begin, ", ", range.end, ") of a layer of ", rows, " rows"));
  return end;
}
}  // namespace detail

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

// Keeps the k best of `c` (ascending in position, more than k of them) in place and in order:
// the largest keys, ties by the smaller position. Sets `kept` to k and returns the k-th
// largest key. O(c.size()): a rank selection and two passes.
template <Value T>
auto keep_top_candidates(std::span<KeyedPosition<T>> c, std::int64_t k, std::size_t& kept) {
  using Key = decltype(sprig::magnitude_key(T(0)));
  const std::size_t n = c.size();
  const Key kth = sprig::key_of_rank<Key>(
      n, [&](std::size_t q) { return c[q].key; }, static_cast<std::int64_t>(n) - k + 1);  // the k-th largest
  std::int64_t ties = k;  // of the k-th's key, how many are taken (the first ones)
  for (std::size_t q = 0; q < n; ++q) ties -= c[q].key > kth;
  std::size_t out = 0;
  for (std::size_t q = 0; q < n; ++q) {
    const Key key = c[q].key;
    bool take = key > kth;
    if (key == kth) [[unlikely]] {
      take = ties > 0;
      ties -= take;
    }
    c[out] = c[q];
    out += take;
  }
  kept = out;
  return kth;
}

// The k positions with the largest |dense gradient| among those not kept (ties: the smaller
// position) in the rows of `range` (every row by default), or all of them if fewer, as keyed
// candidates in ascending position. Streams the gradient in blocks of `block_rows` rows from
// range.begin: `block_gradient(r0, n, out)` must write rows [r0, r0 + n) of dL/dW (dense, n x
// cols) into `out`. Extra memory: one block plus 2k + cols candidates of 16 bytes (T = float),
// never rows x cols. NaN gradients are never chosen. O(range rows * cols) besides
// block_gradient; throws ArgumentError if block_rows < 1 or the range is not within the rows.
//
// Linear: candidates are appended without branches (a slot written at every position, kept
// by advancing past it) while their key is above the running k-th; whenever the buffer is
// full it is cut back to the best k (key_of_rank finds the k-th), compacting in place, so the
// buffer stays in position order and equal keys keep the earlier (smaller) positions. Once it
// has been cut, only keys above the k-th can enter: a later equal key has a larger position.
template <Value T, ColumnIndex Index, class BlockGradient>
std::vector<KeyedPosition<T>> top_gradient_candidates(const PaddedCSR<T, Index>& W, const DropSet& drop, std::int64_t k,
                                                      std::int64_t block_rows, BlockGradient&& block_gradient,
                                                      Matrix<T>& block, RowRange range = {}) {
  if (block_rows < 1)
    throw ArgumentError(sprig::detail::message("dst::top_gradient_candidates: block_rows ", block_rows, " < 1"));
  const std::int64_t row_end = detail::checked_row_end(W.rows(), range, "dst::top_gradient_candidates");
  if (k <= 0) return {};
  using Key = decltype(sprig::magnitude_key(T(0)));
  constexpr Key kExcluded = std::bit_cast<Key>(std::numeric_limits<T>::infinity()) + 1;  // NaN keys and above
  const std::int64_t cols = W.cols();
  const auto capacity = static_cast<std::size_t>(2 * k + cols);
  std::vector<KeyedPosition<T>> cand(capacity + 1);  // + 1: the write past the last kept candidate
  std::size_t n = 0;
  Key lowest = 0;  // keys in [lowest, kExcluded) enter; above the k-th once the buffer was cut
  auto cut = [&] {
    lowest = keep_top_candidates(std::span(cand.data(), n), k, n) + 1;  // above the k-th
  };
  KeptColumns<T, Index> kept(W, drop);
  for (std::int64_t r0 = range.begin; r0 < row_end; r0 += block_rows) {
    const std::int64_t rows = std::min(block_rows, row_end - r0);
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
                                                        BlockGradient&& block_gradient, Matrix<T>& block,
                                                        RowRange range = {}) {
  auto cand = top_gradient_candidates(W, drop, k, block_rows, block_gradient, block, range);
  std::vector<std::int64_t> out(cand.size());
  for (std::size_t q = 0; q < cand.size(); ++q) out[q] = cand[q].position;
  return out;
}

// The k best of candidates gathered from disjoint row ranges (each range's own
// top_gradient_candidates, the ranges in row order, so `all` ascends in position): the
// largest keys, ties by the smaller position, as ascending positions; all of them if fewer
// than k (reorders `all`). They are the positions top_gradient_candidates gives over the union
// of the ranges (dst/split_scoring.hpp says why). O(n) for n candidates (keep_top_candidates).
template <Value T>
std::vector<std::int64_t> merge_top_candidates(std::span<KeyedPosition<T>> all, std::int64_t k) {
  std::vector<std::int64_t> out;
  if (k <= 0) return out;
  std::size_t n = all.size();
  if (std::cmp_greater(n, k)) keep_top_candidates(all, k, n);
  out.reserve(n);
  for (std::size_t q = 0; q < n; ++q) out.push_back(all[q].position);
  return out;
}

// What gather_top_candidates and gather_positions keep between calls (their buffers: capacity
// reused).
template <Value T>
struct SplitCandidates {
  std::vector<std::int64_t> histogram;
  std::vector<KeyedPosition<T>> sent, all;
  std::vector<std::uint64_t> wire, wire_all;  // the sent candidates packed, 8 bytes each
  std::vector<std::uint32_t> narrow, narrow_all;  // gather_positions' positions in 4 bytes each
  std::vector<std::byte> bytes;
};

// Every part's positions (each in [0, bound)), concatenated in part order, on every part:
// they travel as 4 bytes each where bound <= 2^32 (a layer's rows x cols: the same on every
// part, so all parts agree), as 8 otherwise. Every part must call it alike (a collective).
// O(positions) and what the split's gather costs; throws ArgumentError if a position is
// outside [0, bound).
template <Value T>
std::vector<std::int64_t> gather_positions(SplitScoring& split, std::span<const std::int64_t> mine, std::int64_t bound,
                                           SplitCandidates<T>& buffers) {
  for (const std::int64_t q : mine)
    if (q < 0 || q >= bound)
      throw ArgumentError(sprig::detail::message("dst::gather_positions: position ", q, " outside [0, ", bound, ")"));
  std::vector<std::int64_t> all;
  if (bound > (std::int64_t{1} << 32)) {
    gather_values(split, mine, buffers.bytes, all);
    return all;
  }
  buffers.narrow.assign(mine.begin(), mine.end());
  gather_values(split, std::span<const std::uint32_t>(buffers.narrow), buffers.bytes, buffers.narrow_all);
  all.assign(buffers.narrow_all.begin(), buffers.narrow_all.end());
  return all;
}

// The k best of every part's candidates, on every part alike (as ascending positions): `mine`
// is this part's top_gradient_candidates over its rows (split_rows). A histogram of the
// candidates' keys by their top 16 bits, summed over the parts, gives the bucket holding the
// k-th best key of all; each part sends only its candidates in that bucket or above (every
// one of the k best among them), and merge_top_candidates picks from what arrives. Every part
// must call it alike (collectives). A candidate travels as 8 bytes (key and position in 32
// bits each) where every part's keys and positions fit (float, positions below 2^32; the
// histogram counts those that do not), as 16 otherwise. O(candidates + 65536) and what the
// split's calls cost.
template <Value T>
std::vector<std::int64_t> gather_top_candidates(SplitScoring& split, std::span<const KeyedPosition<T>> mine,
                                                std::int64_t k, SplitCandidates<T>& buffers) {
  using Key = decltype(sprig::magnitude_key(T(0)));
  constexpr int kShift = 8 * static_cast<int>(sizeof(Key)) - 16;
  constexpr std::size_t kBuckets = std::size_t{1} << 16;
  constexpr std::int64_t kNarrow = std::int64_t{1} << 32;  // positions below it fit in 32 bits
  auto& histogram = buffers.histogram;
  histogram.assign(kBuckets + 1, 0);  // + 1: the candidates that need 16 bytes
  for (const auto& c : mine) {
    ++histogram[static_cast<std::size_t>(c.key >> kShift)];
    histogram[kBuckets] += sizeof(Key) > 4 || c.position >= kNarrow;
  }
  split.sum(histogram);
  std::size_t bucket = kBuckets;  // the lowest bucket sent
  for (std::int64_t above = 0; bucket > 0 && above < k;) above += histogram[--bucket];
  buffers.sent.clear();
  for (const auto& c : mine)
    if (static_cast<std::size_t>(c.key >> kShift) >= bucket) buffers.sent.push_back(c);
  if (sizeof(Key) > 4 || histogram[kBuckets] > 0) {
    gather_values(split, std::span<const KeyedPosition<T>>(buffers.sent), buffers.bytes, buffers.all);
  } else {
    buffers.wire.clear();
    for (const auto& c : buffers.sent)
      buffers.wire.push_back(static_cast<std::uint64_t>(c.key) << 32 | static_cast<std::uint64_t>(c.position));
    gather_values(split, std::span<const std::uint64_t>(buffers.wire), buffers.bytes, buffers.wire_all);
    buffers.all.resize(buffers.wire_all.size());
    for (std::size_t q = 0; q < buffers.all.size(); ++q)
      buffers.all[q] = {static_cast<Key>(buffers.wire_all[q] >> 32),
                        static_cast<std::int64_t>(buffers.wire_all[q] & 0xffffffffu)};
  }
  return merge_top_candidates<T>(buffers.all, k);
}

// RigL's grow step under constant fan-in: in every row, the per_row columns with the largest
// |dense gradient| among the row's columns that are not kept (ties: the smaller column), as
// ascending linear positions, for the rows of `range` (every row by default); a row with fewer
// non-NaN candidates gives all of them (NaN gradients are never chosen; update() then rejects
// the short list). The gradient is streamed in blocks of `block_rows` rows as for
// top_gradient_candidates. Extra memory: one block plus cols candidates and keys. O(range rows
// * cols) besides block_gradient; throws ArgumentError if block_rows < 1, per_row < 0 or the
// range is not within the rows.
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
                                                                BlockGradient&& block_gradient, Matrix<T>& block,
                                                                RowRange range = {}) {
  const char* fn = "dst::top_gradient_linear_positions_per_row";
  if (block_rows < 1) throw ArgumentError(sprig::detail::message(fn, ": block_rows ", block_rows, " < 1"));
  if (per_row < 0) throw ArgumentError(sprig::detail::message(fn, ": per_row = ", per_row, " < 0"));
  const std::int64_t row_end = detail::checked_row_end(W.rows(), range, fn);
  std::vector<std::int64_t> out;
  if (per_row == 0) return out;
  using Key = decltype(sprig::magnitude_key(T(0)));
  constexpr Key kExcluded = std::bit_cast<Key>(std::numeric_limits<T>::infinity()) + 1;  // NaN keys and above
  const std::int64_t cols = W.cols();
  out.reserve(static_cast<std::size_t>(per_row * (row_end - range.begin)));
  std::vector<KeyedPosition<T>> cand(static_cast<std::size_t>(cols) + 1);  // + 1: the write past the last
  std::vector<Key> keys(static_cast<std::size_t>(cols));
  sprig::KeyRankSelector<Key> selector;
  KeptColumns<T, Index> kept(W, drop);
  Key estimate = 0;
  for (std::int64_t r0 = range.begin; r0 < row_end; r0 += block_rows) {
    const std::int64_t rows = std::min(block_rows, row_end - r0);
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
