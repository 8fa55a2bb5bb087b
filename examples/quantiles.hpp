// examples/quantiles.hpp — the median and the 10th and 90th percentiles of a sample of times,
// as the examples report them (step times, ranks' step times).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

namespace examples {

struct Quantiles {
  double p10, median, p90;
};

// Linear interpolation between the sorted values (the usual median for an even count).
// Precondition: v is not empty. O(n log n).
inline Quantiles quantiles(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const auto at = [&](double q) {
    const double pos = q * static_cast<double>(v.size() - 1);
    const auto lo = static_cast<std::size_t>(std::floor(pos));
    const std::size_t hi = std::min(lo + 1, v.size() - 1);
    return v[lo] + (pos - static_cast<double>(lo)) * (v[hi] - v[lo]);
  };
  return {at(0.1), at(0.5), at(0.9)};
}

}  // namespace examples
