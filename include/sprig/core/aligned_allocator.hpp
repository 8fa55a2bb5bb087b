// sprig/core/aligned_allocator.hpp — a std allocator with 64-byte (cache line, one
// AVX-512 register) alignment for matrix and value storage.
#pragma once

#include <cstddef>
#include <limits>
#include <new>
#include <vector>

namespace sprig {

inline constexpr std::size_t kAlignment = 64;

// Allocates T arrays aligned to Align bytes (a power of two). allocate throws
// std::bad_array_new_length when n elements overflow size_t and std::bad_alloc when memory
// runs out; all instances are interchangeable (operator== is always true).
template <class T, std::size_t Align = kAlignment>
struct AlignedAllocator {
  using value_type = T;
  template <class U>
  struct rebind {
    using other = AlignedAllocator<U, Align>;
  };

  AlignedAllocator() noexcept = default;
  template <class U>
  AlignedAllocator(const AlignedAllocator<U, Align>&) noexcept {}

  T* allocate(std::size_t n) {
    if (n > std::numeric_limits<std::size_t>::max() / sizeof(T)) throw std::bad_array_new_length();
    return static_cast<T*>(::operator new (n * sizeof(T), std::align_val_t{Align}));
  }
  void deallocate(T* p, std::size_t) noexcept { ::operator delete (p, std::align_val_t{Align}); }

  template <class U>
  bool operator==(const AlignedAllocator<U, Align>&) const noexcept {
    return true;
  }
};

// A std::vector whose data() is 64-byte aligned.
template <class T>
using AlignedVector = std::vector<T, AlignedAllocator<T>>;

namespace detail {
// v = n copies of value, reusing v's buffer when it is large enough; a buffer too small is
// freed before the new one is allocated (assign would hold both at once, and a rebuild of a
// large array would briefly double it).
template <class Vec>
void refill(Vec& v, std::size_t n, const typename Vec::value_type& value) {
  if (v.capacity() < n) Vec().swap(v);
  v.assign(n, value);
}
// v.size() == n for a caller that writes every element: as refill, but only the elements past
// v's old size are initialised.
template <class Vec>
void resize_for_overwrite(Vec& v, std::size_t n) {
  if (v.capacity() < n) Vec().swap(v);
  v.resize(n);
}
}  // namespace detail

}  // namespace sprig
