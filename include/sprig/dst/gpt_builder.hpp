// sprig/dst/gpt_builder.hpp — forwarding header, kept for one release: the GPT builder
// moved to sprig/models/gpt.hpp (namespace sprig::models).
#pragma once

#include <cstdint>
#include <vector>

#include "../models/gpt.hpp"
#include "model_builder.hpp"

namespace sprig::dst {

using GPTSpec [[deprecated("use sprig::models::GPTSpec")]] = models::GPTSpec;

[[deprecated("use sprig::models::gpt_densities")]] inline std::vector<GPTBlockDensity> gpt_densities(
    const models::GPTSpec& spec) {
  return models::gpt_densities(spec);
}
template <Value T, ColumnIndex Index = std::int32_t>
[[deprecated("use sprig::models::build_gpt")]] GPT<T, Index> build_gpt(const models::GPTSpec& spec) {
  return models::build_gpt<T, Index>(spec);
}
template <Value T, ColumnIndex Index, int R, int C>
[[deprecated("use sprig::models::build_block_gpt")]] GPT<T, Index, BlockSparseLinear<T, Index, R, C>> build_block_gpt(
    const models::GPTSpec& spec) {
  return models::build_block_gpt<T, Index, R, C>(spec);
}

}  // namespace sprig::dst
