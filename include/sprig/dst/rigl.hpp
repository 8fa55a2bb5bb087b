// sprig/dst/rigl.hpp — RigL (Evci et al. 2020): drop the smallest magnitudes, grow where the
// dense gradient |dL/dW| is largest among the positions not kept, new weights and their
// optimizer state at zero; the gradient of an update step is not applied (as the reference).
// The dense gradient is streamed in row blocks into a top-k, never stored as rows x cols.
// An update step needs the forward and backward of that step (needs_gradients; apply_step
// throws ArgumentError otherwise). Cost per layer: rows x cols x B multiply-adds for the
// gradient. Supports constant_fan_in (the top-k within each row, as SRigL). Constructor
// throws as SparsityAlgorithm's.
#pragma once

#include "algorithm.hpp"

namespace sprig::dst {

template <Value T, ColumnIndex Index>
class RigL final : public SparsityAlgorithm<T, Index> {
public:
  RigL(UpdateSchedule schedule, std::uint64_t seed) : SparsityAlgorithm<T, Index>(schedule, seed) {}
  std::string_view name() const override { return "rigl"; }
  bool skips_optimizer_on_update() const override { return true; }
  bool needs_gradients() const override { return true; }
  bool streams_gradients() const override { return true; }
  bool supports_constant_fan_in() const override { return true; }
  bool supports_blocks() const override { return true; }

protected:
  std::vector<std::int64_t> grow_linear_positions(const typename SparsityAlgorithm<T, Index>::LayerRef& layer,
                                                  const DropSet& dropped, std::int64_t k, CounterRng&) override {
    return this->top_dense_gradient(layer, dropped, k);
  }
  // constant_fan_in: the per_row largest |dL/dW| of each row among its columns not kept
  std::vector<std::int64_t> grow_linear_positions_per_row(const typename SparsityAlgorithm<T, Index>::LayerRef& layer,
                                                          const DropSet& dropped, std::int64_t per_row,
                                                          CounterRng&) override {
    return this->top_dense_gradient_per_row(layer, dropped, per_row);
  }
};

}  // namespace sprig::dst
