// sprig/dst/fan_in.hpp — sparse layers whose output rows all hold the same live count: the
// precondition of SparsityAlgorithm::constant_fan_in (SRigL, Lasby et al. 2024). A
// SparseLinear drawn by density spreads its weights over the whole layer, so its rows differ
// in length; these draw each row on its own instead.
//
// Every row gets n columns uniformly without replacement (PaddedCSR::random_per_row, each
// row from its own counter-based stream), values Kaiming-uniform with the fan-in n, as
// SparseLinear's constructor does with its mean fan-in. The result is a function of the seed
// (and layer key) only, the same for any thread count. redraw_constant_fan_in does the same for
// a block-sparse layer's block grid.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "../core/error.hpp"
#include "../core/padded_csr.hpp"
#include "../core/rng.hpp"
#include "../nn/init.hpp"
#include "../nn/model.hpp"
#include "../nn/sparse_linear.hpp"

namespace sprig::dst {

// The stream key of the constant-fan-in draws (apart from SparseLinear's own).
inline constexpr std::uint64_t kFanInInitKey = 0xFA41'1A17ULL;

namespace detail {
// A padded out x in weight with n live columns in every row, values in the Kaiming-uniform
// bound for fan-in n.
template <Value T, ColumnIndex Index>
PaddedCSR<T, Index> constant_fan_in_weight(std::int64_t out, std::int64_t in, std::int64_t n, std::uint64_t seed,
                                           double padding_ratio) {
  auto w = PaddedCSR<T, Index>::random_per_row(out, in, n, seed, padding_ratio);
  const double bound = kaiming_uniform_bound(static_cast<double>(n));
  for (T& v : w.values()) v = static_cast<T>(v * bound);  // values in U[-1, 1); padding stays 0
  return w;
}
}  // namespace detail

// A random in -> out SparseLinear with exactly n = llround(options.density * in) live weights
// in every output row, Kaiming-uniform with fan-in n, zero bias. options.padding_ratio and
// options.growth_reserve act as in SparseLinear's constructor; the topology and values are a
// function of (options.seed, options.layer_key) only, and differ from the density-drawn
// layer of the same options. Memory O(nnz + in). Throws ShapeError for in or out < 1;
// ArgumentError for a density outside (0, 1], one for which n rounds to 0, a padding ratio or
// growth reserve outside [0, 64], or more columns than Index holds.
template <Value T, ColumnIndex Index>
SparseLinear<T, Index> constant_fan_in_linear(std::int64_t in, std::int64_t out, const SparseLinearOptions& options) {
  const char* fn = "dst::constant_fan_in_linear";
  if (in <= 0 || out <= 0)
    throw ShapeError(sprig::detail::message(fn, ": in and out must be > 0, got ", in, " and ", out));
  const double density = options.density;
  if (!(density > 0.0 && density <= 1.0))
    throw ArgumentError(sprig::detail::message(fn, ": density ", density, " outside (0, 1]"));
  if (!(options.padding_ratio >= 0.0 && options.padding_ratio <= 64.0))
    throw ArgumentError(sprig::detail::message(fn, ": padding_ratio ", options.padding_ratio, " outside [0, 64]"));
  if (!(options.growth_reserve >= 0.0 && options.growth_reserve <= 64.0))
    throw ArgumentError(sprig::detail::message(fn, ": growth_reserve ", options.growth_reserve, " outside [0, 64]"));
  const std::int64_t n = std::llround(density * static_cast<double>(in));
  if (n < 1)
    throw ArgumentError(
        sprig::detail::message(fn, ": density ", density, " of ", in, " inputs rounds to no weight per row"));
  CounterRng rng(options.seed, options.layer_key, kFanInInitKey);
  SparseLinear<T, Index> layer(detail::constant_fan_in_weight<T, Index>(out, in, n, rng(), options.padding_ratio));
  if (options.growth_reserve > 0.0) layer.weight.reserve_growth(options.growth_reserve);
  return layer;
}

// Redraws the weight of every sparse layer of `model` with the same live count in every row:
// n = llround(nnz / rows) and at least 1, the layer's mean fan-in (so its density is kept up
// to rounding), from CounterRng(seed, sparse_index, kFanInInitKey); Kaiming-uniform values
// with fan-in n, the layer's padding ratio and weight-decay flag, `growth_reserve` reserved
// (SparseParameter::reserve_growth; 0 for none), gradient zero and no optimizer state. A
// block-sparse layer gets the same on its block grid: n blocks in every block row
// (BlockTopology::redraw_per_row). Biases and dense layers are untouched. For a freshly built
// model (build_mlp, build_block_mlp, build_gpt, a user's), before the optimizer's first step:
// optimizer state of the old weights is discarded with them. Throws ArgumentError, before any
// layer changes, unless 0 <= growth_reserve <= 64, or if two layers share a sparse_index
// (check_sparse_layers). O(nnz + cols) per layer (x R x C for blocks).
template <TrainableModel M>
void redraw_constant_fan_in(
    M& model, std::uint64_t seed,
    double growth_reserve = SparseParameter<typename M::value_type, typename M::index_type>::kGrowthReserve) {
  using T = typename M::value_type;
  using Index = typename M::index_type;
  if (!(growth_reserve >= 0.0 && growth_reserve <= 64.0))
    throw ArgumentError(
        sprig::detail::message("dst::redraw_constant_fan_in: growth_reserve ", growth_reserve, " outside [0, 64]"));
  const auto layers = model.sparse_layers();
  check_sparse_layers<T, Index>(layers, "dst::redraw_constant_fan_in");
  for (const SparseLayerRef<T, Index>& ref : layers) {
    auto& param = ref.layer->weight;  // a block layer's stand-in over its grid
    const auto& W = param.matrix;
    if (W.rows() == 0) continue;
    const std::int64_t n =
        std::max<std::int64_t>(1, std::llround(static_cast<double>(W.nnz()) / static_cast<double>(W.rows())));
    CounterRng rng(seed, ref.sparse_index, kFanInInitKey);
    if (ref.blocks) {
      ref.blocks->redraw_per_row(n, rng(), growth_reserve);
      continue;
    }
    const bool decay = param.decay;
    param = SparseParameter<T, Index>(
        detail::constant_fan_in_weight<T, Index>(W.rows(), W.cols(), n, rng(), W.padding_ratio()));
    param.decay = decay;
    if (growth_reserve > 0.0) param.reserve_growth(growth_reserve);
  }
}

}  // namespace sprig::dst
