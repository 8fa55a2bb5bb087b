// sprig/kernels/spmm.hpp — Y[M,B] = W[M,K] X[K,B] (or +=): W a PaddedCSR, X and Y dense and
// feature-major (batch contiguous). dX = W^T dY is the same kernel on a cached transpose
// (spmm_transposed.hpp).
//
// How (docs/design.md, "spmm"): X is cut into panels of whole SIMD registers (panels.hpp);
// each thread works panel by panel over its rows, and where K rows of a full-width panel would
// not fit L2, over column blocks of W. For one row and one panel a tile of Y stays in
// registers across all the row's live weights and is stored once; the weights are dealt
// round-robin to C independent accumulator chains (spmm_chains), summed pairwise at the end.
// The X rows of the weights SPRIG_SPMM_PREFETCH ahead are prefetched (the columns are random).
//
// Determinism: each element of Y is summed in an order fixed by W's row, the batch width and
// the column blocks alone (per block: chain q mod C, then the pairwise sum; blocks in order),
// so the result is bitwise identical for every thread count.
#pragma once

#include <type_traits>

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <span>

#include "../core/config.hpp"
#include "../core/error.hpp"
#include "../core/matrix.hpp"
#include "../core/padded_csr.hpp"
#include "../core/tuning.hpp"
#include "dispatch.hpp"
#include "panels.hpp"
#include "parallel.hpp"
#include "row_epilogue.hpp"
#include "row_partition.hpp"
#include "simd.hpp"
#include "transpose.hpp"
#include "update_mode.hpp"
#include "workspace.hpp"

namespace sprig {

namespace detail {

// Where a kernel reads the weight of slot s: the matrix's own values (DirectValues), or, for
// W^T, W's values through the transpose's slot permutation (PermutedValues), which saves a
// separate refresh pass. at(s) returns a cursor v with v[q] = the value of slot s + q and
// v.prefetch(q).
template <class T>
struct DirectValues {
  const T* values;
  struct Cursor {
    const T* p;
    SPRIG_ALWAYS_INLINE T operator[](std::int64_t q) const noexcept { return p[q]; }
    SPRIG_ALWAYS_INLINE void prefetch(std::int64_t) const noexcept {}
  };
  Cursor at(std::int64_t s) const noexcept { return {values + s}; }
  // Asks for the first values of slot s on (a block's segment of the next row).
  SPRIG_ALWAYS_INLINE void prefetch_slots(std::int64_t s) const noexcept { detail::prefetch(values + s); }
};
// PermutedValues prefetches the gathered values SPRIG_SPMM_T_PREFETCH slots ahead (core/tuning.hpp).
template <class T>
struct PermutedValues {
  const T* values;             // W.values()
  const std::int32_t* source;  // slot of W^T -> slot of W (transpose.hpp: SourceSlot)
  const std::int32_t* source_end;
  struct Cursor {
    const T* v;
    const std::int32_t* src;
    std::int64_t left;  // entries of source from src on
    SPRIG_ALWAYS_INLINE T operator[](std::int64_t q) const noexcept { return v[src[q]]; }
    SPRIG_ALWAYS_INLINE void prefetch(std::int64_t q) const noexcept {
      const std::int64_t a = q + SPRIG_SPMM_T_PREFETCH;
      if (a < left && src[a] >= 0) detail::prefetch(v + src[a]);
    }
  };
  Cursor at(std::int64_t s) const noexcept { return {values, source + s, (source_end - source) - s}; }
  SPRIG_ALWAYS_INLINE void prefetch_slots(std::int64_t s) const noexcept { detail::prefetch(source + s); }
};

// spmm's preconditions: the shapes (ShapeError), then Y apart from X and W's values
// (ArgumentError: the kernel would read what it has already overwritten).
template <Value T, ColumnIndex Index>
void check_spmm_operands(const char* fn, const PaddedCSR<T, Index>& W, const ConstMatrixView<T>& X,
                         const MatrixView<T>& Y) {
  if (X.rows() != W.cols() || Y.rows() != W.rows() || Y.cols() != X.cols())
    throw ShapeError(message(fn, ": W is ", W.rows(), "x", W.cols(), ", X is ", X.rows(), "x", X.cols(), ", Y is ",
                             Y.rows(), "x", Y.cols(), " (need X ", W.cols(), "xB and Y ", W.rows(), "xB)"));
  check_no_overlap(fn, "Y", Y, "X", X);
  check_no_overlap(fn, "Y", Y, "W's values", W.values());
}

// The store of one output element, scalar: the old value added (accumulate), then the bias
// (if any), then the activation; the SIMD store below does the same per lane.
template <class T>
SPRIG_ALWAYS_INLINE T finish(T acc, const T* y, bool accumulate, const T* bias, bool relu) noexcept {
  T v = accumulate ? *y + acc : acc;
  if (bias) v += *bias;
  return relu ? (v > T(0) ? v : T(0)) : v;
}

// Independent accumulator chains of an R-register spmm tile: C * R >= 8 accumulators (8 to
// 14), enough to hide the multiply-add latency. With one broadcast that is at most 15 vector
// registers, which fits a 16-register ISA: the X loads fold into the multiply-adds as memory
// operands (checked on the AVX2 code GCC 12 emits for R = 7: 14 accumulators and the
// broadcast in ymm0-ymm14, no stack access in the loop over the weights).
constexpr int spmm_chains(int R) noexcept { return R >= 8 ? 1 : (R >= 4 ? 2 : (R == 3 ? 3 : 8 / R)); }

// Rows [r0, r1) of W by column block: segment(i, slot, n, first, last) for row i's live slots
// [slot, slot + n) in block b, for b over the `blocks` blocks of `bounds` (panels.hpp:
// ColumnBlocks) and, within b, for i in order; rows with no slot in b skipped. first and last
// say whether b is the row's first and last block: both true without bounds (each row whole,
// one call) and for a row whose columns do not ascend (whole, with the first block). Before
// row i's segment, the column indices of row i + 1's segment in b are prefetched and its first
// slot passed to prefetch_slots.
template <class T, class Index, class PrefetchSlots, class Segment>
SPRIG_ALWAYS_INLINE void for_each_row_segment(const PaddedCSR<T, Index>& W, std::int64_t r0, std::int64_t r1,
                                              const std::int64_t* bounds, std::int64_t blocks,
                                              PrefetchSlots&& prefetch_slots, Segment&& segment) {
  const Index* cols = W.col_indices().data();
  for (std::int64_t b = 0; b < blocks; ++b)
    for (std::int64_t i = r0; i < r1; ++i) {
      std::int64_t lo = 0, hi = W.row_nnz(i);
      bool first = true, last = true;
      if (bounds) {
        if (i + 1 < r1) {
          const std::int64_t next = W.row_start(i + 1) + next_row_block_offset(bounds, blocks, i, b);
          prefetch(cols + next);
          prefetch_slots(next);
        }
        const BlockSegment seg = block_segment(bounds, blocks, i, b, hi);
        if (seg.skip) continue;
        lo = seg.lo;
        hi = seg.hi;
        if (seg.grouped) {
          first = b == 0;
          last = b + 1 == blocks;
        }
      }
      segment(i, W.row_start(i) + lo, hi - lo, first, last);
    }
}

#if SPRIG_KERNEL_SIMD
// Y[i, panel] for one row: `n` live weights (cols, vals), X panel rows `xs` elements apart
// starting at xp; stores the first `valid` columns at y, each through finish() (bias: the
// row's bias or nullptr). The tile is stored once after all weights: a loop that writes Y
// through per weight is bound by the store port.
template <class A, class T, class Index, int R, class Vals>
SPRIG_ALWAYS_INLINE void spmm_tile(const Index* __restrict cols, Vals vals, std::int64_t n, const T* __restrict xp,
                                   std::int64_t xs, T* __restrict y, std::int64_t valid, bool accumulate, const T* bias,
                                   bool relu) noexcept {
  using B = Batch<T, A>;
  constexpr std::int64_t N = B::size;
  constexpr int C = spmm_chains(R);
  constexpr std::int64_t D = SPRIG_SPMM_PREFETCH;
  constexpr std::int64_t row_bytes = R * N * static_cast<std::int64_t>(sizeof(T));
  B acc[C][R];
  SPRIG_UNROLL for (int k = 0; k < C; ++k) SPRIG_UNROLL for (int r = 0; r < R; ++r) acc[k][r] = B(T(0));
  std::int64_t q = 0;
  for (; q + C <= n; q += C) {
    if (q + D + C <= n) SPRIG_UNROLL for (int k = 0; k < C; ++k) {
        prefetch_row_start<row_bytes>(xp + static_cast<std::int64_t>(cols[q + D + k]) * xs);
        vals.prefetch(q + D + k);
      }
    SPRIG_UNROLL for (int k = 0; k < C; ++k) {
      const B w(vals[q + k]);
      const T* x = xp + static_cast<std::int64_t>(cols[q + k]) * xs;
      SPRIG_UNROLL for (int r = 0; r < R; ++r) acc[k][r] = xsimd::fma(w, B::load_unaligned(x + r * N), acc[k][r]);
    }
  }
  for (int k = 0; q + k < n; ++k) {
    const B w(vals[q + k]);
    const T* x = xp + static_cast<std::int64_t>(cols[q + k]) * xs;
    SPRIG_UNROLL for (int r = 0; r < R; ++r) acc[k][r] = xsimd::fma(w, B::load_unaligned(x + r * N), acc[k][r]);
  }
  SPRIG_UNROLL for (int step = 1; step < C; step *= 2)  // pairwise: ((c0 + c1) + (c2 + c3)) + ...
      SPRIG_UNROLL for (int k = 0; k + step < C; k += 2 * step) SPRIG_UNROLL for (int r = 0; r < R; ++r) acc[k][r] +=
      acc[k + step][r];
  int r = 0;
  for (; r < R && (r + 1) * N <= valid; ++r) {
    B v = acc[0][r];
    if (accumulate) v += B::load_unaligned(y + r * N);
    if (bias) v += B(*bias);
    if (relu) v = xsimd::select(v > B(T(0)), v, B(T(0)));
    v.store_unaligned(y + r * N);
  }
  if (r < R && r * N < valid) {
    alignas(64) T tmp[N];
    acc[0][r].store_aligned(tmp);
    for (std::int64_t j = 0; j < valid - r * N; ++j)
      y[r * N + j] = finish(tmp[j], y + r * N + j, accumulate, bias, relu);
  }
}

// Rows [r0, r1) over one panel. Without bounds each row is one tile; with column-block
// bounds (panels.hpp: ColumnBlocks) block by block, each tile adding to what the earlier
// blocks stored and the epilogue applied with the last block; a row whose columns do not
// ascend is done whole with the first block.
template <class A, class T, class Index, int R, class Vals>
void spmm_panel_rows(const PaddedCSR<T, Index>& W, const Vals& vals, std::int64_t r0, std::int64_t r1, const T* xp,
                     std::int64_t xs, MatrixView<T> Y, std::int64_t b0, std::int64_t valid, bool accumulate,
                     const T* bias, bool relu, const std::int64_t* bounds, std::int64_t blocks) noexcept {
  const Index* cols = W.col_indices().data();
  for_each_row_segment(
      W, r0, r1, bounds, blocks, [&](std::int64_t next) SPRIG_ALWAYS_INLINE_LAMBDA { vals.prefetch_slots(next); },
      [&](std::int64_t i, std::int64_t s, std::int64_t n, bool first, bool last) SPRIG_ALWAYS_INLINE_LAMBDA {
        spmm_tile<A, T, Index, R>(cols + s, vals.at(s), n, xp, xs, Y.row(i) + b0, valid, accumulate || !first,
                                  last && bias ? bias + i : nullptr, last && relu);
      });
}

// `gather_from` (W^T's slot -> W's slot, transpose.hpp's SourceSlot), when not empty, says
// that W is a cached transpose whose weights are gather_values[gather_from[s]] (0 where
// negative): they are gathered once per call into the workspace's buffer behind the packed
// panels (each thread a range of slots, before the rows) and read from there; vals is then
// not read. The same values as a TransposeCache's refresh, so the same bits, without the cache
// keeping a copy of every weight between calls.
template <class A, Value T, ColumnIndex Index, class Vals>
void spmm_simd(const PaddedCSR<T, Index>& W, const Vals& vals, ConstMatrixView<T> X, MatrixView<T> Y, Update mode,
               KernelWorkspace<T>& ws, const RowEpilogue<T>& epilogue = {},
               std::span<const std::int32_t> gather_from = {}, const T* gather_values = nullptr) {
  constexpr std::int64_t N = Batch<T, A>::size;
  const std::int64_t K = X.rows(), Bw = X.cols();
  // Full-width panels over column blocks where K rows of one would overflow L2.
  const ColumnBlocks blocks = spmm_column_blocks<T, A>(K, Bw, ws.column_block_bytes);
  const PanelPlan plan(Bw, std::min(K, blocks.width), N, sizeof(T), kPanelBudgetBytes, kMaxPanelRegs);
  const bool in_place = plan.in_place(), gather = !gather_from.empty();
  const std::int64_t packed_size = in_place ? 0 : (plan.packed_size(K) + 15) / 16 * 16, S = std::ssize(gather_from);
  T* buffer = in_place && !gather ? nullptr : ws.buffer(static_cast<std::size_t>(packed_size + (gather ? S : 0)));
  T* packed = in_place ? nullptr : buffer;
  T* gathered = gather ? buffer + packed_size : nullptr;
  const std::int64_t* bounds = blocks.count > 1 ? ws.column_bounds(W, blocks) : nullptr;
  ws.partition.update(W);
  const bool accumulate = mode == Update::accumulate;
  const T* bias = epilogue.bias.empty() ? nullptr : epilogue.bias.data();
  const bool relu = epilogue.activation == FusedActivation::relu;
  const auto rows = [&](const auto& v, std::int64_t r0, std::int64_t r1) {
    for (std::int64_t p = 0; p < plan.count(); ++p) {
      const std::int64_t b0 = plan.begin(p), regs = plan.regs_of(p);
      const T* xp = in_place ? X.data() : packed + K * b0;
      const std::int64_t xs = in_place ? X.stride() : regs * N;
      const std::int64_t valid = plan.columns(p);
      with_panel_regs(regs, [&]<int R>(std::integral_constant<int, R>) {
        spmm_panel_rows<A, T, Index, R>(W, v, r0, r1, xp, xs, Y, b0, valid, accumulate, bias, relu, bounds,
                                        blocks.count);
      });
    }
  };
  run_partitioned(
      ws.partition, W.nnz() * Bw,
      [&](int t, int n) {
        if (gather) gather_slots(gather_from.data(), gather_values, gathered, S * t / n, S * (t + 1) / n);
        if (in_place) return;
        const std::int64_t c0 = K * t / n, c1 = K * (t + 1) / n;
        pack_panels(plan, X, packed, c0, c1);
      },
      [&](std::int64_t r0, std::int64_t r1) {
        if (gather)
          rows(DirectValues<T>{gathered}, r0, r1);
        else
          rows(vals, r0, r1);
      });
}
#endif

// Scalar path: the same row tiling with a 16-wide tile of plain accumulators.
template <Value T, ColumnIndex Index, class Vals>
void spmm_scalar(const PaddedCSR<T, Index>& W, const Vals& vals, ConstMatrixView<T> X, MatrixView<T> Y, Update mode,
                 KernelWorkspace<T>& ws, const RowEpilogue<T>& epilogue = {}) {
  constexpr std::int64_t tile = 16;
  const bool accumulate = mode == Update::accumulate;
  const T* bias = epilogue.bias.empty() ? nullptr : epilogue.bias.data();
  const bool relu = epilogue.activation == FusedActivation::relu;
  ws.partition.update(W);
  const Index* cols = W.col_indices().data();
  const std::int64_t Bw = X.cols();
  run_partitioned(
      ws.partition, W.nnz() * Bw, [](int, int) {},
      [&](std::int64_t r0, std::int64_t r1) {
        for (std::int64_t i = r0; i < r1; ++i) {
          const std::int64_t s = W.row_start(i), n = W.row_nnz(i);
          T* y = Y.row(i);
          for (std::int64_t b0 = 0; b0 < Bw; b0 += tile) {
            const std::int64_t nb = std::min(tile, Bw - b0);
            T acc[tile] = {};
            for (std::int64_t q = 0; q < n; ++q) {
              const T w = vals.at(s)[q];
              const T* x = X.row(cols[s + q]) + b0;
              for (std::int64_t j = 0; j < nb; ++j) acc[j] += w * x[j];
            }
            for (std::int64_t j = 0; j < nb; ++j)
              y[b0 + j] = finish(acc[j], y + b0 + j, accumulate, bias ? bias + i : nullptr, relu);
          }
        }
      });
}

// The kernel on architecture A once the operands are checked (and Y is not empty): what a
// dispatching build's table points to (dispatch.hpp).
template <class A, Value T, ColumnIndex Index>
void spmm_on(const PaddedCSR<T, Index>& W, ConstMatrixView<T> X, MatrixView<T> Y, KernelWorkspace<T>& ws, Update mode,
             const RowEpilogue<T>& epilogue) {
#if SPRIG_KERNEL_SIMD
  if constexpr (kSimdFor<T, A>) {
    spmm_simd<A>(W, DirectValues<T>{W.values().data()}, X, Y, mode, ws, epilogue);
    return;
  }
#endif
  spmm_scalar(W, DirectValues<T>{W.values().data()}, X, Y, mode, ws, epilogue);
}

}  // namespace detail

// Y (=|+=) W X with a caller-owned workspace (row partition, packing buffer and column-block
// bounds kept across calls, so a training step allocates nothing).
// Preconditions: X is W.cols() x B and Y is W.rows() x B (else ShapeError); Y shares no
// memory with X or W.values() (else ArgumentError, overlaps() in core/matrix.hpp). Overwrite
// never reads Y (NaN there does not propagate); only W's live slots are read.
// Complexity: O(nnz(W) x B) multiply-adds, plus O(K x B) to pack X where it is not read in
// place and O(nnz(W)) per topology change for the partition and the block bounds.
// Threads: OpenMP over nnz-balanced row ranges; bitwise identical for any thread count (a
// call inside a parallel region runs on its thread). The workspace must not be shared by
// concurrent calls.
template <Value T, ColumnIndex Index>
void spmm(const PaddedCSR<T, Index>& W, std::type_identity_t<ConstMatrixView<T>> X,
          std::type_identity_t<MatrixView<T>> Y, KernelWorkspace<T>& workspace, Update mode = Update::overwrite) {
  detail::check_spmm_operands("sprig::spmm", W, X, Y);
  if (Y.rows() == 0 || Y.cols() == 0) return;
  detail::spmm_kernel<T, Index>()(W, X, Y, workspace, mode, RowEpilogue<T>{});
}

// The same with a temporary workspace (allocates per call).
template <Value T, ColumnIndex Index>
void spmm(const PaddedCSR<T, Index>& W, std::type_identity_t<ConstMatrixView<T>> X,
          std::type_identity_t<MatrixView<T>> Y, Update mode = Update::overwrite) {
  KernelWorkspace<T> workspace;
  spmm(W, X, Y, workspace, mode);
}

// Y = act(W X + bias) (row_epilogue.hpp): the bias and activation applied in the kernel's
// store, bitwise the same as spmm followed by a bias pass and a ReLU pass, without those
// passes over Y. Throws as spmm does; ShapeError unless the bias is empty (none) or has
// W.rows() entries; ArgumentError for an activation that is not a forward epilogue (gelu)
// or a bias that overlaps Y. Complexity and threads as spmm.
template <Value T, ColumnIndex Index>
void spmm(const PaddedCSR<T, Index>& W, std::type_identity_t<ConstMatrixView<T>> X,
          std::type_identity_t<MatrixView<T>> Y, KernelWorkspace<T>& workspace, const RowEpilogue<T>& epilogue) {
  detail::check_spmm_operands("sprig::spmm", W, X, Y);
  detail::check_row_epilogue("sprig::spmm", epilogue, W.rows(), Y);
  if (Y.rows() == 0 || Y.cols() == 0) return;
  detail::spmm_kernel<T, Index>()(W, X, Y, workspace, Update::overwrite, epilogue);
}

}  // namespace sprig
