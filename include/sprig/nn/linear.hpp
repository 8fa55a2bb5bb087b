// sprig/nn/linear.hpp — dense Linear<T>: Y = W X + b, W a dense out x in parameter.
//
// Shapes (feature-major): X [in x B], Y and dY [out x B], dX [in x B].
//   forward:  Y  = W X + b          (gemm NN, then one pass for bias and a fused activation)
//   backward: dW = dY X^T           (gemm NT), db = sum over the batch of dY,
//             dX = W^T dY           (gemm TN; with x_activation = relu then masked where X <= 0,
//                                    with gelu multiplied by x_derivative: row_epilogue.hpp)
// backward overwrites the gradients; the two-argument overload skips dX.
// A layer with at most kNarrowMaxRows outputs (a classifier's head) runs on the narrow kernels
// instead (kernels/narrow_dense.hpp): bias and activation in the forward's store, and dW and dX
// (with the ReLU mask) in one pass over X. Its results then differ from the gemm path's in
// rounding (another summation order), not from run to run or with the thread count.
#pragma once

#include <type_traits>

#include <cstdint>

#include "../core/concepts.hpp"
#include "../core/error.hpp"
#include "../core/matrix.hpp"
#include "../core/rng.hpp"
#include "../kernels/narrow_dense.hpp"
#include "bias.hpp"
#include "gemm.hpp"
#include "init.hpp"
#include "parameter.hpp"

namespace sprig {

template <Value T>
class Linear {
public:
  using value_type = T;

  DenseParameter<T> weight;  // out x in
  DenseParameter<T> bias;    // out x 1, not decayed

  // Kaiming-uniform weights (fan-in = in) drawn from the stream (seed, layer_key); zero bias.
  Linear(std::int64_t in, std::int64_t out, std::uint64_t seed, std::uint64_t layer_key = 0) {
    if (in <= 0 || out <= 0)
      throw ShapeError(detail::message("Linear: in and out must be > 0, got ", in, " and ", out));
    weight = DenseParameter<T>(out, in);
    bias = DenseParameter<T>(out, 1);
    bias.decay = false;
    CounterRng rng(seed, layer_key, kInitKey);
    const double bound = kaiming_uniform_bound(static_cast<double>(in));
    for (T& v : weight.value) v = static_cast<T>(rng.uniform(-bound, bound));
  }

  std::int64_t in_features() const noexcept { return weight.cols; }
  std::int64_t out_features() const noexcept { return weight.rows; }

  // Y = act(W X + b).
  void forward(std::type_identity_t<ConstMatrixView<T>> X, std::type_identity_t<MatrixView<T>> Y,
               FusedActivation act = FusedActivation::none) {
    if (X.rows() != in_features() || Y.rows() != out_features() || Y.cols() != X.cols())
      throw ShapeError(detail::message("Linear::forward: layer is ", out_features(), "x", in_features(), ", X is ",
                                       X.rows(), "x", X.cols(), ", Y is ", Y.rows(), "x", Y.cols()));
    detail::check_forward_activation("Linear::forward", act);
    if (narrow()) {
      narrow_forward<T>(weight.view(), X, Y, std::span<const T>(bias.value), act);
      return;
    }
    gemm<T>(Trans::no, Trans::no, T(1), weight.view(), X, T(0), Y);
    detail::add_bias<T>(bias.value, Y, act);
  }

  // With x_activation = relu (X is a ReLU's output), dX gets that ReLU's backward too:
  // dX = relu_backward(X, W^T dY), so the ReLU's own pass can be skipped (Sequential does);
  // with gelu (X is a GELU's output), dX = x_derivative * W^T dY.
  void backward(std::type_identity_t<ConstMatrixView<T>> X, std::type_identity_t<ConstMatrixView<T>> dY,
                std::type_identity_t<MatrixView<T>> dX, FusedActivation x_activation = FusedActivation::none,
                std::type_identity_t<ConstMatrixView<T>> x_derivative = {}) {
    if (dX.rows() != in_features() || dX.cols() != X.cols())
      throw ShapeError(detail::message("Linear::backward: dX is ", dX.rows(), "x", dX.cols(), ", expected ",
                                       in_features(), "x", X.cols()));
    detail::check_input_activation<T>("Linear::backward", x_activation, X, x_derivative);
    check_backward_shapes(X, dY);
    if (narrow()) {
      narrow_backward<T>(weight.view(), X, dY, weight.grad_view(), dX, x_activation, x_derivative);
      detail::sum_rows<T>(dY, bias.grad);
      return;
    }
    backward(X, dY);
    gemm<T>(Trans::yes, Trans::no, T(1), weight.view(), dY, T(0), dX);
    detail::input_activation_rows<T>(x_activation, X, x_derivative, dX);
  }

  void backward(std::type_identity_t<ConstMatrixView<T>> X, std::type_identity_t<ConstMatrixView<T>> dY) {
    check_backward_shapes(X, dY);
    if (narrow())
      narrow_backward<T>(weight.view(), X, dY, weight.grad_view());
    else
      gemm<T>(Trans::no, Trans::yes, T(1), dY, X, T(0), weight.grad_view());
    detail::sum_rows<T>(dY, bias.grad);
  }

  // Whether this layer runs on the narrow kernels (out_features() <= kNarrowMaxRows).
  bool narrow() const noexcept { return out_features() <= kNarrowMaxRows; }

  template <class Fn>
  void for_each_parameter(Fn&& fn) {
    fn(weight);
    fn(bias);
  }

  std::int64_t weight_bytes() const noexcept { return weight.weight_bytes() + bias.weight_bytes(); }
  std::int64_t dense_weight_bytes() const noexcept {
    return (in_features() * out_features() + out_features()) * static_cast<std::int64_t>(sizeof(T));
  }
  std::int64_t memory_bytes() const noexcept { return weight_bytes() + weight.state_bytes() + bias.state_bytes(); }

private:
  void check_backward_shapes(ConstMatrixView<T> X, ConstMatrixView<T> dY) const {
    if (X.rows() != in_features() || dY.rows() != out_features() || dY.cols() != X.cols())
      throw ShapeError(detail::message("Linear::backward: layer is ", out_features(), "x", in_features(), ", X is ",
                                       X.rows(), "x", X.cols(), ", dY is ", dY.rows(), "x", dY.cols()));
    weight.check_aligned("Linear::backward");
  }

  static constexpr std::uint64_t kInitKey = 0x11A1'7EA1ULL;
};

}  // namespace sprig
