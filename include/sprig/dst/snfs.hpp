// sprig/dst/snfs.hpp — SNFS, sparse momentum (Dettmers & Zettlemoyer 2019): drop the smallest
// magnitudes in every layer, then redistribute the dropped total across layers in proportion
// to each layer's mean |momentum| over its live weights, and grow inside each layer where the
// momentum of the dense gradient is largest.
//
// Deviation, forced by truly sparse storage: sprig keeps optimizer state at live slots only,
// so there is no momentum at empty positions. The growth score there is the |dense gradient|
// of the current step (the momentum with beta = 0), streamed like RigL's. The per-layer
// momentum used for redistribution is the optimizer's first state vector (SGD momentum buffer,
// AdamW first moment); before the optimizer has created it, |grad| is used.
// Unlike RigL/SET, layer live counts change (the model total is preserved). An update step
// needs the forward and backward of that step (needs_gradients). constant_fan_in is not
// supported: redistribution changes a layer's count, so its rows cannot all keep theirs (an
// update with it set throws ArgumentError before any layer changes). Constructor throws as
// SparsityAlgorithm's.
//
// Block-sparse layers: counts are blocks, a layer's momentum is the mean |m| over its live
// entries (BlockTopology::mean_abs_momentum), and a block grows where the sum of |dL/dW| over
// its entries is largest. The blocks moved between layers must be alike, so every layer an
// update changes has the same block shape (an unstructured layer's is 1x1); otherwise the
// update throws ArgumentError before anything changes.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <span>
#include <utility>

#include "algorithm.hpp"

namespace sprig::dst {

template <Value T, ColumnIndex Index>
class SNFS final : public SparsityAlgorithm<T, Index> {
  using Base = SparsityAlgorithm<T, Index>;

public:
  SNFS(UpdateSchedule schedule, std::uint64_t seed) : Base(schedule, seed) {}
  std::string_view name() const override { return "snfs"; }
  bool needs_gradients() const override { return true; }
  bool streams_gradients() const override { return true; }
  bool supports_blocks() const override { return true; }

protected:
  void check_layers(std::span<const typename Base::LayerRef> layers, const char* caller) const override {
    auto shape = [](const typename Base::LayerRef& l) {
      return l.blocks ? std::pair{l.blocks->block_height(), l.blocks->block_width()}
                      : std::pair<std::int64_t, std::int64_t>{1, 1};
    };
    for (const auto& l : layers)
      if (shape(l) != shape(layers.front()))
        throw ArgumentError(sprig::detail::message(
            caller, ": snfs moves weights between layers in units of the layers' blocks, but sparse layer ",
            layers.front().sparse_index, " has ", shape(layers.front()).first, "x", shape(layers.front()).second,
            " blocks and sparse layer ", l.sparse_index, " ", shape(l).first, "x", shape(l).second,
            " (1x1: unstructured); exclude one kind (set_excluded_layers) or use rigl"));
  }

  std::vector<std::int64_t> grow_counts(std::span<const typename Base::LayerRef> layers,
                                        const std::vector<std::int64_t>& drop_counts) override {
    const std::size_t n = layers.size();
    std::vector<double> momentum(n, 0.0);
    std::vector<std::int64_t> room(n);
    for (std::size_t l = 0; l < n; ++l) {
      const auto& p = layers[l].layer->weight;  // a block layer's stand-in over its grid
      room[l] = p.matrix.rows() * p.matrix.cols() - (p.matrix.nnz() - drop_counts[l]);
      if (layers[l].blocks) {
        momentum[l] = layers[l].blocks->mean_abs_momentum();
        continue;
      }
      const auto& m = !p.state.empty() && !p.state[0].empty() ? p.state[0] : p.grad;
      double sum = 0.0;
      p.matrix.for_each_live([&](std::int64_t, std::int64_t, T, std::int64_t s) { sum += std::abs(double(m[s])); });
      momentum[l] = p.matrix.nnz() > 0 ? sum / static_cast<double>(p.matrix.nnz()) : 0.0;
    }
    return redistribute(drop_counts, momentum, room);
  }

  std::vector<std::int64_t> grow_linear_positions(const typename Base::LayerRef& layer, const DropSet& dropped,
                                                  std::int64_t k, CounterRng&) override {
    return this->top_dense_gradient(layer, dropped, k);
  }

public:
  // Splits sum(drop_counts) over layers in proportion to `weight`, no layer above its `room`
  // (water-filling: a capped layer's excess goes to the others); remainders go to the layers
  // with the largest fractional share, ties to the lower index. Falls back to drop_counts if
  // every weight is zero. Preconditions: the three vectors of equal size, weight >= 0, room
  // >= 0 (not checked). O(layers^2) in the worst case; pure.
  static std::vector<std::int64_t> redistribute(const std::vector<std::int64_t>& drop_counts,
                                                const std::vector<double>& weight,
                                                const std::vector<std::int64_t>& room) {
    const std::size_t n = drop_counts.size();
    std::int64_t total = std::accumulate(drop_counts.begin(), drop_counts.end(), std::int64_t{0});
    std::vector<std::int64_t> out(n, 0);
    std::vector<bool> full(n, false);
    for (;;) {
      double wsum = 0.0;
      for (std::size_t l = 0; l < n; ++l)
        if (!full[l]) wsum += weight[l];
      if (total == 0) return out;
      if (wsum <= 0.0) {
        if (std::all_of(out.begin(), out.end(), [](std::int64_t v) { return v == 0; })) return drop_counts;
        break;
      }
      bool capped = false;
      for (std::size_t l = 0; l < n; ++l)
        if (!full[l] && out[l] + weight[l] / wsum * static_cast<double>(total) >= static_cast<double>(room[l])) {
          total -= room[l] - out[l];
          out[l] = room[l];
          full[l] = true;
          capped = true;
        }
      if (capped) continue;
      std::vector<std::pair<double, std::size_t>> frac;
      std::int64_t given = 0;
      for (std::size_t l = 0; l < n; ++l) {
        if (full[l]) continue;
        const double share = weight[l] / wsum * static_cast<double>(total);
        const auto whole = static_cast<std::int64_t>(std::floor(share));
        out[l] += whole;
        given += whole;
        frac.push_back({share - static_cast<double>(whole), l});
      }
      std::stable_sort(frac.begin(), frac.end(), [](auto& a, auto& b) { return a.first > b.first; });
      for (std::size_t q = 0; q < frac.size() && given < total; ++q, ++given) ++out[frac[q].second];
      return out;
    }
    return out;
  }
};

}  // namespace sprig::dst
