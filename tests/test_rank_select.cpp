#include "sprig/core/rank_select.hpp"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <limits>
#include <vector>

#include <catch2/catch.hpp>

#include "sprig/core/rng.hpp"

using namespace sprig;

namespace {

// Magnitude keys of values spread over a few binades, with repeats (ties) and zeros.
template <class T>
std::vector<decltype(magnitude_key(T(0)))> keys_of(std::size_t n, std::uint64_t seed) {
  CounterRng rng(seed, 0, 0);
  std::vector<decltype(magnitude_key(T(0)))> keys;
  for (std::size_t q = 0; q < n; ++q) {
    T v = static_cast<T>(rng.uniform(-4.0, 4.0));
    if (q % 7 == 3) v = T(0.5);  // ties
    if (q % 11 == 5) v = T(0);
    keys.push_back(magnitude_key(v));
  }
  return keys;
}

}  // namespace

TEMPLATE_TEST_CASE("magnitude_key orders as |v| does", "[core][rank_select]", float, double) {
  using T = TestType;
  CHECK(magnitude_key(T(-0.0)) == magnitude_key(T(0)));
  CHECK(magnitude_key(T(-2)) == magnitude_key(T(2)));
  CHECK(magnitude_key(T(1e-30)) < magnitude_key(T(-1e-29)));
  CHECK(magnitude_key(T(3)) < magnitude_key(std::numeric_limits<T>::infinity()));
}

TEMPLATE_TEST_CASE("key_of_rank and KeyRankSelector agree with a sort", "[core][rank_select]", float, double) {
  using T = TestType;
  for (std::size_t n : {std::size_t{1}, std::size_t{2}, std::size_t{37}, std::size_t{5000}}) {
    const auto keys = keys_of<T>(n, n);
    auto sorted = keys;
    std::sort(sorted.begin(), sorted.end());
    using Key = typename decltype(sorted)::value_type;
    KeyRankSelector<Key> selector;
    for (std::int64_t r : {std::int64_t{1}, static_cast<std::int64_t>(n + 1) / 2, static_cast<std::int64_t>(n)}) {
      INFO("n = " << n << ", r = " << r);
      CHECK(key_of_rank<Key>(
                n, [&](std::size_t q) { return keys[q]; }, r) == sorted[static_cast<std::size_t>(r - 1)]);
      CHECK(selector.template select<false>(keys.data(), n, r) == sorted[static_cast<std::size_t>(r - 1)]);
      CHECK(selector.template select<true>(keys.data(), n, r) == sorted[n - static_cast<std::size_t>(r)]);
    }
  }
}
