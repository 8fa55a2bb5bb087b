// CounterRng: determinism, independent streams, ranges and rough uniformity.
#include <sprig/core/rng.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iterator>
#include <set>
#include <vector>

namespace {

std::vector<std::uint64_t> draw(sprig::CounterRng rng, int n) {
  std::vector<std::uint64_t> out;
  for (int i = 0; i < n; ++i) out.push_back(rng());
  return out;
}

// Pearson chi-square of counts against equal expected counts.
double chi_square(const std::vector<double>& counts, double total) {
  const double e = total / static_cast<double>(counts.size());
  double x = 0;
  for (double c : counts) x += (c - e) * (c - e) / e;
  return x;
}

// Bound for a chi-square with k degrees of freedom: mean k, sd sqrt(2k); 6 sd.
double chi_bound(double k) { return k + 6.0 * std::sqrt(2.0 * k); }

}  // namespace

TEST_CASE("CounterRng: the same (seed, keys) gives the same stream; counter() restores it", "[rng]") {
  const auto a = draw(sprig::CounterRng(42, 3, 9), 100);
  REQUIRE(a == draw(sprig::CounterRng(42, 3, 9), 100));
  sprig::CounterRng g(42, 3, 9);
  for (int i = 0; i < 37; ++i) g();
  REQUIRE(g.counter() == 37);
  sprig::CounterRng restored(42, 3, 9, g.counter());
  for (int i = 37; i < 100; ++i) {
    const auto x = g();
    REQUIRE(x == a[static_cast<std::size_t>(i)]);
    REQUIRE(restored() == x);
  }
  // The counter advances by one per raw number, and by at least one per derived number.
  sprig::CounterRng h(1);
  REQUIRE(h.counter() == 0);
  h();
  REQUIRE(h.counter() == 1);
  (void)h.uniform01();
  REQUIRE(h.counter() == 2);
  (void)h.uniform(-1.0, 1.0);
  REQUIRE(h.counter() == 3);
  (void)h.normal();
  REQUIRE(h.counter() == 5);  // Box-Muller: two uniforms per value
  (void)h.uniform_below(10);
  REQUIRE(h.counter() >= 6);
  // constexpr: a stream is a pure function usable at compile time.
  constexpr auto first = [] {
    sprig::CounterRng c(5);
    return c();
  }();
  REQUIRE(first == sprig::CounterRng(5)());
}

TEST_CASE("CounterRng: different seeds or keys give different streams", "[rng]") {
  const auto base = draw(sprig::CounterRng(1, 2, 3), 64);
  const sprig::CounterRng variants[] = {sprig::CounterRng(2, 2, 3), sprig::CounterRng(1, 3, 3),
                                        sprig::CounterRng(1, 2, 4), sprig::CounterRng(1, 3, 2),
                                        sprig::CounterRng(1, 0, 0), sprig::CounterRng(0, 2, 3)};
  std::set<std::vector<std::uint64_t>> streams{base};
  for (const auto& v : variants) {
    const auto s = draw(v, 64);
    // Not just different: no shared values at all (2^-64 chance per pair).
    std::vector<std::uint64_t> common;
    auto x = s, y = base;
    std::sort(x.begin(), x.end());
    std::sort(y.begin(), y.end());
    std::set_intersection(x.begin(), x.end(), y.begin(), y.end(), std::back_inserter(common));
    REQUIRE(common.empty());
    streams.insert(s);
  }
  REQUIRE(streams.size() == 7);
  // Keys are not interchangeable: (layer 1, step 2) differs from (layer 2, step 1).
  REQUIRE(draw(sprig::CounterRng(9, 1, 2), 4) != draw(sprig::CounterRng(9, 2, 1), 4));
}

TEST_CASE("CounterRng: uniform_below stays in range and is roughly uniform", "[rng]") {
  sprig::CounterRng g(7, 1);
  REQUIRE(g.uniform_below(0) == 0);
  REQUIRE(g.uniform_below(1) == 0);
  // Small n, many bins, and an n that is not a power of two (where modulo bias would show).
  for (std::uint64_t n : {2ULL, 7ULL, 100ULL, 1000ULL}) {
    INFO("n = " << n);
    const int draws = 200000;
    std::vector<double> counts(static_cast<std::size_t>(n), 0.0);
    for (int i = 0; i < draws; ++i) {
      const auto x = g.uniform_below(n);
      REQUIRE(x < n);
      counts[static_cast<std::size_t>(x)] += 1;
    }
    const double x = chi_square(counts, draws);
    INFO("chi-square " << x);
    REQUIRE(x < chi_bound(static_cast<double>(n - 1)));
  }
  // A huge n: only the range can be checked cheaply, plus that the top half is reached.
  const std::uint64_t big = (std::uint64_t{1} << 63) + 12345;
  int high = 0;
  for (int i = 0; i < 1000; ++i) {
    const auto x = g.uniform_below(big);
    REQUIRE(x < big);
    high += x >= big / 2;
  }
  REQUIRE(high > 400);
  REQUIRE(high < 600);
}

TEST_CASE("CounterRng: uniform01 in [0, 1), uniform in [lo, hi), normal moments", "[rng]") {
  sprig::CounterRng g(11, 0, 5);
  const int n = 200000;
  std::vector<double> bins(20, 0.0);
  double sum = 0;
  for (int i = 0; i < n; ++i) {
    const double u = g.uniform01();
    REQUIRE(u >= 0.0);
    REQUIRE(u < 1.0);
    bins[static_cast<std::size_t>(u * 20)] += 1;
    sum += u;
  }
  REQUIRE(chi_square(bins, n) < chi_bound(19));
  // Mean 1/2, sd of the mean sqrt(1/12 / n).
  REQUIRE(std::abs(sum / n - 0.5) < 6.0 * std::sqrt(1.0 / 12.0 / n));
  for (int i = 0; i < 10000; ++i) {
    const double x = g.uniform(-3.0, 5.0);
    REQUIRE(x >= -3.0);
    REQUIRE(x < 5.0);
  }
  // normal(): mean 0 (sd of mean 1/sqrt(n)), variance 1 (sd of sample variance sqrt(2/n)).
  double s1 = 0, s2 = 0;
  for (int i = 0; i < n; ++i) {
    const double z = g.normal();
    REQUIRE(std::isfinite(z));
    s1 += z;
    s2 += z * z;
  }
  const double mean = s1 / n, var = s2 / n - mean * mean;
  REQUIRE(std::abs(mean) < 6.0 / std::sqrt(static_cast<double>(n)));
  REQUIRE(std::abs(var - 1.0) < 6.0 * std::sqrt(2.0 / n));
}

TEST_CASE("CounterRng: consecutive raw outputs are not correlated bit-wise", "[rng]") {
  // Each output bit is 1 with probability 1/2; over n draws the count of ones in a bit
  // position has sd sqrt(n)/2. A weak mixer on a counter would leave low bits periodic.
  sprig::CounterRng g(0);
  const int n = 20000;
  std::vector<int> ones(64, 0);
  int equal_low_bit = 0;
  std::uint64_t prev = g();
  for (int i = 0; i < n; ++i) {
    const std::uint64_t x = g();
    for (int b = 0; b < 64; ++b) ones[static_cast<std::size_t>(b)] += static_cast<int>((x >> b) & 1U);
    equal_low_bit += static_cast<int>(((x ^ prev) & 1U) == 0);
    prev = x;
  }
  const double sd = std::sqrt(static_cast<double>(n)) / 2.0;
  for (int b = 0; b < 64; ++b) REQUIRE(std::abs(ones[static_cast<std::size_t>(b)] - n / 2) < 6.0 * sd);
  REQUIRE(std::abs(equal_low_bit - n / 2) < 6.0 * sd);
}
