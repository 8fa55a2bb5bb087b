// sprig/dst/live_count.hpp — how many weights a layer keeps at a given sparsity.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace sprig::dst {

// Live weights for a layer of `size` positions at the given sparsity: round((1 - s) * size),
// at least 1 so that no layer is cut off entirely (and at most size). O(1), no throw;
// precondition size >= 0 and 0 <= sparsity <= 1 (not checked).
inline std::int64_t live_count(std::int64_t size, double sparsity) {
  const auto n = static_cast<std::int64_t>(std::llround((1.0 - sparsity) * static_cast<double>(size)));
  return std::clamp<std::int64_t>(n, std::min<std::int64_t>(1, size), size);
}

}  // namespace sprig::dst
