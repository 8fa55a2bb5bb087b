// sprig/nn/gelu.hpp — GELU<T>, the tanh approximation (Hendrycks & Gimpel; GPT-2, BERT):
//   gelu(x) = x/2 * (1 + tanh(u)),  u = sqrt(2/pi) * (x + 0.044715 x^3)
//   gelu'(x) = (1 + tanh(u))/2 + x/2 * (1 - tanh(u)^2) * sqrt(2/pi) * (1 + 3 * 0.044715 x^2)
// It differs from the erf form x * Phi(x) by at most about 5e-4 (absolute) on the real line.
#pragma once

#include <type_traits>

#include <cmath>
#include <cstdint>

#include "../core/concepts.hpp"
#include "../core/matrix.hpp"
#include "relu.hpp"

namespace sprig {

template <Value T>
class GELU {
public:
  using value_type = T;

  static T value(T x) noexcept {
    const T u = kSqrt2OverPi * (x + kCubic * x * x * x);
    return T(0.5) * x * (T(1) + std::tanh(u));
  }
  static T derivative(T x) noexcept {
    const T x2 = x * x;
    const T t = std::tanh(kSqrt2OverPi * (x + kCubic * x2 * x));
    return T(0.5) * (T(1) + t) + T(0.5) * x * (T(1) - t * t) * kSqrt2OverPi * (T(1) + T(3) * kCubic * x2);
  }

  void forward(std::type_identity_t<ConstMatrixView<T>> X, std::type_identity_t<MatrixView<T>> Y) const {
    detail::check_same_shape<T>("GELU::forward", "X", X, "Y", Y);
    for (std::int64_t i = 0; i < X.rows(); ++i) {
      const T* x = X.row(i);
      T* y = Y.row(i);
      for (std::int64_t j = 0; j < X.cols(); ++j) y[j] = value(x[j]);
    }
  }

  // dX = dY * gelu'(X).
  void backward(std::type_identity_t<ConstMatrixView<T>> X, std::type_identity_t<ConstMatrixView<T>> dY,
                std::type_identity_t<MatrixView<T>> dX) const {
    detail::check_same_shape<T>("GELU::backward", "X", X, "dY", dY);
    detail::check_same_shape<T>("GELU::backward", "X", X, "dX", dX);
    for (std::int64_t i = 0; i < X.rows(); ++i) {
      const T* x = X.row(i);
      const T* d = dY.row(i);
      T* g = dX.row(i);
      for (std::int64_t j = 0; j < X.cols(); ++j) g[j] = d[j] * derivative(x[j]);
    }
  }

private:
  static constexpr T kSqrt2OverPi = T(0.7978845608028654);
  static constexpr T kCubic = T(0.044715);
};

}  // namespace sprig
