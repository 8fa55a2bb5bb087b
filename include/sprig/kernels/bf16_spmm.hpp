// sprig/kernels/bf16_spmm.hpp — Y[M,B] = W[M,K] X[K,B] (or +=) with bfloat16 weights and
// activations and float accumulation, and dX = W^T dY on a cached transpose: the forward and
// the input gradient of a sparse layer trained in bf16.
//
//   refresh_bf16_values(W, values)                    values[s] = bfloat16(W.values()[s]), every slot
//   bf16_spmm(W, values, X, Y, ws, mode)              Y (=|+=) W X
//   bf16_spmm(W, values, X, Y, ws, epilogue)          Y = act(W X + bias), in the store
//   bf16_spmm_transposed(W, values, cache, dY, dX, ws, mode)   dX (=|+=) W^T dY
//   bf16_spmm_transposed(W, values, cache, dY, dX, D, ws)     dX = bf16(D * (W^T dY))
//
// W (a PaddedCSR<float, Index>, whose float values are the optimizer's master weights) gives
// the structure only: row offsets and column indices. The weights come from `values`, a bf16
// shadow with W's slot layout (W.storage_size() entries; refresh_bf16_values writes it after
// each optimizer step). X, dY are bf16 and feature-major ([features x batch], batch
// contiguous); Y, dX are float or bf16, as the caller asks (a bf16 output is the float result
// of one column block rounded once, to nearest even; accumulate adds the old bf16 value,
// widened, before that).
//
// Two paths (Bf16SpmmPath, bf16_paths.hpp; every function takes one, else bf16_spmm_path()):
//   portable     everywhere, described next.
//   avx512_bf16  kernels compiled for AVX-512 with AVX512-BF16 (-march for such a CPU), on a
//                CPU and OS that run it (bf16_gemm's probe): a row's weights two at a time,
//                `vdpbf16ps` adding w_a x_a + w_b x_b per float lane, the two X rows interleaved
//                by one unpack per 16 columns (X packed in an order that makes them come out in
//                column order; bf16_spmm_pairs.hpp). Per weight and 32 columns one load, one
//                unpack and one dot instruction instead of a load, a shift, a mask and two FMAs.
//
// How (portable): spmm.hpp's algorithm on bf16 data. X is packed panel by panel (panels.hpp), each panel
// row a whole number of vector registers of 2N bf16 (N floats per register), with the two
// halves of each 2N-column group interleaved: 32-bit lane j holds column j in its low half and
// column j + N in its high half. One register load then gives, after a 16-bit left shift and
// a mask of the low half, the two float registers of columns [0, N) and [N, 2N), both exact;
// the weight (bf16, widened) multiplies both into float accumulators. Reading X in bf16 halves
// the bytes a weight pulls from L2, which is what bounds the fp32 kernel. One template over
// xsimd: the same code on AVX2, AVX-512, NEON and SSE; the scalar path widens element by
// element. A dispatching build runs the target the CPU allows (dispatch.hpp).
//
// Numerics: each output is a sum of row_nnz exact products (a bf16 times a bf16 fits a float)
// and, in accumulate mode, the old value, summed in float: within gamma_{n} * (sum |w x| +
// |y_old|) of the exact value, n = row_nnz + 1, gamma_n = n u / (1 - n u), u = 2^-24; a bf16
// output adds one rounding of at most 2^-8 relative, on both paths. NaN and infinities
// propagate; subnormals are kept on the portable path, while `vdpbf16ps` treats subnormal
// inputs as zero and flushes subnormal results (below 2^-126 the paths differ by more).
// Determinism: each output element is summed in an order fixed by the path, W's row, the batch
// width and the column blocks alone (spmm.hpp's chains and blocks; the paths sum in different
// orders), so each path is bitwise identical for every thread count.
#pragma once

#include <type_traits>

#include <algorithm>
#include <concepts>
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
#include "bf16_spmm_pairs.hpp"
#include "bfloat16_convert.hpp"
#include "output_store.hpp"
#include "panels.hpp"
#include "parallel.hpp"
#include "row_partition.hpp"
#include "simd.hpp"
#include "spmm.hpp"
#include "transpose.hpp"
#include "update_mode.hpp"
#include "workspace.hpp"

namespace sprig {

// values[s] = bfloat16(W.values()[s]) for every slot s (padding and dead slots included),
// rounded to nearest even: the bf16 shadow the bf16 kernels read. Throws ShapeError unless
// values.size() == W.storage_size(), ArgumentError for a structure-only W (it has no values)
// or values overlapping W's. O(storage), one thread.
template <ColumnIndex Index>
void refresh_bf16_values(const PaddedCSR<float, Index>& W, std::span<bfloat16> values) {
  if (W.structure_only())
    throw ArgumentError("sprig::refresh_bf16_values: W is structure-only (no float values to round)");
  if (std::ssize(values) != W.storage_size())
    throw ShapeError(detail::message("sprig::refresh_bf16_values: W has ", W.storage_size(), " slots, values has ",
                                     values.size(), " entries"));
  detail::check_no_overlap("sprig::refresh_bf16_values", "values", values, "W's values", W.values());
  to_bfloat16(W.values(), values);
}

namespace detail {

// The output types of bf16_spmm and bf16_spmm_transposed: float, or bf16 (the float result
// rounded once).
template <class Out>
concept Bf16SpmmOutput = std::same_as<Out, float> || std::same_as<Out, bfloat16>;

// n bf16 elements of scratch from a float workspace (the same buffer the float kernels pack
// into, so a model's layers share one whichever precision they run in).
inline bfloat16* bf16_scratch(KernelWorkspace<float>& ws, std::int64_t n) {
  return reinterpret_cast<bfloat16*>(ws.buffer(static_cast<std::size_t>((n + 1) / 2)));
}

// The shapes, the shadow's length (ShapeError), and the output apart from every input
// (ArgumentError).
template <ColumnIndex Index, class Out>
void check_bf16_spmm_operands(const char* fn, const PaddedCSR<float, Index>& W, std::span<const bfloat16> values,
                              std::int64_t in_rows, std::int64_t out_rows, const ConstMatrixView<bfloat16>& X,
                              const MatrixView<Out>& Y) {
  if (X.rows() != in_rows || Y.rows() != out_rows || Y.cols() != X.cols())
    throw ShapeError(message(fn, ": W is ", W.rows(), "x", W.cols(), ", the input is ", X.rows(), "x", X.cols(),
                             ", the output is ", Y.rows(), "x", Y.cols(), " (need the input ", in_rows,
                             "xB and the output ", out_rows, "xB)"));
  if (std::ssize(values) != W.storage_size())
    throw ShapeError(message(fn, ": W has ", W.storage_size(), " slots, the bf16 values have ", values.size(),
                             " entries (refresh_bf16_values writes W.storage_size())"));
  check_no_overlap(fn, "the output", Y, "the input", X);
  check_no_overlap(fn, "the output", Y, "the bf16 values", values);
  check_no_overlap(fn, "the output", Y, "W's values", W.values());
}

// Most pair registers (2N bf16 columns each) a panel tile spans: 2 x 4 float accumulators per
// chain group, as the float kernel's 8-register tiles.
inline constexpr std::int64_t kBf16MaxPanelRegs = 4;

// The column blocks of the bf16 kernels: spmm.hpp's rule with a panel row of
// min(ceil(B / unit), kBf16MaxPanelRegs) registers of `unit` bf16 elements.
inline ColumnBlocks bf16_column_blocks(std::int64_t unit, std::int64_t K, std::int64_t B, std::int64_t budget_bytes,
                                       std::int64_t max_regs) noexcept {
  if (unit <= 1) return ColumnBlocks(K, 1, 2 * K + 2);  // one block: width > K
  const std::int64_t regs = std::min<std::int64_t>((B + unit - 1) / unit, max_regs);
  return ColumnBlocks(K, regs * unit * 2, budget_bytes);
}

#if SPRIG_KERNEL_SIMD
// Rows [c0, c1) of X packed with the plan's layout (plan.simd = 2N), each group of 2N columns
// half-interleaved (top of this file), zero past the batch. O((c1 - c0) x B).
template <class A>
void pack_bf16_halves(const PanelPlan& plan, ConstMatrixView<bfloat16> X, std::uint32_t* packed, std::int64_t c0,
                      std::int64_t c1) noexcept {
  using U = xsimd::batch<std::uint32_t, A>;
  constexpr std::int64_t N = U::size;
  const std::int64_t K = X.rows(), Bw = X.cols();
  // rows outer: each X row is read once, front to back, into every panel
  for (std::int64_t c = c0; c < c1; ++c) {
    const auto* src = reinterpret_cast<const std::uint16_t*>(X.row(c));
    for (std::int64_t p = 0; p < plan.count(); ++p) {
      const std::int64_t b0 = plan.begin(p), regs = plan.regs_of(p);
      std::uint32_t* dst = packed + K * b0 / 2 + c * regs * N;
      for (std::int64_t r = 0; r < regs; ++r) {
        const std::int64_t j0 = b0 + r * 2 * N;
        if (j0 + 2 * N <= Bw) {
          const U lo = load_widened_u16<A>(src + j0), hi = load_widened_u16<A>(src + j0 + N);
          (lo | (hi << 16)).store_unaligned(dst + r * N);
        } else {
          for (std::int64_t j = 0; j < N; ++j) {
            const std::uint32_t lo = j0 + j < Bw ? src[j0 + j] : 0u, hi = j0 + N + j < Bw ? src[j0 + N + j] : 0u;
            dst[r * N + j] = lo | (hi << 16);
          }
        }
      }
    }
  }
}

// Y[i, panel] for one row: `n` live weights (cols, vals: bf16), packed X panel rows `xs`
// 32-bit words apart from xp; stores the first `valid` columns at y through store_output
// (bias: the row's bias or nullptr; scale: the row's x_derivative at y's columns, or nullptr).
// R pair registers: 2R float accumulators per chain, C = spmm_chains(2R) chains dealt
// round-robin, summed pairwise.
template <class A, class Index, int R, class Vals, class Out>
SPRIG_ALWAYS_INLINE void bf16_spmm_tile(const Index* __restrict cols, Vals vals, std::int64_t n,
                                        const std::uint32_t* __restrict xp, std::int64_t xs, Out* __restrict y,
                                        std::int64_t valid, bool accumulate, const float* bias, bool relu,
                                        const bfloat16* scale) noexcept {
  using F = Batch<float, A>;
  using U = xsimd::batch<std::uint32_t, A>;
  constexpr std::int64_t N = F::size;
  constexpr int RF = 2 * R;
  constexpr int C = spmm_chains(RF);
  constexpr std::int64_t D = SPRIG_SPMM_PREFETCH;
  constexpr std::int64_t row_bytes = R * N * 4;
  const U high(0xFFFF'0000u);
  F acc[C][RF];
  SPRIG_UNROLL for (int k = 0; k < C; ++k) SPRIG_UNROLL for (int r = 0; r < RF; ++r) acc[k][r] = F(0.0f);
  const auto step = [&](int k, std::int64_t q) SPRIG_ALWAYS_INLINE_LAMBDA {
    const F w(static_cast<float>(vals[q]));
    const std::uint32_t* x = xp + static_cast<std::int64_t>(cols[q]) * xs;
    SPRIG_UNROLL for (int r = 0; r < R; ++r) {
      const U u = U::load_unaligned(x + r * N);
      acc[k][2 * r] = xsimd::fma(w, xsimd::bitwise_cast<F>(u << 16), acc[k][2 * r]);
      acc[k][2 * r + 1] = xsimd::fma(w, xsimd::bitwise_cast<F>(u & high), acc[k][2 * r + 1]);
    }
  };
  std::int64_t q = 0;
  for (; q + C <= n; q += C) {
    if (q + D + C <= n) SPRIG_UNROLL for (int k = 0; k < C; ++k) {
        prefetch_row_start<row_bytes>(xp + static_cast<std::int64_t>(cols[q + D + k]) * xs);
        vals.prefetch(q + D + k);
      }
    SPRIG_UNROLL for (int k = 0; k < C; ++k) step(k, q + k);
  }
  for (int k = 0; q + k < n; ++k) step(k, q + k);
  SPRIG_UNROLL for (int s = 1; s < C; s *= 2)  // pairwise: ((c0 + c1) + (c2 + c3)) + ...
      SPRIG_UNROLL for (int k = 0; k + s < C; k += 2 * s) SPRIG_UNROLL for (int r = 0; r < RF; ++r) acc[k][r] +=
      acc[k + s][r];
  SPRIG_UNROLL for (int r = 0; r < RF; ++r) {
    const std::int64_t first = r * N;  // register 2j: columns [2jN, 2jN + N), 2j + 1 the next N
    if (first >= valid) break;
    store_output<A>(y + first, acc[0][r], std::min(N, valid - first), accumulate, bias, relu,
                    scale ? scale + first : nullptr);
  }
}

// Rows [r0, r1) over one panel, block by block where W's columns are blocked (spmm.hpp's
// spmm_panel_rows, the same order; the epilogue with a row's last block). D: the scale rows
// (one column block only), or empty. Pairs: the pair tile (zero: its zero row), else the
// portable one.
template <class A, class Index, int R, bool Pairs, class Vals, class Out>
void bf16_spmm_panel_rows(const PaddedCSR<float, Index>& W, const Vals& vals, std::int64_t r0, std::int64_t r1,
                          const std::uint32_t* xp, std::int64_t xs, MatrixView<Out> Y, std::int64_t b0,
                          std::int64_t valid, bool accumulate, const float* bias, bool relu, const std::int64_t* bounds,
                          std::int64_t blocks, ConstMatrixView<bfloat16> D, const std::uint32_t* zero) noexcept {
  const Index* cols = W.col_indices().data();
  for_each_row_segment(
      W, r0, r1, bounds, blocks, [&](std::int64_t next) SPRIG_ALWAYS_INLINE_LAMBDA { vals.prefetch_slots(next); },
      [&](std::int64_t i, std::int64_t s, std::int64_t n, bool first, bool last) SPRIG_ALWAYS_INLINE_LAMBDA {
        const bfloat16* scale = D.data() ? D.row(i) + b0 : nullptr;
#  if SPRIG_BF16_BLOCK_DP
        if constexpr (Pairs) {
          bf16_spmm_tile_pairs<A, Index, R>(cols + s, vals.at(s), n, xp, xs, zero, Y.row(i) + b0, valid,
                                            accumulate || !first, last && bias ? bias + i : nullptr, last && relu,
                                            scale);
          return;
        }
#  endif
        (void)zero;
        bf16_spmm_tile<A, Index, R>(cols + s, vals.at(s), n, xp, xs, Y.row(i) + b0, valid, accumulate || !first,
                                    last && bias ? bias + i : nullptr, last && relu, scale);
      });
}
#endif

// Column blocks only for float outputs: a bf16 output is rounded once, so its rows are not
// split over blocks (each block's partial sum would be rounded).
template <class Out>
inline constexpr bool kBf16BlocksFor = std::is_same_v<Out, float>;

// The kernel on architecture A; bias (W.rows() entries, or nullptr) and relu: the forward's
// epilogue (row_epilogue.hpp) in the store. `source` (W^T's slot -> W's slot, transpose.hpp), when not
// empty, says that vals reads through that permutation: with more panels than
// SPRIG_SPMM_T_FUSED_PANELS the gather would repeat per panel, so the weights are then gathered
// once into the workspace (each thread a storage range, before the rows) and read directly.
// D (Y's shape, or empty): each sum times D's element before the store (one column block).
// pairs: the avx512_bf16 tile where A has it (bf16_pairs_for), X packed for it with a zero row.
template <class A, ColumnIndex Index, class Vals, class Out>
void bf16_spmm_run(const PaddedCSR<float, Index>& W, const Vals& vals, ConstMatrixView<bfloat16> X, MatrixView<Out> Y,
                   Update mode, KernelWorkspace<float>& ws, const float* bias, bool relu,
                   std::span<const SourceSlot> source = {}, const bfloat16* source_values = nullptr,
                   ConstMatrixView<bfloat16> D = {}, bool pairs = false) {
  const bool accumulate = mode == Update::accumulate;
  const std::int64_t Bw = X.cols();
  ws.partition.update(W);
#if SPRIG_KERNEL_SIMD
  if constexpr (kSimdFor<float, A>) {
    const std::int64_t K = X.rows();
    constexpr std::int64_t N = Batch<float, A>::size, unit = 2 * N;
    const ColumnBlocks blocks = kBf16BlocksFor<Out> && !D.data()
                                    ? bf16_column_blocks(unit, K, Bw, ws.column_block_bytes, kBf16MaxPanelRegs)
                                    : ColumnBlocks(K, 1, 2 * K + 2);  // one block: width > K
    const PanelPlan plan(Bw, std::min(K, blocks.width), unit, 2, kPanelBudgetBytes, kBf16MaxPanelRegs);
    const bool gather = !source.empty() && plan.count() > SPRIG_SPMM_T_FUSED_PANELS;
    const bool use_pairs = bf16_pairs_for<A>() && pairs;
    const std::int64_t packed_rows = use_pairs ? K + 1 : K;  // the pair tile's zero row last
    const std::int64_t packed_elems = (plan.packed_size(packed_rows) + 31) / 32 * 32, S = std::ssize(source);
    bfloat16* buffer = bf16_scratch(ws, packed_elems + (gather ? S : 0));
    auto* packed = reinterpret_cast<std::uint32_t*>(buffer);
    bfloat16* gathered = buffer + packed_elems;
    const std::int64_t* bounds = blocks.count > 1 ? ws.column_bounds(W, blocks) : nullptr;
    const auto rows = [&](const auto& v, std::int64_t r0, std::int64_t r1) {
      for (std::int64_t p = 0; p < plan.count(); ++p) {
        const std::int64_t b0 = plan.begin(p), regs = plan.regs_of(p);
        const std::uint32_t* xp = packed + packed_rows * b0 / 2;
        const std::int64_t xs = regs * N;
        const std::int64_t valid = plan.columns(p);
        const auto run = [&]<int R>(std::integral_constant<int, R>) {
          if constexpr (bf16_pairs_for<A>())
            if (use_pairs) {
              bf16_spmm_panel_rows<A, Index, R, true>(W, v, r0, r1, xp, xs, Y, b0, valid, accumulate, bias, relu,
                                                      bounds, blocks.count, D, xp + K * xs);
              return;
            }
          bf16_spmm_panel_rows<A, Index, R, false>(W, v, r0, r1, xp, xs, Y, b0, valid, accumulate, bias, relu, bounds,
                                                   blocks.count, D, nullptr);
        };
        switch (regs) {
          case 1: run(std::integral_constant<int, 1>{}); break;
          case 2: run(std::integral_constant<int, 2>{}); break;
          case 3: run(std::integral_constant<int, 3>{}); break;
          default: run(std::integral_constant<int, 4>{}); break;
        }
      }
    };
    run_partitioned(
        ws.partition, W.nnz() * Bw,
        [&](int t, int n) {
#  if SPRIG_BF16_BLOCK_DP
          if (use_pairs)
            pack_bf16_pairs(plan, X, buffer, packed_rows, packed_rows * t / n, packed_rows * (t + 1) / n);
          else
#  endif
            pack_bf16_halves<A>(plan, X, packed, K * t / n, K * (t + 1) / n);
          if (gather) gather_slots(source.data(), source_values, gathered, S * t / n, S * (t + 1) / n);
        },
        [&](std::int64_t r0, std::int64_t r1) {
          if (gather)
            rows(DirectValues<bfloat16>{gathered}, r0, r1);
          else
            rows(vals, r0, r1);
        });
    return;
  }
#endif
  (void)source;  // the scalar path reads through vals, whatever it is
  (void)source_values;
  (void)pairs;
  // Scalar path: a 16-wide tile of float accumulators per row, weights in row order.
  constexpr std::int64_t tile = 16;
  const Index* cols = W.col_indices().data();
  run_partitioned(
      ws.partition, W.nnz() * Bw, [](int, int) {},
      [&](std::int64_t r0, std::int64_t r1) {
        for (std::int64_t i = r0; i < r1; ++i) {
          const std::int64_t s = W.row_start(i), n = W.row_nnz(i);
          Out* y = Y.row(i);
          for (std::int64_t b0 = 0; b0 < Bw; b0 += tile) {
            const std::int64_t nb = std::min(tile, Bw - b0);
            float acc[tile] = {};
            for (std::int64_t q = 0; q < n; ++q) {
              const float w = static_cast<float>(vals.at(s)[q]);
              const bfloat16* x = X.row(cols[s + q]) + b0;
              for (std::int64_t j = 0; j < nb; ++j) acc[j] += w * static_cast<float>(x[j]);
            }
            for (std::int64_t j = 0; j < nb; ++j) {
              const float old = accumulate ? static_cast<float>(y[b0 + j]) : 0.0f;
              const float sum = D.data() ? acc[j] * static_cast<float>(D(i, b0 + j)) : acc[j];
              y[b0 + j] = static_cast<Out>(finish(sum, &old, accumulate, bias ? bias + i : nullptr, relu));
            }
          }
        }
      });
}

// The kernel on architecture A once the operands are checked and the output is not empty:
// what a dispatching build's table points to (dispatch.hpp). `source` empty: W's own slots
// (values[s] is slot s's weight); else W is a cached transpose and source its permutation
// into the slots of `values`. bias and relu: the epilogue; D: the scale; pairs: the
// avx512_bf16 path where A has it (bf16_spmm_run).
template <class A, ColumnIndex Index, class Out>
void bf16_spmm_on(const PaddedCSR<float, Index>& W, const bfloat16* values, std::span<const SourceSlot> source,
                  ConstMatrixView<bfloat16> X, MatrixView<Out> Y, KernelWorkspace<float>& ws, Update mode,
                  const float* bias, bool relu, ConstMatrixView<bfloat16> D, bool pairs) {
  if (source.empty())
    bf16_spmm_run<A>(W, DirectValues<bfloat16>{values}, X, Y, mode, ws, bias, relu, {}, nullptr, D, pairs);
  else
    bf16_spmm_run<A>(W, PermutedValues<bfloat16>{values, source.data(), source.data() + source.size()}, X, Y, mode, ws,
                     bias, relu, source, values, D, pairs);
}

}  // namespace detail

// Why bf16_spmm and bf16_spmm_transposed cannot take `path` here, empty when they can:
// avx512_bf16 needs kernels compiled for AVX-512 with AVX512-BF16 (-march for such a CPU) and
// the CPU and OS bf16_gemm's probe asks for.
inline std::string bf16_spmm_unavailable_reason(Bf16SpmmPath path) {
  if (path == Bf16SpmmPath::portable) return {};
  if constexpr (detail::bf16_pairs_for<detail::KernelArch>())
    return detail::bf16_gemm_reason(Bf16GemmPath::avx512_bf16);
  else
    return "the kernels are not compiled for AVX-512 with AVX512-BF16 (build with -march for such a CPU)";
}
inline bool bf16_spmm_available(Bf16SpmmPath path) { return bf16_spmm_unavailable_reason(path).empty(); }

// The path the bf16 sparse products take without one named: avx512_bf16 where it can run,
// else portable. Probed once per process.
inline Bf16SpmmPath bf16_spmm_path() {
  static const Bf16SpmmPath path =
      bf16_spmm_available(Bf16SpmmPath::avx512_bf16) ? Bf16SpmmPath::avx512_bf16 : Bf16SpmmPath::portable;
  return path;
}

namespace detail {
// ArgumentError naming fn unless `path` can run here.
inline void check_bf16_spmm_path(const char* fn, Bf16SpmmPath path) {
  if (path == Bf16SpmmPath::portable) return;
  if (const std::string why = bf16_spmm_unavailable_reason(path); !why.empty())
    throw ArgumentError(message(fn, ": the ", path_name(path), " path is not available: ", why));
}
}  // namespace detail

// Y (=|+=) W X with W's structure and the bf16 weights `values` (top of this file), X bf16,
// Y float or bf16, with a caller-owned float workspace (partition, packing buffer, column-block
// bounds; the same kind a float layer uses).
// Preconditions: X is W.cols() x B, Y is W.rows() x B and values.size() == W.storage_size()
// (else ShapeError); Y shares no memory with X, values or W's values (else ArgumentError).
// Overwrite never reads Y; only live slots of values are read (W's own values never are, so W
// may be structure-only).
// Complexity: O(nnz(W) x B) multiply-adds plus O(K x B) to pack X; O(nnz) per topology change.
// Threads: OpenMP over nnz-balanced row ranges; bitwise identical for any thread count within
// a path. The workspace must not be shared by concurrent calls. path: bf16_spmm_path()
// unless named (ArgumentError where it cannot run: bf16_spmm_unavailable_reason).
template <ColumnIndex Index, detail::Bf16SpmmOutput Out>
void bf16_spmm(const PaddedCSR<float, Index>& W, std::span<const bfloat16> values, ConstMatrixView<bfloat16> X,
               MatrixView<Out> Y, KernelWorkspace<float>& workspace, Update mode = Update::overwrite,
               Bf16SpmmPath path = bf16_spmm_path()) {
  detail::check_bf16_spmm_operands("sprig::bf16_spmm", W, values, W.cols(), W.rows(), X, Y);
  detail::check_bf16_spmm_path("sprig::bf16_spmm", path);
  if (Y.rows() == 0 || Y.cols() == 0) return;
  detail::bf16_spmm_kernel<Index, Out>()(W, values.data(), {}, X, Y, workspace, mode, nullptr, false, {},
                                         path == Bf16SpmmPath::avx512_bf16);
}

// Y = act(W X + bias) (row_epilogue.hpp), the bias added in float after the sum and the ReLU
// after it, in the kernel's store: bitwise the same as bf16_spmm (overwrite) with a float Y
// followed by a bias pass and a ReLU pass; a bf16 Y is that float result rounded once (the
// float result of one column block: a bf16 Y's rows are never split).
// Throws as bf16_spmm; ShapeError unless the bias is empty (none) or has W.rows() entries;
// ArgumentError for gelu (not a forward epilogue) or a bias overlapping Y. Complexity and
// threads as bf16_spmm.
template <ColumnIndex Index, detail::Bf16SpmmOutput Out>
void bf16_spmm(const PaddedCSR<float, Index>& W, std::span<const bfloat16> values, ConstMatrixView<bfloat16> X,
               MatrixView<Out> Y, KernelWorkspace<float>& workspace, const RowEpilogue<float>& epilogue,
               Bf16SpmmPath path = bf16_spmm_path()) {
  constexpr const char* fn = "sprig::bf16_spmm";
  detail::check_bf16_spmm_operands(fn, W, values, W.cols(), W.rows(), X, Y);
  detail::check_row_epilogue(fn, epilogue, W.rows(), Y);
  detail::check_bf16_spmm_path(fn, path);
  if (Y.rows() == 0 || Y.cols() == 0) return;
  detail::bf16_spmm_kernel<Index, Out>()(W, values.data(), {}, X, Y, workspace, Update::overwrite,
                                         epilogue.bias.empty() ? nullptr : epilogue.bias.data(),
                                         epilogue.activation == FusedActivation::relu, {},
                                         path == Bf16SpmmPath::avx512_bf16);
}

// dX (=|+=) W^T dY, dY bf16, dX float or bf16, reading the bf16 weights through the cached
// transpose's slot permutation (spmm_transposed.hpp's fused path; no transposed copy of the
// values is kept). `cache` should belong to W (one per weight matrix); it is rebuilt when W's
// topology changed (O(nnz + M + K)), otherwise only checked.
// Preconditions: dY is W.rows() x B, dX is W.cols() x B, values.size() == W.storage_size()
// (else ShapeError); dX shares no memory with dY, values or W's values (else ArgumentError);
// the transpose's own limits (transpose.hpp: ArgumentError). Overwrite never reads dX.
// Complexity: O(nnz(W) x B) multiply-adds plus O(M x B) to pack dY. Threads: as bf16_spmm,
// bitwise identical for any thread count.
template <ColumnIndex Index, detail::Bf16SpmmOutput Out>
void bf16_spmm_transposed(const PaddedCSR<float, Index>& W, std::span<const bfloat16> values,
                          TransposeCache<float, Index>& cache, ConstMatrixView<bfloat16> dY, MatrixView<Out> dX,
                          KernelWorkspace<float>& workspace, Update mode = Update::overwrite,
                          Bf16SpmmPath path = bf16_spmm_path()) {
  detail::check_bf16_spmm_operands("sprig::bf16_spmm_transposed", W, values, W.rows(), W.cols(), dY, dX);
  detail::check_bf16_spmm_path("sprig::bf16_spmm_transposed", path);
  if (dX.rows() == 0 || dX.cols() == 0) return;
  const auto& t = cache.sync_topology(W);
  detail::bf16_spmm_kernel<Index, Out>()(t.matrix, values.data(), std::span<const SourceSlot>(t.source_slot), dY, dX,
                                         workspace, mode, nullptr, false, {}, path == Bf16SpmmPath::avx512_bf16);
}

// dX = x_derivative * (W^T dY) element by element, rounded once to bf16: the backward of a GELU
// whose output was W's input, from its derivative kept in bf16 (nn/gelu.hpp), in the product's
// store. The sums run in one column block, so this is bitwise the float dX of the form above
// (overwrite) multiplied afterwards, then rounded, wherever that form runs one block too
// (dY's packed panel, W.rows() x 256 bytes, within SPRIG_COLUMN_BLOCK_BYTES); beyond, the same
// sums in another order. x_derivative has dX's shape (else ShapeError) and may be dX itself
// (each element is read before it is written); a partial overlap is an ArgumentError;
// otherwise as the form above (overwrite only).
template <ColumnIndex Index>
void bf16_spmm_transposed(const PaddedCSR<float, Index>& W, std::span<const bfloat16> values,
                          TransposeCache<float, Index>& cache, ConstMatrixView<bfloat16> dY, MatrixView<bfloat16> dX,
                          ConstMatrixView<bfloat16> x_derivative, KernelWorkspace<float>& workspace,
                          Bf16SpmmPath path = bf16_spmm_path()) {
  constexpr const char* fn = "sprig::bf16_spmm_transposed";
  detail::check_bf16_spmm_operands(fn, W, values, W.rows(), W.cols(), dY, dX);
  detail::check_bf16_spmm_path(fn, path);
  detail::check_x_derivative(fn, dX, x_derivative);
  if (dX.rows() == 0 || dX.cols() == 0) return;
  const auto& t = cache.sync_topology(W);
  detail::bf16_spmm_kernel<Index, bfloat16>()(t.matrix, values.data(), std::span<const SourceSlot>(t.source_slot), dY,
                                              dX, workspace, Update::overwrite, nullptr, false, x_derivative,
                                              path == Bf16SpmmPath::avx512_bf16);
}

}  // namespace sprig
