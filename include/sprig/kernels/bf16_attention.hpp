// sprig/kernels/bf16_attention.hpp — the products of causal attention on one (sequence, head)
// with bf16 operands and float sums, on AVX512-BF16 (`vdpbf16ps`): nn/attention.hpp's bf16
// precision where bf16_attention_path() is avx512_bf16. Its portable path runs
// kernels/attention.hpp's float kernels on bf16-rounded operands instead (the same products,
// summed in another order), so only this path needs the layouts below.
//
// `vdpbf16ps` sums the products of adjacent bf16 pairs, so each product needs its reduction
// index paired in memory. Layouts, with triangles of group width kBf16AttentionGroup (32: a
// row of the key-major triangle starts at its key rounded down to 32 and runs to t rounded up
// to 32, so a row is whole 512-bit registers of bf16 and of float):
//   d pairs    element (d, j) of a [d_head x t] head operand at [(d / 2) xs + 2 j + d % 2]
//              (an odd d_head's last pair has a zero high half); zero for j in [t, tp)
//   natural    element (d, j) at [d hs + j], zero for j in [t, tp]
//   key pairs  Bf16PairTriangle: the entries (k, q) and (k + 1, q) of a triangle adjacent
//   query pairs Bf16QueryPairs: the entries (k, q) and (k, q + 1) adjacent, keys along a row
//   rows       AttentionBlockTriangle<bfloat16> of group width 32
// and the products:
//   bf16_attention_scores_avx512    S(k, q) = sum_d a(d, k) x(d, q): a and x in d pairs, S a
//                                   float triangle (the scores, a = K and x = Q; dP, a = V, x = dOut)
//   bf16_attention_pair_sum_avx512  y(d, q) = sum_k a(d, k) P(k, q): a natural, P in key pairs
//                                   (Out = V P, dQ = K dS)
//   bf16_attention_query_pair_sum_avx512  y(d, k) = sum_q P(k, q) x(d, q): P in query pairs
//                                   (to_query_pairs_avx512 from its rows), x natural
//                                   (dV = dOut P^T, dK = Q dS^T)
// The sums run along registers of 16 outputs, the pair's other operand broadcast, so no
// output needs a horizontal sum: why dV and dK read P in query pairs rather than its rows.
// Every output entry sums its exact products in float in one order fixed by the shape, so
// results do not depend on the thread count. `vdpbf16ps` treats subnormal inputs as zero and
// flushes subnormal results. Nothing allocates or throws.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "../core/bfloat16.hpp"
#include "attention.hpp"
#include "bf16_paths.hpp"
#include "bf16_sddmm.hpp"
#include "bfloat16_convert.hpp"
#include "simd.hpp"

namespace sprig {

// Whether the bf16 attention core can take `path` here (portable: always), and why not.
inline std::string bf16_attention_unavailable_reason(Bf16AttentionPath path) {
  return path == Bf16AttentionPath::portable ? std::string() : detail::bf16_gemm_reason(Bf16GemmPath::avx512_bf16);
}

// The path the bf16 attention core takes in this process: avx512_bf16, else portable.
inline Bf16AttentionPath bf16_attention_path() {
  return bf16_attention_unavailable_reason(Bf16AttentionPath::avx512_bf16).empty() ? Bf16AttentionPath::avx512_bf16
                                                                                   : Bf16AttentionPath::portable;
}

namespace detail {

inline constexpr std::int64_t kBf16AttentionGroup = 32;

template <class T>
AttentionBlockTriangle<T> bf16_attention_triangle(T* base, std::int64_t t) noexcept {
  return {base, t, kBf16AttentionGroup};
}

// A key-major causal triangle of bf16 with rows k and k + 1 (k even) interleaved: pair(k)[2q
// + j] is entry (k + j, q) for q in [start(k), tp). An odd t's last pair has a zero row t.
struct Bf16PairTriangle {
  bfloat16* base;
  std::int64_t t;

  AttentionBlockTriangle<bfloat16> rows() const noexcept { return bf16_attention_triangle(base, t); }
  std::int64_t size() const noexcept { return rows().offset(t + (t & 1)); }
  bfloat16* pair(std::int64_t k) const noexcept { return base + rows().offset(k) - 2 * rows().start(k); }
};

// A causal triangle of bf16 in query pairs: row q / 2 (q even) holds, for every key k below
// keys() (t rounded up to 64), the entries (k, q) and (k, q + 1) as one 32-bit word at
// pair(q) + 2k; 0 where the query is below the key or at t or past it, and for keys >= t.
struct Bf16QueryPairs {
  bfloat16* base;
  std::int64_t t;

  static std::int64_t keys_of(std::int64_t t) noexcept { return (t + 63) / 64 * 64; }
  std::int64_t keys() const noexcept { return keys_of(t); }
  std::int64_t size() const noexcept { return (t + 1) / 2 * 2 * keys(); }
  bfloat16* pair(std::int64_t q) const noexcept { return base + q * keys(); }
};

// p[i] = float(bfloat16(p[i])) for i < n: the values rounded in place.
inline void round_to_bfloat16(float* p, std::int64_t n) noexcept {
  std::int64_t i = 0;
#if SPRIG_KERNEL_SIMD
  if constexpr (kSimdFor<float, KernelArch>) {
    using F = Batch<float, KernelArch>;
    using U = xsimd::batch<std::uint32_t, KernelArch>;
    for (; i + std::int64_t(F::size) <= n; i += F::size)
      xsimd::bitwise_cast<F>(bfloat16_high_bits(F::load_unaligned(p + i)) & U(0xFFFF'0000u)).store_unaligned(p + i);
  }
#endif
  for (; i < n; ++i) p[i] = float(bfloat16(p[i]));
}

// out[2j] = bfloat16(lo[j]) and out[2j + 1] = bfloat16(hi[j]) (0 where hi is null) for j < n:
// two rows into one row of pairs, each 32-bit lane formed where the float was (no shuffles).
inline void to_bfloat16_pairs(const float* lo, const float* hi, std::int64_t n, bfloat16* out) noexcept {
  std::int64_t j = 0;
#if SPRIG_KERNEL_SIMD
  if constexpr (kSimdFor<float, KernelArch>) {
    using F = Batch<float, KernelArch>;
    using U = xsimd::batch<std::uint32_t, KernelArch>;
    constexpr std::int64_t w = F::size;
    for (; j + w <= n; j += w) {
      const U low = bfloat16_high_bits(F::load_unaligned(lo + j)) >> 16;
      const U high = hi ? bfloat16_high_bits(F::load_unaligned(hi + j)) & U(0xFFFF'0000u) : U(0u);
      (low | high).store_unaligned(reinterpret_cast<std::uint32_t*>(out + 2 * j));
    }
  }
#endif
  for (; j < n; ++j) {
    out[2 * j] = bfloat16(lo[j]);
    out[2 * j + 1] = hi ? bfloat16(hi[j]) : bfloat16(0.0f);
  }
}

#if SPRIG_BF16_GEMM_X86

// The 32 bits at p (two bf16) in every lane.
SPRIG_DETAIL_BF16_DP_TARGET SPRIG_ALWAYS_INLINE __m512i bf16_pair_broadcast(const bfloat16* p) noexcept {
  return _mm512_broadcastd_epi32(_mm_loadu_si32(p));
}

// out[j] = bfloat16(in[j]) for j < n with `vcvtneps2bf16` (nearest even; subnormals to zero).
SPRIG_DETAIL_BF16_DP_TARGET inline void to_bfloat16_avx512(const float* in, std::int64_t n, bfloat16* out) noexcept {
  std::int64_t j = 0;
  for (; j + 16 <= n; j += 16)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + j), (__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(in + j)));
  for (; j < n; ++j) out[j] = bfloat16(in[j]);
}

// to_bfloat16_pairs with `vcvtne2ps2bf16` and one permute per 16 pairs (subnormals to zero).
SPRIG_DETAIL_BF16_DP_TARGET inline void to_bfloat16_pairs_avx512(const float* lo, const float* hi, std::int64_t n,
                                                                 bfloat16* out) noexcept {
  alignas(64) static constexpr std::uint16_t order[32] = {0, 16, 1, 17, 2,  18, 3,  19, 4,  20, 5,  21, 6,  22, 7,  23,
                                                          8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
  const __m512i idx = _mm512_load_si512(order);
  std::int64_t j = 0;
  for (; j + 16 <= n; j += 16) {
    const __m512 h = hi ? _mm512_loadu_ps(hi + j) : _mm512_setzero_ps();
    const __m512i both = (__m512i)_mm512_cvtne2ps_pbh(h, _mm512_loadu_ps(lo + j));  // lo in words 0-15
    _mm512_storeu_si512(out + 2 * j, _mm512_permutexvar_epi16(idx, both));
  }
  if (j < n) to_bfloat16_pairs(lo + j, hi ? hi + j : nullptr, n - j, out + 2 * j);
}

// out[2 j] = lo[j], out[2 j + 1] = hi[j] (0 without hi) for j < n: two bf16 rows interleaved
// into pairs (to_bfloat16_pairs for values that are bf16 already; exact).
SPRIG_DETAIL_BF16_DP_TARGET inline void interleave_bfloat16_pairs_avx512(const bfloat16* lo, const bfloat16* hi,
                                                                         std::int64_t n, bfloat16* out) noexcept {
  std::int64_t j = 0;
  for (; j + 16 <= n; j += 16) {
    const __m512i l = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(lo + j)));
    const __m512i h =
        hi ? _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(hi + j))), 16)
           : _mm512_setzero_si512();
    _mm512_storeu_si512(out + 2 * j, _mm512_or_si512(l, h));
  }
  for (; j < n; ++j) {
    out[2 * j] = lo[j];
    out[2 * j + 1] = hi ? hi[j] : bfloat16(0.0f);
  }
}

// The float triangle S (group width 32) into P's key pairs, rounded (subnormals to zero).
SPRIG_DETAIL_BF16_DP_TARGET inline void to_bfloat16_key_pairs_avx512(AttentionBlockTriangle<float> S,
                                                                     Bf16PairTriangle P) noexcept {
  const std::int64_t t = S.t, tp = S.padded();
  for (std::int64_t k = 0; k < t; k += 2) {
    const std::int64_t q0 = S.start(k);
    to_bfloat16_pairs_avx512(S.row(k) + q0, k + 1 < t ? S.row(k + 1) + q0 : nullptr, tp - q0, P.pair(k) + 2 * q0);
  }
}

// One tile of bf16_attention_scores_avx512: 4 keys by R registers of 16 queries from q.
template <int R>
SPRIG_DETAIL_BF16_DP_TARGET SPRIG_ALWAYS_INLINE void bf16_attention_scores_tile(
    const bfloat16* __restrict a, const bfloat16* __restrict x, std::int64_t xs, std::int64_t pairs,
    const std::int64_t* keys, std::int64_t q, AttentionBlockTriangle<float> S) noexcept {
  __m512 acc[4][R];
  SPRIG_UNROLL for (int j = 0; j < 4; ++j) SPRIG_UNROLL for (int v = 0; v < R; ++v) acc[j][v] = _mm512_setzero_ps();
  for (std::int64_t i = 0; i < pairs; ++i) {
    const bfloat16* xr = x + i * xs + 2 * q;
    __m512i xv[R];
    SPRIG_UNROLL for (int v = 0; v < R; ++v) xv[v] = _mm512_loadu_si512(xr + 32 * v);
    SPRIG_UNROLL for (int j = 0; j < 4; ++j) {
      const __m512i av = bf16_pair_broadcast(a + i * xs + 2 * keys[j]);
      SPRIG_UNROLL for (int v = 0; v < R; ++v) acc[j][v] = _mm512_dpbf16_ps(acc[j][v], (__m512bh)av, (__m512bh)xv[v]);
    }
  }
  SPRIG_UNROLL for (int j = 0; j < 4; ++j) {
    float* out = S.row(keys[j]) + q;
    SPRIG_UNROLL for (int v = 0; v < R; ++v) _mm512_storeu_ps(out + 16 * v, acc[j][v]);
  }
}

// S(k, q) = sum_{d < dh} a(d, k) x(d, q) for k < t, q in [start(k), tp): a and x in d pairs at
// pair-row stride xs >= 2 tp, S of group width 32. Tiles of 4 keys (a last partial tile
// repeats key t - 1) by 4 or 2 registers; d pairs ascending.
SPRIG_DETAIL_BF16_DP_TARGET inline void bf16_attention_scores_avx512(const bfloat16* a, const bfloat16* x,
                                                                     std::int64_t xs, std::int64_t dh,
                                                                     AttentionBlockTriangle<float> S) noexcept {
  const std::int64_t t = S.t, tp = S.padded(), pairs = (dh + 1) / 2;
  for (std::int64_t k0 = 0; k0 < t; k0 += 4) {
    std::int64_t keys[4];
    for (std::int64_t j = 0; j < 4; ++j) keys[j] = std::min(k0 + j, t - 1);
    std::int64_t q = S.start(k0);
    for (; q + 64 <= tp; q += 64) bf16_attention_scores_tile<4>(a, x, xs, pairs, keys, q, S);
    if (q < tp) bf16_attention_scores_tile<2>(a, x, xs, pairs, keys, q, S);
  }
}

// A tile's sums into y: acc[r][v] to row d0 + r (r < 4, d0 + r < dh) at columns first + 16 v
// on, rows ys apart, only the columns below t.
template <int R>
SPRIG_DETAIL_BF16_DP_TARGET SPRIG_ALWAYS_INLINE void bf16_attention_store_tile(const __m512 (&acc)[4][R], float* y,
                                                                               std::int64_t ys, std::int64_t d0,
                                                                               std::int64_t dh, std::int64_t first,
                                                                               std::int64_t t) noexcept {
  for (std::int64_t r = 0; r < 4 && d0 + r < dh; ++r) {
    float* out = y + (d0 + r) * ys;
    SPRIG_UNROLL for (int v = 0; v < R; ++v) {
      const std::int64_t c = first + 16 * v;
      if (c + 16 <= t)
        _mm512_storeu_ps(out + c, acc[r][v]);
      else if (c < t)
        _mm512_mask_storeu_ps(out + c, static_cast<__mmask16>((1u << (t - c)) - 1u), acc[r][v]);
    }
  }
}

// Key pairs [k_begin, k_end) into registers [J, R) of a bf16_attention_pair_sum tile.
template <int J, int R>
SPRIG_DETAIL_BF16_DP_TARGET SPRIG_ALWAYS_INLINE void bf16_attention_pair_keys(const bfloat16* const* ar,
                                                                              Bf16PairTriangle P, std::int64_t q0,
                                                                              std::int64_t k_begin, std::int64_t k_end,
                                                                              __m512 (&acc)[4][R]) noexcept {
  for (std::int64_t k = k_begin; k < k_end; k += 2) {
    const bfloat16* p = P.pair(k) + 2 * q0;
    __m512i pv[R];
    SPRIG_UNROLL for (int v = J; v < R; ++v) pv[v] = _mm512_loadu_si512(p + 32 * v);
    SPRIG_UNROLL for (int r = 0; r < 4; ++r) {
      const __m512i av = bf16_pair_broadcast(ar[r] + k);
      SPRIG_UNROLL for (int v = J; v < R; ++v) acc[r][v] = _mm512_dpbf16_ps(acc[r][v], (__m512bh)av, (__m512bh)pv[v]);
    }
  }
}

template <int R>
SPRIG_DETAIL_BF16_DP_TARGET SPRIG_ALWAYS_INLINE void bf16_attention_pair_sum_tile(const bfloat16* a, std::int64_t hs,
                                                                                  Bf16PairTriangle P, std::int64_t dh,
                                                                                  std::int64_t d0, std::int64_t q0,
                                                                                  float* y, std::int64_t ys) noexcept {
  const std::int64_t t = P.t, te = t + (t & 1);
  const bfloat16* ar[4];
  for (std::int64_t r = 0; r < 4; ++r) ar[r] = a + std::min(d0 + r, dh - 1) * hs;
  __m512 acc[4][R];
  SPRIG_UNROLL for (int r = 0; r < 4; ++r) SPRIG_UNROLL for (int v = 0; v < R; ++v) acc[r][v] = _mm512_setzero_ps();
  // keys whose rows start at or before group g of the tile feed its registers 2g..R-1
  bf16_attention_pair_keys<0, R>(ar, P, q0, 0, std::min(q0 + 32, te), acc);
  if constexpr (R > 2) bf16_attention_pair_keys<2, R>(ar, P, q0, q0 + 32, std::min(q0 + 64, te), acc);
  bf16_attention_store_tile<R>(acc, y, ys, d0, dh, q0, t);
}

// y[d ys + q] = sum_{k < t, start(k) <= q} a(d, k) P(k, q) for d < dh, q < t: a natural at row
// stride hs >= t + 1 (zero at t), P in key pairs with 0 below each key. Tiles of 4 head rows by
// 4 or 2 registers of queries; key pairs ascending.
SPRIG_DETAIL_BF16_DP_TARGET inline void bf16_attention_pair_sum_avx512(const bfloat16* a, std::int64_t hs,
                                                                       Bf16PairTriangle P, std::int64_t dh, float* y,
                                                                       std::int64_t ys) noexcept {
  const std::int64_t tp = P.rows().padded();
  for (std::int64_t d0 = 0; d0 < dh; d0 += 4) {
    std::int64_t q = 0;
    for (; q + 64 <= tp; q += 64) bf16_attention_pair_sum_tile<4>(a, hs, P, dh, d0, q, y, ys);
    if (q < tp) bf16_attention_pair_sum_tile<2>(a, hs, P, dh, d0, q, y, ys);
  }
}

// Query pairs [q_begin, q_end) into registers [0, V) of a bf16_attention_query_pair_sum tile
// (keys from k0). A function of its own: a lambda would not get the target attribute.
template <int V, int R>
SPRIG_DETAIL_BF16_DP_TARGET SPRIG_ALWAYS_INLINE void bf16_attention_query_pairs(const bfloat16* const* xr,
                                                                                Bf16QueryPairs P, std::int64_t k0,
                                                                                std::int64_t q_begin,
                                                                                std::int64_t q_end,
                                                                                __m512 (&acc)[4][R]) noexcept {
  for (std::int64_t q = q_begin; q < q_end; q += 2) {
    const bfloat16* p = P.pair(q) + 2 * k0;
    __m512i pv[V];
    SPRIG_UNROLL for (int v = 0; v < V; ++v) pv[v] = _mm512_loadu_si512(p + 32 * v);
    SPRIG_UNROLL for (int r = 0; r < 4; ++r) {
      const __m512i xv = bf16_pair_broadcast(xr[r] + q);
      SPRIG_UNROLL for (int v = 0; v < V; ++v) acc[r][v] = _mm512_dpbf16_ps(acc[r][v], (__m512bh)xv, (__m512bh)pv[v]);
    }
  }
}

// y[d ys + k] = sum_{q >= k, q < t} P(k, q) x(d, q) for d < dh, k < t: P in query pairs (0
// where q < k, q >= t or k >= t), x natural at row stride hs >= t + 1 (zero at t). Tiles of 4
// head rows by 4 or 2 registers of keys; query pairs ascending.
template <int R>
SPRIG_DETAIL_BF16_DP_TARGET SPRIG_ALWAYS_INLINE void bf16_attention_query_pair_sum_tile(
    const bfloat16* x, std::int64_t hs, Bf16QueryPairs P, std::int64_t dh, std::int64_t d0, std::int64_t k0, float* y,
    std::int64_t ys) noexcept {
  const std::int64_t t = P.t, te = t + (t & 1);
  const bfloat16* xr[4];
  for (std::int64_t r = 0; r < 4; ++r) xr[r] = x + std::min(d0 + r, dh - 1) * hs;
  __m512 acc[4][R];
  SPRIG_UNROLL for (int r = 0; r < 4; ++r) SPRIG_UNROLL for (int v = 0; v < R; ++v) acc[r][v] = _mm512_setzero_ps();
  // queries below k0 + 32 see none of the keys from k0 + 32 on: registers 2.. skip them
  bf16_attention_query_pairs<std::min(R, 2), R>(xr, P, k0, k0, std::min(k0 + 32, te), acc);
  bf16_attention_query_pairs<R, R>(xr, P, k0, k0 + 32, te, acc);
  bf16_attention_store_tile<R>(acc, y, ys, d0, dh, k0, t);
}

SPRIG_DETAIL_BF16_DP_TARGET inline void bf16_attention_query_pair_sum_avx512(const bfloat16* x, std::int64_t hs,
                                                                             Bf16QueryPairs P, std::int64_t dh,
                                                                             float* y, std::int64_t ys) noexcept {
  const std::int64_t t = P.t;
  for (std::int64_t d0 = 0; d0 < dh; d0 += 4)
    for (std::int64_t k0 = 0; k0 < t; k0 += 64) {
      if (t - k0 > 32)
        bf16_attention_query_pair_sum_tile<4>(x, hs, P, dh, d0, k0, y, ys);
      else
        bf16_attention_query_pair_sum_tile<2>(x, hs, P, dh, d0, k0, y, ys);
    }
}

// Q = the bf16 triangle `rows` (group width 32, 0 below each key) in query pairs, with the
// zeros the layout states: 16 keys by 16 query pairs at a time, one register transpose each,
// for the query pairs a tile of bf16_attention_query_pair_sum reads (from its first key on).
SPRIG_DETAIL_BF16_DP_TARGET inline void to_query_pairs_avx512(AttentionBlockTriangle<bfloat16> rows,
                                                              Bf16QueryPairs Q) noexcept {
  const std::int64_t t = rows.t, te = t + (t & 1);
  for (std::int64_t kb = 0; kb < Q.keys(); kb += 16) {
    const std::int64_t start = kb < t ? rows.start(kb) : te;  // the 16 keys share one group
    for (std::int64_t qb = kb / 64 * 64; qb < te; qb += 32) {
      __m512i v[16];
      for (std::int64_t j = 0; j < 16; ++j)
        v[j] = qb >= start && kb + j < t ? _mm512_loadu_si512(rows.row(kb + j) + qb) : _mm512_setzero_si512();
      transpose_words_16x16(v);
      for (std::int64_t i = 0; i < 16 && qb + 2 * i < te; ++i) _mm512_storeu_si512(Q.pair(qb + 2 * i) + 2 * kb, v[i]);
    }
  }
  if (t & 1)  // the pair (t - 1, t): no query t
    for (std::int64_t k = 0; k < Q.keys(); ++k) Q.pair(t - 1)[2 * k + 1] = bfloat16(0.0f);
}

#endif  // SPRIG_BF16_GEMM_X86

}  // namespace detail
}  // namespace sprig
