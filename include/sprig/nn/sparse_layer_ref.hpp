// sprig/nn/sparse_layer_ref.hpp — SparseLayerRef, one entry of a model's sparse_layers(),
// and the check every consumer of that list runs on it.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "../core/concepts.hpp"
#include "../core/error.hpp"
#include "../core/matrix.hpp"
#include "block_topology.hpp"
#include "sparse_linear.hpp"

namespace sprig {

// What dynamic sparse training needs from one sparse layer after a step: the layer (its
// SparseParameter is layer->weight), the input it saw and the gradient of its output.
// For a block-sparse layer, `blocks` is the layer and `layer` its stand-in over the block
// grid (BlockTopology), valid until the layer's next structural change; input and
// output_grad are the layer's own, [in x B] and [out x B] in elements. A model that keeps a
// layer's input in bf16 (nn/projection_input.hpp) gives it as input_bf16 and leaves input
// empty; consumers read either through input_rows() / input_cols() and, for the values,
// float_input(). The same for a dY kept in bf16 (output_grad_bf16, output_grad empty;
// output_grad_rows() / output_grad_cols(), float_output_grad()).
template <Value T, ColumnIndex Index>
struct SparseLayerRef {
  std::size_t position;      // where the layer sits in its model (the model documents it)
  std::size_t sparse_index;  // 0, 1, ... among the model's sparse layers
  SparseLinear<T, Index>* layer;
  ConstMatrixView<T> input;                      // X of the last forward   [in x B]
  ConstMatrixView<T> output_grad;                // dY of the last backward [out x B]
  BlockTopology<T, Index>* blocks = nullptr;     // the block-sparse layer behind `layer`, if any
  ConstMatrixView<bfloat16> input_bf16{};        // X in bf16, in place of input (see above)
  ConstMatrixView<bfloat16> output_grad_bf16{};  // dY in bf16, in place of output_grad

  // The weight's shape in elements (the stand-in's grid times the block shape, clipped).
  std::int64_t out_features() const noexcept { return blocks ? blocks->out_features() : layer->weight.matrix.rows(); }
  std::int64_t in_features() const noexcept { return blocks ? blocks->in_features() : layer->weight.matrix.cols(); }

  // The shape of the input, whichever form holds it.
  std::int64_t input_rows() const noexcept { return input_bf16.data() ? input_bf16.rows() : input.rows(); }
  std::int64_t input_cols() const noexcept { return input_bf16.data() ? input_bf16.cols() : input.cols(); }
  std::int64_t output_grad_rows() const noexcept {
    return output_grad_bf16.data() ? output_grad_bf16.rows() : output_grad.rows();
  }
  std::int64_t output_grad_cols() const noexcept {
    return output_grad_bf16.data() ? output_grad_bf16.cols() : output_grad.cols();
  }
  // The input in T: `input` itself, or input_bf16 widened (exactly) into `buffer`, reshaped
  // here (a caller that reuses it allocates once). O(in x B) when it widens.
  ConstMatrixView<T> float_input(Matrix<T>& buffer) const {
    return input_bf16.data() ? widened(input_bf16, buffer) : input;
  }
  // The same for the output gradient. O(out x B) when it widens.
  ConstMatrixView<T> float_output_grad(Matrix<T>& buffer) const {
    return output_grad_bf16.data() ? widened(output_grad_bf16, buffer) : output_grad;
  }

private:
  static ConstMatrixView<T> widened(ConstMatrixView<bfloat16> X, Matrix<T>& buffer) {
    buffer.resize(X.rows(), X.cols());
    for (std::int64_t i = 0; i < X.rows(); ++i)
      for (std::int64_t j = 0; j < X.cols(); ++j) buffer(i, j) = static_cast<T>(static_cast<float>(X(i, j)));
    return buffer.view();
  }
};

// Throws ArgumentError naming `caller` and the index if two entries of `layers` (a model's
// sparse_layers()) have the same sparse_index: DST, its exclusions and checkpoints identify
// a layer by it, so a repeated index would silently update or restore one layer as another.
// Every library function that consumes sparse_layers() calls this first. O(n log n) for n
// entries; reads only.
template <Value T, ColumnIndex Index>
void check_sparse_layers(std::span<const SparseLayerRef<T, Index>> layers, const char* caller) {
  std::vector<std::pair<std::size_t, std::size_t>> seen;  // (sparse_index, entry)
  seen.reserve(layers.size());
  for (std::size_t q = 0; q < layers.size(); ++q) seen.emplace_back(layers[q].sparse_index, q);
  std::sort(seen.begin(), seen.end());
  for (std::size_t q = 1; q < seen.size(); ++q)
    if (seen[q].first == seen[q - 1].first)
      throw ArgumentError(detail::message(caller, ": the model's sparse_layers() lists sparse_index ", seen[q].first,
                                          " twice (entries ", seen[q - 1].second, " and ", seen[q].second,
                                          "); each sparse layer needs its own index"));
}

}  // namespace sprig
