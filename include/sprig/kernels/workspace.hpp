// sprig/kernels/workspace.hpp — caller-owned scratch for the fast kernels: the nnz-balanced
// row partition of one weight matrix, the buffer X is packed into and the column-block
// bounds. A training layer keeps one per weight (and one per cached transpose), so a step
// allocates nothing; the plain kernel overloads build a temporary one per call.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <vector>

#include "../core/concepts.hpp"
#include "../core/padded_csr.hpp"
#include "panels.hpp"
#include "row_partition.hpp"

namespace sprig {

// Not thread-safe: one workspace serves one kernel call at a time (the call itself may run on
// many OpenMP threads). Any workspace gives the same bits for a given column_block_bytes; a
// workspace last used with another matrix is detected (topology keys) and rebuilt.
template <Value T>
class KernelWorkspace {
public:
  RowPartition partition;
  // Bytes of X a column block may span (panels.hpp: ColumnBlocks); a tuning knob, and tests
  // make it small to run the blocked kernels on small shapes. Results depend on it only
  // through the summation order of spmm (sddmm's are bitwise the same for any value).
  std::int64_t column_block_bytes = detail::kColumnBlockBytes;

  // A 64-byte aligned buffer of at least n elements, uninitialised; grows, never shrinks.
  // Throws std::bad_alloc when memory runs out.
  T* buffer(std::size_t n) {
    if (n > capacity_) {
      buffer_.reset(static_cast<T*>(::operator new (n * sizeof(T), std::align_val_t{64})));
      capacity_ = n;
    }
    return buffer_.get();
  }

  // W's column-block bounds for `blocks` (panels.hpp: ColumnBlocks::bounds), computed once per
  // topology (PaddedCSR::topology_key: never another matrix's, never a stale one): O(nnz x
  // blocks) then, O(1) otherwise.
  template <class V, class Index>
  const std::int64_t* column_bounds(const PaddedCSR<V, Index>& W, const detail::ColumnBlocks& blocks) {
    // The key fixes W's shape, so the shift fixes the block count.
    if (!(bounds_key_ == W.topology_key() && bounds_shift_ == blocks.shift)) {
      bounds_.resize(static_cast<std::size_t>(W.rows() * (blocks.count + 1)));
      blocks.bounds(W.col_indices().data(), W.row_starts(), W.row_nnzs(), 0, W.rows(), bounds_.data());
      bounds_key_ = W.topology_key();
      bounds_shift_ = blocks.shift;
    }
    return bounds_.data();
  }

  // Bytes owned: the packing buffer, the block bounds and the partition.
  std::int64_t memory_bytes() const noexcept {
    return static_cast<std::int64_t>(capacity_ * sizeof(T) + bounds_.capacity() * sizeof(std::int64_t)) +
           partition.memory_bytes();
  }

private:
  struct AlignedDelete {
    void operator()(T* p) const noexcept { ::operator delete (p, std::align_val_t{64}); }
  };
  std::unique_ptr<T, AlignedDelete> buffer_;
  std::size_t capacity_ = 0;
  std::vector<std::int64_t> bounds_;
  TopologyKey bounds_key_;
  int bounds_shift_ = -1;
};

}  // namespace sprig
