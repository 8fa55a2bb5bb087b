// sprig/nn/sequential.hpp — Sequential<T, Index>: a chain of layers that owns the
// activation and gradient buffers between them.
//
// Layers are a closed set held in a std::variant (SparseLinear, Linear, ReLU, GELU, and the
// extra layer types named as template arguments, e.g. BlockSparseLinear<T, Index, 4, 4>): no
// virtual calls, and a caller can std::visit or std::get_if a layer to reach its type. An
// extra type with in_features()/out_features() is a linear layer (forward(X, Y, act) and
// backward(X, dY, dX, x_activation, x_derivative) as SparseLinear's, so the fusions below
// apply to it); one without them is element-wise (forward(X, Y), backward(X, dY, dX)).
// sparse_layers() (what DST updates) lists the SparseLinear layers and the block-sparse ones
// (BlockSparseLinear: through its stand-in over the block grid, SparseLayerRef::blocks).
//
// Buffers: act(k) holds the output of layer k, grad(k) the loss gradient with respect to
// it; both are [width_k x batch] with a row stride padded to a 64-byte multiple that is not
// a multiple of 128 bytes (so rows start on cache lines, and many rows walked at once do
// not collide in the same cache sets). They are reshaped only when the batch size changes
// and reuse their allocation, so a steady-state training step allocates nothing.
// Element-wise layers (ReLU, GELU: backward_in_place) compute their dX in place over their
// dY, so grad(k - 1) and grad(k) share one buffer and a model holds one gradient buffer per
// linear layer (2 MB less on a 4096-wide hidden layer at B = 128); after backward() such a
// shared buffer holds grad(k - 1), the gradient the linear layer below needs.
// A linear layer followed by a ReLU applies it in its own store (FusedActivation::relu: the
// kernel's epilogue, no pass over the activation) and the two share one buffer: act(k) of
// such a linear layer holds the ReLU's output, its pre-activation is not kept (the ReLU's
// backward needs only the sign, and relu(x) > 0 exactly where x > 0). Bitwise the same
// results as running the two layers apart, one activation buffer less per pair.
// In backward, a linear layer whose input a ReLU produced applies that ReLU's backward to its
// dX (SparseLinear / Linear ::backward with FusedActivation::relu: in the store of sddmm_dx's
// one pass or of the narrow kernels, else in a pass after the kernels) and the ReLU's pass is
// skipped: the same bits, and where the kernel fuses it one pass over the gradient less.
// A GELU between two linear layers computes its derivative in its forward, with the same exp
// as its value (GELU::forward_keep_derivative), into its input's buffer, which nothing else
// reads: act(k - 1) of the linear layer below a GELU holds gelu'(its output), not the output.
// The linear layer above multiplies its dX by it (FusedActivation::gelu) and the GELU's
// backward pass is skipped: the same bits as the GELU run apart.
//
// A training step:
//     auto Z  = model.forward(X);                          // X [in x B], kept by view
//     loss.forward_backward(Z, labels, model.output_grad());  // a separate statement: the
//                                                          // buffer is shaped by forward()
//     model.backward();                                    // every layer's grads, first layer skips dX
//     opt.step(model);
// The input X is held by view from forward() to backward(): the caller keeps it alive.
//
// Scratch: the model owns one ModelScratch (nn/model_scratch.hpp) and add() hands it to every
// layer that packs its kernels' operands (share_scratch): one packing buffer, sized by the
// largest layer's request, instead of two per sparse layer. Layers run one at a time, so
// sharing is safe and gives the same bits as private buffers. A layer assigned over one in
// the model (layer(k) = ...) keeps its own buffers until share_scratch_with_layers().
//
// Cost: forward and backward run each layer's passes once; a steady-state step (the same
// batch size, no add(), no topology change) allocates nothing. Threads: every layer gives the
// same bits for any OpenMP thread count (Linear on a threaded CBLAS excepted: kernels/dense_gemm.hpp), so
// the model does; a model serves one thread at a time. Slot order: forward may regroup a wide
// sparse layer's slots (SparseLinear, "Slot order"); a caller keeping per-slot arrays of its
// own attaches a SlotLog to that layer (sparse_layers()[j].layer->set_slot_log(&log)).
#pragma once

#include <type_traits>

#include <algorithm>
#include <cstdint>
#include <utility>
#include <variant>
#include <vector>

#include "../core/concepts.hpp"
#include "../core/error.hpp"
#include "../core/matrix.hpp"
#include "gelu.hpp"
#include "layer_clock.hpp"
#include "linear.hpp"
#include "model.hpp"
#include "model_scratch.hpp"
#include "relu.hpp"
#include "sparse_linear.hpp"

namespace sprig {

template <Value T, ColumnIndex Index = std::int32_t, class... ExtraLayers>
class Sequential {
public:
  using value_type = T;
  using index_type = Index;
  using Layer = std::variant<SparseLinear<T, Index>, Linear<T>, ReLU<T>, GELU<T>, ExtraLayers...>;

  // Appends a layer (SparseLinear, Linear, ReLU or GELU) and returns a reference to it (valid
  // until the next add()); a layer that packs gets the model's scratch (see the top). Widths
  // are checked by the next forward, which add() makes due again: until then output_grad()
  // and backward() throw. Amortised O(1).
  template <class L>
  L& add(L layer) {
    layers_.emplace_back(std::move(layer));
    std::visit([&](auto& l) { scratch_.share_with(l); }, layers_.back());
    acts_.emplace_back();
    act_of_.push_back(acts_.size() - 1);
    grads_.emplace_back();
    grad_of_.push_back(grads_.size() - 1);
    forwarded_ = false;  // the buffers of an earlier forward do not cover the new layer
    return std::get<L>(layers_.back());
  }

  // The number of layers, and layer k (std::get_if / std::visit it). Throws ArgumentError for
  // k >= size().
  std::size_t size() const noexcept { return layers_.size(); }
  Layer& layer(std::size_t k) { return layers_[checked("Sequential::layer", k)]; }
  const Layer& layer(std::size_t k) const { return layers_[checked("Sequential::layer", k)]; }

  // Runs every layer on X [in x B] and returns the output [out x B] (a view of act(last),
  // valid until the next forward or add()). X is held by view until backward(). Throws
  // ArgumentError for a model without layers, ShapeError if X or a layer's output does not
  // have the width the next layer takes (before any layer runs), and what a layer throws;
  // after a throw, output_grad() and backward() throw until a forward succeeds.
  ConstMatrixView<T> forward(std::type_identity_t<ConstMatrixView<T>> X) {
    if (layers_.empty()) throw ArgumentError("Sequential::forward: the model has no layers");
    forwarded_ = false;
    for (std::int64_t k = 0, w = X.rows(); k < std::ssize(layers_); ++k) w = out_width(static_cast<std::size_t>(k), w);
    input_ = X;
    const std::int64_t B = X.cols();
    std::int64_t width = X.rows();
    for (std::size_t k = 0; k < layers_.size(); ++k) {
      const std::int64_t out = out_width(k, width);
      width = out;
      if (k > 0 && fuses_next_relu(k - 1)) {  // computed by layer k - 1, in its buffer
        act_of_[k] = act_of_[k - 1];
        if (acts_[k].rows() != 0) acts_[k] = Matrix<T>();  // fused since a later add()
        continue;
      }
      act_of_[k] = k;
      reshape(acts_[k], out, B);
      const ConstMatrixView<T> in = input_of(k);
      const MatrixView<T> y = acts_[k].view();
      timed(k, LayerClock::Pass::forward, [&] {
        if (keeps_gelu_derivative(k)) {  // layer k - 1's buffer then holds gelu'(its output)
          std::get<GELU<T>>(layers_[k]).forward_keep_derivative(acts_[act_of_[k - 1]].view(), y);
          return;
        }
        std::visit(
            [&](auto& l) {
              if constexpr (requires { l.forward(in, y, FusedActivation::relu); })
                l.forward(in, y, fuses_next_relu(k) ? FusedActivation::relu : FusedActivation::none);
              else
                l.forward(in, y);
            },
            layers_[k]);
      });
    }
    // which buffer holds grad(k): its own, or for the input of an element-wise layer k + 1
    // the one of grad(k + 1) (dX written over dY)
    for (std::size_t k = layers_.size(); k-- > 0;) {
      const bool shared = k + 1 < layers_.size() && in_place_backward(k + 1);
      grad_of_[k] = shared ? grad_of_[k + 1] : k;
      if (!shared)
        reshape(grads_[k], act(k).rows(), B);
      else if (grads_[k].rows() != 0)
        grads_[k] = Matrix<T>();  // shared since a later add()
    }
    forwarded_ = true;
    return act(layers_.size() - 1);
  }

  // The buffer for dLoss/dOutput of the last forward (same shape as its output); the loss
  // writes into it before backward(). Shaped by forward(), so call it after forward(): throws
  // ArgumentError without a forward since the model was built or a layer was added.
  MatrixView<T> output_grad() {
    if (!forwarded_)
      throw ArgumentError(
          "Sequential::output_grad: call forward first (no forward since the model was built or a layer was added)");
    return grads_[grad_of_.back()].view();
  }

  // Back-propagates output_grad() through every layer, filling every parameter gradient
  // (overwritten, not accumulated). The first layer does not compute dX. Precondition: the
  // input of the last forward is alive and unchanged. Throws ArgumentError without a forward
  // since the model was built or a layer was added ("call forward first"), and what a layer
  // throws (ShapeError for a sparse layer whose topology changed without weight.apply).
  void backward() {
    backward([](std::size_t) {});
  }
  // backward(), calling layer_done(k) as soon as layer k's parameter gradients are final (k
  // from the last layer down to 0), before the layers below it run: a data-parallel run starts
  // summing those gradients across ranks while backward goes on (dist/data_parallel.hpp).
  // layer_done must not change the model; what it throws propagates.
  template <class LayerDone>
  void backward(LayerDone&& layer_done) {
    if (!forwarded_)
      throw ArgumentError(
          "Sequential::backward: call forward first (no forward since the model was built or a layer was added)");
    for (std::size_t k = layers_.size(); k-- > 0;) {
      backward_layer(k);
      layer_done(k);
    }
  }

  // Attaches a clock to which forward() and backward() add each layer's time (nullptr, the
  // default: none). Held by pointer: it outlives the model or is detached first. Same results.
  // A layer whose work another does is not timed: a ReLU applied in the store of the linear
  // layer below it (forward) or in the dX of the one above (backward), a GELU whose backward
  // the layer above applies; layer 0's backward is its parameter gradients only.
  void set_layer_clock(LayerClock* clock) noexcept { clock_ = clock; }

  // Calls fn on the parameters of layer k (its weight, then its bias; none for an element-wise
  // layer), as for_each_parameter does for that layer. Throws ArgumentError for k >= size().
  template <class Fn>
  void for_each_parameter_of(std::size_t k, Fn&& fn) {
    std::visit(
        [&](auto& layer) {
          if constexpr (requires { layer.for_each_parameter(fn); }) layer.for_each_parameter(fn);
        },
        layers_[checked("Sequential::for_each_parameter_of", k)]);
  }

  // Reserves room for topology growth in every sparse layer (SparseParameter::reserve_growth):
  // for dynamic sparse training, once the model is built. Throws ArgumentError unless
  // 0 <= fraction <= 64.
  void reserve_growth(double fraction = SparseParameter<T, Index>::kGrowthReserve) {
    for (auto& l : layers_)
      if (auto* s = std::get_if<SparseLinear<T, Index>>(&l)) s->weight.reserve_growth(fraction);
  }

  // Calls fn(SparseParameter<T, Index>&) or fn(DenseParameter<T>&) for every parameter,
  // in layer order (each layer's weight, then its bias): what an optimizer's step visits.
  // With sparse_layers(), what makes a Sequential a Model (nn/model.hpp).
  // The const form visits the same parameters in the same order (a checkpoint writes with it).
  template <class Fn>
  void for_each_parameter(Fn&& fn) {
    for (auto& l : layers_)
      std::visit(
          [&](auto& layer) {
            if constexpr (requires { layer.for_each_parameter(fn); }) layer.for_each_parameter(fn);
          },
          l);
  }
  template <class Fn>
  void for_each_parameter(Fn&& fn) const {
    for (const auto& l : layers_)
      std::visit(
          [&](const auto& layer) {
            if constexpr (requires { layer.for_each_parameter(fn); }) layer.for_each_parameter(fn);
          },
          l);
  }

  // The sparse layers with their last input and output gradient (valid until the next
  // forward/backward or add(); empty views before the first forward). O(layers), plus
  // O(storage x R x C) per block-sparse layer to rebuild its stand-in.
  std::vector<SparseLayerRef<T, Index>> sparse_layers() {
    std::vector<SparseLayerRef<T, Index>> out;
    for (std::size_t k = 0; k < layers_.size(); ++k)
      std::visit(
          [&](auto& layer) {
            using L = std::remove_cvref_t<decltype(layer)>;
            const ConstMatrixView<T> dY(grads_[grad_of_[k]].view());
            if constexpr (std::is_same_v<L, SparseLinear<T, Index>>) {
              out.push_back({k, out.size(), &layer, input_of(k), dY});
            } else if constexpr (requires { layer.topology_stand_in(); }) {
              out.push_back({k, out.size(), &layer.topology_stand_in(), input_of(k), dY, &layer});
            }
          },
          layers_[k]);
    return out;
  }

  // The output of layer k (for a linear layer followed by a ReLU: the ReLU's output; for a
  // linear layer followed by a GELU and another linear layer: gelu' of its output, see the top).
  // Throws ArgumentError for k >= size().
  ConstMatrixView<T> act(std::size_t k) const { return acts_[act_of_[checked("Sequential::act", k)]].view(); }
  // The buffer of grad(k); for the output of an element-wise layer it is shared with the
  // layer's input gradient and holds that one after backward() (see the top of this file).
  // Throws ArgumentError for k >= size().
  ConstMatrixView<T> grad(std::size_t k) const { return grads_[grad_of_[checked("Sequential::grad", k)]].view(); }
  // The input of the last forward (a view of the caller's X).
  ConstMatrixView<T> input() const noexcept { return input_; }

  // Bytes of all weights as stored (sparse layers: every PaddedCSR array incl. padding), and
  // the bytes the same model would need with every layer dense.
  std::int64_t weight_bytes() const { return sum_over(kWeightBytes); }
  std::int64_t dense_weight_bytes() const { return sum_over(kDenseWeightBytes); }
  // Everything the model owns: weights, gradients, optimizer state, caches, buffers, and the
  // shared scratch once.
  std::int64_t memory_bytes() const {
    std::int64_t b = sum_over([](const auto& l) { return l.memory_bytes(); });
    for (const auto& m : acts_) b += m.memory_bytes();
    for (const auto& m : grads_) b += m.memory_bytes();
    return b + scratch_.memory_bytes();
  }
  // Bytes of the kernels' packing buffers: the shared scratch plus any a layer still owns.
  std::int64_t scratch_bytes() const {
    std::int64_t b = scratch_.memory_bytes();
    for (const auto& l : layers_)
      std::visit(
          [&](const auto& layer) {
            if constexpr (requires { layer.scratch_bytes(); }) b += layer.scratch_bytes();
          },
          l);
    return b;
  }
  // Hands the model's scratch to every layer that packs, as add() does: after a layer was
  // assigned over another (layer(k) = ...). O(layers).
  void share_scratch_with_layers() noexcept {
    for (auto& l : layers_) std::visit([&](auto& layer) { scratch_.share_with(layer); }, l);
  }

  // Row stride for a [rows x cols] activation: a multiple of 64 bytes that is an odd
  // multiple of 64 bytes once past one line (power-of-two strides map rows walked together
  // onto the same cache sets).
  static std::int64_t activation_stride(std::int64_t cols) noexcept {
    constexpr std::int64_t line = 64 / static_cast<std::int64_t>(sizeof(T));
    std::int64_t s = (cols + line - 1) / line * line;
    if (s > line && (s / line) % 2 == 0) s += line;
    return std::max<std::int64_t>(s, 1);
  }

  // The fusions forward() and backward() make, by layer index (public so that a profiler
  // can run the same step phase by phase: bench/train_step). O(1); precondition k < size().
  // Whether layer k is linear and applies the ReLU at k + 1 in its forward's store.
  bool fuses_next_relu(std::size_t k) const {
    return k + 1 < layers_.size() && std::holds_alternative<ReLU<T>>(layers_[k + 1]) && is_linear(layers_[k]);
  }

  // Whether the GELU at k runs forward_keep_derivative: its input is the output of the linear
  // layer k - 1 (a buffer of this model that nothing else reads: a linear layer's backward needs
  // its input, not its output) and linear layer k + 1 applies its backward from the derivative.
  bool keeps_gelu_derivative(std::size_t k) const {
    return k >= 1 && k + 1 < layers_.size() && std::holds_alternative<GELU<T>>(layers_[k]) &&
           is_linear(layers_[k - 1]) && is_linear(layers_[k + 1]);
  }

  // The backward of the element-wise layer at k - 1 that linear layer k applies to its dX (the
  // element-wise layer's input gradient shares its buffer with dX, so its own pass is
  // skipped): relu for a ReLU (its input is the ReLU's output either way, fused into layer
  // k - 2 or not, which relu_backward allows), gelu for a GELU that kept its derivative.
  FusedActivation fused_input_activation(std::size_t k) const {
    if (k < 2 || !is_linear(layers_[k])) return FusedActivation::none;
    if (std::holds_alternative<ReLU<T>>(layers_[k - 1])) return FusedActivation::relu;
    if (keeps_gelu_derivative(k - 1)) return FusedActivation::gelu;
    return FusedActivation::none;
  }

private:
  // One layer of backward(): its parameter gradients and, except for layer 0, its dX.
  void backward_layer(std::size_t k) {
    const ConstMatrixView<T> in = input_of(k);
    const ConstMatrixView<T> dy = grads_[grad_of_[k]].view();
    if (k == 0) {
      timed(k, LayerClock::Pass::backward, [&] {
        std::visit(
            [&](auto& l) {
              if constexpr (requires { l.backward(in, dy); }) l.backward(in, dy);  // parameters only
            },
            layers_[k]);
      });
    } else if (k + 1 < layers_.size() && fused_input_activation(k + 1) != FusedActivation::none) {
      // this activation's backward was applied by layer k + 1 to its dX
    } else {
      const FusedActivation fuse = fused_input_activation(k);
      // gelu: the derivative forward_keep_derivative left in the GELU's input buffer
      const ConstMatrixView<T> derivative = fuse == FusedActivation::gelu ? act(k - 2) : ConstMatrixView<T>();
      timed(k, LayerClock::Pass::backward, [&] {
        std::visit(
            [&](auto& l) {
              if constexpr (requires { l.backward(in, dy, grads_[grad_of_[k - 1]].view(), fuse, derivative); })
                l.backward(in, dy, grads_[grad_of_[k - 1]].view(), fuse, derivative);
              else
                l.backward(in, dy, grads_[grad_of_[k - 1]].view());
            },
            layers_[k]);
      });
    }
  }
  // fn() timed into layer k's pass of the attached clock, or fn() alone.
  template <class Fn>
  void timed(std::size_t k, LayerClock::Pass p, Fn&& fn) {
    detail::timed(clock_ ? &clock_->layer(k) : nullptr, p, std::forward<Fn>(fn));
  }

  std::size_t checked(const char* fn, std::size_t k) const {
    if (k >= layers_.size())
      throw ArgumentError(detail::message(fn, ": layer ", k, " of a model with ", layers_.size(), " layers"));
    return k;
  }

  static bool is_linear(const Layer& l) noexcept {
    return std::visit(
        [](const auto& layer) {
          return requires { layer.out_features(); };
        },
        l);
  }

  std::int64_t out_width(std::size_t k, std::int64_t in) const {
    return std::visit(
        [&](const auto& l) -> std::int64_t {
          if constexpr (requires { l.out_features(); }) {
            if (l.in_features() != in)
              throw ShapeError(detail::message("Sequential::forward: layer ", k, " takes ", l.in_features(),
                                               " inputs but gets ", in));
            return l.out_features();
          } else {
            return in;
          }
        },
        layers_[k]);
  }

  static constexpr auto kWeightBytes = [](const auto& l) { return l.weight_bytes(); };
  static constexpr auto kDenseWeightBytes = [](const auto& l) { return l.dense_weight_bytes(); };
  template <class Fn>
  std::int64_t sum_over(Fn&& fn) const {
    std::int64_t b = 0;
    for (const auto& l : layers_)
      std::visit(
          [&](const auto& layer) {
            if constexpr (requires { layer.weight_bytes(); }) b += fn(layer);
          },
          l);
    return b;
  }

  ConstMatrixView<T> input_of(std::size_t k) const { return k == 0 ? input_ : act(k - 1); }

  // Whether layer k's backward may write dX over dY (element-wise layers declare it).
  bool in_place_backward(std::size_t k) const {
    return std::visit(
        [](const auto& l) {
          if constexpr (requires { std::remove_cvref_t<decltype(l)>::backward_in_place; })
            return std::remove_cvref_t<decltype(l)>::backward_in_place;
          else
            return false;
        },
        layers_[k]);
  }

  static void reshape(Matrix<T>& m, std::int64_t rows, std::int64_t cols) {
    if (m.rows() != rows || m.cols() != cols) m.resize(rows, cols, activation_stride(cols));
  }

  std::vector<Layer> layers_;
  std::vector<Matrix<T>> acts_;       // empty where the output lives in layer k - 1's buffer
  std::vector<std::size_t> act_of_;   // act(k) is acts_[act_of_[k]]
  std::vector<Matrix<T>> grads_;      // empty where the gradient lives in a shared buffer
  std::vector<std::size_t> grad_of_;  // grad(k) is grads_[grad_of_[k]]
  ConstMatrixView<T> input_;
  bool forwarded_ = false;
  LayerClock* clock_ = nullptr;  // set_layer_clock
  ModelScratch<T> scratch_;  // the layers' packing buffer (see the top)
};

}  // namespace sprig
