// sprig/nn/gelu.hpp — GELU<T>, the tanh approximation (Hendrycks & Gimpel; GPT-2, BERT):
//   gelu(x) = x/2 * (1 + tanh(u)),  u = sqrt(2/pi) * (x + 0.044715 x^3)
//   gelu'(x) = (1 + tanh(u))/2 + x/2 * (1 - tanh(u)^2) * sqrt(2/pi) * (1 + 3 * 0.044715 x^2)
// It differs from the erf form x * Phi(x) by at most about 5e-4 (absolute) on the real line.
// The row passes are kernels/gelu.hpp's (xsimd, dispatched; a scalar std::tanh per element
// made the GELU the larger part of a sparse training step), with OpenMP over rows for large
// inputs (rows.hpp). Every pass is O(rows x cols) and allocates nothing; each element's result
// does not depend on the thread count (it may differ in the last ulp between the SIMD body
// and the scalar tail of a row). The operands are checked for shape only: an output that
// partly overlaps an input is not detected.
#pragma once

#include <type_traits>

#include <cstdint>

#include "../core/bfloat16.hpp"
#include "../core/concepts.hpp"
#include "../core/matrix.hpp"
#include "../kernels/gelu.hpp"
#include "../kernels/row_epilogue.hpp"
#include "relu.hpp"
#include "rows.hpp"

namespace sprig {

template <Value T>
class GELU {
public:
  using value_type = T;

  // gelu(x) and gelu'(x) of one scalar, as the passes' scalar tail computes them.
  static T value(T x) noexcept { return detail::GeluMath<T>::value_of(x); }
  static T derivative(T x) noexcept { return detail::GeluMath<T>::derivative_of(x); }

  // Y = gelu(X). Y must not overlap X. Throws ShapeError unless X and Y have one shape.
  void forward(std::type_identity_t<ConstMatrixView<T>> X, std::type_identity_t<MatrixView<T>> Y) const {
    detail::check_same_shape<T>("GELU::forward", "X", X, "Y", Y);
    const auto kernel = detail::gelu_forward_kernel<T>();
    detail::for_rows(X.rows(), X.cols(), [&](std::int64_t i) { kernel(X.row(i), Y.row(i), X.cols()); });
  }

  // Y = gelu(Z), and Z overwritten with gelu'(Z): the forward for a model whose next layer
  // applies this GELU's backward to its dX from the stored derivative (x_activation = gelu,
  // x_derivative = Z; Sequential does it), so no backward pass over the activation is needed.
  // One exp per element serves both. Y is bitwise forward(Z)'s, Z bitwise gelu'(Z) as
  // backward() computes it. Y must not overlap Z. Throws ShapeError unless Z and Y have one
  // shape.
  void forward_keep_derivative(std::type_identity_t<MatrixView<T>> Z, std::type_identity_t<MatrixView<T>> Y) const {
    detail::check_same_shape<T>("GELU::forward_keep_derivative", "Z", Z, "Y", Y);
    const auto kernel = detail::gelu_keep_derivative_kernel<T>();
    detail::for_rows(Z.rows(), Z.cols(), [&](std::int64_t i) { kernel(Z.row(i), Y.row(i), Z.cols()); });
  }

  // The same with both results rounded to bf16 (T = float; a model that keeps its activations
  // in bf16): Y = bf16(gelu(Z)) and D = bf16(gelu'(Z)), bitwise the float form's results
  // rounded, in one pass over Z (left unchanged). Throws ShapeError unless Z, Y and D have one
  // shape.
  void forward_keep_derivative(ConstMatrixView<float> Z, MatrixView<bfloat16> Y,
                               MatrixView<bfloat16> D) const requires std::is_same_v<T, float> {
    constexpr const char* fn = "GELU::forward_keep_derivative";
    if (Y.rows() != Z.rows() || Y.cols() != Z.cols() || D.rows() != Z.rows() || D.cols() != Z.cols())
      throw ShapeError(detail::message(fn, ": Z is ", Z.rows(), "x", Z.cols(), ", Y ", Y.rows(), "x", Y.cols(), ", D ",
                                       D.rows(), "x", D.cols(), "; they must have one shape"));
    const auto kernel = detail::gelu_keep_derivative_bf16_kernel<float>();
    detail::for_rows(Z.rows(), Z.cols(), [&](std::int64_t i) { kernel(Z.row(i), Y.row(i), D.row(i), Z.cols()); });
  }

  // The backward from a derivative D kept in bf16 (the form above): dY = bf16(dX * float(D))
  // element by element, or in float with dX overwritten (dX *= float(D)). dY may be D (in
  // place). Throws ShapeError unless the operands have one shape.
  static void backward(ConstMatrixView<bfloat16> D, ConstMatrixView<float> dX,
                       MatrixView<bfloat16> dY) requires std::is_same_v<T, float> {
    check_derivative_shapes(D, dX.rows(), dX.cols(), dY.rows(), dY.cols());
    const auto kernel = detail::gelu_scale_bf16_kernel<float>();
    detail::for_rows(D.rows(), D.cols(), [&](std::int64_t i) { kernel(D.row(i), dX.row(i), dY.row(i), D.cols()); });
  }
  static void backward(ConstMatrixView<bfloat16> D, MatrixView<float> dX) requires std::is_same_v<T, float> {
    check_derivative_shapes(D, dX.rows(), dX.cols(), dX.rows(), dX.cols());
    const auto kernel = detail::gelu_scale_widened_kernel<float>();
    detail::for_rows(D.rows(), D.cols(), [&](std::int64_t i) { kernel(D.row(i), dX.row(i), D.cols()); });
  }

  // dX = dY * gelu'(X). dX may be dY (element by element, in place); X must not overlap dX.
  // Throws ShapeError unless X, dY and dX have one shape.
  static constexpr bool backward_in_place = true;
  void backward(std::type_identity_t<ConstMatrixView<T>> X, std::type_identity_t<ConstMatrixView<T>> dY,
                std::type_identity_t<MatrixView<T>> dX) const {
    detail::check_same_shape<T>("GELU::backward", "X", X, "dY", dY);
    detail::check_same_shape<T>("GELU::backward", "X", X, "dX", dX);
    const auto kernel = detail::gelu_backward_kernel<T>();
    detail::for_rows(X.rows(), X.cols(), [&](std::int64_t i) { kernel(X.row(i), dY.row(i), dX.row(i), X.cols()); });
  }

private:
  static void check_derivative_shapes(ConstMatrixView<bfloat16> D, std::int64_t xr, std::int64_t xc, std::int64_t yr,
                                      std::int64_t yc) {
    if (xr != D.rows() || xc != D.cols() || yr != D.rows() || yc != D.cols())
      throw ShapeError(detail::message("GELU::backward: D is ", D.rows(), "x", D.cols(), ", dX ", xr, "x", xc, ", dY ",
                                       yr, "x", yc, "; they must have one shape"));
  }
};

}  // namespace sprig
