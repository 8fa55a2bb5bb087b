// sprig/core/sampling.hpp — sorting and drawing integer positions in [0, n): what a random
// sparsity pattern (PaddedCSR::random_total) and a topology update's random growth
// (dst::random_free_linear_positions) share.
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <utility>
#include <vector>

#include "rng.hpp"

namespace sprig {

// Sorts values in [0, bound) ascending: an LSD radix sort, 11 bits per pass (2 passes up to
// 2^22, 3 up to 2^33), each pass a stable counting sort into a second buffer. Same result as
// std::sort; std::sort below 2^11 values. (For the positions of a topology update: the per-row
// std::sort it replaced, after a counting sort by row, was a quarter of a SET update of a
// 4096 x 1024 layer at density 0.1, ~1.2e5 positions, ~29 per row.) Precondition (unchecked):
// every value in [0, bound). O(n x passes), one scratch buffer of n.
inline void sort_below(std::vector<std::int64_t>& v, std::int64_t bound) {
  if (v.size() < 2 || std::is_sorted(v.begin(), v.end())) return;
  constexpr int kDigitBits = 11;
  constexpr std::size_t kBuckets = std::size_t{1} << kDigitBits;
  if (v.size() < kBuckets) {
    std::sort(v.begin(), v.end());
    return;
  }
  const auto span = static_cast<std::uint64_t>(std::max<std::int64_t>(bound, 1) - 1);
  const int bits = std::max(1, static_cast<int>(std::bit_width(span)));
  std::vector<std::int64_t> out(v.size());
  std::vector<std::size_t> start(kBuckets);
  for (int shift = 0; shift < bits; shift += kDigitBits) {
    std::fill(start.begin(), start.end(), std::size_t{0});
    for (std::int64_t p : v) ++start[(static_cast<std::uint64_t>(p) >> shift) & (kBuckets - 1)];
    std::size_t sum = 0;
    for (auto& c : start) sum += std::exchange(c, sum);
    for (std::int64_t p : v) out[start[(static_cast<std::uint64_t>(p) >> shift) & (kBuckets - 1)]++] = p;
    v.swap(out);
  }
}

// k distinct values of [0, n), ascending, uniformly random among those for which excluded(v)
// is false (there must be at least k of them). Rounds of i.i.d. rng.uniform_below(n) draws,
// each for exactly the number still missing, sorted, filtered and merged: when to stop
// depends only on how many distinct values were found, so the result is a uniformly random
// subset. The first round's draws (k of them, the list's capacity) become the result, later
// rounds add only the missing ones, so no second k-sized list is held. Few rounds while k is
// at most about half of the candidates; beyond that the last missing values take ever more
// rounds (a coupon collector), and callers draw the complement or enumerate instead.
// Precondition (unchecked): at least k values of [0, n) are not excluded, or it never ends.
// The result depends on the rng's stream alone.
template <class Excluded>
std::vector<std::int64_t> draw_distinct_below(CounterRng& rng, std::int64_t n, std::int64_t k, Excluded&& excluded) {
  std::vector<std::int64_t> chosen, fresh;
  while (std::ssize(chosen) < k) {
    fresh.resize(static_cast<std::size_t>(k - std::ssize(chosen)));
    for (auto& p : fresh) p = static_cast<std::int64_t>(rng.uniform_below(static_cast<std::uint64_t>(n)));
    sort_below(fresh, n);
    std::erase_if(fresh, excluded);
    if (chosen.empty()) {
      fresh.erase(std::unique(fresh.begin(), fresh.end()), fresh.end());
      chosen.swap(fresh);
      continue;
    }
    // merged in place (the sorted union of both lists, duplicates dropped)
    const auto middle = static_cast<std::ptrdiff_t>(chosen.size());
    chosen.insert(chosen.end(), fresh.begin(), fresh.end());
    std::inplace_merge(chosen.begin(), chosen.begin() + middle, chosen.end());
    chosen.erase(std::unique(chosen.begin(), chosen.end()), chosen.end());
  }
  return chosen;
}

}  // namespace sprig
