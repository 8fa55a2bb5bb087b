// sprig/nn/model.hpp — the TrainableModel concept: what optimizers, dynamic sparse training
// (dst::apply_step), checkpoints (io/checkpoint.hpp), gradient clipping and memory
// accounting need from a model. Sequential and GPT satisfy it; so does a user's own class
// with these members:
//
//   using value_type = T;  using index_type = Index;
//   template <class Fn> void for_each_parameter(Fn&& fn);        // fn(SparseParameter<T, Index>&)
//   template <class Fn> void for_each_parameter(Fn&& fn) const;  //  or fn(DenseParameter<T>&),
//                                                                // const in the const form
//   std::vector<SparseLayerRef<T, Index>> sparse_layers();
//
// Contract: for_each_parameter visits every trainable parameter once, in an order fixed by
// the model's structure (both forms in the same order: a checkpoint writes with one and
// reads with the other). sparse_layers() lists the model's SparseLinear layers in a fixed
// order, each with the input it saw in the last forward and the output gradient of the last
// backward (empty views before them); those views stay valid until the next forward. Block-
// sparse layers (BlockSparseLinear) are listed through a stand-in over their block grid
// (SparseLayerRef::blocks), rebuilt by each call. A DST
// algorithm changes the layers' topology through these references; a model that caches
// anything derived from a sparse weight's topology must key it on
// PaddedCSR::topology_key() (as SparseLinear's transpose cache does).
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "../core/concepts.hpp"
#include "../core/matrix.hpp"
#include "../core/padded_csr.hpp"
#include "../core/slot_log.hpp"
#include "parameter.hpp"
#include "sparse_linear.hpp"

namespace sprig {

// A layer whose weight is stored in dense R x C blocks (BlockSparseLinear), as dynamic sparse
// training changes it: through a stand-in SparseLinear over the block grid (one entry per
// block, its value the block's Frobenius norm), whose slot changes are replayed here.
template <Value T, ColumnIndex Index>
class BlockTopology {
public:
  virtual std::int64_t block_height() const noexcept = 0;  // R: output rows per block
  virtual std::int64_t block_width() const noexcept = 0;   // C: inputs per block
  virtual std::int64_t out_features() const noexcept = 0;  // rows of the weight
  virtual std::int64_t in_features() const noexcept = 0;   // columns of the weight
  // Replays one chunk of the stand-in's SlotLog on the blocks, their gradient and optimizer
  // state (R x C entries per slot).
  virtual void apply_slot_moves(const SlotLog& chunk) = 0;
  // Takes the stand-in's pattern once every chunk was replayed (BlockPaddedCSR::adopt_pattern).
  virtual void adopt_pattern(const PaddedCSR<T, Index>& grid) = 0;

protected:
  ~BlockTopology() = default;
};

// What dynamic sparse training needs from one sparse layer after a step: the layer (its
// SparseParameter is layer->weight), the input it saw and the gradient of its output.
// For a block-sparse layer, `blocks` is the layer and `layer` its stand-in over the block
// grid (BlockTopology), valid until the layer's next structural change; input and
// output_grad are the layer's own, [in x B] and [out x B] in elements.
template <Value T, ColumnIndex Index>
struct SparseLayerRef {
  std::size_t position;       // where the layer sits in its model (the model documents it)
  std::size_t sparse_index;   // 0, 1, ... among the model's sparse layers
  SparseLinear<T, Index>* layer;
  ConstMatrixView<T> input;        // X of the last forward   [in x B]
  ConstMatrixView<T> output_grad;  // dY of the last backward [out x B]
  BlockTopology<T, Index>* blocks = nullptr;  // the block-sparse layer behind `layer`, if any

  // The weight's shape in elements (the stand-in's grid times the block shape, clipped).
  std::int64_t out_features() const noexcept { return blocks ? blocks->out_features() : layer->weight.matrix.rows(); }
  std::int64_t in_features() const noexcept { return blocks ? blocks->in_features() : layer->weight.matrix.cols(); }
};

namespace detail {
// Accepts any parameter: the probe the concept calls for_each_parameter with.
struct ParameterProbe {
  template <class P>
  void operator()(P&) const noexcept {}
};
}  // namespace detail

template <class M>
concept TrainableModel = requires(M& m, const M& cm) {
  typename M::value_type;
  typename M::index_type;
  m.for_each_parameter(detail::ParameterProbe{});
  cm.for_each_parameter(detail::ParameterProbe{});
  { m.sparse_layers() } -> std::convertible_to<std::vector<SparseLayerRef<typename M::value_type, typename M::index_type>>>;
};

// Bytes of a model's parameters by kind, from for_each_parameter alone (so any TrainableModel has
// it). weights: every stored array of the weights (sparse: all PaddedCSR arrays, padding
// and reserve included); dense_weights: the same parameters stored dense (rows x cols
// values each); gradients and optimizer_state: capacities of grad and of the state
// vectors. Activations and scratch are the model's own (its memory_bytes(), if it has one).
struct ParameterMemory {
  std::int64_t weights = 0;
  std::int64_t dense_weights = 0;
  std::int64_t gradients = 0;
  std::int64_t optimizer_state = 0;
  std::int64_t parameters = 0;       // live weights (sparse: live_count(); dense: rows x cols)
  std::int64_t dense_parameters = 0; // rows x cols summed over all parameters
};

// O(parameters); reads only.
template <TrainableModel M>
ParameterMemory parameter_memory(const M& model) {
  using T = typename M::value_type;
  ParameterMemory m;
  model.for_each_parameter([&](const auto& p) {
    std::int64_t rows = 0, cols = 0;
    if constexpr (requires { p.matrix.storage_size(); }) {
      rows = p.matrix.rows();
      cols = p.matrix.cols();
      m.parameters += p.live_count();
    } else {
      rows = p.rows;
      cols = p.cols;
      m.parameters += rows * cols;
    }
    m.weights += p.weight_bytes();
    m.dense_weights += rows * cols * static_cast<std::int64_t>(sizeof(T));
    m.dense_parameters += rows * cols;
    m.gradients += static_cast<std::int64_t>(p.grad.capacity() * sizeof(T));
    for (const auto& s : p.state) m.optimizer_state += static_cast<std::int64_t>(s.capacity() * sizeof(T));
  });
  return m;
}

}  // namespace sprig
