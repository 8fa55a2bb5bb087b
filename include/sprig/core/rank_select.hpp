// sprig/core/rank_select.hpp — the element of a given rank among unsigned keys, by a radix
// histogram of the keys' top bits and nth_element over the one bucket that holds it.
//
// Nothing here knows about sparse training: a DST drop or grow step (dst/drop_grow.hpp) ranks
// weight or gradient magnitudes with it, through magnitude_key. Everything is sequential and
// deterministic; results never depend on the thread count.
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <type_traits>
#include <vector>

#include "concepts.hpp"

namespace sprig {

// The bits of |v| as an unsigned integer: for v not NaN they order exactly as the
// magnitudes do (IEEE 754 non-negative values order as their bit patterns; -0 becomes +0).
template <Value T>
auto magnitude_key(T v) noexcept {
  using Key = std::conditional_t<sizeof(T) == 4, std::uint32_t, std::uint64_t>;
  static_assert(sizeof(Key) == sizeof(T));
  return std::bit_cast<Key>(std::abs(v));
}

// The key of rank r (1-based, ascending) among key_of(0), ..., key_of(n - 1), unsigned keys
// whose top bit is 0 (magnitude_key). Precondition: 1 <= r <= n (not checked). A histogram
// of the keys' next 12 bits finds the bucket that holds it, nth_element over a copy of that
// bucket alone the exact key (about a thousandth of the keys when magnitudes spread over a
// few binades). O(n) time, O(bucket) extra memory; throws only std::bad_alloc.
template <class Key, class KeyOf>
Key key_of_rank(std::size_t n, KeyOf&& key_of, std::int64_t r) {
  constexpr int kBucketBits = 12;
  constexpr int kShift = static_cast<int>(8 * sizeof(Key)) - 1 - kBucketBits;
  std::vector<std::int64_t> count(std::size_t{1} << kBucketBits, 0);
  for (std::size_t q = 0; q < n; ++q) ++count[static_cast<std::size_t>(key_of(q) >> kShift)];
  std::int64_t before = 0;  // keys in the buckets below the one holding rank r
  std::size_t bucket = 0;
  while (before + count[bucket] < r) before += count[bucket++];
  std::vector<Key> inside;
  inside.reserve(static_cast<std::size_t>(count[bucket]));
  for (std::size_t q = 0; q < n; ++q)
    if (const Key key = key_of(q); static_cast<std::size_t>(key >> kShift) == bucket) inside.push_back(key);
  const auto nth = inside.begin() + (r - 1 - before);
  std::nth_element(inside.begin(), nth, inside.end());
  return *nth;
}

// The key of rank r (1-based) among n unsigned keys whose top bit is 0 (magnitude_key),
// counted from the largest (Largest) or from the smallest: key_of_rank for many short lists
// (the rows of a layer), with its scratch kept across calls. A histogram of the keys' next 12
// bits is scanned from the extreme bucket towards the one that holds rank r, and nth_element
// runs on a copy of that bucket alone; the counts are cleared key by key afterwards, so a call
// costs O(n + buckets scanned), not O(4096). Precondition: 1 <= r <= n (not checked). 16 KiB
// of counts plus the bucket; throws only std::bad_alloc.
template <class Key>
class KeyRankSelector {
public:
  template <bool Largest>
  Key select(const Key* keys, std::size_t n, std::int64_t r) {
    constexpr int kBucketBits = 12;
    constexpr int kShift = static_cast<int>(8 * sizeof(Key)) - 1 - kBucketBits;
    if (count_.empty()) count_.assign(std::size_t{1} << kBucketBits, 0);
    std::size_t extreme = Largest ? 0 : count_.size() - 1;
    for (std::size_t q = 0; q < n; ++q) {
      const auto b = static_cast<std::size_t>(keys[q] >> kShift);
      ++count_[b];
      extreme = Largest ? std::max(extreme, b) : std::min(extreme, b);
    }
    std::int64_t before = 0;  // keys in the buckets scanned past
    std::size_t bucket = extreme;
    while (before + count_[bucket] < r) {
      before += count_[bucket];
      bucket = Largest ? bucket - 1 : bucket + 1;
    }
    inside_.clear();
    for (std::size_t q = 0; q < n; ++q) {
      if (static_cast<std::size_t>(keys[q] >> kShift) == bucket) inside_.push_back(keys[q]);
      count_[static_cast<std::size_t>(keys[q] >> kShift)] = 0;
    }
    const auto nth = inside_.begin() + (r - 1 - before);
    if constexpr (Largest)
      std::nth_element(inside_.begin(), nth, inside_.end(), std::greater<>());
    else
      std::nth_element(inside_.begin(), nth, inside_.end());
    return *nth;
  }

private:
  std::vector<std::int64_t> count_;
  std::vector<Key> inside_;
};

}  // namespace sprig
