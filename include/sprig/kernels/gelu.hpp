// sprig/kernels/gelu.hpp — the tanh-form GELU's row passes (nn/gelu.hpp states the layer),
// vectorised with xsimd and, in a dispatching build, run on the dispatch target (dispatch.hpp):
//
//   gelu_forward            y[j] = gelu(x[j])                          (y must not overlap x)
//   gelu_keep_derivative    y[j] = gelu(z[j]), then z[j] = gelu'(z[j])  (one exp for both)
//   gelu_backward           dx[j] = dy[j] * gelu'(x[j])                (dx may be dy)
//   gelu_keep_derivative_bf16  y[j] = bf16(gelu(z[j])), d[j] = bf16(gelu'(z[j])) (z unchanged)
//   gelu_scale_bf16         dy[j] = bf16(dx[j] * float(d[j]))          (dy may be d)
//   gelu_scale_widened      dx[j] = dx[j] * float(d[j])
//
// GeluMath<T> holds the formulas, for a scalar or a register:
//   gelu(x) = x/2 (1 + tanh(u)),  u = sqrt(2/pi) (x + 0.044715 x^3)
//   gelu'(x) = (1 + tanh(u))/2 + x/2 (1 - tanh(u)^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2)
// computed through s = sigmoid(2u) = 1 / (1 + e), e = exp(-2u): 1 + tanh(u) = 2 s and
// 1 - tanh(u)^2 = 4 s (1 - s) with 1 - s = e s (no cancellation near s = 1), so gelu = x s and
// gelu' = s + 2 x s (e s) u'(x). The same function within a few ulp of the tanh form; one exp
// and one division are cheaper than xsimd::tanh (docs/design.md, "GELU"). For x -> -inf, e
// overflows to inf and s, gelu and gelu' go to 0 (e s is then inf * 0: taken as 0).
// The bf16 forms (a model that keeps gelu' in bf16) compute in float for T = float (for
// double: the same in double, rounded to bf16 once) and round as core/bfloat16.hpp does:
// bitwise the float forms' results rounded. Each element's result depends on its value alone, except that the scalar tail of a row
// (the last n mod register-width elements) uses std::exp and may differ from the register
// body in the last ulp. Preconditions (not checked): the arrays hold n elements. O(n), one
// thread, no allocation.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <type_traits>

#include "../core/bfloat16.hpp"
#include "../core/concepts.hpp"
#include "bfloat16_convert.hpp"
#include "dispatch.hpp"
#include "simd.hpp"

namespace sprig::detail {

template <Value T>
struct GeluMath {
  static T exp_of(T u) noexcept { return std::exp(u); }
#if SPRIG_KERNEL_SIMD
  template <class A>
  static xsimd::batch<T, A> exp_of(xsimd::batch<T, A> u) noexcept {
    return xsimd::exp(u);
  }
#endif
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

template <class A, class T>
void gelu_forward_on(const T* x, T* y, std::int64_t n) {
  using M = GeluMath<T>;
  std::int64_t j = 0;
#if SPRIG_KERNEL_SIMD
  if constexpr (kSimdFor<T, A>) {
    using B = xsimd::batch<T, A>;
    for (; j + std::int64_t(B::size) <= n; j += B::size) M::value_of(B::load_unaligned(x + j)).store_unaligned(y + j);
  }
#endif
  for (; j < n; ++j) y[j] = M::value_of(x[j]);
}

template <class A, class T>
void gelu_keep_derivative_on(T* z, T* y, std::int64_t n) {
  using M = GeluMath<T>;
  std::int64_t j = 0;
#if SPRIG_KERNEL_SIMD
  if constexpr (kSimdFor<T, A>) {
    using B = xsimd::batch<T, A>;
    for (; j + std::int64_t(B::size) <= n; j += B::size) {
      const B x = B::load_unaligned(z + j), e = M::exp_term(x);
      M::value_from(x, e).store_unaligned(y + j);
      M::derivative_from(x, e).store_unaligned(z + j);
    }
  }
#endif
  for (; j < n; ++j) {
    const T x = z[j], e = M::exp_term(x);
    y[j] = M::value_from(x, e);
    z[j] = M::derivative_from(x, e);
  }
}

template <class A, class T>
void gelu_backward_on(const T* x, const T* dy, T* dx, std::int64_t n) {
  using M = GeluMath<T>;
  std::int64_t j = 0;
#if SPRIG_KERNEL_SIMD
  if constexpr (kSimdFor<T, A>) {
    using B = xsimd::batch<T, A>;
    for (; j + std::int64_t(B::size) <= n; j += B::size)
      (B::load_unaligned(dy + j) * M::derivative_of(B::load_unaligned(x + j))).store_unaligned(dx + j);
  }
#endif
  for (; j < n; ++j) dx[j] = dy[j] * M::derivative_of(x[j]);
}

// In chunks of kGeluChunk through two float buffers on the stack, each rounded by one
// to_bfloat16 pass: rounding in the exp loop's registers measured slower.
inline constexpr std::int64_t kGeluChunk = 256;

template <class A, class T>
void gelu_keep_derivative_bf16_on(const T* z, bfloat16* y, bfloat16* d, std::int64_t n) {
  using M = GeluMath<T>;
  std::int64_t j = 0;
#if SPRIG_KERNEL_SIMD
  if constexpr (kSimdFor<T, A> && std::is_same_v<T, float>) {
    using B = xsimd::batch<T, A>;
    static_assert(kGeluChunk % B::size == 0);
    alignas(64) float yc[kGeluChunk], dc[kGeluChunk];
    while (j + std::int64_t(B::size) <= n) {
      const std::int64_t len = std::min(kGeluChunk, (n - j) / std::int64_t(B::size) * std::int64_t(B::size));
      for (std::int64_t k = 0; k < len; k += B::size) {
        const B x = B::load_unaligned(z + j + k), e = M::exp_term(x);
        M::value_from(x, e).store_aligned(yc + k);
        M::derivative_from(x, e).store_aligned(dc + k);
      }
      const auto m = static_cast<std::size_t>(len);
      convert_array<A>("gelu_keep_derivative_bf16", std::span<const float>(yc, m), std::span<bfloat16>(y + j, m));
      convert_array<A>("gelu_keep_derivative_bf16", std::span<const float>(dc, m), std::span<bfloat16>(d + j, m));
      j += len;
    }
  }
#endif
  for (; j < n; ++j) {
    const T x = z[j], e = M::exp_term(x);
    y[j] = bfloat16(static_cast<float>(M::value_from(x, e)));
    d[j] = bfloat16(static_cast<float>(M::derivative_from(x, e)));
  }
}

template <class A, class T>
void gelu_scale_bf16_on(const bfloat16* d, const T* dx, bfloat16* dy, std::int64_t n) {
  std::int64_t j = 0;
#if SPRIG_KERNEL_SIMD
  if constexpr (kSimdFor<T, A> && std::is_same_v<T, float>) {
    using B = xsimd::batch<T, A>;
    for (; j + std::int64_t(B::size) <= n; j += B::size)
      store_bfloat16<A>(dy + j, B::load_unaligned(dx + j) * load_bfloat16<A>(d + j));
  }
#endif
  for (; j < n; ++j) dy[j] = bfloat16(static_cast<float>(dx[j] * static_cast<T>(static_cast<float>(d[j]))));
}

template <class A, class T>
void gelu_scale_widened_on(const bfloat16* d, T* dx, std::int64_t n) {
  std::int64_t j = 0;
#if SPRIG_KERNEL_SIMD
  if constexpr (kSimdFor<T, A> && std::is_same_v<T, float>) {
    using B = xsimd::batch<T, A>;
    for (; j + std::int64_t(B::size) <= n; j += B::size)
      (B::load_unaligned(dx + j) * load_bfloat16<A>(d + j)).store_unaligned(dx + j);
  }
#endif
  for (; j < n; ++j) dx[j] = dx[j] * static_cast<T>(static_cast<float>(d[j]));
}

}  // namespace sprig::detail
