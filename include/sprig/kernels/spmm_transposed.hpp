// sprig/kernels/spmm_transposed.hpp — dX[K,B] = W^T[K,M] * dY[M,B] (or +=) on a cached
// transpose, reading W's current values through the transpose's slot permutation.
//
// Equal to spmm(cache.get(W), dY, dX) but faster: a separate value refresh is a gather over
// W's values in transposed order (at 4096 x 4096, density 0.1: 4.2 ms when this was chosen,
// twice the spmm itself at B = 32; 0.97 ms since the permutation is 32-bit and prefetched).
// Inside the spmm the same gather overlaps with the multiply-adds. With many batch panels the gather would repeat per panel, so then the
// values are refreshed once and the plain spmm runs.
#pragma once

#include <type_traits>

#include "spmm.hpp"
#include "transpose.hpp"

// Panels up to which the permuted-value kernel is used; beyond, refresh + plain spmm.
#ifndef SPRIG_SPMM_T_FUSED_PANELS
#  define SPRIG_SPMM_T_FUSED_PANELS 1
#endif

namespace sprig {

// dX (=|+=) W^T dY. `cache` must belong to W (one cache per weight matrix): it is rebuilt when
// W's topology changed; its stored values may be left stale (cache.get(W) refreshes them).
// Throws ShapeError unless dY is W.rows() x B and dX is W.cols() x B.
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
#if SPRIG_KERNEL_SIMD
  if constexpr (detail::kSimdFor<T>) {
    const detail::PanelPlan plan(dY.cols(), dY.rows(), detail::Batch<T>::size, sizeof(T), detail::kPanelBudgetBytes,
                                 detail::kMaxPanelRegs);
    if (plan.count() <= SPRIG_SPMM_T_FUSED_PANELS) {
      const auto& t = cache.sync_topology(W);
      detail::spmm_simd(t.matrix, detail::PermutedValues<T>{W.values().data(), t.source_slot.data(),
                                                   t.source_slot.data() + t.source_slot.size()}, dY, dX, mode,
                        workspace);
      return;
    }
  }
#endif
  spmm(cache.get(W), dY, dX, workspace, mode);
}

template <Value T, ColumnIndex Index>
void spmm_transposed(const PaddedCSR<T, Index>& W, TransposeCache<T, Index>& cache,
                     std::type_identity_t<ConstMatrixView<T>> dY, std::type_identity_t<MatrixView<T>> dX,
                     Update mode = Update::overwrite) {
  KernelWorkspace<T> workspace;
  spmm_transposed(W, cache, dY, dX, workspace, mode);
}

}  // namespace sprig
