// sprig/kernels/optimizer_update.hpp — the element-wise updates of AdamW and SGD over one
// contiguous range of a parameter, vectorised with xsimd and, in a dispatching build, run on
// the dispatch target (dispatch.hpp: SPRIG_DETAIL_DENSE_KERNELS).
//
//   adamw_update   m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;
//                  w = w * shrink - lr (m c1) / (sqrt(v c2) + eps)     (c1, c2 the corrections)
//   adamw_counted_update   the same with per-slot corrections c1[n], c2[n], where the slot's
//                  count n becomes 1 for a slot whose m and v are both exactly 0, else
//                  min(n + 1, top), and is stored back
//   zero_moments   whether some slot has m and v both exactly 0 (either sign): AdamW's test for
//                  a slot that needs a count of its own
//   sgd_update     g' = g + wd w, then plain (w -= lr g'), momentum (b = mu b + g';
//                  w -= lr b) or Nesterov (b = mu b + g'; w -= lr (g' + mu b))
//
// optim/adamw.hpp and optim/sgd.hpp state the algorithms; these are their inner loops.
// Determinism: every element goes through the same register arithmetic wherever it lies in
// the range: the last partial register is computed in a register too (copied in and out), so
// an element's bits do not depend on how the caller splits the parameter into ranges (thread
// chunks, rows). Preconditions (not checked): the arrays hold n elements and do not overlap;
// counts are whole numbers in [0, top] and c1, c2 have top + 1 entries. O(n), one thread.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "../core/concepts.hpp"
#include "dispatch.hpp"
#include "simd.hpp"

namespace sprig::detail {

// AdamW's per-step constants (options in T, lr's decay factor folded into shrink).
template <Value T>
struct AdamWStep {
  T lr, beta1, beta2, eps, shrink;
};

// SGD's variants and per-step constants.
enum class SGDKind : std::uint8_t { plain, momentum, nesterov };
template <Value T>
struct SGDStep {
  T lr, momentum, weight_decay;
  SGDKind kind;
};

#if SPRIG_KERNEL_SIMD
// Runs step(p) over [0, n) in registers of Batch<T, A>::size lanes: whole registers
// from the arrays, then the remainder through a register-sized copy (step reads and writes
// through the pointers it is given, so a tail call gets pointers into local buffers).
template <class A, class T, int Arrays, class Step>
SPRIG_ALWAYS_INLINE void in_registers(std::int64_t n, T* const (&arrays)[Arrays], Step&& step) {
  constexpr auto N = static_cast<std::int64_t>(xsimd::batch<T, A>::size);
  std::int64_t i = 0;
  for (; i + N <= n; i += N) {
    T* at[Arrays];
    for (int a = 0; a < Arrays; ++a) at[a] = arrays[a] + i;
    step(at);
  }
  if (i == n) return;
  alignas(64) T tail[Arrays][N] = {};
  T* at[Arrays];
  for (int a = 0; a < Arrays; ++a) {
    std::copy(arrays[a] + i, arrays[a] + n, tail[a]);
    at[a] = tail[a];
  }
  step(at);
  for (int a = 0; a < Arrays; ++a) std::copy(tail[a], tail[a] + (n - i), arrays[a] + i);
}
#endif

// AdamW's constants in V (T, or a register of T), and one element's (or register's) update:
// the one expression both AdamW kernels and their scalar paths run.
template <class V>
struct AdamWConstants {
  V beta1, beta2, one_minus_beta1, one_minus_beta2, lr, eps, shrink;
  template <class T>
  explicit AdamWConstants(const AdamWStep<T>& k)
      : beta1(k.beta1),
        beta2(k.beta2),
        one_minus_beta1(T(1) - k.beta1),
        one_minus_beta2(T(1) - k.beta2),
        lr(k.lr),
        eps(k.eps),
        shrink(k.shrink) {}
};
template <class V>
SPRIG_ALWAYS_INLINE void adamw_element(const AdamWConstants<V>& k, V g, V c1, V c2, V& m, V& v, V& w) {
  using std::sqrt;  // xsimd::sqrt for a register, by argument-dependent lookup
  m = k.beta1 * m + k.one_minus_beta1 * g;
  v = k.beta2 * v + k.one_minus_beta2 * g * g;
  w = w * k.shrink - k.lr * (m * c1) / (sqrt(v * c2) + k.eps);
}

#if SPRIG_KERNEL_SIMD
// One register of AdamW: w, g, m, v at p[0..3]; corrections(m, v) gives (c1, c2) from the
// moments before the update.
template <class B, class T, std::size_t Arrays, class Corrections>
SPRIG_ALWAYS_INLINE void adamw_register(const AdamWConstants<B>& k, T* const (&p)[Arrays], Corrections&& corrections) {
  B w = B::load_unaligned(p[0]), m = B::load_unaligned(p[2]), v = B::load_unaligned(p[3]);
  const auto [c1, c2] = corrections(m, v);
  adamw_element(k, B::load_unaligned(p[1]), c1, c2, m, v, w);
  m.store_unaligned(p[2]);
  v.store_unaligned(p[3]);
  w.store_unaligned(p[0]);
}
#endif

template <class A, class T>
void adamw_update_on(const AdamWStep<T>& k, T c1, T c2, T* w, const T* g, T* m, T* v, std::int64_t n) {
#if SPRIG_KERNEL_SIMD
  if constexpr (kSimdFor<T, A>) {
    using B = xsimd::batch<T, A>;
    const AdamWConstants<B> kb(k);
    const B cb1(c1), cb2(c2);
    T* const arrays[4] = {w, const_cast<T*>(g), m, v};  // g is only read
    in_registers<A>(n, arrays, [&](T* const(&p)[4]) SPRIG_ALWAYS_INLINE_LAMBDA {
      adamw_register<B>(kb, p, [&](const B&, const B&) SPRIG_ALWAYS_INLINE_LAMBDA { return std::pair{cb1, cb2}; });
    });
    return;
  }
#endif
  const AdamWConstants<T> ks(k);
  for (std::int64_t s = 0; s < n; ++s) adamw_element(ks, g[s], c1, c2, m[s], v[s], w[s]);
}

template <class A, class T>
bool zero_moments_on(const T* m, const T* v, std::int64_t n) {
  std::int64_t j = 0;
#if SPRIG_KERNEL_SIMD
  if constexpr (kSimdFor<T, A>) {
    using B = xsimd::batch<T, A>;
    constexpr std::int64_t U = B::size;
    const B zero(T(0));
    const auto hit = [&](std::int64_t at) SPRIG_ALWAYS_INLINE_LAMBDA {
      return (B::load_unaligned(m + at) == zero) & (B::load_unaligned(v + at) == zero);
    };
    for (; j + 4 * U <= n; j += 4 * U)  // four registers per test: the loop is a stream of loads
      if (xsimd::any(hit(j) | hit(j + U) | hit(j + 2 * U) | hit(j + 3 * U))) return true;
    for (; j + U <= n; j += U)
      if (xsimd::any(hit(j))) return true;
  }
#endif
  for (; j < n; ++j)
    if (m[j] == T(0) && v[j] == T(0)) return true;
  return false;
}

template <class A, class T>
void adamw_counted_update_on(const AdamWStep<T>& k, const T* c1, const T* c2, T top, T* w, const T* g, T* m, T* v,
                             T* counts, std::int64_t n) {
#if SPRIG_KERNEL_SIMD
  if constexpr (kSimdFor<T, A>) {
    using B = xsimd::batch<T, A>;
    const AdamWConstants<B> kb(k);
    const B topb(top), one(T(1)), zero(T(0));
    T* const arrays[5] = {w, const_cast<T*>(g), m, v, counts};  // g is only read
    in_registers<A>(n, arrays, [&](T* const(&p)[5]) SPRIG_ALWAYS_INLINE_LAMBDA {
      adamw_register<B>(kb, p, [&](const B& m0, const B& v0) SPRIG_ALWAYS_INLINE_LAMBDA {
        const B nb = xsimd::select((m0 == zero) & (v0 == zero), one, xsimd::min(B::load_unaligned(p[4]) + one, topb));
        nb.store_unaligned(p[4]);
        // the corrections by lane, read back from the counts just stored (whole numbers in
        // [0, top]): one entry where every lane has the same count (slots born together),
        // else one scalar read per lane (xsimd 8's B::gather is a chain of per-lane inserts)
        const T first = p[4][0];
        if (xsimd::all(nb == B(first))) {
          const auto j = static_cast<std::size_t>(first);
          return std::pair{B(c1[j]), B(c2[j])};
        }
        alignas(64) T lane1[B::size], lane2[B::size];
        for (std::size_t i = 0; i < B::size; ++i) {
          const auto j = static_cast<std::size_t>(p[4][i]);
          lane1[i] = c1[j];
          lane2[i] = c2[j];
        }
        return std::pair{B::load_aligned(lane1), B::load_aligned(lane2)};
      });
    });
    return;
  }
#endif
  const AdamWConstants<T> ks(k);
  for (std::int64_t s = 0; s < n; ++s) {
    const bool fresh = (m[s] == T(0)) & (v[s] == T(0));
    counts[s] = fresh ? T(1) : std::min(counts[s] + T(1), top);
    const auto j = static_cast<std::size_t>(counts[s]);
    adamw_element(ks, g[s], c1[j], c2[j], m[s], v[s], w[s]);
  }
}

template <class A, class T>
void sgd_update_on(const SGDStep<T>& k, T* w, const T* g, T* buffer, std::int64_t n) {
#if SPRIG_KERNEL_SIMD
  if constexpr (kSimdFor<T, A>) {
    using B = xsimd::batch<T, A>;
    const B lr(k.lr), mu(k.momentum), wd(k.weight_decay);
    if (k.kind == SGDKind::plain) {
      T* const arrays[2] = {w, const_cast<T*>(g)};  // g is only read
      in_registers<A>(n, arrays, [&](T* const(&p)[2]) SPRIG_ALWAYS_INLINE_LAMBDA {
        const B wb = B::load_unaligned(p[0]);
        (wb - lr * (B::load_unaligned(p[1]) + wd * wb)).store_unaligned(p[0]);
      });
      return;
    }
    const bool nesterov = k.kind == SGDKind::nesterov;
    T* const arrays[3] = {w, const_cast<T*>(g), buffer};
    in_registers<A>(n, arrays, [&](T* const(&p)[3]) SPRIG_ALWAYS_INLINE_LAMBDA {
      const B wb = B::load_unaligned(p[0]);
      const B gd = B::load_unaligned(p[1]) + wd * wb;
      const B bb = mu * B::load_unaligned(p[2]) + gd;
      bb.store_unaligned(p[2]);
      (nesterov ? wb - lr * (gd + mu * bb) : wb - lr * bb).store_unaligned(p[0]);
    });
    return;
  }
#endif
  for (std::int64_t s = 0; s < n; ++s) {
    if (k.kind == SGDKind::plain) {
      w[s] -= k.lr * (g[s] + k.weight_decay * w[s]);
      continue;
    }
    const T gd = g[s] + k.weight_decay * w[s];
    buffer[s] = k.momentum * buffer[s] + gd;
    w[s] -= k.kind == SGDKind::momentum ? k.lr * buffer[s] : k.lr * (gd + k.momentum * buffer[s]);
  }
}

}  // namespace sprig::detail
