// sprig/kernels/workspace.hpp — caller-owned scratch for the fast kernels: the nnz-balanced
// row partition of one weight matrix, the buffer X is packed into and the column-block
// bounds. A training layer keeps one per weight (and one per cached transpose), so a step
// allocates nothing; the plain kernel overloads build a temporary one per call.
//
// The packing buffer is the large part (K x B values for a K-row operand at batch width B)
// and its contents matter only during one kernel call: every kernel packs before it reads.
// So it may come from a ScratchBuffer shared by many workspaces (share_scratch): a model
// hands one to all its layers, sized by the largest request, instead of one per workspace.
// The small parts (partition, column-block bounds) are keyed by one matrix's topology and
// stay per workspace.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <utility>
#include <vector>

#include "../core/concepts.hpp"
#include "../core/padded_csr.hpp"
#include "../core/tuning.hpp"
#include "panels.hpp"
#include "row_partition.hpp"

namespace sprig {

// A 64-byte aligned buffer that grows to the largest request it has served and never
// shrinks: the packing space of the kernels, owned by one workspace or shared by several
// (SharedScratch). Its contents are unspecified between calls of data(); a caller that
// shares it must not hold data() across another sharer's kernel call.
// Not thread-safe: it serves one kernel call at a time (the call may run on many OpenMP
// threads). Sharing it between workspaces is safe as long as their kernel calls are
// sequential, as the layers of one model are.
template <Value T>
class ScratchBuffer {
public:
  // At least n elements, uninitialised. O(1) unless it grows (then it frees the old block
  // first and allocates n). Throws std::bad_alloc when memory runs out (the buffer is then
  // empty).
  T* data(std::size_t n) {
    if (n > capacity_) {
      buffer_.reset();
      capacity_ = 0;
      buffer_.reset(static_cast<T*>(::operator new (n * sizeof(T), std::align_val_t{64})));
      capacity_ = n;
    }
    return buffer_.get();
  }
  std::size_t capacity() const noexcept { return capacity_; }
  // Bytes owned: capacity() x sizeof(T).
  std::int64_t memory_bytes() const noexcept { return static_cast<std::int64_t>(capacity_ * sizeof(T)); }

private:
  struct AlignedDelete {
    void operator()(T* p) const noexcept { ::operator delete (p, std::align_val_t{64}); }
  };
  std::unique_ptr<T, AlignedDelete> buffer_;
  std::size_t capacity_ = 0;
};

// A ScratchBuffer several workspaces use in turn (KernelWorkspace::share_scratch). Shared
// ownership, so a workspace never outlives its buffer, whichever of its users goes first.
template <Value T>
using SharedScratch = std::shared_ptr<ScratchBuffer<T>>;

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
  // Overwritten float outputs of at least this many bytes leave the block kernels
  // (block_spmm.hpp, bf16_block_kernels.hpp) with streaming stores (tuning.hpp:
  // SPRIG_BLOCK_STREAM_BYTES); the results are bitwise the same for any value, and tests set
  // 0 to run that path on small shapes.
  std::int64_t stream_bytes = SPRIG_BLOCK_STREAM_BYTES;

  // A 64-byte aligned buffer of at least n elements, uninitialised, whose contents last
  // until the next buffer() call on this workspace or on any workspace sharing its scratch;
  // grows, never shrinks. The shared scratch if one is set (share_scratch), else the
  // workspace's own. Throws std::bad_alloc when memory runs out.
  T* buffer(std::size_t n) { return (shared_ ? *shared_ : own_).data(n); }

  // Packs into `scratch` from now on (frees the workspace's own buffer); nullptr returns to
  // a private buffer (allocated on first use). The partition and the column-block bounds stay
  // the workspace's. Results are bitwise the same either way: kernels write every element
  // of the buffer they read in the same call. Precondition: the kernel calls of all
  // workspaces sharing `scratch` are sequential (one at a time). O(1), noexcept.
  void share_scratch(SharedScratch<T> scratch) noexcept {
    shared_ = std::move(scratch);
    if (shared_) own_ = ScratchBuffer<T>();
  }
  const SharedScratch<T>& shared_scratch() const noexcept { return shared_; }

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

  // Bytes owned: the own packing buffer (0 while sharing: the shared one is counted once, by
  // its owner), the block bounds and the partition.
  std::int64_t memory_bytes() const noexcept {
    return own_.memory_bytes() + static_cast<std::int64_t>(bounds_.capacity() * sizeof(std::int64_t)) +
           partition.memory_bytes();
  }
  // Bytes of the own packing buffer (0 while sharing), the part share_scratch moves out.
  std::int64_t scratch_bytes() const noexcept { return own_.memory_bytes(); }

private:
  ScratchBuffer<T> own_;
  SharedScratch<T> shared_;
  std::vector<std::int64_t> bounds_;
  TopologyKey bounds_key_;
  int bounds_shift_ = -1;
};

}  // namespace sprig
