// tests/value_test_support.hpp — what the element-wise kernels' tests share: arrays of
// uniform random values, and bitwise comparison of arrays.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include <sprig/core/rng.hpp>

namespace sprig::test {

// n values uniform in [lo, hi), from the counter-based stream of seed.
template <class T>
std::vector<T> random_values(std::size_t n, std::uint64_t seed, double lo, double hi) {
  CounterRng rng(seed);
  std::vector<T> v(n);
  for (auto& x : v) x = static_cast<T>(rng.uniform(lo, hi));
  return v;
}

// Whether a[0..n) and b[0..n) hold the same bits (NaN payloads and signed zeros included).
template <class T>
bool same_bits(const T* a, const T* b, std::size_t n) {
  return n == 0 || std::memcmp(a, b, n * sizeof(T)) == 0;  // memcmp takes no null pointers, even for 0 bytes
}
template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && same_bits(a.data(), b.data(), a.size());
}

}  // namespace sprig::test
