// sprig/nn/gelu.hpp — GELU<T>, the tanh approximation (Hendrycks & Gimpel; GPT-2, BERT):
//   gelu(x) = x/2 * (1 + tanh(u)),  u = sqrt(2/pi) * (x + 0.044715 x^3)
//   gelu'(x) = (1 + tanh(u))/2 + x/2 * (1 - tanh(u)^2) * sqrt(2/pi) * (1 + 3 * 0.044715 x^2)
// It differs from the erf form x * Phi(x) by at most about 5e-4 (absolute) on the real line.
// Element-wise with xsimd (xsimd::tanh; a scalar std::tanh per element was 2/3 of a 90%-sparse
// 1024-4096-1024 training step, bench/train_step) and OpenMP over rows for large inputs; each
// element's result does not depend on the thread count.
#pragma once

#include <type_traits>

#include <cmath>
#include <cstdint>

#include "../core/concepts.hpp"
#include "../core/matrix.hpp"
#include "../kernels/simd.hpp"
#include "relu.hpp"
#include "rows.hpp"

namespace sprig {

template <Value T>
class GELU {
public:
  using value_type = T;

  static T value(T x) noexcept { return value_of(x); }
  static T derivative(T x) noexcept { return derivative_of(x); }

  void forward(std::type_identity_t<ConstMatrixView<T>> X, std::type_identity_t<MatrixView<T>> Y) const {
    detail::check_same_shape<T>("GELU::forward", "X", X, "Y", Y);
    detail::for_rows(X.rows(), X.cols(), [&](std::int64_t i) {
      const T* x = X.row(i);
      T* y = Y.row(i);
      std::int64_t j = 0;
#if SPRIG_KERNEL_SIMD
      using B = xsimd::batch<T, detail::KernelArch>;
      for (; j + std::int64_t(B::size) <= X.cols(); j += B::size) value_of(B::load_unaligned(x + j)).store_unaligned(y + j);
#endif
      for (; j < X.cols(); ++j) y[j] = value_of(x[j]);
    });
  }

  // dX = dY * gelu'(X). dX may be dY (element by element, in place).
  static constexpr bool backward_in_place = true;
  void backward(std::type_identity_t<ConstMatrixView<T>> X, std::type_identity_t<ConstMatrixView<T>> dY,
                std::type_identity_t<MatrixView<T>> dX) const {
    detail::check_same_shape<T>("GELU::backward", "X", X, "dY", dY);
    detail::check_same_shape<T>("GELU::backward", "X", X, "dX", dX);
    detail::for_rows(X.rows(), X.cols(), [&](std::int64_t i) {
      const T* x = X.row(i);
      const T* d = dY.row(i);
      T* g = dX.row(i);
      std::int64_t j = 0;
#if SPRIG_KERNEL_SIMD
      using B = xsimd::batch<T, detail::KernelArch>;
      for (; j + std::int64_t(B::size) <= X.cols(); j += B::size)
        (B::load_unaligned(d + j) * derivative_of(B::load_unaligned(x + j))).store_unaligned(g + j);
#endif
      for (; j < X.cols(); ++j) g[j] = d[j] * derivative_of(x[j]);
    });
  }

private:
  static T tanh_of(T u) noexcept { return std::tanh(u); }
#if SPRIG_KERNEL_SIMD
  template <class A>
  static xsimd::batch<T, A> tanh_of(xsimd::batch<T, A> u) noexcept {
    return xsimd::tanh(u);
  }
#endif
  // The formulas above, for a scalar or an xsimd batch.
  template <class V>
  static V value_of(V x) noexcept {
    const V u = V(kSqrt2OverPi) * (x + V(kCubic) * x * x * x);
    return V(T(0.5)) * x * (V(T(1)) + tanh_of(u));
  }
  template <class V>
  static V derivative_of(V x) noexcept {
    const V x2 = x * x;
    const V t = tanh_of(V(kSqrt2OverPi) * (x + V(kCubic) * x2 * x));
    return V(T(0.5)) * (V(T(1)) + t) +
           V(T(0.5)) * x * (V(T(1)) - t * t) * V(kSqrt2OverPi) * (V(T(1)) + V(T(3) * kCubic) * x2);
  }
  // Runs fn(row) for every row, threaded when there is enough work to pay for it.

  static constexpr T kSqrt2OverPi = T(0.7978845608028654);
  static constexpr T kCubic = T(0.044715);
};

}  // namespace sprig
