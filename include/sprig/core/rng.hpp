// sprig/core/rng.hpp — a counter-based random generator.
//
// The n-th number of a stream is a pure function of (seed, stream key, n): SplitMix64's
// finaliser applied to key + n * golden gamma. Streams are keyed by what they belong to
// (for example layer and training step), so runs are reproducible for any thread count and
// data-parallel workers agree without communicating.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>

namespace sprig {

namespace detail {
__extension__ typedef unsigned __int128 uint128;  // GCC/Clang extension, fine under -Wpedantic
constexpr std::uint64_t kGoldenGamma = 0x9E3779B97F4A7C15ULL;

constexpr std::uint64_t mix64(std::uint64_t z) noexcept {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}
}  // namespace detail

// A std uniform random bit generator. One object is not thread-safe; give each thread (or
// each layer, step, row) its own stream instead, which is what makes results independent of
// the thread count. All members are O(1) and noexcept.
class CounterRng {
public:
  using result_type = std::uint64_t;

  // A stream identified by a seed and up to two keys (e.g. layer index and step).
  explicit constexpr CounterRng(std::uint64_t seed, std::uint64_t key1 = 0, std::uint64_t key2 = 0,
                                std::uint64_t counter = 0) noexcept
      : key_(detail::mix64(detail::mix64(detail::mix64(seed) ^ (key1 * detail::kGoldenGamma + 1)) ^
                           (key2 * 0xD1B54A32D192ED03ULL + 2))),
        counter_(counter) {}

  static constexpr result_type min() noexcept { return 0; }
  static constexpr result_type max() noexcept { return std::numeric_limits<result_type>::max(); }

  constexpr result_type operator()() noexcept { return detail::mix64(key_ + (++counter_) * detail::kGoldenGamma); }

  // How many numbers this stream has produced; with the constructor arguments it
  // restores the generator exactly (checkpoints store it).
  constexpr std::uint64_t counter() const noexcept { return counter_; }

  // Uniform integer in [0, n), n > 0, without modulo bias (Lemire's method).
  std::uint64_t uniform_below(std::uint64_t n) noexcept {
    if (n <= 1) return 0;
    detail::uint128 m = static_cast<detail::uint128>((*this)()) * n;
    auto low = static_cast<std::uint64_t>(m);
    if (low < n) {
      const std::uint64_t threshold = (0 - n) % n;
      while (low < threshold) {
        m = static_cast<detail::uint128>((*this)()) * n;
        low = static_cast<std::uint64_t>(m);
      }
    }
    return static_cast<std::uint64_t>(m >> 64);
  }

  // Uniform real in [0, 1) with 53 random bits.
  double uniform01() noexcept { return static_cast<double>((*this)() >> 11) * 0x1.0p-53; }

  // Uniform real in [lo, hi).
  double uniform(double lo, double hi) noexcept { return lo + (hi - lo) * uniform01(); }

  // Standard normal (Box-Muller, one value per call for simplicity and reproducibility).
  double normal() noexcept {
    const double u1 = 1.0 - uniform01();  // (0, 1]
    const double u2 = uniform01();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }

private:
  std::uint64_t key_;
  std::uint64_t counter_;
};

}  // namespace sprig
