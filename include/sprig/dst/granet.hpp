// sprig/dst/granet.hpp — GraNet (Liu et al. 2021): gradual magnitude pruning from an initial
// sparsity to a final one along Zhu & Gupta's cubic schedule, with RigL's drop-and-regrow
// ("neuroregeneration") at every update in between. With regrow off it is the gradual
// magnitude pruning baseline of Zhu & Gupta (2017).
//
// At an update step t of the UpdateSchedule, with p = (t - t_begin) / (t_last - t_begin) the
// progress through the updates (t_last: the schedule's last update step; p = 1 when the
// schedule has a single update), each sparse layer l of `size` positions has the target
//   s_l(t) = final_l + (initial_l - final_l) * (1 - p)^3,   live_l(t) = live_count(size, s_l(t))
// (dst/live_count.hpp), with l the layer's sparse_index (so the lists cover every sparse layer,
// excluded ones included). The layer drops prune = max(0, live - live_l(t)) weights plus
// regen = floor(f(t) * min(live, live_l(t))) more (f: the schedule's cosine-decayed drop
// fraction), all of smallest |w|, and grows regen positions where |dL/dW| is largest among
// those not kept (RigL's rule; none with regrow off). So after the update the layer holds
// exactly live_l(t) weights when it held at least that many, and live_l(t_last) =
// live_count(size, final_l). The optimizer step is applied on update steps too (before the
// topology changes), as GraNet's reference code does. A layer whose storage exceeds its tight
// layout (PaddedCSR::capacity_for per row) by more than compact_threshold is compacted after
// the update, so pruned rows return their memory.
//
// On a block-sparse layer the sparsities, counts and magnitudes are those of its block grid
// (blocks, their Frobenius norms, RigL's block score: SparsityAlgorithm::supports_blocks).
//
// The model is built at the initial sparsity (e.g. build_mlp with sparsity 0.5). A checkpoint
// records the options (configuration()) and rejects a load into a GraNet built with others. constant_fan_in is not supported (pruning by
// magnitude changes row counts). Deterministic as every algorithm (algorithm.hpp).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "algorithm.hpp"
#include "live_count.hpp"

namespace sprig::dst {

struct GraNetOptions {
  std::vector<double> initial_sparsity{};  // per sparse layer, in model order, in [0, 1)
  std::vector<double> final_sparsity{};    // per sparse layer, in [initial, 1)
  bool regrow = true;                      // false: Zhu & Gupta's gradual pruning, no regrowth
};

template <Value T, ColumnIndex Index>
class GraNet final : public SparsityAlgorithm<T, Index> {
  using Base = SparsityAlgorithm<T, Index>;

public:
  // Throws ArgumentError as SparsityAlgorithm's constructor, and unless both sparsity lists
  // have the same length and 0 <= initial <= final < 1 for every layer (a sparse layer
  // beyond the lists is an ArgumentError at the first update).
  GraNet(UpdateSchedule schedule, std::uint64_t seed, GraNetOptions options)
      : Base(schedule, seed), options_(std::move(options)) {
    if (options_.initial_sparsity.size() != options_.final_sparsity.size())
      throw ArgumentError(sprig::detail::message("GraNet: ", options_.initial_sparsity.size(),
                                                 " initial sparsities but ", options_.final_sparsity.size(), " final"));
    for (std::size_t l = 0; l < options_.final_sparsity.size(); ++l) {
      const double a = options_.initial_sparsity[l], b = options_.final_sparsity[l];
      if (!(a >= 0.0 && a <= b && b < 1.0))
        throw ArgumentError(sprig::detail::message("GraNet: layer ", l,
                                                   " needs 0 <= initial sparsity <= final < 1, got ", a, " and ", b));
    }
  }

  std::string_view name() const override { return options_.regrow ? "granet" : "gmp"; }
  bool needs_gradients() const override { return options_.regrow; }
  bool streams_gradients() const override { return true; }
  bool supports_blocks() const override { return true; }
  const GraNetOptions& options() const noexcept { return options_; }
  // The sparsities and the regrow flag, for checkpoints: [initial..., final..., regrow].
  std::vector<double> configuration() const override {
    std::vector<double> c = options_.initial_sparsity;
    c.insert(c.end(), options_.final_sparsity.begin(), options_.final_sparsity.end());
    c.push_back(options_.regrow ? 1.0 : 0.0);
    return c;
  }

  // The target sparsity of sparse layer l at update step t (the formula at the top). O(1).
  double target_sparsity(std::size_t l, std::int64_t t) const {
    const UpdateSchedule& s = this->schedule();
    const std::int64_t last = s.t_begin + (s.t_end - s.t_begin) / s.delta_t * s.delta_t;
    const double p =
        last > s.t_begin
            ? std::clamp(static_cast<double>(t - s.t_begin) / static_cast<double>(last - s.t_begin), 0.0, 1.0)
            : 1.0;
    const double a = options_.initial_sparsity.at(l), b = options_.final_sparsity.at(l);
    return b + (a - b) * (1.0 - p) * (1.0 - p) * (1.0 - p);
  }

protected:
  std::vector<std::int64_t> drop_counts(std::span<const typename Base::LayerRef> layers, std::int64_t t,
                                        double fraction) override {
    std::vector<std::int64_t> drop(layers.size());
    grow_.assign(layers.size(), 0);
    for (std::size_t l = 0; l < layers.size(); ++l) {
      const auto index = static_cast<std::size_t>(layers[l].sparse_index);
      if (index >= options_.final_sparsity.size())
        throw ArgumentError(sprig::detail::message("GraNet: sparse layer ", index, " has no sparsity (",
                                                   options_.final_sparsity.size(), " were given)"));
      const auto& W = layers[l].layer->weight.matrix;
      const std::int64_t live = W.nnz();
      const std::int64_t target = live_count(W.rows() * W.cols(), target_sparsity(index, t));
      const std::int64_t regen =
          options_.regrow
              ? static_cast<std::int64_t>(std::floor(fraction * static_cast<double>(std::min(live, target))))
              : 0;
      drop[l] = std::max<std::int64_t>(0, live - target) + regen;
      grow_[l] = regen;
    }
    return drop;
  }
  std::vector<std::int64_t> grow_counts(std::span<const typename Base::LayerRef>,
                                        const std::vector<std::int64_t>&) override {
    return grow_;
  }
  std::vector<std::int64_t> grow_linear_positions(const typename Base::LayerRef& layer, const DropSet& dropped,
                                                  std::int64_t k, CounterRng&) override {
    if (k == 0) return {};
    return this->top_dense_gradient(layer, dropped, k);
  }
  bool should_compact(const PaddedCSR<T, Index>& W) const override {
    std::int64_t tight = 0;
    for (std::int64_t i = 0; i < W.rows(); ++i)
      tight += PaddedCSR<T, Index>::capacity_for(W.row_nnz(i), W.padding_ratio());
    return static_cast<double>(W.storage_size()) > (1.0 + this->compact_threshold) * static_cast<double>(tight);
  }

private:
  GraNetOptions options_;
  std::vector<std::int64_t> grow_;  // of the update in progress (set by drop_counts)
};

}  // namespace sprig::dst
