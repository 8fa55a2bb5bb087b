// sprig/kernels/spmm_transposed.hpp — dX[K,B] = W^T[K,M] dY[M,B] (or +=) on a cached
// transpose, reading W's current values through the transpose's slot permutation.
//
// Equal to spmm(cache.get(W), dY, dX) but faster: a separate value refresh is a pass of its
// own, a gather over W's values in transposed order, which inside the spmm overlaps with the
// multiply-adds (docs/design.md, "The transpose and spmm_transposed"). With several batch
// panels the gather would repeat per panel, so then the values are gathered once per call
// into the workspace (not into the cache, which keeps no values: 4 bytes per weight less
// between calls) and the plain spmm reads them. The scalar path uses cache.get(W).
#pragma once

#include <type_traits>

#include "../core/tuning.hpp"
#include "spmm.hpp"
#include "transpose.hpp"

namespace sprig {

namespace detail {

// The kernel on architecture A once the operands are checked and dX is not empty: what a
// dispatching build's table points to (dispatch.hpp).
template <class A, Value T, ColumnIndex Index>
void spmm_transposed_on(const PaddedCSR<T, Index>& W, TransposeCache<T, Index>& cache, ConstMatrixView<T> dY,
                        MatrixView<T> dX, KernelWorkspace<T>& workspace, Update mode) {
#if SPRIG_KERNEL_SIMD
  if constexpr (kSimdFor<T, A>) {
    const PanelPlan plan(dY.cols(), dY.rows(), Batch<T, A>::size, sizeof(T), kPanelBudgetBytes, kMaxPanelRegs);
    const auto& t = cache.sync_topology(W);
    if (plan.count() <= SPRIG_SPMM_T_FUSED_PANELS)
      spmm_simd<A>(t.matrix,
                   PermutedValues<T>{W.values().data(), t.source_slot.data(), t.source_slot.data() + t.source_slot.size()},
                   dY, dX, mode, workspace);
    else  // the values gathered once into the workspace, then read in slot order per panel (vals unread)
      spmm_simd<A>(t.matrix, DirectValues<T>{nullptr}, dY, dX, mode, workspace,
                   RowEpilogue<T>{}, std::span<const SourceSlot>(t.source_slot), W.values().data());
    return;
  }
#endif
  spmm_on<A>(cache.get(W), dY, dX, workspace, mode, RowEpilogue<T>{});
}

}  // namespace detail

// dX (=|+=) W^T dY with a caller-owned workspace (for W^T's rows). `cache` should belong to W
// (one cache per weight matrix; another matrix is detected and costs a rebuild): it is
// rebuilt when W's topology changed; its stored values may be left stale (cache.get(W)
// refreshes them).
// Preconditions: dY is W.rows() x B and dX is W.cols() x B (else ShapeError); dX shares no
// memory with dY or W.values() (else ArgumentError). Overwrite never reads dX.
// Complexity: O(nnz(W) x B) multiply-adds; O(nnz + M + K) for a rebuild after a topology
// change. Threads: as spmm, bitwise identical for any thread count.
template <Value T, ColumnIndex Index>
void spmm_transposed(const PaddedCSR<T, Index>& W, TransposeCache<T, Index>& cache,
                     std::type_identity_t<ConstMatrixView<T>> dY, std::type_identity_t<MatrixView<T>> dX,
                     KernelWorkspace<T>& workspace, Update mode = Update::overwrite) {
  if (dY.rows() != W.rows() || dX.rows() != W.cols() || dX.cols() != dY.cols())
    throw ShapeError(detail::message("sprig::spmm_transposed: W is ", W.rows(), "x", W.cols(), ", dY is ", dY.rows(),
                                     "x", dY.cols(), ", dX is ", dX.rows(), "x", dX.cols(), " (need dY ", W.rows(),
                                     "xB and dX ", W.cols(), "xB)"));
  detail::check_no_overlap("sprig::spmm_transposed", "dX", dX, "dY", dY);
  detail::check_no_overlap("sprig::spmm_transposed", "dX", dX, "W's values", W.values());
  if (dX.rows() == 0 || dX.cols() == 0) return;
  detail::spmm_transposed_kernel<T, Index>()(W, cache, dY, dX, workspace, mode);
}

// The same with a temporary workspace (allocates per call).
template <Value T, ColumnIndex Index>
void spmm_transposed(const PaddedCSR<T, Index>& W, TransposeCache<T, Index>& cache,
                     std::type_identity_t<ConstMatrixView<T>> dY, std::type_identity_t<MatrixView<T>> dX,
                     Update mode = Update::overwrite) {
  KernelWorkspace<T> workspace;
  spmm_transposed(W, cache, dY, dX, workspace, mode);
}

}  // namespace sprig
