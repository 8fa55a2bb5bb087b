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

#include "../core/concepts.hpp"
#include "../core/matrix.hpp"
#include "../kernels/gelu.hpp"
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
};

}  // namespace sprig
