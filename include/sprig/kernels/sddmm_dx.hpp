// sprig/kernels/sddmm_dx.hpp — a sparse layer's backward in one pass over W^T: the weight
// gradient at W's live slots, grad[s] = dot(dY[i,:], X[c,:]) for s = (i, c), and
// dX = W^T dY, overwriting both. The same results as sddmm (overwrite) followed by
// spmm_transposed (overwrite), bit for bit where the one pass runs.
//
// Why: the two kernels each read one B-wide row from L2 per live weight: sddmm an X row, the
// transposed spmm a dY row. Walking W^T row c (the weights of input c) keeps X[c,:] and the
// dX[c,:] accumulator in registers, so one dY row load per weight serves both the gradient's
// dot and dX's multiply-add. At density 0.1, B = 128, 1 thread, warm caches, median of 60
// calls alternating in one process: a 1024 x 4096 layer's two kernels 2.58-2.94 ms, the one
// pass 2.26-2.59 (-11%); 1024 x 1024: 0.60 against 0.54 ms (-10%). In bench/train_step's
// whole step the 90% FFN went from 6.34-6.52 to 6.14-6.47 ms and the MLP from 1.43-1.44 to
// 1.36-1.38 ms (alternating runs of 150 and 300 steps). W's values are gathered through the
// transpose's permutation as spmm_transposed does; the prefetch 128 weights ahead must cross
// row ends (a W^T row holds ~100), or the gathered loads stall the dX chain.
//
// The one pass runs where the whole batch fits one register tile (B a multiple of the SIMD
// width N, B / N <= kMaxPanelRegs) and dY fits the L2 budget of one column block
// (spmm_column_blocks over W^T's M columns is one block), on at most 2 threads
// (SPRIG_SDDMM_DX_MAX_THREADS). Elsewhere it runs the two kernels.
// Threads take W^T's rows in nnz-balanced ranges (RowPartition): each dX row and each weight's
// gradient is written by one thread, in the same order for any thread count. Two threads
// write gradients to the same cache lines only where a row of W crosses their boundary
// column. 1024 x 4096 at density 0.1, B = 128, 2 threads (the 90% FFN's layer 2 in
// bench/train_step's profile, 3 alternating runs): the one pass 2.18-2.75 ms against
// 3.05-3.14 for the two kernels.
//
// With x_activation = FusedActivation::relu (X is a ReLU's output), dX also gets the ReLU's
// backward, dX = relu_backward(X, W^T dY): the one pass masks each dX row with the X row it
// holds in registers before storing it, which saves the ReLU's own pass over dX (0.015 ms of
// the MLP's 1.4 ms step); elsewhere a pass after the two kernels does it.
//
// Bits: a weight's dot is accumulated lane-wise over the batch registers in sddmm's order and
// reduced by the same batched horizontal sum (N dots at a time, from an L1 buffer), and dX[c,:]
// is summed over W^T's row on spmm_tile's chains (spmm_chains), combined pairwise as there.
//
// What bounds it (Zen 4, 1 thread, B = 128, density 0.1): one dY row per weight serves both
// products, so the pass needs one row load (bench_kernels' BM_row_stream: 4.2-4.6 ns per
// 512-byte row from L2) and 16 multiply-adds (4.4 ns at BM_fma_peak's 117 GFLOP/s) per weight,
// plus its share of the batched horizontal sums, on the same FP pipes. It takes 7.2-8.9 ns on
// 1024 x 1024 (BM_sddmm_dx, and the timings below). W's slot order costs part of that: the walk
// over W^T gathers each weight's value and scatters its gradient, one cache line each, in
// arrays of 0.5 MB (1024 x 1024) to 2 MB (1024 x 4096). Medians of 200-400 calls with a 1 MB
// sweep between them, 4 alternating rounds on a quiet machine, ms:
//   | variant (timing only; the next two give wrong results)  | 1024 x 1024            | 1024 x 4096       |
//   | this kernel                                             | 0.755-0.76 (once 0.98) | 3.76-4.17         |
//   | value read and gradient write at contiguous addresses   | 0.68-0.72              | 2.94-3.33         |
//   | the gradient's write alone at contiguous addresses      | 0.72                   | 3.45-3.54         |
//   | gradients held back, stored in chunks of 512-8192 slots | 0.77-0.82              | 3.6-4.3           |
//   | gradient stores of a group spread over the next group   | 0.79-0.84              | 3.96-4.47         |
//   | walk W^T once per half (quarter) of W's rows            | 0.82 (0.93)            | 3.8-5.3 (4.7-5.0) |
// So the slot order is 10% (1024 x 1024) to 20% (1024 x 4096) of the pass, and it would take
// the gradient (and value) stored in W^T's order for such a layer, a layout change beyond this
// kernel, to win it back; the rest is the multiply-adds and horizontal sums themselves. The
// gradient alone in W^T's order only moves the scatter: the optimizer, which walks W's slots,
// would read it through the permutation instead.
#pragma once

#include <type_traits>

#include <algorithm>
#include <cstdint>
#include <span>

#include "../core/config.hpp"
#include "../core/error.hpp"
#include "../core/matrix.hpp"
#include "../core/padded_csr.hpp"
#include "parallel.hpp"
#include "row_epilogue.hpp"
#include "sddmm.hpp"
#include "spmm.hpp"
#include "spmm_transposed.hpp"
#include "transpose.hpp"
#include "workspace.hpp"

#if SPRIG_HAS_OPENMP
#  include <omp.h>
#endif

// How many weights ahead the pass asks for the start of a dY row. Shorter than spmm's 16: a
// weight here costs twice the multiply-adds (dot and dX), so 4 weights cover the L2 latency,
// and rows asked for further ahead are evicted again by the gathered values and gradient
// stores. Median of 400 calls alternating in one process, density 0.1, B = 128, 1 thread:
// 1024 x 1024 0.536 -> 0.494 ms, 1024 x 4096 2.28 -> 2.09 ms, 4096 x 1024 2.66 -> 2.55 ms
// (distances 3, 6 and 8 between; at B = 32 and 64 within 1% or better); in bench/train_step's
// profile the MLP's layer 2 0.544-0.560 -> 0.509-0.516 ms.
#ifndef SPRIG_SDDMM_DX_PREFETCH
#  define SPRIG_SDDMM_DX_PREFETCH 4
#endif

// The most OpenMP threads the one pass runs on (see sddmm_dx_one_pass).
#ifndef SPRIG_SDDMM_DX_MAX_THREADS
#  define SPRIG_SDDMM_DX_MAX_THREADS 2
#endif

namespace sprig {

namespace detail {

inline constexpr int kOnePassMaxThreads = SPRIG_SDDMM_DX_MAX_THREADS;

#if SPRIG_KERNEL_SIMD
// W^T rows [r0, r1) with R batch registers: Wt is W^T's structure (its column indices are
// rows of W), source its slot permutation into W (source_size entries), values W's values.
// Act (x_activation): relu masks each dX row where X <= 0 (relu_backward) before it is stored,
// gelu multiplies it by the row of Xd (x_derivative).
template <class T, class Index, int R, FusedActivation Act>
void sddmm_dx_rows(const PaddedCSR<T, Index>& Wt, const SourceSlot* source, std::int64_t source_size, const T* values,
                   ConstMatrixView<T> dY, ConstMatrixView<T> X, ConstMatrixView<T> Xd, T* grad, MatrixView<T> dX,
                   std::int64_t r0, std::int64_t r1) noexcept {
  using B = Batch<T>;
  constexpr std::int64_t N = B::size;
  constexpr std::int64_t row_bytes = R * N * static_cast<std::int64_t>(sizeof(T));
  constexpr std::int64_t D = SPRIG_SDDMM_DX_PREFETCH;
  constexpr int C = spmm_chains(R);
  const Index* cols = Wt.col_indices().data();
  alignas(64) B dots[N];      // the last N weights' lane-wise dots, reduced N at a time
  std::int32_t slot_of[N];    // their slots in W
  alignas(64) T reduced[N];
  for (std::int64_t c = r0; c < r1; ++c) {
    const std::int64_t s = Wt.row_start(c), n = Wt.row_nnz(c);
    T* dx = dX.row(c);
    if (n == 0) {  // 0 times the mask or derivative is 0 too (a NaN derivative aside)
      if constexpr (Act == FusedActivation::gelu)
        for (std::int64_t j = 0; j < R * N; ++j) dx[j] = T(0) * Xd.row(c)[j];
      else
        std::fill_n(dx, R * N, T(0));
      continue;
    }
    const T* xr = X.row(c);
    if constexpr (Act == FusedActivation::gelu)  // the derivative row is read at the store, ~100
      for (std::int64_t off = 0; off < R * N; off += 64 / static_cast<std::int64_t>(sizeof(T)))  // weights away
        prefetch(Xd.row(c) + off);
    B xv[R], acc[C][R];
    for (int r = 0; r < R; ++r) xv[r] = B::load_unaligned(xr + r * N);
    for (int h = 0; h < C; ++h)
      for (int r = 0; r < R; ++r) acc[h][r] = B(T(0));
    const Index* ci = cols + s;
    const SourceSlot* src = source + s;
    std::int64_t k = 0;  // weights buffered in dots
    for (std::int64_t q = 0; q < n; ++q) {
      const int h = static_cast<int>(q % C);  // spmm_tile's chain of weight q
      if (q + D < n) prefetch_row_start<row_bytes>(dY.row(static_cast<std::int64_t>(ci[q + D])));
      // W's values are gathered from L3: asked for 128 weights ahead, across row ends, as
      // PermutedValues does (within a row of ~100 weights they would never be)
      if (s + q + SPRIG_SPMM_T_PREFETCH < source_size && src[q + SPRIG_SPMM_T_PREFETCH] >= 0)
        prefetch(values + src[q + SPRIG_SPMM_T_PREFETCH]);
      const T* d = dY.row(static_cast<std::int64_t>(ci[q]));
      const std::int32_t slot = src[q];
      const B w(values[slot]);
      B dvs[R];
      for (int r = 0; r < R; ++r) {
        dvs[r] = B::load_unaligned(d + r * N);
        acc[h][r] = xsimd::fma(w, dvs[r], acc[h][r]);
      }
      dots[k] = lane_dot<R>(xv, [&dvs](int r) { return dvs[r]; });
      slot_of[k] = slot;
      if (++k == N) {
        batched_hsum(dots).store_aligned(reduced);
        for (std::int64_t e = 0; e < N; ++e) grad[slot_of[e]] = reduced[e];
        k = 0;
      }
    }
    if (k > 0) {
      for (std::int64_t e = k; e < N; ++e) dots[e] = B(T(0));
      batched_hsum(dots).store_aligned(reduced);
      for (std::int64_t e = 0; e < k; ++e) grad[slot_of[e]] = reduced[e];
    }
    for (int step = 1; step < C; step *= 2)  // pairwise, as spmm_tile
      for (int h = 0; h + step < C; h += 2 * step)
        for (int r = 0; r < R; ++r) acc[h][r] += acc[h + step][r];
    for (int r = 0; r < R; ++r) {
      if constexpr (Act == FusedActivation::relu) acc[0][r] = xsimd::select(xv[r] > B(T(0)), acc[0][r], B(T(0)));
      if constexpr (Act == FusedActivation::gelu) acc[0][r] = acc[0][r] * B::load_unaligned(Xd.row(c) + r * N);
      acc[0][r].store_unaligned(dx + r * N);
    }
  }
}
#endif

// Whether sddmm_dx takes the one pass for W and batch width B with these workspaces (and
// the current OpenMP thread count): see the header comment.
template <Value T, ColumnIndex Index>
bool sddmm_dx_one_pass(const PaddedCSR<T, Index>& W, std::int64_t B, const KernelWorkspace<T>& workspace,
                       const KernelWorkspace<T>& transpose_workspace) {
#if SPRIG_KERNEL_SIMD
  if constexpr (kSimdFor<T>) {
    constexpr std::int64_t N = Batch<T>::size;
    const bool one_tile = B > 0 && B % N == 0 && B / N <= kMaxPanelRegs;
    // spmm_transposed runs one column block of one panel and sddmm one panel: the same bits
    const bool one_block = spmm_column_blocks<T>(W.rows(), B, transpose_workspace.column_block_bytes).count == 1;
    const ColumnBlocks x_blocks = spmm_column_blocks<T>(W.cols(), B, workspace.column_block_bytes);
    const bool sddmm_one_panel =
        PanelPlan(B, std::min(W.cols(), x_blocks.width), N, sizeof(T), SPRIG_SDDMM_PANEL_BUDGET_BYTES, kMaxPanelRegs)
            .count() == 1;
    // Each thread beyond the first adds a boundary column whose gradient cache lines two threads
    // write; measured faster than the two kernels at 2 threads, not measured beyond: there the
    // two kernels run, as before.
    bool few_threads = true;
#  if SPRIG_HAS_OPENMP
    few_threads = omp_in_parallel() || omp_get_max_threads() <= kOnePassMaxThreads;
#  endif
    return one_tile && one_block && sddmm_one_panel && few_threads && W.nnz() > 0;
  }
#endif
  (void)W, (void)B, (void)workspace, (void)transpose_workspace;
  return false;
}

}  // namespace detail

// grad = the weight gradient at W's live slots (0 at padding and dead slots) and dX = W^T dY,
// or with x_activation = relu dX = relu_backward(X, W^T dY) (X the output of a ReLU), or with
// x_activation = gelu dX = x_derivative * W^T dY (X a GELU's output, x_derivative its
// derivative at the GELU's input: row_epilogue.hpp).
// `cache` must belong to W, as for spmm_transposed; `workspace` serves sddmm (W's rows) and
// `transpose_workspace` the pass over W^T. Throws ShapeError unless dY is W.rows() x B,
// X and dX are W.cols() x B and grad.size() == W.storage_size().
template <Value T, ColumnIndex Index>
void sddmm_dx(const PaddedCSR<T, Index>& W, TransposeCache<T, Index>& cache,
              std::type_identity_t<ConstMatrixView<T>> dY, std::type_identity_t<ConstMatrixView<T>> X,
              std::type_identity_t<std::span<T>> grad, std::type_identity_t<MatrixView<T>> dX,
              KernelWorkspace<T>& workspace, KernelWorkspace<T>& transpose_workspace,
              FusedActivation x_activation = FusedActivation::none,
              std::type_identity_t<ConstMatrixView<T>> x_derivative = {}) {
  if (dY.rows() != W.rows() || X.rows() != W.cols() || dX.rows() != W.cols() || dY.cols() != X.cols() ||
      dX.cols() != X.cols() || std::ssize(grad) != W.storage_size())
    throw ShapeError(detail::message("sprig::sddmm_dx: W is ", W.rows(), "x", W.cols(), " with ", W.storage_size(),
                                     " slots, dY is ", dY.rows(), "x", dY.cols(), ", X is ", X.rows(), "x", X.cols(),
                                     ", dX is ", dX.rows(), "x", dX.cols(), ", grad has ", grad.size(),
                                     " entries (need dY ", W.rows(), "xB, X and dX ", W.cols(), "xB, grad ",
                                     W.storage_size(), ")"));
  detail::check_input_activation<T>("sprig::sddmm_dx", x_activation, X, x_derivative);
  {
    constexpr const char* fn = "sprig::sddmm_dx";
    const ConstMatrixView<T> xd = x_activation == FusedActivation::gelu ? x_derivative : ConstMatrixView<T>{};
    detail::check_no_overlap(fn, "grad", grad, "dY", dY);
    detail::check_no_overlap(fn, "grad", grad, "X", X);
    detail::check_no_overlap(fn, "grad", grad, "x_derivative", xd);
    detail::check_no_overlap(fn, "grad", grad, "W's values", W.values());
    detail::check_no_overlap(fn, "grad", grad, "dX", dX);
    detail::check_no_overlap(fn, "dX", dX, "dY", dY);
    detail::check_no_overlap(fn, "dX", dX, "X", X);
    detail::check_no_overlap(fn, "dX", dX, "x_derivative", xd);
    detail::check_no_overlap(fn, "dX", dX, "W's values", W.values());
  }
#if SPRIG_KERNEL_SIMD
  if constexpr (detail::kSimdFor<T>) {
    if (detail::sddmm_dx_one_pass(W, X.cols(), workspace, transpose_workspace)) {
      const std::int64_t regs = X.cols() / static_cast<std::int64_t>(detail::Batch<T>::size);
      const auto& t = cache.sync_topology(W);
      // every slot that holds no live weight gets 0 (the pass writes the live ones)
      if (W.dead_slots() > 0) {
        std::fill(grad.begin(), grad.end(), T(0));
      } else {
        for (std::int64_t i = 0; i < W.rows(); ++i)
          std::fill(grad.data() + W.row_start(i) + W.row_nnz(i), grad.data() + W.row_start(i) + W.row_capacity(i),
                    T(0));
      }
      const T* values = W.values().data();
      const SourceSlot* source = t.source_slot.data();
      const auto source_size = std::ssize(t.source_slot);
      transpose_workspace.partition.update(t.matrix);
      detail::with_panel_regs(regs, [&]<int R>(std::integral_constant<int, R>) {
        auto rows_with = [&]<FusedActivation A>() {
          detail::run_partitioned(
              transpose_workspace.partition, W.nnz() * X.cols(), [](int, int) {},
              [&](std::int64_t r0, std::int64_t r1) {
                detail::sddmm_dx_rows<T, Index, R, A>(t.matrix, source, source_size, values, dY, X, x_derivative,
                                                      grad.data(), dX, r0, r1);
              });
        };
        switch (x_activation) {
          case FusedActivation::relu: rows_with.template operator()<FusedActivation::relu>(); break;
          case FusedActivation::gelu: rows_with.template operator()<FusedActivation::gelu>(); break;
          default: rows_with.template operator()<FusedActivation::none>(); break;
        }
      });
      return;
    }
  }
#endif
  sddmm(W, dY, X, grad, workspace, Update::overwrite);
  spmm_transposed(W, cache, dY, dX, transpose_workspace, Update::overwrite);
  detail::input_activation_rows<T>(x_activation, X, x_derivative, dX);
}

}  // namespace sprig
