// sprig/nn/model_scratch.hpp — ModelScratch<T>: the kernels' packing space, one buffer per
// model, handed to every layer that packs (SparseLinear, BlockSparseLinear: share_scratch).
//
// Why: each sparse layer packs its kernels' operands ([in x B] for W's passes, [out x B] for
// W^T's) into a buffer whose contents matter only within one kernel call. Owned per layer,
// those buffers add up over the model; shared, they cost what the largest single request
// needs. A model runs its layers' kernel calls one after another (one call at a time, each
// free to use OpenMP threads), so one buffer serves them all, with the same bits.
//
// Use: a model (Sequential, GPT, or a user's TrainableModel) keeps one ModelScratch member,
// calls share_with(layer) on each layer it owns once the layer sits where it stays (a layer
// without share_scratch is left alone), and adds memory_bytes() once to its own
// memory_bytes(). Moving the model keeps the sharing (the buffer lives on the heap, shared
// by the layers that use it). Layers trained in bf16 get a second shared buffer the same way
// (share_bf16_scratch, nn/bf16_scratch.hpp), for their operands rounded to bf16. With
// share_transposes(true), layers that build W^T for their backward (share_transpose) get one
// cache per index type too, rebuilt for each layer's backward in turn (kernels/transpose.hpp:
// SharedTranspose): W^T's structure then costs the largest layer's, not the sum.
#pragma once

#include <cstdint>
#include <memory>
#include <tuple>

#include "../core/concepts.hpp"
#include "../kernels/transpose.hpp"
#include "../kernels/workspace.hpp"
#include "bf16_scratch.hpp"

namespace sprig {

template <Value T>
class ModelScratch {
public:
  // An empty buffer; it grows on the first kernel call that packs. Throws std::bad_alloc.
  ModelScratch() : buffer_(std::make_shared<ScratchBuffer<T>>()), bf16_(std::make_shared<Bf16Scratch>()) {}

  // Whether share_with hands layers the shared W^T caches (false, the default: each keeps its
  // own). Takes effect for the layers share_with is called on next. O(1); the caches (empty)
  // are allocated on the first true. Throws std::bad_alloc.
  void share_transposes(bool on) {
    if (on && !transposes_) transposes_ = std::make_shared<Transposes>();
    share_transposes_ = on;
  }

  // Hands the buffer to `layer` if it takes one (layer.share_scratch(SharedScratch<T>)), else
  // does nothing. O(1).
  template <class Layer>
  void share_with(Layer& layer) const noexcept {
    if constexpr (requires { layer.share_scratch(buffer_); }) layer.share_scratch(buffer_);
    if constexpr (requires { layer.share_bf16_scratch(bf16_); }) layer.share_bf16_scratch(bf16_);
    if constexpr (requires { typename Layer::index_type; }) {
      using Shared = SharedTranspose<T, typename Layer::index_type>;
      if constexpr (requires(Shared c) { layer.share_transpose(c); })
        layer.share_transpose(share_transposes_ && transposes_
                                  ? Shared(transposes_, &std::get<typename Shared::element_type>(*transposes_))
                                  : nullptr);
    }
  }

  // The shared buffer, for a layer type that takes it by another name.
  const SharedScratch<T>& buffer() const noexcept { return buffer_; }

  // Bytes of the buffers: the largest packing request of any layer sharing them, so far, the
  // largest bf16 rounding request, and the W^T caches (0 for a moved-from ModelScratch).
  std::int64_t memory_bytes() const noexcept {
    std::int64_t bytes = (buffer_ ? buffer_->memory_bytes() : 0) + (bf16_ ? bf16_->memory_bytes() : 0);
    if (transposes_) std::apply([&](const auto&... c) { ((bytes += c.memory_bytes()), ...); }, *transposes_);
    return bytes;
  }

private:
  SharedScratch<T> buffer_;
  SharedBf16Scratch bf16_;
  using Transposes =
      std::tuple<TransposeCache<T, std::int16_t>, TransposeCache<T, std::int32_t>, TransposeCache<T, std::int64_t>>;
  std::shared_ptr<Transposes> transposes_;  // one W^T cache per index type (share_transposes)
  bool share_transposes_ = false;
};

}  // namespace sprig
