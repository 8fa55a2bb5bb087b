// sprig/nn/init.hpp — weight initialisation rules shared by the layers.
#pragma once

#include <cmath>
#include <cstdint>

#include "../core/error.hpp"

namespace sprig {

// Kaiming (He) uniform for ReLU-family layers: U(-b, b) with b = sqrt(6 / fan_in), which
// gives Var(w) = 2 / fan_in and keeps the pre-activation variance constant across layers.
// For a sparse layer fan_in is the *effective* fan-in in * density (the number of live
// inputs a neuron sums on average): using the dense fan-in would shrink activations by
// sqrt(density) per layer. O(1). Throws ArgumentError unless fan_in > 0.
inline double kaiming_uniform_bound(double fan_in) {
  if (!(fan_in > 0.0)) throw ArgumentError(detail::message("kaiming_uniform_bound: fan_in ", fan_in, " must be > 0"));
  return std::sqrt(6.0 / fan_in);
}

}  // namespace sprig
