// sprig/dst/static_topology.hpp — Static: the initial random topology never changes (the
// baseline every dynamic algorithm is compared with). apply_step with Static is exactly
// optimizer.step; the schedule is ignored (is_update_step is always false).
#pragma once

#include "algorithm.hpp"

namespace sprig::dst {

template <Value T, ColumnIndex Index>
class Static final : public SparsityAlgorithm<T, Index> {
public:
  explicit Static(UpdateSchedule schedule = {}, std::uint64_t seed = 0) : SparsityAlgorithm<T, Index>(schedule, seed) {}
  std::string_view name() const override { return "static"; }
  bool is_update_step(std::int64_t) const override { return false; }
  bool supports_constant_fan_in() const override { return true; }
  bool supports_blocks() const override { return true; }

protected:
  std::vector<std::int64_t> grow_linear_positions(const typename SparsityAlgorithm<T, Index>::LayerRef&, const DropSet&,
                                                  std::int64_t, CounterRng&) override {
    return {};
  }
  // Never updates, so every row keeps its count trivially.
  std::vector<std::int64_t> grow_linear_positions_per_row(const typename SparsityAlgorithm<T, Index>::LayerRef&,
                                                          const DropSet&, std::int64_t, CounterRng&) override {
    return {};
  }
};

}  // namespace sprig::dst
