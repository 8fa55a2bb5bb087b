// sprig/nn/gelu.hpp — GELU<T>, the tanh approximation (Hendrycks & Gimpel; GPT-2, BERT):
//   gelu(x) = x/2 * (1 + tanh(u)),  u = sqrt(2/pi) * (x + 0.044715 x^3)
//   gelu'(x) = (1 + tanh(u))/2 + x/2 * (1 - tanh(u)^2) * sqrt(2/pi) * (1 + 3 * 0.044715 x^2)
// It differs from the erf form x * Phi(x) by at most about 5e-4 (absolute) on the real line.
// Element-wise with xsimd (a scalar std::tanh per element made the GELU the larger part of a
// sparse training step), computed through sigmoid(2u) (below), and OpenMP over rows for large
// inputs (rows.hpp). Every pass is O(rows x cols) and allocates nothing; each element's result
// does not depend on the thread count (it may differ in the last ulp between the SIMD body
// and the scalar tail of a row, xsimd::exp against std::exp). The operands are checked for
// shape only: an output that partly overlaps an input is not detected.
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

  // gelu(x) and gelu'(x) of one scalar, as the passes' scalar tail computes them.
  static T value(T x) noexcept { return value_of(x); }
  static T derivative(T x) noexcept { return derivative_of(x); }

  // Y = gelu(X). Y must not overlap X. Throws ShapeError unless X and Y have one shape.
  void forward(std::type_identity_t<ConstMatrixView<T>> X, std::type_identity_t<MatrixView<T>> Y) const {
    detail::check_same_shape<T>("GELU::forward", "X", X, "Y", Y);
    forward_on<detail::KernelArch>(X, Y);
  }

  // The passes on SIMD architecture Arch (operands checked).
  template <class Arch>
  static void forward_on(ConstMatrixView<T> X, MatrixView<T> Y) {
    detail::for_rows(X.rows(), X.cols(), [&](std::int64_t i) {
      const T* x = X.row(i);
      T* y = Y.row(i);
      std::int64_t j = 0;
#if SPRIG_KERNEL_SIMD
      using B = xsimd::batch<T, Arch>;
      for (; j + std::int64_t(B::size) <= X.cols(); j += B::size)
        value_of(B::load_unaligned(x + j)).store_unaligned(y + j);
#endif
      for (; j < X.cols(); ++j) y[j] = value_of(x[j]);
    });
  }

  // Y = gelu(Z), and Z overwritten with gelu'(Z): the forward for a model whose next layer
  // applies this GELU's backward to its dX from the stored derivative (x_activation = gelu,
  // x_derivative = Z; Sequential does it), so no backward pass over the activation is needed.
  // One exp per element serves both. Y is bitwise forward(Z)'s, Z bitwise gelu'(Z) as
  // backward() computes it. Y must not overlap Z. Throws ShapeError unless Z and Y have one
  // shape.
  void forward_keep_derivative(std::type_identity_t<MatrixView<T>> Z, std::type_identity_t<MatrixView<T>> Y) const {
    detail::check_same_shape<T>("GELU::forward_keep_derivative", "Z", Z, "Y", Y);
    forward_keep_derivative_on<detail::KernelArch>(Z, Y);
  }
  template <class Arch>
  static void forward_keep_derivative_on(MatrixView<T> Z, MatrixView<T> Y) {
    detail::for_rows(Z.rows(), Z.cols(), [&](std::int64_t i) {
      T* z = Z.row(i);
      T* y = Y.row(i);
      std::int64_t j = 0;
#if SPRIG_KERNEL_SIMD
      using B = xsimd::batch<T, Arch>;
      for (; j + std::int64_t(B::size) <= Z.cols(); j += B::size) {
        const B x = B::load_unaligned(z + j), e = exp_term(x);
        value_from(x, e).store_unaligned(y + j);
        derivative_from(x, e).store_unaligned(z + j);
      }
#endif
      for (; j < Z.cols(); ++j) {
        const T x = z[j], e = exp_term(x);
        y[j] = value_from(x, e);
        z[j] = derivative_from(x, e);
      }
    });
  }

  // dX = dY * gelu'(X). dX may be dY (element by element, in place); X must not overlap dX.
  // Throws ShapeError unless X, dY and dX have one shape.
  static constexpr bool backward_in_place = true;
  void backward(std::type_identity_t<ConstMatrixView<T>> X, std::type_identity_t<ConstMatrixView<T>> dY,
                std::type_identity_t<MatrixView<T>> dX) const {
    detail::check_same_shape<T>("GELU::backward", "X", X, "dY", dY);
    detail::check_same_shape<T>("GELU::backward", "X", X, "dX", dX);
    backward_on<detail::KernelArch>(X, dY, dX);
  }
  template <class Arch>
  static void backward_on(ConstMatrixView<T> X, ConstMatrixView<T> dY, MatrixView<T> dX) {
    detail::for_rows(X.rows(), X.cols(), [&](std::int64_t i) {
      const T* x = X.row(i);
      const T* d = dY.row(i);
      T* g = dX.row(i);
      std::int64_t j = 0;
#if SPRIG_KERNEL_SIMD
      using B = xsimd::batch<T, Arch>;
      for (; j + std::int64_t(B::size) <= X.cols(); j += B::size)
        (B::load_unaligned(d + j) * derivative_of(B::load_unaligned(x + j))).store_unaligned(g + j);
#endif
      for (; j < X.cols(); ++j) g[j] = d[j] * derivative_of(x[j]);
    });
  }

private:
  static T exp_of(T u) noexcept { return std::exp(u); }
#if SPRIG_KERNEL_SIMD
  template <class A>
  static xsimd::batch<T, A> exp_of(xsimd::batch<T, A> u) noexcept {
    return xsimd::exp(u);
  }
#endif
  // The formulas above through 1 + tanh(u) = 2 s and 1 - tanh(u)^2 = 4 s (1 - s) with
  // s = sigmoid(2u) = 1 / (1 + e), e = exp(-2u), and 1 - s = e s (no cancellation near s = 1):
  // gelu = x s, gelu' = s + 2 x s (e s) u'(x). The same function within a few ulp of the tanh
  // form; one exp and one division are cheaper than xsimd::tanh (docs/design.md, "GELU"). For
  // x -> -inf, e overflows to inf and s, gelu and gelu' go to 0, as they should (e s is then
  // inf * 0: taken as 0 by the select below).
  // e = exp(-2u), shared by the value and the derivative
  template <class V>
  static V exp_term(V x) noexcept {
    const V u = V(kSqrt2OverPi) * (x + V(kCubic) * x * x * x);
    return exp_of(V(T(-2)) * u);
  }
  template <class V>
  static V value_from(V x, V e) noexcept {
    return x / (V(T(1)) + e);
  }
  template <class V>
  static V derivative_from(V x, V e) noexcept {
    const V x2 = x * x;
    const V s = V(T(1)) / (V(T(1)) + e);
    const V one_minus_s = select_finite(e, e * s);
    return s + V(T(2)) * x * s * one_minus_s * V(kSqrt2OverPi) * (V(T(1)) + V(T(3) * kCubic) * x2);
  }
  template <class V>
  static V value_of(V x) noexcept {
    return value_from(x, exp_term(x));
  }
  template <class V>
  static V derivative_of(V x) noexcept {
    return derivative_from(x, exp_term(x));
  }
  // 1 - s: e * s, or 1 where e overflowed to inf (s = 0 there, and inf * 0 is NaN).
  static T select_finite(T e, T es) noexcept { return std::isinf(e) ? T(1) : es; }
#if SPRIG_KERNEL_SIMD
  template <class A>
  static xsimd::batch<T, A> select_finite(xsimd::batch<T, A> e, xsimd::batch<T, A> es) noexcept {
    return xsimd::select(xsimd::isinf(e), xsimd::batch<T, A>(T(1)), es);
  }
#endif

  static constexpr T kSqrt2OverPi = T(0.7978845608028654);
  static constexpr T kCubic = T(0.044715);
};

}  // namespace sprig
