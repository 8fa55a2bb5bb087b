// sprig/kernels/bf16_spmm_pairs.hpp — the avx512_bf16 path of bf16_spmm and
// bf16_spmm_transposed (Bf16SpmmPath, kernels/bf16_spmm.hpp): X packed so that two rows
// interleave in column order, and a tile that takes a row's weights two at a time through
// `vdpbf16ps`. Compiled where the kernels are built for AVX-512 with AVX512-BF16
// (SPRIG_BF16_BLOCK_DP, kernels/operands.hpp); bf16_pairs_for says where it runs.
#pragma once

#include <algorithm>
#include <cstdint>

#include "../core/bfloat16.hpp"
#include "../core/matrix.hpp"
#include "../core/tuning.hpp"
#include "operands.hpp"
#include "output_store.hpp"
#include "panels.hpp"
#include "simd.hpp"
#include "spmm.hpp"

namespace sprig::detail {

// Whether architecture A runs the avx512_bf16 path (Bf16SpmmPath, kernels/bf16_spmm.hpp): kernels
// compiled for AVX-512 with AVX512-BF16, registers of 16 floats.
template <class A>
constexpr bool bf16_pairs_for() noexcept {
#if SPRIG_BF16_BLOCK_DP
  if constexpr (kSimdFor<float, A>) return Batch<float, A>::size == 16;
#endif
  return false;
}

#if SPRIG_BF16_BLOCK_DP
// Word p of each packed register of 32 columns holds column kBf16PairOrder[p]: in 128-bit lane
// L, words 0-3 columns 4L..4L+3 and words 4-7 columns 16+4L..16+4L+3, so that vpunpcklwd of two
// rows gives columns [0, 16) and vpunpckhwd columns [16, 32), each 32-bit lane a (row a, row b)
// pair in column order.
alignas(64) inline constexpr std::uint16_t kBf16PairOrder[32] = {0,  1,  2,  3,  16, 17, 18, 19, 4,  5,  6,
                                                                 7,  20, 21, 22, 23, 8,  9,  10, 11, 24, 25,
                                                                 26, 27, 12, 13, 14, 15, 28, 29, 30, 31};

// Rows [c0, c1) of the pair tile's packed X (the plan's layout, `rows` rows a panel, 32 bf16 a
// register, kBf16PairOrder within each, zero past the batch); rows >= X.rows() are all zero
// (the one the tile pairs an odd weight with). O((c1 - c0) x B).
inline void pack_bf16_pairs(const PanelPlan& plan, ConstMatrixView<bfloat16> X, bfloat16* packed, std::int64_t rows,
                            std::int64_t c0, std::int64_t c1) noexcept {
  const __m512i order = _mm512_load_si512(kBf16PairOrder);
  const std::int64_t K = X.rows(), Bw = X.cols();
  // rows outer: each X row is read once, front to back, into every panel
  for (std::int64_t c = c0; c < c1; ++c) {
    for (std::int64_t p = 0; p < plan.count(); ++p) {
      const std::int64_t b0 = plan.begin(p), regs = plan.regs_of(p);
      bfloat16* dst = packed + rows * b0 + c * regs * 32;
      for (std::int64_t r = 0; r < regs; ++r) {
        const std::int64_t j0 = b0 + 32 * r, n = c < K ? std::clamp<std::int64_t>(Bw - j0, 0, 32) : 0;
        const auto mask = static_cast<__mmask32>(n >= 32 ? ~0u : (1u << n) - 1u);
        const __m512i v = n > 0 ? _mm512_maskz_loadu_epi16(mask, X.row(c) + j0) : _mm512_setzero_si512();
        _mm512_storeu_si512(dst + 32 * r, _mm512_permutexvar_epi16(order, v));
      }
    }
  }
}

// bf16_spmm_tile on the pair layout: the row's weights two at a time, (w_a, w_b) broadcast as
// one 32-bit pair against rows a and b interleaved, vdpbf16ps adding w_a x_a + w_b x_b into
// each float lane; an odd last weight pairs with the zero row `zero`. xp, xs and zero in 32-bit
// words; R registers of 32 columns: 2R float accumulators per chain, C = spmm_chains(2R)
// chains of weight pairs, summed pairwise.
template <class A, class Index, int R, class Vals, class Out>
SPRIG_ALWAYS_INLINE void bf16_spmm_tile_pairs(const Index* __restrict cols, Vals vals, std::int64_t n,
                                              const std::uint32_t* __restrict xp, std::int64_t xs,
                                              const std::uint32_t* zero, Out* __restrict y, std::int64_t valid,
                                              bool accumulate, const float* bias, bool relu,
                                              const bfloat16* scale) noexcept {
  constexpr int RF = 2 * R;
  constexpr int C = spmm_chains(RF);
  constexpr std::int64_t D = SPRIG_SPMM_PREFETCH;
  constexpr std::int64_t row_bytes = R * 64;
  __m512 acc[C][RF];
  SPRIG_UNROLL for (int k = 0; k < C; ++k) SPRIG_UNROLL for (int r = 0; r < RF; ++r) acc[k][r] = _mm512_setzero_ps();
  const auto row = [&](std::int64_t q)
                       SPRIG_ALWAYS_INLINE_LAMBDA { return xp + static_cast<std::int64_t>(cols[q]) * xs; };
  const auto pair = [&](std::int64_t q) SPRIG_ALWAYS_INLINE_LAMBDA {
    return static_cast<std::uint32_t>(vals[q].bits) | static_cast<std::uint32_t>(vals[q + 1].bits) << 16;
  };
  const auto step = [&](int k, const std::uint32_t* xa, const std::uint32_t* xb,
                        std::uint32_t w2) SPRIG_ALWAYS_INLINE_LAMBDA {
    const auto w = (__m512bh)_mm512_set1_epi32(static_cast<int>(w2));
    SPRIG_UNROLL for (int r = 0; r < R; ++r) {
      const __m512i a = _mm512_loadu_si512(xa + 16 * r), b = _mm512_loadu_si512(xb + 16 * r);
      acc[k][2 * r] = _mm512_dpbf16_ps(acc[k][2 * r], (__m512bh)_mm512_unpacklo_epi16(a, b), w);
      acc[k][2 * r + 1] = _mm512_dpbf16_ps(acc[k][2 * r + 1], (__m512bh)_mm512_unpackhi_epi16(a, b), w);
    }
  };
  std::int64_t q = 0;
  for (; q + 2 * C <= n; q += 2 * C) {
    if (q + D + 2 * C <= n) SPRIG_UNROLL for (int k = 0; k < 2 * C; ++k) {
        prefetch_row_start<row_bytes>(row(q + D + k));
        vals.prefetch(q + D + k);
      }
    SPRIG_UNROLL for (int k = 0; k < C; ++k) step(k, row(q + 2 * k), row(q + 2 * k + 1), pair(q + 2 * k));
  }
  int k = 0;  // fewer than 2C weights left: at most C - 1 pairs, then an odd one
  for (; q + 2 <= n; q += 2, ++k) step(k, row(q), row(q + 1), pair(q));
  if (q < n) step(k, row(q), zero, vals[q].bits);
  SPRIG_UNROLL for (int s = 1; s < C; s *= 2)  // pairwise: ((c0 + c1) + (c2 + c3)) + ...
      SPRIG_UNROLL for (int j = 0; j + s < C; j += 2 * s) SPRIG_UNROLL for (int r = 0; r < RF; ++r) acc[j][r] =
          _mm512_add_ps(acc[j][r], acc[j + s][r]);
  SPRIG_UNROLL for (int r = 0; r < RF; ++r) {
    const std::int64_t first = r * 16;  // register 2j: columns [32j, 32j + 16), 2j + 1 the next 16
    if (first >= valid) break;
    store_output<A>(y + first, Batch<float, A>(acc[0][r]), std::min<std::int64_t>(16, valid - first), accumulate, bias,
                    relu, scale ? scale + first : nullptr);
  }
}
#endif

}  // namespace sprig::detail
