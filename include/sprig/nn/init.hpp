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

// How a layer draws its weights (Linear, SparseLinear, BlockSparseLinear; zero bias either way):
//   kaiming_uniform (the default): U(-b, b), b = kaiming_uniform_bound(effective fan-in);
//   normal: N(0, std^2) for a dense layer, GPT-2's and nanoGPT's scheme (std = 0.02). A
//     sparse layer draws with std * sqrt(in / fan_in), fan_in its effective fan-in (live
//     weights / rows), so each output's variance at init is the dense layer's,
//     in * std^2 * E[x^2]: the sparsity-aware scaling of Evci et al., "Gradient Flow in Sparse
//     Neural Networks and How Lottery Tickets Win" (AAAI 2022).
struct WeightInit {
  enum class Scheme { kaiming_uniform, normal };
  Scheme scheme = Scheme::kaiming_uniform;
  double std = 0.0;  // normal's, for the dense layer; > 0 and finite

  static constexpr WeightInit normal(double std) noexcept { return {Scheme::normal, std}; }
  bool is_normal() const noexcept { return scheme == Scheme::normal; }
};

// The standard deviation a layer of dense fan-in `in` and effective fan-in `fan_in` draws
// with under init.is_normal(): init.std * sqrt(in / fan_in). O(1). Throws ArgumentError, naming
// `fn`, for a std that is not finite and > 0 or a fan-in outside (0, in].
inline double normal_init_std(const char* fn, const WeightInit& init, double in, double fan_in) {
  if (!(std::isfinite(init.std) && init.std > 0.0))
    throw ArgumentError(detail::message(fn, ": WeightInit::normal std ", init.std, " must be finite and > 0"));
  if (!(fan_in > 0.0 && fan_in <= in))
    throw ArgumentError(detail::message(fn, ": effective fan-in ", fan_in, " outside (0, ", in, "]"));
  return init.std * std::sqrt(in / fan_in);
}

}  // namespace sprig
