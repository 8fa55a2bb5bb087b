// sprig/dst/split_scoring.hpp — a gradient-driven grow step's scoring split over the processes
// of a data-parallel run. Every process holds the same model and the same global-batch X and
// dY; instead of each ranking the whole dense gradient dY X^T of a layer, part p of P ranks
// rows [p R / P, (p + 1) R / P) of its R rows, and the parts' candidates are gathered and
// merged. The merge is exact: a position among the k best of the layer is among the k best of
// its own part, so the k best of the gathered candidates (ties: the smaller position, as
// unsplit) are the unsplit grow step's, and every process grows the same positions. The
// scoring's compute per process drops by P. What travels per layer: a histogram of the parts'
// candidate keys (65536 counts, summed), then the candidates at or above the histogram bucket
// that holds the k-th best of all, about k of 8 bytes in all (not P x k; 16 bytes for double
// keys or a layer of 2^32 positions or more). A per-row (constant fan-in) grow step gathers
// each part's positions instead, 4 bytes each below 2^32 positions (gather_positions).
//
// SparsityAlgorithm::set_split_scoring attaches a SplitScoring; dist::DataParallel does so
// for its gradient-driven updates, over its Communicator.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <span>
#include <type_traits>
#include <vector>

namespace sprig::dst {

// The processes that share the scoring. Every part calls gather() in the same order, as
// collectives require; an implementation reports failures by throwing.
class SplitScoring {
public:
  virtual ~SplitScoring() = default;
  virtual int part() const noexcept = 0;   // this process, 0 .. parts() - 1
  virtual int parts() const noexcept = 0;  // >= 1
  // all = every part's bytes, concatenated in part order (parts may contribute different
  // counts); `all` is resized, its capacity reused.
  virtual void gather(std::span<const std::byte> mine, std::vector<std::byte>& all) = 0;
  // counts = the element-wise sum of every part's counts, on every part.
  virtual void sum(std::span<std::int64_t> counts) = 0;
};

// Rows [begin, end) of a layer's weight (of its block grid, for a block-sparse layer); end is
// clipped to the layer's rows, so the default is every row.
struct RowRange {
  std::int64_t begin = 0;
  std::int64_t end = std::numeric_limits<std::int64_t>::max();
};

// The rows of `rows` that `split`'s part ranks: [p rows / P, (p + 1) rows / P), p = part().
inline RowRange split_rows(std::int64_t rows, const SplitScoring& split) noexcept {
  const std::int64_t p = split.part(), n = split.parts();
  return {p * rows / n, (p + 1) * rows / n};
}

// all = every part's `mine`, concatenated in part order; `bytes` and `all` are resized, their
// capacity reused (an update gathers layer after layer). V must be trivially copyable.
template <class V>
void gather_values(SplitScoring& split, std::span<const V> mine, std::vector<std::byte>& bytes, std::vector<V>& all) {
  static_assert(std::is_trivially_copyable_v<V>);
  split.gather(std::as_bytes(mine), bytes);
  all.resize(bytes.size() / sizeof(V));
  if (!all.empty()) std::memcpy(all.data(), bytes.data(), all.size() * sizeof(V));
}

}  // namespace sprig::dst
