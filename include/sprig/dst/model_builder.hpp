// sprig/dst/model_builder.hpp — forwarding header, kept for one release: the MLP builder
// moved to sprig/models/mlp.hpp (namespace sprig::models).
#pragma once

#include <vector>

#include "../models/mlp.hpp"
#include "density.hpp"

namespace sprig::dst {

using Activation [[deprecated("use sprig::models::Activation")]] = models::Activation;
using MLPSpec [[deprecated("use sprig::models::MLPSpec")]] = models::MLPSpec;

[[deprecated("use sprig::models::mlp_sparsities")]] inline std::vector<double> mlp_sparsities(
    const models::MLPSpec& spec) {
  return models::mlp_sparsities(spec);
}
template <Value T, ColumnIndex Index>
[[deprecated("use sprig::models::build_mlp")]] Sequential<T, Index> build_mlp(const models::MLPSpec& spec) {
  return models::build_mlp<T, Index>(spec);
}
template <Value T, ColumnIndex Index, int R, int C>
[[deprecated("use sprig::models::build_block_mlp")]] Sequential<T, Index, BlockSparseLinear<T, Index, R, C>>
build_block_mlp(const models::MLPSpec& spec) {
  return models::build_block_mlp<T, Index, R, C>(spec);
}

}  // namespace sprig::dst
