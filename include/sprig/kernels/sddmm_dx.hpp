// sprig/kernels/sddmm_dx.hpp — a sparse layer's backward in one pass over W^T: the weight
// gradient at W's live slots, grad[s] = dot(dY[i,:], X[c,:]) for s = (i, c), and
// dX = W^T dY, overwriting both. Where the one pass runs, the same bits as sddmm (overwrite)
// followed by spmm_transposed (overwrite); elsewhere it runs those two kernels.
//
// Why (docs/design.md, "the one pass"): the two kernels each read one B-wide row from L2 per
// live weight, sddmm an X row and the transposed spmm a dY row. Walking row c of W^T (the
// weights of input c) keeps X[c,:] and the dX[c,:] accumulators in registers, so one dY row
// load per weight serves both the gradient's dot and dX's multiply-add, which makes it faster
// than the two kernels (figures in docs/design.md). W's values are gathered through the transpose's
// permutation as spmm_transposed does, and each weight's gradient is scattered to its slot.
//
// Where: the whole batch fits one register tile (B a multiple of the SIMD width N and
// B / N <= kMaxPanelRegs), dY fits one column block of the transposed workspace
// (spmm_column_blocks over W^T's M columns is one block), sddmm would run one panel, and at
// most SPRIG_SDDMM_DX_MAX_THREADS (2) OpenMP threads. Elsewhere the two kernels run.
//
// x_activation: relu (X is a ReLU's output) also applies the ReLU's backward to dX, masking
// each dX row with the X row held in registers before its store; gelu multiplies each dX row
// by the row of x_derivative. Off the one pass, a pass after the two kernels does the same.
//
// Bits: a weight's dot is accumulated lane-wise in sddmm's order (lane_dot) and reduced by
// the same batched horizontal sum, N dots at a time; dX[c,:] is summed over W^T's row on
// spmm_tile's chains (spmm_chains), combined pairwise as there. Threads take W^T's rows in
// nnz-balanced ranges: each dX row and each gradient is written by one thread, in the same
// order for any thread count.
#pragma once

#include <type_traits>

#include <algorithm>
#include <cstdint>
#include <span>

#include "../core/config.hpp"
#include "../core/error.hpp"
#include "../core/matrix.hpp"
#include "../core/padded_csr.hpp"
#include "../core/tuning.hpp"
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

namespace sprig {

namespace detail {

inline constexpr int kOnePassMaxThreads = SPRIG_SDDMM_DX_MAX_THREADS;

#if SPRIG_KERNEL_SIMD
// W^T rows [r0, r1) with R batch registers: Wt is W^T's structure (its column indices are
// rows of W), source its slot permutation into W (source_size entries), values W's values.
// Act (x_activation): relu masks each dX row where X <= 0 (relu_backward) before it is stored,
// gelu multiplies it by the row of Xd (x_derivative).
template <class A, class T, class Index, int R, FusedActivation Act>
void sddmm_dx_rows(const PaddedCSR<T, Index>& Wt, const SourceSlot* source, std::int64_t source_size, const T* values,
                   ConstMatrixView<T> dY, ConstMatrixView<T> X, ConstMatrixView<T> Xd, T* grad, MatrixView<T> dX,
                   std::int64_t r0, std::int64_t r1) noexcept {
  using B = Batch<T, A>;
  constexpr std::int64_t N = B::size;
  constexpr std::int64_t row_bytes = R * N * static_cast<std::int64_t>(sizeof(T));
  constexpr std::int64_t D = SPRIG_SDDMM_DX_PREFETCH;
  constexpr int C = spmm_chains(R);
  const Index* cols = Wt.col_indices().data();
  alignas(64) B dots[N];    // the last N weights' lane-wise dots, reduced N at a time
  std::int32_t slot_of[N];  // their slots in W
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
    SPRIG_UNROLL for (int r = 0; r < R; ++r) xv[r] = B::load_unaligned(xr + r * N);
    SPRIG_UNROLL for (int h = 0; h < C; ++h) SPRIG_UNROLL for (int r = 0; r < R; ++r) acc[h][r] = B(T(0));
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
      SPRIG_UNROLL for (int r = 0; r < R; ++r) {
        dvs[r] = B::load_unaligned(d + r * N);
        acc[h][r] = xsimd::fma(w, dvs[r], acc[h][r]);
      }
      dots[k] = lane_dot<R>(xv, [&dvs](int r) SPRIG_ALWAYS_INLINE_LAMBDA { return dvs[r]; });
      slot_of[k] = slot;
      if (++k == N) {
        batched_hsum(dots).store_aligned(reduced);
        SPRIG_UNROLL for (std::int64_t e = 0; e < N; ++e) grad[slot_of[e]] = reduced[e];
        k = 0;
      }
    }
    if (k > 0) {
      SPRIG_UNROLL for (std::int64_t e = k; e < N; ++e) dots[e] = B(T(0));
      batched_hsum(dots).store_aligned(reduced);
      for (std::int64_t e = 0; e < k; ++e) grad[slot_of[e]] = reduced[e];
    }
    SPRIG_UNROLL for (int step = 1; step < C; step *= 2)  // pairwise, as spmm_tile
        SPRIG_UNROLL for (int h = 0; h + step < C; h += 2 * step) SPRIG_UNROLL for (int r = 0; r < R; ++r) acc[h][r] +=
        acc[h + step][r];
    SPRIG_UNROLL for (int r = 0; r < R; ++r) {
      if constexpr (Act == FusedActivation::relu) acc[0][r] = xsimd::select(xv[r] > B(T(0)), acc[0][r], B(T(0)));
      if constexpr (Act == FusedActivation::gelu) acc[0][r] = acc[0][r] * B::load_unaligned(Xd.row(c) + r * N);
      acc[0][r].store_unaligned(dx + r * N);
    }
  }
}
#endif

// Whether sddmm_dx takes the one pass for W and batch width B with these workspaces (and
// the current OpenMP thread count) on architecture A: see "Where" in the header comment.
template <Value T, ColumnIndex Index, class A = KernelArch>
bool sddmm_dx_one_pass(const PaddedCSR<T, Index>& W, std::int64_t B, const KernelWorkspace<T>& workspace,
                       const KernelWorkspace<T>& transpose_workspace) {
#if SPRIG_KERNEL_SIMD
  if constexpr (kSimdFor<T, A>) {
    constexpr std::int64_t N = Batch<T, A>::size;
    const bool one_tile = B > 0 && B % N == 0 && B / N <= kMaxPanelRegs;
    // spmm_transposed runs one column block of one panel and sddmm one panel: the same bits
    const bool one_block = spmm_column_blocks<T, A>(W.rows(), B, transpose_workspace.column_block_bytes).count == 1;
    const ColumnBlocks x_blocks = spmm_column_blocks<T, A>(W.cols(), B, workspace.column_block_bytes);
    const bool sddmm_one_panel = PanelPlan(B, std::min(W.cols(), x_blocks.width), N, sizeof(T),
                                           SPRIG_SDDMM_PANEL_BUDGET_BYTES, sddmm_max_regs<T, A>())
                                     .count() == 1;
    // Each thread beyond the first adds a boundary column whose gradient cache lines two threads
    // write; it beats the two kernels at 2 threads and was not tried beyond, where the two
    // kernels run.
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

// The kernel on architecture A once the operands are checked: what a dispatching build's
// table points to (dispatch.hpp).
template <class A, Value T, ColumnIndex Index>
void sddmm_dx_on(const PaddedCSR<T, Index>& W, TransposeCache<T, Index>& cache, ConstMatrixView<T> dY,
                 ConstMatrixView<T> X, std::span<T> grad, MatrixView<T> dX, KernelWorkspace<T>& workspace,
                 KernelWorkspace<T>& transpose_workspace, FusedActivation x_activation,
                 ConstMatrixView<T> x_derivative) {
#if SPRIG_KERNEL_SIMD
  if constexpr (kSimdFor<T, A>) {
    if (sddmm_dx_one_pass<T, Index, A>(W, X.cols(), workspace, transpose_workspace)) {
      const std::int64_t regs = X.cols() / static_cast<std::int64_t>(Batch<T, A>::size);
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
      with_panel_regs(regs, [&]<int R>(std::integral_constant<int, R>) {
        auto rows_with = [&]<FusedActivation Act>() {
          run_partitioned(
              transpose_workspace.partition, W.nnz() * X.cols(), [](int, int) {},
              [&](std::int64_t r0, std::int64_t r1) {
                sddmm_dx_rows<A, T, Index, R, Act>(t.matrix, source, source_size, values, dY, X, x_derivative,
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
  if (X.cols() == 0 || W.nnz() == 0)  // every dot is empty
    std::fill(grad.begin(), grad.end(), T(0));
  else
    sddmm_on<A>(W, dY, X, grad, workspace, Update::overwrite);
  if (dX.rows() > 0 && dX.cols() > 0) spmm_transposed_on<A>(W, cache, dY, dX, transpose_workspace, Update::overwrite);
  input_activation_rows<T>(x_activation, X, x_derivative, dX);
}

}  // namespace detail

// grad = the weight gradient at W's live slots (0 at padding and dead slots) and dX = W^T dY,
// or with x_activation = relu dX = relu_backward(X, W^T dY) (X the output of a ReLU), or with
// x_activation = gelu dX = x_derivative * W^T dY (X a GELU's output, x_derivative its
// derivative at the GELU's input: row_epilogue.hpp). Both outputs are overwritten.
// `cache` must belong to W, as for spmm_transposed; `workspace` serves sddmm (W's rows) and
// `transpose_workspace` the pass over W^T.
// Preconditions: dY is W.rows() x B, X and dX are W.cols() x B, grad.size() ==
// W.storage_size(), and with gelu x_derivative has X's shape (else ShapeError); grad and dX
// share no memory with each other, dY, X, x_derivative (gelu) or W.values() (else
// ArgumentError).
// Complexity: O(nnz(W) x B) multiply-adds for each product, one pass over the weights for
// both where the one pass runs; O(nnz(W)) to rebuild the transpose after a topology change.
// Threads: bitwise identical for any thread count, and the same bits on and off the one pass.
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
  detail::sddmm_dx_kernel<T, Index>()(W, cache, dY, X, grad, dX, workspace, transpose_workspace, x_activation,
                                      x_derivative);
}

}  // namespace sprig
