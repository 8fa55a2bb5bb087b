// sprig/dst/set.hpp — SET (Mocanu et al. 2018): drop the smallest magnitudes, grow uniformly at
// random among the positions not kept, new weights at zero. As in the reference RigL code's
// SET optimizer, the optimizer step is applied on update steps too (the topology changes
// after it). Grow positions come from CounterRng(seed, layer, step) (deterministic for any
// thread count); no gradient is needed. Constructor throws as SparsityAlgorithm's.
#pragma once

#include "algorithm.hpp"

namespace sprig::dst {

template <Value T, ColumnIndex Index>
class SET final : public SparsityAlgorithm<T, Index> {
public:
  SET(UpdateSchedule schedule, std::uint64_t seed) : SparsityAlgorithm<T, Index>(schedule, seed) {}
  std::string_view name() const override { return "set"; }

protected:
  std::vector<std::int64_t> grow_linear_positions(const typename SparsityAlgorithm<T, Index>::LayerRef& layer,
                                                  const DropSet& dropped, std::int64_t k, CounterRng& rng) override {
    return random_free_linear_positions(layer.layer->weight.weight, dropped, k, rng);
  }
};

}  // namespace sprig::dst
