// AlignedAllocator / AlignedVector: 64-byte alignment through growth, copies and rebinding.
#include <sprig/core/aligned_allocator.hpp>

#include <catch2/catch.hpp>

#include <cstdint>
#include <limits>
#include <memory>
#include <new>
#include <type_traits>
#include <vector>

namespace {
template <class T>
bool aligned(const T* p, std::size_t a) {
  return reinterpret_cast<std::uintptr_t>(p) % a == 0;
}
}  // namespace

TEMPLATE_TEST_CASE("AlignedVector: data() is 64-byte aligned at every size and after growth", "[aligned]", float,
                   double, std::int16_t, std::int32_t, std::int64_t, char) {
  using T = TestType;
  static_assert(sprig::kAlignment == 64);
  sprig::AlignedVector<T> v;
  for (int i = 0; i < 5000; ++i) {
    const auto* before = v.data();
    v.push_back(static_cast<T>(i % 100));
    if (v.data() != before) REQUIRE(aligned(v.data(), 64));  // every reallocation
  }
  for (int i = 0; i < 5000; ++i) REQUIRE(v[static_cast<std::size_t>(i)] == static_cast<T>(i % 100));
  for (std::size_t n : {1u, 3u, 17u, 64u, 1000u}) {
    sprig::AlignedVector<T> w(n, T(1));
    REQUIRE(aligned(w.data(), 64));
    sprig::AlignedVector<T> copy = w;
    REQUIRE(aligned(copy.data(), 64));
    REQUIRE(copy == w);
    w.resize(n * 3 + 1);
    REQUIRE(aligned(w.data(), 64));
    w.shrink_to_fit();
    REQUIRE(aligned(w.data(), 64));
  }
}

TEST_CASE("AlignedAllocator: custom alignment, rebind, equality, overflow", "[aligned]") {
  sprig::AlignedAllocator<float, 256> a;
  float* p = a.allocate(3);
  REQUIRE(aligned(p, 256));
  a.deallocate(p, 3);
  using Rebound = std::allocator_traits<sprig::AlignedAllocator<float>>::rebind_alloc<double>;
  static_assert(std::is_same_v<Rebound, sprig::AlignedAllocator<double>>);
  Rebound r{sprig::AlignedAllocator<float>{}};
  double* q = r.allocate(5);
  REQUIRE(aligned(q, 64));
  r.deallocate(q, 5);
  REQUIRE(sprig::AlignedAllocator<float>{} == sprig::AlignedAllocator<double>{});
  // A request whose byte count overflows size_t must not wrap to a small allocation.
  sprig::AlignedAllocator<double> d;
  REQUIRE_THROWS_AS(d.allocate(std::numeric_limits<std::size_t>::max() / 4), std::bad_array_new_length);
}
