// sprig/kernels/elementwise.hpp — the element-wise and column passes of the dense layers,
// vectorised with xsimd and, in a dispatching build, run on the dispatch target (dispatch.hpp:
// SPRIG_DETAIL_DENSE_KERNELS):
//
//   layer_norm_forward    over columns [0, n) of a feature-major X [d x n] (row strides given):
//                         mean[j] = (1/d) sum_i X[i, j], var[j] = (1/d) sum_i (X[i, j] - mean[j])^2
//                         (both sums in double), rstd[j] = 1 / sqrt(var[j] + eps) (in double),
//                         both stored in T, and Y[i, j] = (X[i, j] - mean[j]) rstd[j] gain[i] + bias[i]
//   layer_norm_backward   dX[i, j] = rstd[j] (g[i] dY[i, j] - m1[j] - xhat[i, j] m2[j]) with
//                         xhat = (X - mean) rstd in T, m1[j] = (1/d) sum_i g[i] dY[i, j] and
//                         m2[j] = (1/d) sum_i g[i] dY[i, j] xhat[i, j] (sums in double, rounded to T)
//   layer_norm_dy_xhat    out[j] = dY[j] ((x[j] - mean[j]) rstd[j]), one row (dgain's terms)
//   add_arrays            y[j] = a[j] + b[j], one row (y may be a or b)
//   sum_squares           the sum of double(p[j])^2 over j in [0, n), in double
//   scale_array           p[j] = p[j] * c (clipping's scale)
//
// nn/layer_norm.hpp and nn/residual.hpp state the layers; these are their inner loops.
// Layout: the LayerNorm kernels walk strips of columns (a few registers wide) down all d rows,
// with one double accumulator register per column lane: each column's sums run over i = 0..d-1
// in order, as a scalar loop would, so the vectorisation does not change a sum's order. Float
// registers are widened to two double registers exactly (cvtps2pd, fcvtl).
// Determinism: every element (column) goes through the same register arithmetic wherever it
// lies; a last partial register is computed in a register too (copied in and out through a
// zero-padded buffer), so a result's bits do not depend on n or on where a range starts.
// Rounding against a plain scalar loop: the variance sum and the dX and Y formulas use fused
// multiply-adds where the architecture has them (xsimd::fma / fnma; emulated by a multiply and an
// add on SSE2); products of two floats widened to double are exact, so m2's sum is unchanged.
// sum_squares keeps 4 T registers' worth of double accumulators (lane k of register r sums
// the elements j = k (mod U) of every 4U-element stretch r); the last partial stretch goes
// through zero-padded registers (adding +0 changes no sum); then the accumulators are added
// pairwise and the lanes in xsimd's reduce order. So a sum depends on n and on the register
// width, not on where the array lies in memory. Squares of floats widened to double are exact.
// Preconditions (not checked): arrays hold what the formulas index, outputs do not overlap
// inputs (add_arrays: y may be exactly a or b), d >= 1. Complexity O(d n), one thread, no
// allocation.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "../core/concepts.hpp"
#include "dispatch.hpp"
#include "simd.hpp"

namespace sprig::detail {

// One column block of LayerNorm's forward: X, Y [d x n] with row strides; gain, bias [d];
// mean, rstd [n] written.
template <Value T>
struct LayerNormForwardArgs {
  const T* x;
  std::int64_t ldx;
  const T* gain;
  const T* bias;
  T* y;
  std::int64_t ldy;
  T* mean;
  T* rstd;
  std::int64_t d, n;
  double eps;
};

// One column block of LayerNorm's backward: X, dY, dX [d x n] with row strides; gain [d];
// mean, rstd [n] (the forward's).
template <Value T>
struct LayerNormBackwardArgs {
  const T* x;
  std::int64_t ldx;
  const T* dy;
  std::int64_t lddy;
  const T* gain;
  const T* mean;
  const T* rstd;
  T* dx;
  std::int64_t lddx;
  std::int64_t d, n;
};

#if SPRIG_KERNEL_SIMD
// Loads `count` (< a register) elements into a zero-padded register; stores `count` lanes.
template <class A, class T>
SPRIG_ALWAYS_INLINE xsimd::batch<T, A> load_part(const T* p, std::int64_t count) noexcept {
  alignas(64) T buf[xsimd::batch<T, A>::size] = {};
  std::copy(p, p + count, buf);
  return xsimd::batch<T, A>::load_aligned(buf);
}
template <class A, class T>
SPRIG_ALWAYS_INLINE void store_part(const xsimd::batch<T, A>& v, T* p, std::int64_t count) noexcept {
  alignas(64) T buf[xsimd::batch<T, A>::size];
  v.store_aligned(buf);
  std::copy(buf, buf + count, p);
}

// A register of T as P = size / double size double registers, exactly (lanes in order).
template <class A, class T>
SPRIG_ALWAYS_INLINE void to_double(const xsimd::batch<T, A>& v, xsimd::batch<double, A>* out) noexcept {
  using D = xsimd::batch<double, A>;
  if constexpr (std::is_same_v<T, double>) {
    out[0] = v;
  } else {
#  if XSIMD_WITH_AVX512F
    if constexpr (std::is_base_of_v<xsimd::avx512f, A>) {
      const __m512 r = v;
      out[0] = D(_mm512_cvtps_pd(_mm512_castps512_ps256(r)));
      out[1] = D(_mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(r), 1))));
      return;
    }
#  endif
#  if XSIMD_WITH_AVX
    if constexpr (std::is_base_of_v<xsimd::avx, A>) {
      const __m256 r = v;
      out[0] = D(_mm256_cvtps_pd(_mm256_castps256_ps128(r)));
      out[1] = D(_mm256_cvtps_pd(_mm256_extractf128_ps(r, 1)));
      return;
    }
#  endif
#  if XSIMD_WITH_SSE2
    if constexpr (std::is_base_of_v<xsimd::sse2, A>) {
      const __m128 r = v;
      out[0] = D(_mm_cvtps_pd(r));
      out[1] = D(_mm_cvtps_pd(_mm_movehl_ps(r, r)));
      return;
    }
#  endif
#  if XSIMD_WITH_NEON64
    if constexpr (std::is_base_of_v<xsimd::neon64, A>) {
      const float32x4_t r = v;
      out[0] = D(vcvt_f64_f32(vget_low_f32(r)));
      out[1] = D(vcvt_high_f64_f32(r));
      return;
    }
#  endif
    constexpr std::size_t U = xsimd::batch<T, A>::size;
    alignas(64) T f[U];
    alignas(64) double w[U];
    v.store_aligned(f);
    for (std::size_t k = 0; k < U; ++k) w[k] = static_cast<double>(f[k]);
    for (std::size_t p = 0; p < U / D::size; ++p) out[p] = D::load_aligned(w + p * D::size);
  }
}

// The LayerNorm kernels' geometry on A for T: U lanes of T per register, P double registers per
// T register, R T registers per strip (R * P double accumulators: 8 with 32 vector registers,
// 4 with 16, so accumulators, means and temporaries stay in registers).
template <class A, class T>
struct ColumnStrip {
  static constexpr std::int64_t U = xsimd::batch<T, A>::size;
  static constexpr int P = static_cast<int>(U / xsimd::batch<double, A>::size);
  static constexpr int R = std::max(1, (kVectorRegistersOf<A> / 4) / P);
};

// A strip's register r at p: whole, or the last one's `last` lanes when Partial.
template <class A, class T, int R, bool Partial>
SPRIG_ALWAYS_INLINE xsimd::batch<T, A> strip_load(const T* p, int r, std::int64_t last) noexcept {
  if constexpr (Partial)
    if (r == R - 1) return load_part<A>(p, last);
  return xsimd::batch<T, A>::load_unaligned(p);
}
template <class A, class T, int R, bool Partial>
SPRIG_ALWAYS_INLINE void strip_store(const xsimd::batch<T, A>& v, T* p, int r, std::int64_t last) noexcept {
  if constexpr (Partial)
    if (r == R - 1) return store_part<A>(v, p, last);
  v.store_unaligned(p);
}

// Columns [c, c + (R - 1) U + last) of LayerNorm's forward (the three passes on one strip).
template <class A, class T, int R, bool Partial>
SPRIG_ALWAYS_INLINE void layer_norm_forward_strip(const LayerNormForwardArgs<T>& a, std::int64_t c, std::int64_t last) {
  using B = xsimd::batch<T, A>;
  using D = xsimd::batch<double, A>;
  constexpr std::int64_t U = ColumnStrip<A, T>::U;
  constexpr int P = ColumnStrip<A, T>::P;
  D s[R * P], q[R * P], w[P];
  SPRIG_UNROLL for (int k = 0; k < R * P; ++k) s[k] = q[k] = D(0.0);
  for (std::int64_t i = 0; i < a.d; ++i) {
    const T* x = a.x + i * a.ldx + c;
    SPRIG_UNROLL for (int r = 0; r < R; ++r) {
      to_double<A>(strip_load<A, T, R, Partial>(x + r * U, r, last), w);
      SPRIG_UNROLL for (int p = 0; p < P; ++p) s[r * P + p] += w[p];
    }
  }
  const D dd(static_cast<double>(a.d)), inv_d(1.0 / static_cast<double>(a.d)), eps(a.eps), one(1.0);
  SPRIG_UNROLL for (int k = 0; k < R * P; ++k) s[k] /= dd;  // a division: never contracted into w - s
  for (std::int64_t i = 0; i < a.d; ++i) {
    const T* x = a.x + i * a.ldx + c;
    SPRIG_UNROLL for (int r = 0; r < R; ++r) {
      to_double<A>(strip_load<A, T, R, Partial>(x + r * U, r, last), w);
      SPRIG_UNROLL for (int p = 0; p < P; ++p) {
        const D dev = w[p] - s[r * P + p];
        q[r * P + p] = xsimd::fma(dev, dev, q[r * P + p]);
      }
    }
  }
  alignas(64) double md[R * U], rd[R * U];
  alignas(64) T mt[R * U], rt[R * U];
  SPRIG_UNROLL for (int k = 0; k < R * P; ++k) {
    s[k].store_aligned(md + k * D::size);
    (one / xsimd::sqrt(xsimd::fma(q[k], inv_d, eps))).store_aligned(rd + k * D::size);
  }
  for (std::int64_t k = 0; k < R * U; ++k) {
    mt[k] = static_cast<T>(md[k]);
    rt[k] = static_cast<T>(rd[k]);
  }
  const std::int64_t width = (R - 1) * U + last;
  std::copy(mt, mt + width, a.mean + c);
  std::copy(rt, rt + width, a.rstd + c);
  B mb[R], rb[R];
  SPRIG_UNROLL for (int r = 0; r < R; ++r) {
    mb[r] = B::load_aligned(mt + r * U);
    rb[r] = B::load_aligned(rt + r * U);
  }
  for (std::int64_t i = 0; i < a.d; ++i) {
    const T* x = a.x + i * a.ldx + c;
    T* y = a.y + i * a.ldy + c;
    const B g(a.gain[i]), b(a.bias[i]);
    SPRIG_UNROLL for (int r = 0; r < R; ++r) {
      const B v = strip_load<A, T, R, Partial>(x + r * U, r, last);
      strip_store<A, T, R, Partial>(xsimd::fma((v - mb[r]) * rb[r], g, b), y + r * U, r, last);
    }
  }
}

// Columns [c, c + (R - 1) U + last) of LayerNorm's backward (two passes on one strip).
template <class A, class T, int R, bool Partial>
SPRIG_ALWAYS_INLINE void layer_norm_backward_strip(const LayerNormBackwardArgs<T>& a, std::int64_t c,
                                                   std::int64_t last) {
  using B = xsimd::batch<T, A>;
  using D = xsimd::batch<double, A>;
  constexpr std::int64_t U = ColumnStrip<A, T>::U;
  constexpr int P = ColumnStrip<A, T>::P;
  B mb[R], rb[R];
  SPRIG_UNROLL for (int r = 0; r < R; ++r) {
    mb[r] = strip_load<A, T, R, Partial>(a.mean + c + r * U, r, last);
    rb[r] = strip_load<A, T, R, Partial>(a.rstd + c + r * U, r, last);
  }
  D s1[R * P], s2[R * P], gw[P], xw[P];
  SPRIG_UNROLL for (int k = 0; k < R * P; ++k) s1[k] = s2[k] = D(0.0);
  for (std::int64_t i = 0; i < a.d; ++i) {
    const T* x = a.x + i * a.ldx + c;
    const T* dy = a.dy + i * a.lddy + c;
    const B g(a.gain[i]);
    SPRIG_UNROLL for (int r = 0; r < R; ++r) {
      const B xh = (strip_load<A, T, R, Partial>(x + r * U, r, last) - mb[r]) * rb[r];
      to_double<A>(g * strip_load<A, T, R, Partial>(dy + r * U, r, last), gw);
      to_double<A>(xh, xw);
      SPRIG_UNROLL for (int p = 0; p < P; ++p) {
        s1[r * P + p] += gw[p];
        s2[r * P + p] = xsimd::fma(gw[p], xw[p], s2[r * P + p]);
      }
    }
  }
  const D dd(static_cast<double>(a.d));
  alignas(64) double d1[R * U], d2[R * U];
  alignas(64) T t1[R * U], t2[R * U];
  SPRIG_UNROLL for (int k = 0; k < R * P; ++k) {
    (s1[k] / dd).store_aligned(d1 + k * D::size);
    (s2[k] / dd).store_aligned(d2 + k * D::size);
  }
  for (std::int64_t k = 0; k < R * U; ++k) {
    t1[k] = static_cast<T>(d1[k]);
    t2[k] = static_cast<T>(d2[k]);
  }
  B m1[R], m2[R];
  SPRIG_UNROLL for (int r = 0; r < R; ++r) {
    m1[r] = B::load_aligned(t1 + r * U);
    m2[r] = B::load_aligned(t2 + r * U);
  }
  for (std::int64_t i = 0; i < a.d; ++i) {
    const T* x = a.x + i * a.ldx + c;
    const T* dy = a.dy + i * a.lddy + c;
    T* dx = a.dx + i * a.lddx + c;
    const B g(a.gain[i]);
    SPRIG_UNROLL for (int r = 0; r < R; ++r) {
      const B xh = (strip_load<A, T, R, Partial>(x + r * U, r, last) - mb[r]) * rb[r];
      const B gd = g * strip_load<A, T, R, Partial>(dy + r * U, r, last);
      strip_store<A, T, R, Partial>(rb[r] * xsimd::fnma(xh, m2[r], gd - m1[r]), dx + r * U, r, last);
    }
  }
}

// Runs strip<R>(c, U) over whole strips, strip<1> over the whole registers left, and
// strip<1, partial> over the last partial register.
template <class A, class T, class Whole, class One, class Tail>
SPRIG_ALWAYS_INLINE void over_strips(std::int64_t n, Whole&& whole, One&& one, Tail&& tail) {
  constexpr std::int64_t U = ColumnStrip<A, T>::U, W = ColumnStrip<A, T>::R * U;
  std::int64_t c = 0;
  for (; c + W <= n; c += W) whole(c);
  for (; c + U <= n; c += U) one(c);
  if (c < n) tail(c, n - c);
}
#endif

template <class A, class T>
void layer_norm_forward_on(const LayerNormForwardArgs<T>& a) {
#if SPRIG_KERNEL_SIMD
  if constexpr (kSimdFor<T, A> && kSimdFor<double, A>) {
    constexpr int R = ColumnStrip<A, T>::R;
    constexpr std::int64_t U = ColumnStrip<A, T>::U;
    over_strips<A, T>(
        a.n, [&](std::int64_t c) { layer_norm_forward_strip<A, T, R, false>(a, c, U); },
        [&](std::int64_t c) { layer_norm_forward_strip<A, T, 1, false>(a, c, U); },
        [&](std::int64_t c, std::int64_t last) { layer_norm_forward_strip<A, T, 1, true>(a, c, last); });
    return;
  }
#endif
  const double inv_d = 1.0 / static_cast<double>(a.d);
  for (std::int64_t j = 0; j < a.n; ++j) {
    double s = 0.0, q = 0.0;
    for (std::int64_t i = 0; i < a.d; ++i) s += static_cast<double>(a.x[i * a.ldx + j]);
    s /= static_cast<double>(a.d);
    for (std::int64_t i = 0; i < a.d; ++i) {
      const double dev = static_cast<double>(a.x[i * a.ldx + j]) - s;
      q += dev * dev;
    }
    const T m = static_cast<T>(s), r = static_cast<T>(1.0 / std::sqrt(q * inv_d + a.eps));
    a.mean[j] = m;
    a.rstd[j] = r;
    for (std::int64_t i = 0; i < a.d; ++i) a.y[i * a.ldy + j] = (a.x[i * a.ldx + j] - m) * r * a.gain[i] + a.bias[i];
  }
}

template <class A, class T>
void layer_norm_backward_on(const LayerNormBackwardArgs<T>& a) {
#if SPRIG_KERNEL_SIMD
  if constexpr (kSimdFor<T, A> && kSimdFor<double, A>) {
    constexpr int R = ColumnStrip<A, T>::R;
    constexpr std::int64_t U = ColumnStrip<A, T>::U;
    over_strips<A, T>(
        a.n, [&](std::int64_t c) { layer_norm_backward_strip<A, T, R, false>(a, c, U); },
        [&](std::int64_t c) { layer_norm_backward_strip<A, T, 1, false>(a, c, U); },
        [&](std::int64_t c, std::int64_t last) { layer_norm_backward_strip<A, T, 1, true>(a, c, last); });
    return;
  }
#endif
  for (std::int64_t j = 0; j < a.n; ++j) {
    const T mu = a.mean[j], rs = a.rstd[j];
    double s1 = 0.0, s2 = 0.0;
    for (std::int64_t i = 0; i < a.d; ++i) {
      const T gd = a.gain[i] * a.dy[i * a.lddy + j], xh = (a.x[i * a.ldx + j] - mu) * rs;
      s1 += static_cast<double>(gd);
      s2 += static_cast<double>(gd) * static_cast<double>(xh);
    }
    const T m1 = static_cast<T>(s1 / static_cast<double>(a.d)), m2 = static_cast<T>(s2 / static_cast<double>(a.d));
    for (std::int64_t i = 0; i < a.d; ++i) {
      const T xh = (a.x[i * a.ldx + j] - mu) * rs;
      a.dx[i * a.lddx + j] = rs * (a.gain[i] * a.dy[i * a.lddy + j] - m1 - xh * m2);
    }
  }
}

template <class A, class T>
void layer_norm_dy_xhat_on(const T* x, const T* dy, const T* mean, const T* rstd, T* out, std::int64_t n) {
  std::int64_t j = 0;
#if SPRIG_KERNEL_SIMD
  if constexpr (kSimdFor<T, A>) {
    using B = xsimd::batch<T, A>;
    const auto term = [](B xv, B d, B m, B r) SPRIG_ALWAYS_INLINE_LAMBDA { return d * ((xv - m) * r); };
    for (; j + std::int64_t(B::size) <= n; j += B::size)
      term(B::load_unaligned(x + j), B::load_unaligned(dy + j), B::load_unaligned(mean + j),
           B::load_unaligned(rstd + j))
          .store_unaligned(out + j);
    if (j < n)
      store_part<A>(term(load_part<A>(x + j, n - j), load_part<A>(dy + j, n - j), load_part<A>(mean + j, n - j),
                         load_part<A>(rstd + j, n - j)),
                    out + j, n - j);
    return;
  }
#endif
  for (; j < n; ++j) out[j] = dy[j] * ((x[j] - mean[j]) * rstd[j]);
}

template <class A, class T>
void add_arrays_on(const T* a, const T* b, T* y, std::int64_t n) {
  std::int64_t j = 0;
#if SPRIG_KERNEL_SIMD
  if constexpr (kSimdFor<T, A>) {
    using B = xsimd::batch<T, A>;
    for (; j + std::int64_t(B::size) <= n; j += B::size)
      (B::load_unaligned(a + j) + B::load_unaligned(b + j)).store_unaligned(y + j);
    if (j < n) store_part<A>(load_part<A>(a + j, n - j) + load_part<A>(b + j, n - j), y + j, n - j);
    return;
  }
#endif
  for (; j < n; ++j) y[j] = a[j] + b[j];
}

template <class A, class T>
double sum_squares_on(const T* p, std::int64_t n) {
#if SPRIG_KERNEL_SIMD
  if constexpr (kSimdFor<T, A> && kSimdFor<double, A>) {
    using B = xsimd::batch<T, A>;
    using D = xsimd::batch<double, A>;
    constexpr std::int64_t U = B::size;
    constexpr int P = static_cast<int>(U / D::size), R = 4;
    // every loop over the accumulators unrolled, so they stay in registers (indexed by a
    // runtime r they lived on the stack, each multiply-add a store-forwarding round trip)
    D acc[R * P];
    SPRIG_UNROLL for (int a = 0; a < R * P; ++a) acc[a] = D(0.0);
    const auto add = [&](const B& v, int r) SPRIG_ALWAYS_INLINE_LAMBDA {
      D w[P];
      to_double<A>(v, w);
      SPRIG_UNROLL for (int q = 0; q < P; ++q) acc[r * P + q] = xsimd::fma(w[q], w[q], acc[r * P + q]);
    };
    std::int64_t j = 0;
    for (; j + R * U <= n; j += R * U) {
      SPRIG_UNROLL for (int r = 0; r < R; ++r) add(B::load_unaligned(p + j + r * U), r);
    }
    SPRIG_UNROLL for (int r = 0; r < R; ++r) {  // the tail: fewer than R registers
      if (j < n) add(load_part<A>(p + j, std::min(U, n - j)), r);
      j += U;
    }
    SPRIG_UNROLL for (int w = R * P / 2; w >= 1; w /= 2) {
      SPRIG_UNROLL for (int q = 0; q < w; ++q) acc[q] = acc[q] + acc[q + w];
    }
    return reduce_add(acc[0]);
  }
#endif
  double a0 = 0.0, a1 = 0.0, a2 = 0.0, a3 = 0.0;
  std::int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    const double g0 = p[i], g1 = p[i + 1], g2 = p[i + 2], g3 = p[i + 3];
    a0 += g0 * g0;
    a1 += g1 * g1;
    a2 += g2 * g2;
    a3 += g3 * g3;
  }
  for (; i < n; ++i) {
    const double g = p[i];
    a0 += g * g;
  }
  return (a0 + a1) + (a2 + a3);
}

template <class A, class T>
void scale_array_on(T* p, T c, std::int64_t n) {
  std::int64_t j = 0;
#if SPRIG_KERNEL_SIMD
  if constexpr (kSimdFor<T, A>) {
    using B = xsimd::batch<T, A>;
    const B cv(c);
    for (; j + std::int64_t(B::size) <= n; j += B::size) (B::load_unaligned(p + j) * cv).store_unaligned(p + j);
  }
#endif
  for (; j < n; ++j) p[j] *= c;
}

}  // namespace sprig::detail
