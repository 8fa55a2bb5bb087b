// sprig/models/density.hpp — how a global sparsity is spread over a model's layers.
//
// Uniform: every sparse layer gets the same sparsity. ERK (Erdos-Renyi-Kernel, RigL's
// get_sparsities_erdos_renyi with power scale 1): layer l of shape n_out x n_in gets density
// eps * (n_in + n_out) / (n_in * n_out), with eps solved so that the total live count equals
// (1 - S) * (total parameters); a layer whose density would exceed 1 is made dense and eps is
// re-solved over the remaining layers (its parameters all count as live). The functions are
// pure (no state, deterministic) and O(layers) (ERK: O(layers^2) in the worst case).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "../core/error.hpp"

namespace sprig::models {

// How build_mlp and build_gpt spread a global sparsity over their layers.
enum class Distribution { uniform, erk };

// The shape of a layer's weight matrix, W: n_out x n_in.
struct LayerShape {
  std::int64_t n_out = 0;  // rows of W
  std::int64_t n_in = 0;   // cols of W
  std::int64_t size() const noexcept { return n_out * n_in; }
};

namespace detail {
inline void check_layers(const char* fn, const std::vector<LayerShape>& layers, double sparsity) {
  if (!(sparsity >= 0.0 && sparsity < 1.0))
    throw ArgumentError(sprig::detail::message(fn, ": sparsity ", sparsity, " outside [0, 1)"));
  for (std::size_t l = 0; l < layers.size(); ++l)
    if (layers[l].n_out < 1 || layers[l].n_in < 1)
      throw ShapeError(sprig::detail::message(fn, ": layer ", l, " has shape ", layers[l].n_out, "x", layers[l].n_in));
}
}  // namespace detail

namespace detail {
// The two distributions below, with `fn` (the public call) named in their errors.
inline std::vector<double> uniform_sparsities(const char* fn, const std::vector<LayerShape>& layers, double sparsity) {
  check_layers(fn, layers, sparsity);
  return std::vector<double>(layers.size(), sparsity);
}
inline std::vector<double> erk_sparsities(const char* fn, const std::vector<LayerShape>& layers, double sparsity) {
  check_layers(fn, layers, sparsity);
  const std::size_t n = layers.size();
  std::vector<bool> dense(n, false);
  std::vector<double> raw(n);
  for (std::size_t l = 0; l < n; ++l)
    raw[l] = static_cast<double>(layers[l].n_in + layers[l].n_out) / static_cast<double>(layers[l].size());
  double eps = 0.0;
  for (;;) {
    double rhs = 0.0, divisor = 0.0;
    for (std::size_t l = 0; l < n; ++l) {
      const double params = static_cast<double>(layers[l].size());
      if (dense[l]) {
        rhs -= params * sparsity;  // a dense layer spends the zeros the others must absorb
      } else {
        rhs += params * (1.0 - sparsity);
        divisor += raw[l] * params;
      }
    }
    if (divisor == 0.0) break;  // every layer dense
    eps = rhs / divisor;
    double max_raw = 0.0;
    for (std::size_t l = 0; l < n; ++l)
      if (!dense[l]) max_raw = std::max(max_raw, raw[l]);
    if (max_raw * eps <= 1.0) break;
    for (std::size_t l = 0; l < n; ++l)
      if (!dense[l] && raw[l] == max_raw) dense[l] = true;
  }
  std::vector<double> out(n);
  for (std::size_t l = 0; l < n; ++l) out[l] = dense[l] ? 0.0 : std::clamp(1.0 - eps * raw[l], 0.0, 1.0);
  return out;
}
}  // namespace detail

// Per-layer sparsity (fraction of zeros), all equal to `sparsity`. Throws ArgumentError
// unless 0 <= sparsity < 1, ShapeError if a layer has a dimension below 1.
inline std::vector<double> uniform_sparsities(const std::vector<LayerShape>& layers, double sparsity) {
  return detail::uniform_sparsities("models::uniform_sparsities", layers, sparsity);
}

// Per-layer sparsity by ERK (see the top); a layer made dense gets 0. The total live count
// sum((1 - s_l) * size_l) equals (1 - sparsity) * sum(size_l) up to rounding; for
// LeNet-300-100 at 0.9 the sparsities are 0.9204, 0.7698 and 0 (RigL's oracle, tested).
// Throws as uniform_sparsities.
inline std::vector<double> erk_sparsities(const std::vector<LayerShape>& layers, double sparsity) {
  return detail::erk_sparsities("models::erk_sparsities", layers, sparsity);
}

}  // namespace sprig::models
