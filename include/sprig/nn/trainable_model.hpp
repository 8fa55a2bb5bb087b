// sprig/nn/trainable_model.hpp — the TrainableModel concept: what optimizers, dynamic sparse training
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
// order, each with its own sparse_index (every library call that reads the list rejects a
// repeated one: check_sparse_layers), the input it saw in the last forward and the output
// gradient of the last backward (empty views before them); those views stay valid until the
// next forward. Block-sparse layers (BlockSparseLinear) are listed through a stand-in over
// their block grid (SparseLayerRef::blocks), rebuilt by each call. A DST
// algorithm changes the layers' topology through these references; a model that caches
// anything derived from a sparse weight's topology must key it on
// PaddedCSR::topology_key() (as SparseLinear's transpose cache does).
//
// Scratch (not required by the concept; what Sequential and GPT do, and what a user's model
// should do too): keep one ModelScratch<T> (nn/model_scratch.hpp) and hand it to every layer
// it owns with scratch.share_with(layer) once the layer sits where it stays; a layer that
// packs kernel operands (SparseLinear, BlockSparseLinear) then uses that one buffer instead
// of its own. This is safe because a model runs its layers' kernel calls one at a time (each
// call may use OpenMP threads), and the results are bitwise those of private buffers. A
// memory_bytes() of the model then adds scratch.memory_bytes() once (the layers' own
// memory_bytes() leave a shared buffer out), and a scratch_bytes() reports it.
#pragma once

#include <concepts>
#include <vector>

#include "sparse_layer_ref.hpp"

namespace sprig {

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
  {
    m.sparse_layers()
    } -> std::convertible_to<std::vector<SparseLayerRef<typename M::value_type, typename M::index_type>>>;
};

}  // namespace sprig
