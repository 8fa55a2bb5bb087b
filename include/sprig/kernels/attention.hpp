// sprig/kernels/attention.hpp — the products of causal attention on one (sequence, head), as
// register-tiled micro-kernels over a key-major triangle of scores whose rows start on SIMD
// register boundaries (AttentionBlockTriangle). nn/attention.hpp's CausalSelfAttention runs them.
//
// Operands: a head's [d_head x t] operands are copies (nn/attention.hpp) with row stride hs >=
// padded_length(t) whose columns [t, padded_length(t)) hold zeros; the kernels read those
// padding columns, so every register is whole and no kernel has a scalar tail. Keys are the
// triangle's rows k < t, queries its columns q.
//
// Entries of row k below its key (q < k, in the diagonal register) and past t (q >= t) exist
// in memory: the softmax writes 0 below the key; past t the entries stay finite (scores
// against zero columns), they meet only zero columns or are never stored.
//
// Every output entry sums its terms in one order fixed by the shape and the architecture, so
// results do not depend on the thread count. Complexity: d_head multiply-adds per stored
// triangle entry per product. Nothing allocates or throws.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "../core/bfloat16.hpp"
#include "bfloat16_convert.hpp"
#include "simd.hpp"

namespace sprig::detail {

// A key-major causal triangle for t keys whose rows are grouped by `w` (the SIMD width): row
// k holds the queries [qs(k), tp), qs(k) = floor(k / w) w and tp = t rounded up to w, so
// every row is whole registers and the rows of one group share their start. row(k) is offset
// back by qs(k) so that it is indexed by q.
template <class T>
struct AttentionBlockTriangle {
  T* base;
  std::int64_t t, w;

  std::int64_t padded() const noexcept { return (t + w - 1) / w * w; }
  std::int64_t start(std::int64_t k) const noexcept { return k / w * w; }
  // Entries before row k (k <= t; size() is offset(t)).
  std::int64_t offset(std::int64_t k) const noexcept {
    const std::int64_t g = k / w, tp = padded();
    return w * g * tp - w * w * g * (g - 1) / 2 + (k - g * w) * (tp - g * w);
  }
  std::int64_t size() const noexcept { return offset(t); }
  T* row(std::int64_t k) const noexcept { return base + offset(k) - start(k); }
};

// The query-major transpose of AttentionBlockTriangle (attention_to_queries): row q < padded()
// holds the keys [0, end(q)), end(q) = (floor(q / w) + 1) w, whole registers indexed by k;
// the same size as the key-major triangle of padded() keys.
template <class T>
struct AttentionQueryTriangle {
  T* base;
  std::int64_t t, w;

  std::int64_t padded() const noexcept { return (t + w - 1) / w * w; }
  std::int64_t end(std::int64_t q) const noexcept { return (q / w + 1) * w; }
  // Entries before row q (q <= padded(); size() is offset(padded())).
  std::int64_t offset(std::int64_t q) const noexcept {
    const std::int64_t g = q / w;
    return w * w * g * (g + 1) / 2 + (q - g * w) * (g + 1) * w;
  }
  std::int64_t size() const noexcept { return offset(padded()); }
  T* row(std::int64_t q) const noexcept { return base + offset(q); }
};

// Keys per register tile of attention_scores on architecture A.
template <class T, class A>
inline constexpr std::int64_t kAttentionKeys = std::min<std::int64_t>(4, std::int64_t(simd_width<T, A>()));
// Registers along the queries per tile: 4 x 4 accumulators where 32 registers exist, 4 x 2
// where 16 do.
template <class T, class A>
inline constexpr int kAttentionQueryRegisters =
#if SPRIG_KERNEL_SIMD
    kVectorRegistersOf<A> >= 32 ? 4 : 2;
#else
    1;
#endif

// S(k, q) = sum_{d < dh} a[d hs + k] x[d hs + q] for every key k < t and q in [start(k), tp):
// the scores (a = K_h, x = Q_h) or dP (a = V_h, x = dOut_h). Tiles of kAttentionKeys keys of
// one row group by registers of queries; a last partial key tile repeats key t - 1 (same
// operations, same values). d ascending.
template <class T, class Arch = KernelArch>
void attention_scores(const T* a, const T* x, std::int64_t hs, std::int64_t dh, AttentionBlockTriangle<T> S) noexcept {
  const std::int64_t t = S.t, tp = S.padded();
#if SPRIG_KERNEL_SIMD
  if constexpr (kSimdFor<T, Arch>) {
    using V = Batch<T, Arch>;
    constexpr std::int64_t w = V::size, nk = kAttentionKeys<T, Arch>;
    S.w = w;  // the precondition as a constant, so row() divides by a shift
    constexpr int nq = kAttentionQueryRegisters<T, Arch>;
    auto tile = [&]<int R>(const std::int64_t* keys, std::int64_t q) {
      V acc[nk][R];
      SPRIG_UNROLL for (int j = 0; j < nk; ++j) SPRIG_UNROLL for (int v = 0; v < R; ++v) acc[j][v] = V(T(0));
      for (std::int64_t d = 0; d < dh; ++d) {
        const T* xr = x + d * hs + q;
        V xv[R];
        SPRIG_UNROLL for (int v = 0; v < R; ++v) xv[v] = V::load_unaligned(xr + v * w);
        SPRIG_UNROLL for (int j = 0; j < nk; ++j) {
          const V av(a[d * hs + keys[j]]);
          SPRIG_UNROLL for (int v = 0; v < R; ++v) acc[j][v] = xsimd::fma(av, xv[v], acc[j][v]);
        }
      }
      SPRIG_UNROLL for (int j = 0; j < nk; ++j) {
        T* out = S.row(keys[j]) + q;
        SPRIG_UNROLL for (int v = 0; v < R; ++v) acc[j][v].store_unaligned(out + v * w);
      }
    };
    // panels of nq registers of queries outside the keys, so a panel of x (dh x nq w) stays in
    // L1 while every key's tile reads it; a key's row may start inside a panel
    for (std::int64_t p0 = 0; p0 < tp; p0 += nq * w) {
      const std::int64_t p1 = std::min(p0 + nq * w, tp);
      for (std::int64_t k0 = 0; k0 < t && S.start(k0) < p1; k0 += nk) {
        std::int64_t keys[nk];
        for (std::int64_t j = 0; j < nk; ++j) keys[j] = std::min(k0 + j, t - 1);
        std::int64_t q = std::max(p0, S.start(k0)), regs = (p1 - q) / w;
        if (regs == nq) {
          tile.template operator()<nq>(keys, q);
        } else if (nq == 4 && regs == 3) {
          tile.template operator()<std::min(nq, 3)>(keys, q);
        } else if (nq >= 2 && regs == 2) {
          tile.template operator()<std::min(nq, 2)>(keys, q);
        } else {
          for (; q < p1; q += w) tile.template operator()<1>(keys, q);
        }
      }
    }
    return;
  }
#endif
  for (std::int64_t k = 0; k < t; ++k) {
    T* out = S.row(k);
    for (std::int64_t q = S.start(k); q < tp; ++q) {
      T s = T(0);
      for (std::int64_t d = 0; d < dh; ++d) s += a[d * hs + k] * x[d * hs + q];
      out[q] = s;
    }
  }
}

#if SPRIG_KERNEL_SIMD
// The start of a tile of 4 head rows by R registers: the rows d0.. of a (rows hs apart; a
// last partial tile repeats row dh - 1) and zero sums.
template <int R, class T, class A>
SPRIG_ALWAYS_INLINE void start_head_rows(const T* a, std::int64_t hs, std::int64_t d0, std::int64_t dh,
                                         const T* (&rows)[4], xsimd::batch<T, A> (&acc)[4][R]) noexcept {
  for (std::int64_t r = 0; r < 4; ++r) rows[r] = a + std::min(d0 + r, dh - 1) * hs;
  SPRIG_UNROLL for (int r = 0; r < 4; ++r) SPRIG_UNROLL for (int v = 0; v < R; ++v) acc[r][v] =
      xsimd::batch<T, A>(T(0));
}

// A tile of 4 head rows by R registers into y: acc[r][v] to row d0 + r (d0 + r < dh) at
// columns first + v w on, rows ys apart, only the columns below t.
template <int R, class T, class A>
SPRIG_ALWAYS_INLINE void store_head_rows(const xsimd::batch<T, A> (&acc)[4][R], T* y, std::int64_t ys, std::int64_t d0,
                                         std::int64_t dh, std::int64_t first, std::int64_t t) noexcept {
  constexpr std::int64_t w = xsimd::batch<T, A>::size;
  for (std::int64_t r = 0; r < 4 && d0 + r < dh; ++r) {
    T* out = y + (d0 + r) * ys;
    SPRIG_UNROLL for (int v = 0; v < R; ++v) {
      const std::int64_t c = first + v * w;
      if (c + w <= t) {
        acc[r][v].store_unaligned(out + c);
      } else if (c < t) {
        alignas(64) T part[w];
        acc[r][v].store_aligned(part);
        std::copy_n(part, t - c, out + c);
      }
    }
  }
}

// acc[r][v] += a_r[i] M.row(i)[c0 + v w] for rows i in [begin, end), registers v in [V0, V1)
// and the 4 head rows r: the inner loop of head_row_sums.
template <int V0, int V1, int R, class Triangle, class T, class A>
SPRIG_ALWAYS_INLINE void accumulate_head_rows(Triangle M, std::int64_t c0, const T* const* a, std::int64_t begin,
                                              std::int64_t end, xsimd::batch<T, A> (&acc)[4][R]) noexcept {
  using V = xsimd::batch<T, A>;
  constexpr std::int64_t w = V::size;
  for (std::int64_t i = begin; i < end; ++i) {
    const T* p = M.row(i) + c0;
    V pv[R];
    SPRIG_UNROLL for (int v = V0; v < V1; ++v) pv[v] = V::load_unaligned(p + v * w);
    SPRIG_UNROLL for (int r = 0; r < 4; ++r) {
      const V av(a[r][i]);
      SPRIG_UNROLL for (int v = V0; v < V1; ++v) acc[r][v] = xsimd::fma(av, pv[v], acc[r][v]);
    }
  }
}

// What the rows of a causal triangle M hold: keys (M(k, q), q >= start(k): P and dS) or
// queries (M(q, k), k <= q: their query-major copies).
enum class TriangleRows { keys, queries };

// y[d ys + c] = sum_i a[d hs + i] M.row(i)[c] for d < dh, c < t, over the rows i that hold
// column c: Out, dQ (rows are keys, columns queries) and dV, dK (rows are queries, columns
// keys). Tiles of 4 head rows by R registers of columns, every row's a broadcast; panels of
// the kernel's registers of columns outside the head rows, so a panel of M stays in L1 while
// every head row reads it. A last partial row tile repeats row dh - 1 and stores it once. i
// ascending. M's group width is the SIMD width, as a constant.
template <TriangleRows rows, class Arch, class T, class Triangle>
SPRIG_ALWAYS_INLINE void head_row_sums(const T* a, std::int64_t hs, Triangle M, std::int64_t dh, T* y,
                                       std::int64_t ys) noexcept {
  using V = Batch<T, Arch>;
  constexpr std::int64_t w = V::size;
  constexpr int nr = kAttentionQueryRegisters<T, Arch>;
  M.w = w;  // the precondition as a constant, so padded() and row() divide by a shift
  const std::int64_t t = M.t, tp = M.padded();
  auto tile = [&]<int R>(std::int64_t d0, std::int64_t c0) {
    static_assert(R <= 4);
    // again inside: the compiler may keep this lambda out of line, where a captured M's width
    // would be a runtime value and every row offset a division
    Triangle m = M;
    m.w = w;
    const T* ar[4];
    V acc[4][R];
    start_head_rows(a, hs, d0, dh, ar, acc);
    auto span = [&]<int V0, int V1>(std::int64_t begin, std::int64_t end)
                    SPRIG_ALWAYS_INLINE_LAMBDA { accumulate_head_rows<V0, V1>(m, c0, ar, begin, end, acc); };
    if constexpr (rows == TriangleRows::keys) {
      // keys whose rows start at or before register J feed registers J..R-1
      span.template operator()<0, R>(0, std::min(c0 + w, t));
      if constexpr (R > 1) span.template operator()<1, R>(c0 + w, std::min(c0 + 2 * w, t));
      if constexpr (R > 2) span.template operator()<2, R>(c0 + 2 * w, std::min(c0 + 3 * w, t));
      if constexpr (R > 3) span.template operator()<3, R>(c0 + 3 * w, std::min(c0 + 4 * w, t));
    } else {
      // the queries of register J see the keys of registers 0..J; the later ones all of them
      span.template operator()<0, 1>(c0, std::min(c0 + w, t));
      if constexpr (R > 1) span.template operator()<0, 2>(c0 + w, std::min(c0 + 2 * w, t));
      if constexpr (R > 2) span.template operator()<0, 3>(c0 + 2 * w, std::min(c0 + 3 * w, t));
      if constexpr (R > 3) span.template operator()<0, 4>(c0 + 3 * w, std::min(c0 + 4 * w, t));
      span.template operator()<0, R>(c0 + R * w, t);
    }
    store_head_rows<R>(acc, y, ys, d0, dh, c0, t);
  };
  std::int64_t c = 0;
  for (; c + nr * w <= tp; c += nr * w)
    for (std::int64_t d0 = 0; d0 < dh; d0 += 4) tile.template operator()<nr>(d0, c);
  for (; c < tp; c += w)
    for (std::int64_t d0 = 0; d0 < dh; d0 += 4) tile.template operator()<1>(d0, c);
}
#endif

// y[d ys + q] = sum_{k < t, start(k) <= q} a[d hs + k] P(k, q) for d < dh, q < t: Out_h = V_h P
// (a = V_h) and dQ_h = K_h dS (a = K_h); P's entries below the key must be 0. Tiles of 4 head
// rows by registers of queries; a last partial row tile repeats row dh - 1 and stores it once.
// k ascending.
template <class T, class Arch = KernelArch>
void attention_weighted_sum(const T* a, std::int64_t hs, AttentionBlockTriangle<T> P, std::int64_t dh, T* y,
                            std::int64_t ys) noexcept {
  const std::int64_t t = P.t;
#if SPRIG_KERNEL_SIMD
  if constexpr (kSimdFor<T, Arch>) {
    head_row_sums<TriangleRows::keys, Arch>(a, hs, P, dh, y, ys);
    return;
  }
#endif
  for (std::int64_t d = 0; d < dh; ++d) {
    T* yr = y + d * ys;
    std::fill(yr, yr + t, T(0));
    for (std::int64_t k = 0; k < t; ++k) {
      const T* p = P.row(k);
      const T ak = a[d * hs + k];
      for (std::int64_t q = P.start(k); q < t; ++q) yr[q] += ak * p[q];
    }
  }
}

// PT = P transposed into a query-major triangle: PT(q, k) = P(k, q) for every entry P holds
// and 0 for keys k >= t; rows q >= t get P's padding columns (finite, never read by
// attention_query_sum). One register transpose per w x w block of P. Exact (moves only).
template <class T, class Arch = KernelArch>
void attention_to_queries(AttentionBlockTriangle<T> P, AttentionQueryTriangle<T> PT) noexcept {
  const std::int64_t t = P.t, tp = P.padded();
#if SPRIG_KERNEL_SIMD
  if constexpr (kSimdFor<T, Arch>) {
    using V = Batch<T, Arch>;
    constexpr std::int64_t w = V::size;
    P.w = w;  // the preconditions as constants, so row() divides by a shift
    PT.w = w;
    for (std::int64_t kb = 0; kb < t; kb += w) {
      // rows kb.. of P are tp - kb apart; rows qb.. of PT are qb + w apart
      const T* p = P.row(kb);
      const std::int64_t ps = tp - kb, keys = std::min(w, t - kb);
      for (std::int64_t qb = kb; qb < tp; qb += w) {
        V v[w];
        if (keys == w) {
          SPRIG_UNROLL for (std::int64_t r = 0; r < w; ++r) v[r] = V::load_unaligned(p + r * ps + qb);
        } else {
          for (std::int64_t r = 0; r < w; ++r) v[r] = r < keys ? V::load_unaligned(p + r * ps + qb) : V(T(0));
        }
        transpose_square(v);
        T* out = PT.row(qb) + kb;
        SPRIG_UNROLL for (std::int64_t c = 0; c < w; ++c) v[c].store_unaligned(out + c * (qb + w));
      }
    }
    return;
  }
#endif
  for (std::int64_t q = 0; q < tp; ++q)
    for (std::int64_t k = 0; k < PT.end(q); ++k) PT.row(q)[k] = k < t && q >= P.start(k) ? P.row(k)[q] : T(0);
}

// y[d ys + k] = sum_{q in [k, t)} PT(q, k) x[d hs + q] for d < dh, k < t: dV_h = dOut_h P^T
// (x = dOut_h, PT = attention_to_queries(P)) and dK_h = Q_h dS^T (x = Q_h); PT's entries with
// k > q must be 0. Tiles of 4 head rows by registers of keys, each query's x broadcast, so no
// output needs a horizontal sum; a last partial row tile repeats row dh - 1 and stores it
// once. q ascending.
template <class T, class Arch = KernelArch>
void attention_query_sum(AttentionQueryTriangle<T> PT, const T* x, std::int64_t hs, std::int64_t dh, T* y,
                         std::int64_t ys) noexcept {
  const std::int64_t t = PT.t;
#if SPRIG_KERNEL_SIMD
  if constexpr (kSimdFor<T, Arch>) {
    head_row_sums<TriangleRows::queries, Arch>(x, hs, PT, dh, y, ys);
    return;
  }
#endif
  for (std::int64_t d = 0; d < dh; ++d)
    for (std::int64_t k = 0; k < t; ++k) {
      T s = T(0);
      for (std::int64_t q = k; q < t; ++q) s += PT.row(q)[k] * x[d * hs + q];
      y[d * ys + k] = s;
    }
}

// Softmax over the keys k <= q of every query q, in place: P(k, q) = exp(scale (S(k, q) -
// m_q)) / sum_{k' <= q} exp(scale (S(k', q) - m_q)) with m_q = max_{k <= q} S(k, q), and 0
// below the key. m and sum are scratch of padded() entries. k ascending in every reduction.
// P's group width is the SIMD width or a multiple of it (the bf16 core's 32).
template <class T, class Arch = KernelArch>
void attention_softmax(AttentionBlockTriangle<T> P, T scale, T* m, T* sum) noexcept {
  const std::int64_t t = P.t;
  [[maybe_unused]] const std::int64_t tp = P.padded();
#if SPRIG_KERNEL_SIMD
  if constexpr (kSimdFor<T, Arch>) {
    using V = Batch<T, Arch>;
    constexpr std::int64_t w = V::size;
    alignas(64) static constexpr T lane_index[] = {0,  1,  2,  3,  4,  5,  6,  7,  8,  9,  10, 11, 12, 13, 14, 15,
                                                   16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31};
    static_assert(w <= 32);
    const V lanes = V::load_aligned(lane_index), lowest(std::numeric_limits<T>::lowest()), zero(T(0)), sc(scale);
    std::fill(m, m + tp, std::numeric_limits<T>::lowest());
    std::fill(sum, sum + tp, T(0));
    for (std::int64_t k = 0; k < t; ++k) {  // the registers at or below the key keep the lanes q >= k
      const T* p = P.row(k);
      for (std::int64_t q = P.start(k); q < tp; q += w) {
        V s = V::load_unaligned(p + q);
        if (q <= k) s = xsimd::select(lanes >= V(T(k - q)), s, lowest);
        xsimd::max(V::load_unaligned(m + q), s).store_unaligned(m + q);
      }
    }
    for (std::int64_t k = 0; k < t; ++k) {
      T* p = P.row(k);
      for (std::int64_t q = P.start(k); q < tp; q += w) {
        V e = xsimd::exp(sc * (V::load_unaligned(p + q) - V::load_unaligned(m + q)));
        if (q <= k) e = xsimd::select(lanes >= V(T(k - q)), e, zero);
        e.store_unaligned(p + q);
        (V::load_unaligned(sum + q) + e).store_unaligned(sum + q);
      }
    }
    for (std::int64_t q = 0; q < tp; q += w) (V(T(1)) / V::load_unaligned(sum + q)).store_unaligned(sum + q);
    for (std::int64_t k = 0; k < t; ++k) {
      T* p = P.row(k);
      for (std::int64_t q = P.start(k); q < tp; q += w)
        (V::load_unaligned(p + q) * V::load_unaligned(sum + q)).store_unaligned(p + q);
    }
    return;
  }
#endif
  for (std::int64_t k = 0; k < t; ++k) std::fill(P.row(k) + P.start(k), P.row(k) + k, T(0));
  std::copy(P.row(0), P.row(0) + t, m);
  for (std::int64_t k = 1; k < t; ++k)
    for (std::int64_t q = k; q < t; ++q) m[q] = std::max(m[q], P.row(k)[q]);
  std::fill(sum, sum + t, T(0));
  for (std::int64_t k = 0; k < t; ++k)
    for (std::int64_t q = k; q < t; ++q) sum[q] += P.row(k)[q] = std::exp(scale * (P.row(k)[q] - m[q]));
  for (std::int64_t q = 0; q < t; ++q) sum[q] = T(1) / sum[q];
  for (std::int64_t k = 0; k < t; ++k)
    for (std::int64_t q = k; q < t; ++q) P.row(k)[q] *= sum[q];
}

// G(k, q) = scale P(k, q) (G(k, q) - r_q) in place, r_q = sum_k P(k, q) G(k, q) (k ascending):
// dP into scale dS. r is scratch of padded() entries; P and G share the shape. P is T or, for
// the bf16 core, bfloat16 (widened exactly as it is read).
template <class T, class PT = T, class Arch = KernelArch>
void attention_softmax_backward(AttentionBlockTriangle<PT> P, AttentionBlockTriangle<T> G, T scale, T* r) noexcept {
  static_assert(std::is_same_v<PT, T> || (std::is_same_v<PT, bfloat16> && std::is_same_v<T, float>));
  const std::int64_t t = P.t;
  [[maybe_unused]] const std::int64_t tp = P.padded();
  std::int64_t w = 1;
#if SPRIG_KERNEL_SIMD
  if constexpr (kSimdFor<T, Arch>) {
    using V = Batch<T, Arch>;
    w = V::size;
    auto load_p = [](const PT* p) {
      if constexpr (std::is_same_v<PT, T>)
        return V::load_unaligned(p);
      else
        return load_bfloat16<Arch>(p);
    };
    std::fill(r, r + tp, T(0));
    for (std::int64_t k = 0; k < t; ++k)
      for (std::int64_t q = P.start(k); q < tp; q += w)
        xsimd::fma(load_p(P.row(k) + q), V::load_unaligned(G.row(k) + q), V::load_unaligned(r + q))
            .store_unaligned(r + q);
    const V sc(scale);
    for (std::int64_t k = 0; k < t; ++k)
      for (std::int64_t q = P.start(k); q < tp; q += w) {
        const V pv = load_p(P.row(k) + q);
        (sc * pv * (V::load_unaligned(G.row(k) + q) - V::load_unaligned(r + q))).store_unaligned(G.row(k) + q);
      }
    return;
  }
#endif
  std::fill(r, r + tp, T(0));
  for (std::int64_t k = 0; k < t; ++k)
    for (std::int64_t q = P.start(k); q < tp; q += w) r[q] += T(P.row(k)[q]) * G.row(k)[q];
  for (std::int64_t k = 0; k < t; ++k)
    for (std::int64_t q = P.start(k); q < tp; q += w) G.row(k)[q] = scale * T(P.row(k)[q]) * (G.row(k)[q] - r[q]);
}

}  // namespace sprig::detail
