// sprig/dst/density.hpp — forwarding header, kept for one release: the density
// distributions moved to sprig/models/density.hpp (namespace sprig::models); live_count
// stays in sprig::dst (dst/live_count.hpp).
#pragma once

#include <vector>

#include "../models/density.hpp"
#include "live_count.hpp"

namespace sprig::dst {

using LayerShape [[deprecated("use sprig::models::LayerShape")]] = models::LayerShape;
using Distribution [[deprecated("use sprig::models::Distribution")]] = models::Distribution;

[[deprecated("use sprig::models::uniform_sparsities")]] inline std::vector<double> uniform_sparsities(
    const std::vector<models::LayerShape>& layers, double sparsity) {
  return models::uniform_sparsities(layers, sparsity);
}
[[deprecated("use sprig::models::erk_sparsities")]] inline std::vector<double> erk_sparsities(
    const std::vector<models::LayerShape>& layers, double sparsity) {
  return models::erk_sparsities(layers, sparsity);
}

}  // namespace sprig::dst
