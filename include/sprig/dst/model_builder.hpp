// sprig/dst/model_builder.hpp — builds an MLP whose layer densities come from one global
// sparsity, distributed uniformly or by ERK (see density.hpp).
//
// Layer l maps widths[l] -> widths[l + 1]; activations (ReLU or GELU) between layers, none
// after the last. The global sparsity is the fraction of zeros over the layers that take
// part (all of them, or all but the output layer when dense_output is set, as is usual).
// A layer whose share comes out dense (ERK can do that) is built as a dense Linear.
#pragma once

#include <cstdint>
#include <vector>

#include "../core/error.hpp"
#include "../nn/sequential.hpp"
#include "density.hpp"

namespace sprig::dst {

enum class Distribution { uniform, erk };
enum class Activation { relu, gelu };

struct MLPSpec {
  std::vector<std::int64_t> widths;  // inputs, hidden..., outputs (at least two entries)
  double sparsity = 0.9;
  Distribution distribution = Distribution::uniform;
  bool dense_output = true;
  Activation activation = Activation::relu;
  std::uint64_t seed = 0;
  double padding_ratio = kDefaultPaddingRatio;
  double growth_reserve = 0.0;  // > 0 for dynamic sparse training (SparseParameter::reserve_growth)
};

// The sparsity of every layer (0 for a dense one) that `spec` leads to.
inline std::vector<double> mlp_sparsities(const MLPSpec& spec) {
  if (spec.widths.size() < 2)
    throw ShapeError(sprig::detail::message("mlp_sparsities: need at least 2 widths, got ", spec.widths.size()));
  const std::size_t layers = spec.widths.size() - 1;
  const std::size_t sparse = spec.dense_output ? layers - 1 : layers;
  std::vector<LayerShape> shapes;
  for (std::size_t l = 0; l < sparse; ++l) shapes.push_back({spec.widths[l + 1], spec.widths[l]});
  std::vector<double> out(layers, 0.0);
  if (sparse == 0) return out;
  const auto s = spec.distribution == Distribution::erk ? erk_sparsities(shapes, spec.sparsity)
                                                        : uniform_sparsities(shapes, spec.sparsity);
  std::copy(s.begin(), s.end(), out.begin());
  return out;
}

template <Value T, ColumnIndex Index>
Sequential<T, Index> build_mlp(const MLPSpec& spec) {
  const std::vector<double> sparsity = mlp_sparsities(spec);
  Sequential<T, Index> model;
  for (std::size_t l = 0; l < sparsity.size(); ++l) {
    const std::int64_t in = spec.widths[l], out = spec.widths[l + 1];
    if (sparsity[l] > 0.0)
      model.add(SparseLinear<T, Index>(in, out, 1.0 - sparsity[l], spec.seed, l, spec.padding_ratio,
                                       spec.growth_reserve));
    else
      model.add(Linear<T>(in, out, spec.seed, l));
    if (l + 1 < sparsity.size()) {
      if (spec.activation == Activation::relu)
        model.add(ReLU<T>{});
      else
        model.add(GELU<T>{});
    }
  }
  return model;
}

}  // namespace sprig::dst
