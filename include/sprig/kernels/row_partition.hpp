// sprig/kernels/row_partition.hpp — splits the rows of a PaddedCSR into contiguous ranges of
// about equal work (live weights, plus a per-row overhead) for the threaded kernels.
//
// Each row is computed by exactly one thread and the arithmetic of a row never depends on
// which thread runs it or on the range boundaries, so any partition gives bitwise the same
// result: the partition decides only the load balance.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "../core/padded_csr.hpp"

namespace sprig {

class RowPartition {
public:
  // Work of one row in units of one live weight: loading, storing and zeroing the output
  // row segment costs about as much as two weights.
  static constexpr std::int64_t kRowOverhead = 2;

  // Rebuilds the work prefix when W's topology changed (PaddedCSR::topology_key): O(M) then,
  // O(1) otherwise. Even a stale prefix could only unbalance the threads, never change a
  // result. Not thread-safe (the kernels call it before their parallel region).
  template <Value T, ColumnIndex Index>
  void update(const PaddedCSR<T, Index>& W) {
    if (valid_ && key_ == W.topology_key() && std::ssize(prefix_) == W.rows() + 1) return;
    build(W);
  }

  template <Value T, ColumnIndex Index>
  void build(const PaddedCSR<T, Index>& W) {
    const std::int64_t M = W.rows();
    prefix_.resize(static_cast<std::size_t>(M + 1));
    prefix_[0] = 0;
    const auto nnz = W.row_nnzs();
    for (std::int64_t i = 0; i < M; ++i) prefix_[i + 1] = prefix_[i] + nnz[i] + kRowOverhead;
    key_ = W.topology_key();
    valid_ = true;
  }

  std::int64_t rows() const noexcept { return valid_ ? std::ssize(prefix_) - 1 : 0; }
  std::int64_t total_work() const noexcept { return valid_ ? prefix_.back() : 0; }

  // First row of part t of n (t in [0, n]); part t is [begin(t, n), begin(t + 1, n)).
  // O(log M) (binary search of the prefix); safe to call from many threads at once.
  std::int64_t begin(int t, int n) const noexcept {
    if (t <= 0) return 0;
    if (t >= n) return rows();
    const std::int64_t target =
        static_cast<std::int64_t>(static_cast<double>(total_work()) * static_cast<double>(t) / static_cast<double>(n));
    return std::lower_bound(prefix_.begin(), prefix_.end(), target) - prefix_.begin();
  }

  std::int64_t memory_bytes() const noexcept {
    return static_cast<std::int64_t>(prefix_.capacity() * sizeof(std::int64_t));
  }

private:
  std::vector<std::int64_t> prefix_;
  TopologyKey key_;
  bool valid_ = false;
};

}  // namespace sprig
