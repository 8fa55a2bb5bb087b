// sprig/kernels/bf16_sddmm.hpp — the weight gradient at live slots from bf16 activations,
// accumulated and returned in float: grad[s] = dot(dY[i,:], X[c,:]) for every live slot
// s = (i, c) of W, into a float array aligned with W's slots.
//
//   bf16_sddmm(W, dY, X, grad, ws, mode)         the fastest path here (bf16_sddmm_path())
//   bf16_sddmm(W, dY, X, grad, ws, mode, path)   that path (tests, benchmarks)
//
// Two paths (Bf16SddmmPath, bf16_paths.hpp):
//   avx512_bf16  x86-64 with AVX512F + AVX512BW + AVX512-BF16 (asked of the CPU and OS at run
//                time, as bf16_gemm does): `vdpbf16ps` multiplies 32 adjacent bf16 pairs of dY
//                and X and adds each pair's two products into one float lane, so a dot over
//                the batch takes half the instructions of float multiply-adds and half the
//                bytes. Used through function target attributes: no special compiler flags.
//   portable     everywhere: each register of 2N bf16 is widened into the float registers of
//                its even and odd elements (a shift and a mask) and multiplied-added in float
//                (one template over xsimd; the scalar path widens element by element; in a
//                dispatching build, on the target the CPU allows, dispatch.hpp).
// Both follow sddmm.hpp's plan: X packed in panels of whole registers (zero past the batch)
// kept in L2, a row's dY panel held in registers, N slots in flight, their dots reduced
// together by a batched horizontal sum; panels after the first add into grad.
//
// Numerics: every path forms the exact products (a bf16 times a bf16 fits a float) and sums
// them, and in accumulate mode grad's old value, in float in some order: each grad[s] is within
// gamma_{B+1} * (|g_old| + sum_b |dy x|) of the exact value, gamma_n = n u / (1 - n u),
// u = 2^-24. The paths sum in different orders, so they agree to twice that, not bit for bit.
// `vdpbf16ps` treats subnormal bf16 inputs as zero and flushes subnormal results (the
// portable path keeps them): below 2^-126 the paths differ by more. NaN and infinities
// propagate on both.
// Determinism: each grad[s] is summed in an order fixed by the path, B and the panel plan
// alone, so each path is bitwise identical for every thread count.
#pragma once

#include <type_traits>

#include <algorithm>
#include <cstdint>
#include <span>
#include <string>

#include "../core/bfloat16.hpp"
#include "../core/config.hpp"
#include "../core/error.hpp"
#include "../core/matrix.hpp"
#include "../core/padded_csr.hpp"
#include "../core/tuning.hpp"
#include "bf16_paths.hpp"
#include "bf16_spmm.hpp"
#include "panels.hpp"
#include "parallel.hpp"
#include "row_partition.hpp"
#include "sddmm.hpp"
#include "simd.hpp"
#include "update_mode.hpp"
#include "workspace.hpp"

namespace sprig {

namespace detail {

#if SPRIG_BF16_GEMM_X86
#  define SPRIG_DETAIL_BF16_DP_TARGET __attribute__((target("avx512bf16,avx512f,avx512bw")))

// out lane k = the sum of the lanes of acc[k], k < 16, in 4 shuffle-and-add levels over all 16
// at once. The levels leave the sums in lane order 0 2 1 3 8 10 9 11 4 6 5 7 12 14 13 15 (an
// involution), so the accumulators are fed in that order.
SPRIG_DETAIL_BF16_DP_TARGET SPRIG_ALWAYS_INLINE __m512 avx512bf16_hsum16(const __m512* acc) noexcept {
  constexpr int order[16] = {0, 2, 1, 3, 8, 10, 9, 11, 4, 6, 5, 7, 12, 14, 13, 15};
  __m512 r[8], s[4], t[2];
  SPRIG_UNROLL for (int k = 0; k < 8; ++k) {  // 256-bit halves: [k, k, k+8, k+8] by 128-bit block
    const __m512 x = acc[order[k]], y = acc[order[k + 8]];
    r[k] = _mm512_add_ps(_mm512_shuffle_f32x4(x, y, 0x44), _mm512_shuffle_f32x4(x, y, 0xEE));
  }
  SPRIG_UNROLL for (int k = 0; k < 4; ++k)  // 128-bit blocks: [k, k+8, k+4, k+12]
      s[k] = _mm512_add_ps(_mm512_shuffle_f32x4(r[k], r[k + 4], 0x88), _mm512_shuffle_f32x4(r[k], r[k + 4], 0xDD));
  SPRIG_UNROLL for (int k = 0; k < 2; ++k)  // lane pairs
      t[k] = _mm512_add_ps(_mm512_shuffle_ps(s[k], s[k + 2], 0x44), _mm512_shuffle_ps(s[k], s[k + 2], 0xEE));
  return _mm512_add_ps(_mm512_shuffle_ps(t[0], t[1], 0x88), _mm512_shuffle_ps(t[0], t[1], 0xDD));
}

// One slot's partial dot over R registers of 32 bf16: dv (dY) against the X row at x.
template <int R>
SPRIG_DETAIL_BF16_DP_TARGET SPRIG_ALWAYS_INLINE __m512 avx512bf16_dot(const __m512i* dv, const bfloat16* x) noexcept {
  __m512 a = _mm512_setzero_ps();
  SPRIG_UNROLL for (int r = 0; r < R; ++r) a =
      _mm512_dpbf16_ps(a, (__m512bh)dv[r], (__m512bh)_mm512_loadu_si512(x + 32 * r));
  return a;
}

// Partial dots of one row over one panel (sddmm.hpp's sddmm_tile with vdpbf16ps): d holds
// R x 32 bf16 of dY[i, panel] (zero past the batch), X panel rows xs elements apart from xp.
template <class Index, int R>
SPRIG_DETAIL_BF16_DP_TARGET inline void bf16_sddmm_tile_avx512bf16(const Index* __restrict cols, std::int64_t n,
                                                                   const bfloat16* __restrict d,
                                                                   const bfloat16* __restrict xp, std::int64_t xs,
                                                                   float* __restrict g, bool add) noexcept {
  constexpr std::int64_t row_bytes = R * 64;
  __m512i dv[R];
  SPRIG_UNROLL for (int r = 0; r < R; ++r) dv[r] = _mm512_loadu_si512(d + 32 * r);
  __m512 acc[16];
  std::int64_t q = 0;
  for (; q + 16 <= n; q += 16) {
    SPRIG_UNROLL for (std::int64_t k = 0; k < 16; ++k) {
      if (q + k + 16 < n) prefetch_row_start<row_bytes>(xp + static_cast<std::int64_t>(cols[q + k + 16]) * xs);
      acc[k] = avx512bf16_dot<R>(dv, xp + static_cast<std::int64_t>(cols[q + k]) * xs);
    }
    __m512 s = avx512bf16_hsum16(acc);
    if (add) s = _mm512_add_ps(s, _mm512_loadu_ps(g + q));
    _mm512_storeu_ps(g + q, s);
  }
  if (q < n) {
    const std::int64_t m = n - q;
    SPRIG_UNROLL for (std::int64_t k = 0; k < 16; ++k) acc[k] =
        k < m ? avx512bf16_dot<R>(dv, xp + static_cast<std::int64_t>(cols[q + k]) * xs) : _mm512_setzero_ps();
    const auto mask = static_cast<__mmask16>((1u << m) - 1u);
    __m512 s = avx512bf16_hsum16(acc);
    if (add) s = _mm512_add_ps(s, _mm512_maskz_loadu_ps(mask, g + q));
    _mm512_mask_storeu_ps(g + q, mask, s);
  }
}
#endif

#if SPRIG_KERNEL_SIMD
// The portable tile: dY's R registers of 2N bf16 split once into the float registers of their
// even and odd elements; per slot, X's registers split the same way and multiplied-added.
template <class A, class Index, int R>
SPRIG_ALWAYS_INLINE void bf16_sddmm_tile(const Index* __restrict cols, std::int64_t n, const bfloat16* __restrict d,
                                         const bfloat16* __restrict xp, std::int64_t xs, float* __restrict g,
                                         bool add) noexcept {
  using F = Batch<float, A>;
  using U = xsimd::batch<std::uint32_t, A>;
  constexpr std::int64_t N = F::size;
  constexpr std::int64_t row_bytes = R * N * 4;
  const U high(0xFFFF'0000u);
  F de[R], dd[R];
  SPRIG_UNROLL for (int r = 0; r < R; ++r) {
    const U u = U::load_unaligned(reinterpret_cast<const std::uint32_t*>(d + 2 * N * r));
    de[r] = xsimd::bitwise_cast<F>(u << 16);
    dd[r] = xsimd::bitwise_cast<F>(u & high);
  }
  const auto dot = [&](const bfloat16* x) SPRIG_ALWAYS_INLINE_LAMBDA {
    F a(0.0f);
    SPRIG_UNROLL for (int r = 0; r < R; ++r) {
      const U u = U::load_unaligned(reinterpret_cast<const std::uint32_t*>(x + 2 * N * r));
      a = xsimd::fma(de[r], xsimd::bitwise_cast<F>(u << 16), a);
      a = xsimd::fma(dd[r], xsimd::bitwise_cast<F>(u & high), a);
    }
    return a;
  };
  F acc[N];
  std::int64_t q = 0;
  for (; q + N <= n; q += N) {
    SPRIG_UNROLL for (std::int64_t k = 0; k < N; ++k) {
      if (q + k + N < n) prefetch_row_start<row_bytes>(xp + static_cast<std::int64_t>(cols[q + k + N]) * xs);
      acc[k] = dot(xp + static_cast<std::int64_t>(cols[q + k]) * xs);
    }
    F s = batched_hsum(acc);
    if (add) s += F::load_unaligned(g + q);
    s.store_unaligned(g + q);
  }
  if (q < n) {
    const std::int64_t m = n - q;
    SPRIG_UNROLL for (std::int64_t k = 0; k < N; ++k) acc[k] =
        k < m ? dot(xp + static_cast<std::int64_t>(cols[q + k]) * xs) : F(0.0f);
    alignas(64) float tmp[N];
    batched_hsum(acc).store_aligned(tmp);
    for (std::int64_t k = 0; k < m; ++k) g[q + k] = add ? g[q + k] + tmp[k] : tmp[k];
  }
}

// The widest panel of the portable tile, in registers of 2N bf16: 2R dY registers + N
// accumulators + 3 temporaries within the register file.
template <class A>
constexpr std::int64_t bf16_sddmm_max_regs() noexcept {
  constexpr std::int64_t N = Batch<float, A>::size;
  return std::clamp<std::int64_t>((kVectorRegistersOf<A> - N - 3) / 2, 1, kMaxPanelRegs);
}
#endif

// The panel loop of both vector paths: `unit` bf16 per register, tiles of R <= max_regs
// registers; tile(R, cols, n, d, xp, xs, g, add) for one row's slots of one panel.
template <ColumnIndex Index, class Tile>
void bf16_sddmm_panels(const PaddedCSR<float, Index>& W, ConstMatrixView<bfloat16> dY, ConstMatrixView<bfloat16> X,
                       std::span<float> grad, Update mode, KernelWorkspace<float>& ws, std::int64_t unit,
                       std::int64_t max_regs, Tile&& tile) {
  const std::int64_t K = X.rows(), Bw = X.cols();
  const ColumnBlocks blocks = bf16_column_blocks(unit, K, Bw, ws.column_block_bytes, kMaxPanelRegs);
  const PanelPlan plan(Bw, std::min(K, blocks.width), unit, 2, SPRIG_SDDMM_PANEL_BUDGET_BYTES, max_regs);
  const bool in_place = plan.in_place();
  bfloat16* packed = in_place ? nullptr : bf16_scratch(ws, plan.packed_size(K));
  const std::int64_t* bounds = blocks.count > 1 ? ws.column_bounds(W, blocks) : nullptr;
  ws.partition.update(W);
  const bool overwrite = mode == Update::overwrite;
  const bool dead = W.dead_slots() > 0;
  const Index* cols = W.col_indices().data();
  run_partitioned(
      ws.partition, W.nnz() * Bw,
      [&](int t, int n) {
        if (!in_place) pack_panels(plan, X, packed, K * t / n, K * (t + 1) / n);
        if (overwrite && dead) {
          const std::int64_t S = std::ssize(grad);
          std::fill(grad.data() + S * t / n, grad.data() + S * (t + 1) / n, 0.0f);
        }
      },
      [&](std::int64_t r0, std::int64_t r1) {
        if (overwrite) zero_row_padding(W, grad.data(), r0, r1);
        alignas(64) bfloat16 dpad[kMaxPanelRegs * 64];
        for (std::int64_t p = 0; p < plan.count(); ++p) {
          const std::int64_t b0 = plan.begin(p), regs = plan.regs_of(p);
          const bfloat16* xp = in_place ? X.data() : packed + K * b0;
          const std::int64_t xs = in_place ? X.stride() : regs * unit;
          const std::int64_t valid = plan.columns(p);
          const bool add = !overwrite || p > 0;
          for_each_row_segment(
              W, r0, r1, bounds, blocks.count, [](std::int64_t) SPRIG_ALWAYS_INLINE_LAMBDA {},
              [&](std::int64_t i, std::int64_t s, std::int64_t n, bool, bool) SPRIG_ALWAYS_INLINE_LAMBDA {
                if (n == 0) return;
                const bfloat16* d = dY.row(i) + b0;
                if (valid < regs * unit) {  // batch tail: zero-padded copy, so no load reads past the row
                  std::copy_n(d, valid, dpad);
                  std::fill(dpad + valid, dpad + regs * unit, bfloat16{});
                  d = dpad;
                }
                tile(regs, cols + s, n, d, xp, xs, grad.data() + s, add);
              });
        }
      });
}

// The portable path on architecture A once the operands are checked and X.cols() and W.nnz()
// are not 0: what a dispatching build's table points to (dispatch.hpp).
template <class A, ColumnIndex Index>
void bf16_sddmm_portable_on(const PaddedCSR<float, Index>& W, ConstMatrixView<bfloat16> dY, ConstMatrixView<bfloat16> X,
                            std::span<float> grad, KernelWorkspace<float>& ws, Update mode) {
#if SPRIG_KERNEL_SIMD
  if constexpr (kSimdFor<float, A>) {
    constexpr std::int64_t unit = 2 * Batch<float, A>::size;
    bf16_sddmm_panels(W, dY, X, grad, mode, ws, unit, bf16_sddmm_max_regs<A>(),
                      [](std::int64_t regs, const Index* cols, std::int64_t n, const bfloat16* d, const bfloat16* xp,
                         std::int64_t xs, float* g, bool add) {
                        with_panel_regs(regs, [&]<int R>(std::integral_constant<int, R>) {
                          if constexpr (R <= bf16_sddmm_max_regs<A>())
                            bf16_sddmm_tile<A, Index, R>(cols, n, d, xp, xs, g, add);
                        });
                      });
    return;
  }
#endif
  sddmm_scalar(W, dY, X, grad, mode, ws);
}

#if SPRIG_BF16_GEMM_X86
template <ColumnIndex Index>
void bf16_sddmm_avx512(const PaddedCSR<float, Index>& W, ConstMatrixView<bfloat16> dY, ConstMatrixView<bfloat16> X,
                       std::span<float> grad, Update mode, KernelWorkspace<float>& ws) {
  bf16_sddmm_panels(W, dY, X, grad, mode, ws, 32, kMaxPanelRegs,
                    [](std::int64_t regs, const Index* cols, std::int64_t n, const bfloat16* d, const bfloat16* xp,
                       std::int64_t xs, float* g, bool add) {
                      with_panel_regs(regs, [&]<int R>(std::integral_constant<int, R>) {
                        bf16_sddmm_tile_avx512bf16<Index, R>(cols, n, d, xp, xs, g, add);
                      });
                    });
}
#endif

}  // namespace detail

// Whether bf16_sddmm can take `path` here (portable: always), and why not
// (bf16_gemm_unavailable_reason's wording; empty when it can).
inline std::string bf16_sddmm_unavailable_reason(Bf16SddmmPath path) {
  return path == Bf16SddmmPath::portable ? std::string() : detail::bf16_gemm_reason(Bf16GemmPath::avx512_bf16);
}
inline bool bf16_sddmm_available(Bf16SddmmPath path) { return bf16_sddmm_unavailable_reason(path).empty(); }

// The path bf16_sddmm(W, dY, X, grad, ws, mode) takes in this process: avx512_bf16, else
// portable.
inline Bf16SddmmPath bf16_sddmm_path() {
  return bf16_sddmm_available(Bf16SddmmPath::avx512_bf16) ? Bf16SddmmPath::avx512_bf16 : Bf16SddmmPath::portable;
}

// grad (=|+=) the weight gradient at W's live slots on `path` (top of this file), dY and X
// bf16, grad float, with a caller-owned float workspace.
// Preconditions: dY is W.rows() x B, X is W.cols() x B and grad.size() == W.storage_size()
// (else ShapeError); grad shares no memory with dY, X or W's values (else ArgumentError); path
// available here (else ArgumentError, bf16_sddmm_unavailable_reason). Overwrite writes every
// slot (0 at padding and dead slots) and never reads grad; accumulate leaves non-live slots
// unchanged. W's values are never read.
// Complexity: O(nnz(W) x B) products, plus O(K x B) to pack X where it is not read in place
// and O(nnz(W)) per topology change. Threads: OpenMP over nnz-balanced row ranges; bitwise
// identical for any thread count within a path. The workspace must not be shared by
// concurrent calls.
template <ColumnIndex Index>
void bf16_sddmm(const PaddedCSR<float, Index>& W, ConstMatrixView<bfloat16> dY, ConstMatrixView<bfloat16> X,
                std::span<float> grad, KernelWorkspace<float>& workspace, Update mode, Bf16SddmmPath path) {
  if (dY.rows() != W.rows() || X.rows() != W.cols() || dY.cols() != X.cols() || std::ssize(grad) != W.storage_size())
    throw ShapeError(detail::message("sprig::bf16_sddmm: W is ", W.rows(), "x", W.cols(), " with ", W.storage_size(),
                                     " slots, dY is ", dY.rows(), "x", dY.cols(), ", X is ", X.rows(), "x", X.cols(),
                                     ", grad has ", grad.size(), " entries (need dY ", W.rows(), "xB, X ", W.cols(),
                                     "xB, grad ", W.storage_size(), ")"));
  detail::check_no_overlap("sprig::bf16_sddmm", "grad", grad, "dY", dY);
  detail::check_no_overlap("sprig::bf16_sddmm", "grad", grad, "X", X);
  detail::check_no_overlap("sprig::bf16_sddmm", "grad", grad, "W's values", W.values());
  if (const std::string why = bf16_sddmm_unavailable_reason(path); !why.empty())
    throw ArgumentError(detail::message("sprig::bf16_sddmm: the ", path_name(path), " path is not available: ", why));
  if (X.cols() == 0 || W.nnz() == 0) {  // every dot is empty
    if (mode == Update::overwrite) std::fill(grad.begin(), grad.end(), 0.0f);
    return;
  }
#if SPRIG_BF16_GEMM_X86
  if (path == Bf16SddmmPath::avx512_bf16) {
    detail::bf16_sddmm_avx512(W, dY, X, grad, mode, workspace);
    return;
  }
#endif
  detail::bf16_sddmm_portable_kernel<Index>()(W, dY, X, grad, workspace, mode);
}

// The same on the fastest path here (bf16_sddmm_path()).
template <ColumnIndex Index>
void bf16_sddmm(const PaddedCSR<float, Index>& W, ConstMatrixView<bfloat16> dY, ConstMatrixView<bfloat16> X,
                std::span<float> grad, KernelWorkspace<float>& workspace, Update mode = Update::overwrite) {
  bf16_sddmm(W, dY, X, grad, workspace, mode, bf16_sddmm_path());
}

}  // namespace sprig
