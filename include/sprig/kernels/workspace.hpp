// sprig/kernels/workspace.hpp — caller-owned scratch for the fast kernels: the nnz-balanced
// row partition of one weight matrix and the buffer X is packed into. A training layer keeps
// one per weight (and one per cached transpose), so a step allocates nothing; the plain kernel
// overloads build a temporary one per call.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>

#include "../core/concepts.hpp"
#include "row_partition.hpp"

namespace sprig {

template <Value T>
class KernelWorkspace {
public:
  RowPartition partition;

  // A 64-byte aligned buffer of at least n elements, uninitialised; grows, never shrinks.
  T* buffer(std::size_t n) {
    if (n > capacity_) {
      buffer_.reset(static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t{64})));
      capacity_ = n;
    }
    return buffer_.get();
  }

  // Bytes owned: the packing buffer and the partition.
  std::int64_t memory_bytes() const noexcept {
    return static_cast<std::int64_t>(capacity_ * sizeof(T)) + partition.memory_bytes();
  }

private:
  struct AlignedDelete {
    void operator()(T* p) const noexcept { ::operator delete(p, std::align_val_t{64}); }
  };
  std::unique_ptr<T, AlignedDelete> buffer_;
  std::size_t capacity_ = 0;
};

}  // namespace sprig
