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
//
// Cost: each pass O(in x out x B); nothing allocated in a steady-state step (the portable gemm
// allocates nothing; a BLAS may). Threads: bitwise identical for any thread count on the
// narrow kernels and the portable gemm; with SPRIG_USE_CBLAS that is the BLAS's to promise
// (a threaded OpenBLAS does not: kernels/dense_gemm.hpp). One layer serves one thread at a time.
// Operand overlaps are not detected: Y and dX must not overlap any input.
//
// Precision (set_precision; core/precision.hpp): with Precision::bf16 (T = float only) every
// product runs on bf16_gemm (kernels/bf16_gemm.hpp: AMX, AVX512-BF16 or portable, float
// accumulation), narrow layers included: forward rounds W into a bf16 shadow (refreshed from
// the float masters on every forward) and X; backward rounds dY and X^T for dW = dY X^T and
// transposes the shadow for dX = W^T dY, then applies x_activation in a pass. Gradients,
// bias and optimizer state stay float; the rounded operands live only within the call, in a
// Bf16Scratch (the layer's own or a model's: share_bf16_scratch). Each output is within
// bf16_gemm's bound of the products of the rounded operands, bitwise identical for any thread
// count on one bf16_gemm path.
#pragma once

#include <type_traits>

#include <cstdint>

#include "../core/concepts.hpp"
#include "../core/error.hpp"
#include "../core/matrix.hpp"
#include "../core/precision.hpp"
#include "../core/rng.hpp"
#include "../kernels/bf16_gemm.hpp"
#include "../kernels/dense_gemm.hpp"
#include "../kernels/narrow_dense.hpp"
#include "bf16_scratch.hpp"
#include "bias.hpp"
#include "init.hpp"
#include "parameter.hpp"

namespace sprig {

template <Value T>
class Linear {
public:
  using value_type = T;

  DenseParameter<T> weight;  // out x in
  DenseParameter<T> bias;    // out x 1, not decayed

  // Weights drawn from the stream (seed, layer_key) by `init` (init.hpp: Kaiming-uniform with
  // fan-in = in by default, or normal(0, init.std^2)); zero bias (not decayed). O(in x out).
  // Throws ShapeError for in or out < 1, ArgumentError for a normal std not finite and > 0.
  Linear(std::int64_t in, std::int64_t out, std::uint64_t seed, std::uint64_t layer_key = 0,
         const WeightInit& init = {}) {
    if (in <= 0 || out <= 0)
      throw ShapeError(detail::message("Linear: in and out must be > 0, got ", in, " and ", out));
    const double fan_in = static_cast<double>(in);
    const double scale = init.is_normal() ? normal_init_std("Linear", init, fan_in, fan_in) : 0.0;
    weight = DenseParameter<T>(out, in);
    bias = DenseParameter<T>(out, 1);
    bias.decay = false;
    CounterRng rng(seed, layer_key, kInitKey);
    const double bound = kaiming_uniform_bound(fan_in);
    for (T& v : weight.value)
      v = static_cast<T>(init.is_normal() ? scale * rng.normal() : rng.uniform(-bound, bound));
  }

  // Shape of W (O(1)).
  std::int64_t in_features() const noexcept { return weight.cols; }
  std::int64_t out_features() const noexcept { return weight.rows; }

  // Y = act(W X + b), X [in x B], Y [out x B]. Throws ShapeError for the shapes,
  // ArgumentError for act = gelu (not a forward epilogue).
  void forward(std::type_identity_t<ConstMatrixView<T>> X, std::type_identity_t<MatrixView<T>> Y,
               FusedActivation act = FusedActivation::none) {
    check_forward(X, Y, act);
    if constexpr (std::is_same_v<T, float>)
      if (bf16_.bf16()) {
        forward_bf16(X, Y, act);
        return;
      }
    if (narrow()) {
      narrow_forward<T>(weight.view(), X, Y, std::span<const T>(bias.value), act);
      return;
    }
    gemm<T>(Trans::no, Trans::no, T(1), weight.view(), X, T(0), Y);
    detail::add_bias<T>(bias.value, Y, act);
  }
  // The same with X in bf16 (a model that keeps its activations in bf16,
  // nn/projection_input.hpp): bitwise the float form's results for a float X that rounds to
  // this X. Needs Precision::bf16 (else ArgumentError); throws as the float form.
  void forward(ConstMatrixView<bfloat16> X, std::type_identity_t<MatrixView<T>> Y,
               FusedActivation act = FusedActivation::none)
    requires std::is_same_v<T, float>
  {
    bf16_.require_bf16_input("Linear::forward");
    check_forward(X, Y, act);
    forward_bf16(X, Y, act);
  }

  // With x_activation = relu (X is a ReLU's output), dX gets that ReLU's backward too:
  // dX = relu_backward(X, W^T dY), so the ReLU's own pass can be skipped (Sequential does);
  // with gelu (X is a GELU's output), dX = x_derivative * W^T dY. Overwrites weight.grad,
  // bias.grad and dX [in x B]. Throws ShapeError for the shapes (x_derivative included) or
  // misaligned parameter arrays.
  void backward(std::type_identity_t<ConstMatrixView<T>> X, std::type_identity_t<ConstMatrixView<T>> dY,
                std::type_identity_t<MatrixView<T>> dX, FusedActivation x_activation = FusedActivation::none,
                std::type_identity_t<ConstMatrixView<T>> x_derivative = {}) {
    if (dX.rows() != in_features() || dX.cols() != X.cols())
      throw ShapeError(detail::message("Linear::backward: dX is ", dX.rows(), "x", dX.cols(), ", expected ",
                                       in_features(), "x", X.cols()));
    detail::check_input_activation<T>("Linear::backward", x_activation, X, x_derivative);
    check_backward_shapes(X, dY);
    if constexpr (std::is_same_v<T, float>)
      if (bf16_.bf16()) {
        backward_bf16(X, dY, &dX);
        detail::input_activation_rows<T>(x_activation, X, x_derivative, dX);
        return;
      }
    if (narrow()) {
      narrow_backward<T>(weight.view(), X, dY, weight.grad_view(), dX, x_activation, x_derivative);
      detail::sum_rows<T>(dY, bias.grad);
      return;
    }
    backward(X, dY);
    gemm<T>(Trans::yes, Trans::no, T(1), weight.view(), dY, T(0), dX);
    detail::input_activation_rows<T>(x_activation, X, x_derivative, dX);
  }
  // The same with X in bf16, as forward's bf16 form (x_activation relu reads X widened).
  void backward(ConstMatrixView<bfloat16> X, std::type_identity_t<ConstMatrixView<T>> dY,
                std::type_identity_t<MatrixView<T>> dX, FusedActivation x_activation = FusedActivation::none,
                std::type_identity_t<ConstMatrixView<T>> x_derivative = {})
    requires std::is_same_v<T, float>
  {
    bf16_.require_bf16_input("Linear::backward");
    if (dX.rows() != in_features() || dX.cols() != X.cols())
      throw ShapeError(detail::message("Linear::backward: dX is ", dX.rows(), "x", dX.cols(), ", expected ",
                                       in_features(), "x", X.cols()));
    detail::check_input_activation<T>("Linear::backward", x_activation, X, x_derivative);
    check_backward_shapes(X, dY);
    backward_bf16(X, dY, &dX);
    detail::input_activation_rows<T>(x_activation, X, x_derivative, dX);
  }

  // Weight and bias gradients only (no dX: the first layer of a network). Throws ShapeError
  // as the three-argument form.
  void backward(std::type_identity_t<ConstMatrixView<T>> X, std::type_identity_t<ConstMatrixView<T>> dY) {
    check_backward_shapes(X, dY);
    if constexpr (std::is_same_v<T, float>)
      if (bf16_.bf16()) {
        backward_bf16(X, dY, nullptr);
        return;
      }
    if (narrow())
      narrow_backward<T>(weight.view(), X, dY, weight.grad_view());
    else
      gemm<T>(Trans::no, Trans::yes, T(1), dY, X, T(0), weight.grad_view());
    detail::sum_rows<T>(dY, bias.grad);
  }
  void backward(ConstMatrixView<bfloat16> X, std::type_identity_t<ConstMatrixView<T>> dY)
    requires std::is_same_v<T, float>
  {
    bf16_.require_bf16_input("Linear::backward");
    check_backward_shapes(X, dY);
    backward_bf16(X, dY, nullptr);
  }

  // The precision of the layer's products (top of this file); fp32 by default. Switching
  // keeps every weight, gradient and optimizer state. Throws ArgumentError for bf16 on a
  // layer whose values are not float. O(1); the bf16 shadow (in x out values) is allocated
  // on the first forward.
  void set_precision(Precision p) { bf16_.set_precision(p, "Linear"); }
  Precision precision() const noexcept { return bf16_.precision(); }

  // Rounds the operands of the bf16 products in `scratch` (a model's, nn/model_scratch.hpp)
  // instead of a buffer of the layer's own; nullptr returns to the layer's own. The same bits
  // either way. Precondition: no two layers sharing it run a forward or backward at once.
  void share_bf16_scratch(const SharedBf16Scratch& scratch) noexcept { bf16_.share(scratch); }

  // Whether this layer runs on the narrow kernels (out_features() <= kNarrowMaxRows).
  bool narrow() const noexcept { return out_features() <= kNarrowMaxRows; }

  // Calls fn(weight) then fn(bias): what an optimizer's step visits.
  template <class Fn>
  void for_each_parameter(Fn&& fn) {
    fn(weight);
    fn(bias);
  }
  template <class Fn>
  void for_each_parameter(Fn&& fn) const {
    fn(weight);
    fn(bias);
  }

  // Bytes of the weights and bias; the same (a dense layer); and everything the layer owns
  // (weights, gradients, optimizer state).
  std::int64_t weight_bytes() const noexcept { return weight.weight_bytes() + bias.weight_bytes(); }
  std::int64_t dense_weight_bytes() const noexcept {
    return (in_features() * out_features() + out_features()) * static_cast<std::int64_t>(sizeof(T));
  }
  std::int64_t memory_bytes() const noexcept {
    return weight_bytes() + weight.state_bytes() + bias.state_bytes() + bf16_.memory_bytes();
  }

private:
  // The bf16 products (T = float): see the top of this file.
  template <class XT>
  void check_forward(ConstMatrixView<XT> X, MatrixView<T> Y, FusedActivation act) const {
    if (X.rows() != in_features() || Y.rows() != out_features() || Y.cols() != X.cols())
      throw ShapeError(detail::message("Linear::forward: layer is ", out_features(), "x", in_features(), ", X is ",
                                       X.rows(), "x", X.cols(), ", Y is ", Y.rows(), "x", Y.cols()));
    detail::check_forward_activation("Linear::forward", act);
  }
  template <class XT>
  void forward_bf16(ConstMatrixView<XT> X, MatrixView<float> Y, FusedActivation act) {
    const auto W = bf16_.shadow(weight.value.size());
    to_bfloat16(std::span<const float>(weight.value), W);
    const std::int64_t out = out_features(), in = in_features();
    const Bf16GemmPath path = bf16_gemm_path();
    const auto [Xb, pack] = bf16_.rounded_with_workspace(X, bf16_gemm_workspace_size(out, in, X.cols(), path));
    bf16_gemm(ConstMatrixView<bfloat16>(W.data(), out, in), Xb, Y, Update::overwrite, path, pack);
    detail::add_bias<float>(bias.value, Y, act);
  }
  // dW = dY X^T, db, and dX = W^T dY when dX is given (no activation: the caller's pass).
  template <class In>
  void backward_bf16(ConstMatrixView<In> X, ConstMatrixView<float> dY, const MatrixView<float>* dX) {
    const auto W = bf16_.forwarded_shadow(weight.value.size(), "Linear::backward");
    const std::int64_t B = X.cols(), in = in_features(), out = out_features();
    const Bf16GemmPath path = bf16_gemm_path();
    const std::int64_t ws = std::max(bf16_gemm_workspace_size(out, B, in, path),
                                     dX ? bf16_gemm_workspace_size(in, out, B, path) : std::int64_t{0});
    const auto [xt, dy, wt, pk] = bf16_.scratch().parts(std::array{B * in, B * out, dX ? in * out : 0, ws});
    const std::span<bfloat16> pack(pk, static_cast<std::size_t>(ws));
    const auto XT = detail::narrow_transposed(X, xt);
    const auto dYb = detail::narrow_rows(dY, dy);
    bf16_gemm(dYb, XT, weight.grad_view(), Update::overwrite, path, pack);
    detail::sum_rows<float>(dY, bias.grad);
    if (!dX) return;
    const auto WT = detail::narrow_transposed(ConstMatrixView<bfloat16>(W.data(), out, in), wt);
    bf16_gemm(WT, dYb, *dX, Update::overwrite, path, pack);
  }

  Bf16Operands<T> bf16_;  // precision, bf16 shadow of W, rounded operands

  template <class XT>
  void check_backward_shapes(ConstMatrixView<XT> X, ConstMatrixView<T> dY) const {
    if (X.rows() != in_features() || dY.rows() != out_features() || dY.cols() != X.cols())
      throw ShapeError(detail::message("Linear::backward: layer is ", out_features(), "x", in_features(), ", X is ",
                                       X.rows(), "x", X.cols(), ", dY is ", dY.rows(), "x", dY.cols()));
    weight.check_aligned("Linear::backward");
  }

  static constexpr std::uint64_t kInitKey = 0x11A1'7EA1ULL;
};

}  // namespace sprig
