// sprig/dst/set.hpp — SET (Mocanu et al. 2018): drop the smallest magnitudes, grow uniformly at
// random among the positions not kept, new weights at zero. As in the reference RigL code's
// SET optimizer, the optimizer step is applied on update steps too (the topology changes
// after it). Grow positions come from CounterRng(seed, layer, step) (deterministic for any
// thread count); no gradient is needed. Supports constant_fan_in (random within each row).
// Constructor throws as SparsityAlgorithm's.
#pragma once

#include "algorithm.hpp"

namespace sprig::dst {

template <Value T, ColumnIndex Index>
class SET final : public SparsityAlgorithm<T, Index> {
public:
  SET(UpdateSchedule schedule, std::uint64_t seed) : SparsityAlgorithm<T, Index>(schedule, seed) {}
  std::string_view name() const override { return "set"; }
  bool supports_constant_fan_in() const override { return true; }
  bool supports_blocks() const override { return true; }

protected:
  std::vector<std::int64_t> grow_linear_positions(const typename SparsityAlgorithm<T, Index>::LayerRef& layer,
                                                  const DropSet& dropped, std::int64_t k, CounterRng& rng) override {
    return random_free_linear_positions(layer.layer->weight.matrix, dropped, k, rng);
  }
  // constant_fan_in: per_row columns uniformly at random among each row's columns not kept
  std::vector<std::int64_t> grow_linear_positions_per_row(const typename SparsityAlgorithm<T, Index>::LayerRef& layer,
                                                          const DropSet& dropped, std::int64_t per_row,
                                                          CounterRng& rng) override {
    return random_free_linear_positions_per_row(layer.layer->weight.matrix, dropped, per_row, rng);
  }
};

}  // namespace sprig::dst
