// sprig/models/mlp.hpp — builds an MLP whose layer densities come from one global
// sparsity, distributed uniformly or by ERK (see density.hpp).
//
// Layer l maps widths[l] -> widths[l + 1]; activations (ReLU or GELU) between layers, none
// after the last. The global sparsity is the fraction of zeros over the layers that take
// part (all of them, or all but the output layer when dense_output is set, as is usual).
// A layer whose share comes out dense (ERK can do that) is built as a dense Linear.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "../core/error.hpp"
#include "../core/precision.hpp"
#include "../nn/block_sparse_linear.hpp"
#include "../nn/sequential.hpp"
#include "density.hpp"

namespace sprig::models {

// The activation build_mlp puts between its layers.
enum class Activation { relu, gelu };

// What build_mlp builds. Layer l's weights and topology come from CounterRng(seed, l), so a
// spec gives the same model on every run and for any thread count.
struct MLPSpec {
  std::vector<std::int64_t> widths;  // inputs, hidden..., outputs (at least two entries)
  double sparsity = 0.9;
  Distribution distribution = Distribution::uniform;
  bool dense_output = true;
  Activation activation = Activation::relu;
  std::uint64_t seed = 0;
  double padding_ratio = kDefaultPaddingRatio;  // spare capacity per row, in [0, 64] (PaddedCSR)
  double growth_reserve = 0.0;  // > 0 for dynamic sparse training (SparseParameter::reserve_growth), <= 64
  // Non-empty: the sparsity of each layer that may be sparse (all but the output with
  // dense_output), in order, in [0, 1), instead of sparsity and distribution; 0 makes that
  // layer a dense Linear. ERK over a chosen subset: erk_sparsities of those layers' shapes.
  std::vector<double> layer_sparsities{};
  // Of the hidden layers' products (set_precision; bf16 needs T = float). A dense output
  // layer stays fp32.
  Precision precision = Precision::fp32;
};

namespace detail {
// mlp_sparsities with `fn` (the public call) named in its errors; ERK over the block grids
// of R x C blocks (R = C = 1: the layers themselves).
inline std::vector<double> mlp_sparsities(const char* fn, const MLPSpec& spec, std::int64_t block_rows = 1,
                                          std::int64_t block_cols = 1) {
  if (spec.widths.size() < 2)
    throw ShapeError(sprig::detail::message(fn, ": need at least 2 widths, got ", spec.widths.size()));
  for (std::size_t l = 0; l < spec.widths.size(); ++l)
    if (spec.widths[l] < 1)
      throw ShapeError(sprig::detail::message(fn, ": widths[", l, "] = ", spec.widths[l], ", must be >= 1"));
  const std::size_t layers = spec.widths.size() - 1;
  const std::size_t sparse = spec.dense_output ? layers - 1 : layers;
  std::vector<LayerShape> shapes;
  for (std::size_t l = 0; l < sparse; ++l)
    shapes.push_back(
        {(spec.widths[l + 1] + block_rows - 1) / block_rows, (spec.widths[l] + block_cols - 1) / block_cols});
  std::vector<double> out(layers, 0.0);
  if (!spec.layer_sparsities.empty()) {
    if (spec.layer_sparsities.size() != sparse)
      throw ArgumentError(sprig::detail::message(fn, ": ", spec.layer_sparsities.size(), " layer_sparsities for ",
                                                 sparse, " layers that may be sparse"));
    for (std::size_t l = 0; l < sparse; ++l) {
      const double s = spec.layer_sparsities[l];
      if (!(s >= 0.0 && s < 1.0))
        throw ArgumentError(sprig::detail::message(fn, ": layer_sparsities[", l, "] = ", s, " outside [0, 1)"));
      out[l] = s;
    }
    return out;
  }
  if (sparse == 0) return out;
  const auto s = spec.distribution == Distribution::erk ? erk_sparsities(fn, shapes, spec.sparsity)
                                                        : uniform_sparsities(fn, shapes, spec.sparsity);
  std::copy(s.begin(), s.end(), out.begin());
  return out;
}
}  // namespace detail

// The sparsity of every layer (0 for a dense one) that `spec` leads to, one per layer; with
// a block shape, those of build_block_mlp in block_rows x block_cols blocks (ERK over the
// block grids). O(layers); throws ShapeError for fewer than 2 widths or a width below 1,
// ArgumentError unless 0 <= sparsity < 1, or for layer_sparsities of the wrong length or out
// of [0, 1), or a block shape below 1x1.
inline std::vector<double> mlp_sparsities(const MLPSpec& spec, std::int64_t block_rows = 1,
                                          std::int64_t block_cols = 1) {
  if (block_rows < 1 || block_cols < 1)
    throw ArgumentError(sprig::detail::message("models::mlp_sparsities: block shape ", block_rows, "x", block_cols,
                                               " (rows and columns must be >= 1)"));
  return detail::mlp_sparsities("models::mlp_sparsities", spec, block_rows, block_cols);
}

namespace detail {
// The MLP of `spec` at the given per-layer sparsities: make_sparse(in, out, density, key)
// builds a sparse layer, Linear where the sparsity is 0, activations in between.
template <class Model, class MakeSparse>
Model build_mlp_with(const char* fn, const MLPSpec& spec, const std::vector<double>& sparsity, MakeSparse&& make_sparse,
                     std::int64_t block_cols) {
  using T = typename Model::value_type;
  using Index = typename Model::index_type;
  if (!(spec.padding_ratio >= 0.0 && spec.padding_ratio <= 64.0))
    throw ArgumentError(sprig::detail::message(fn, ": padding_ratio ", spec.padding_ratio, " outside [0, 64]"));
  if (!(spec.growth_reserve >= 0.0 && spec.growth_reserve <= 64.0))
    throw ArgumentError(sprig::detail::message(fn, ": growth_reserve ", spec.growth_reserve, " outside [0, 64]"));
  constexpr auto max_index = static_cast<std::int64_t>(std::numeric_limits<Index>::max());
  for (std::size_t l = 0; l < sparsity.size(); ++l) {
    if (sparsity[l] <= 0.0) continue;
    if ((spec.widths[l] + block_cols - 1) / block_cols - 1 > max_index)
      throw ArgumentError(sprig::detail::message(fn, ": widths[", l, "] = ", spec.widths[l],
                                                 " columns cannot be indexed by a ", sizeof(Index) * 8,
                                                 "-bit column index (at most ", max_index, " + 1",
                                                 block_cols > 1 ? " blocks)" : ")"));
    const double size = static_cast<double>(spec.widths[l]) * static_cast<double>(spec.widths[l + 1]);
    if (std::llround((1.0 - sparsity[l]) * size) == 0)
      throw ArgumentError(sprig::detail::message(fn, ": layer ", l, " (", spec.widths[l + 1], "x", spec.widths[l],
                                                 ") at sparsity ", sparsity[l], " keeps no weight"));
  }
  Model model;
  for (std::size_t l = 0; l < sparsity.size(); ++l) {
    const std::int64_t in = spec.widths[l], out = spec.widths[l + 1];
    if (sparsity[l] > 0.0)
      model.add(make_sparse(in, out, 1.0 - sparsity[l], static_cast<std::uint64_t>(l)));
    else {
      Linear<T> layer(in, out, spec.seed, l);
      if (l + 1 < sparsity.size()) layer.set_precision(spec.precision);  // the output layer stays fp32
      model.add(std::move(layer));
    }
    if (l + 1 < sparsity.size()) {
      if (spec.activation == Activation::relu)
        model.add(ReLU<T>{});
      else
        model.add(GELU<T>{});
    }
  }
  return model;
}
// A sparse layer (SparseLinear or BlockSparseLinear) of the MLP at `density`, in spec.precision.
template <class Layer>
Layer mlp_sparse_layer(const MLPSpec& spec, std::int64_t in, std::int64_t out, double density, std::uint64_t key) {
  Layer layer(in, out,
              typename Layer::Options{.density = density,
                                      .seed = spec.seed,
                                      .layer_key = key,
                                      .padding_ratio = spec.padding_ratio,
                                      .growth_reserve = spec.growth_reserve});
  layer.set_precision(spec.precision);
  return layer;
}
}  // namespace detail

// Builds the MLP of `spec`: SparseLinear layers at the sparsities of mlp_sparsities, Linear
// layers where that is 0, activations in between. O(total parameters) time for the dense
// layers and O(live weights) for the sparse ones. Deterministic for spec.seed.
// Throws, naming models::build_mlp, what mlp_sparsities throws, ArgumentError for a
// padding_ratio or growth_reserve outside [0, 64], a width whose columns Index cannot
// address, or a sparse layer whose share rounds to no weight; ArgumentError for bf16 with
// T = double.
template <Value T, ColumnIndex Index>
Sequential<T, Index> build_mlp(const MLPSpec& spec) {
  constexpr const char* fn = "models::build_mlp";
  return detail::build_mlp_with<Sequential<T, Index>>(
      fn, spec, detail::mlp_sparsities(fn, spec),
      [&](std::int64_t in, std::int64_t out, double density, std::uint64_t key) {
        return detail::mlp_sparse_layer<SparseLinear<T, Index>>(spec, in, out, density, key);
      },
      1);
}

// The same MLP with its sparse layers in R x C blocks (BlockSparseLinear at block density 1 -
// the layer's sparsity; ERK over the layers' block grids). Throws as build_mlp, naming
// models::build_block_mlp; ArgumentError also for a layer whose share rounds to no block.
template <Value T, ColumnIndex Index, int R, int C>
Sequential<T, Index, BlockSparseLinear<T, Index, R, C>> build_block_mlp(const MLPSpec& spec) {
  constexpr const char* fn = "models::build_block_mlp";
  return detail::build_mlp_with<Sequential<T, Index, BlockSparseLinear<T, Index, R, C>>>(
      fn, spec, detail::mlp_sparsities(fn, spec, R, C),
      [&](std::int64_t in, std::int64_t out, double density, std::uint64_t key) {
        return detail::mlp_sparse_layer<BlockSparseLinear<T, Index, R, C>>(spec, in, out, density, key);
      },
      C);
}

}  // namespace sprig::models
