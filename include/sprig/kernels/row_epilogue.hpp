// sprig/kernels/row_epilogue.hpp — what a forward kernel does to a finished output row
// before it stores it: add the row's bias, then apply an activation. Done in registers, it
// replaces the separate passes over Y that a layer would otherwise make (bias add, ReLU).
// Also the ReLU's backward for one element, which sddmm_dx applies in its dX store.
#pragma once

#include <cstdint>
#include <span>

#include "../core/config.hpp"
#include "../core/matrix.hpp"

#if SPRIG_HAS_OPENMP
#  include <omp.h>
#endif

namespace sprig {

// The activation a layer's forward can apply in its store. relu is max(x, 0) with the
// semantics of ReLU<T> (x > 0 ? x : 0: NaN and -0 become +0).
enum class FusedActivation { none, relu };

// The ReLU's backward for one element: the gradient d passes where the ReLU's input x is > 0
// and is +0 elsewhere (NaN included). Its output has the same sign, so x may be either.
template <class T>
constexpr T relu_backward(T x, T d) noexcept {
  return x > T(0) ? d : T(0);
}

namespace detail {

// dX = relu_backward(X, dX) element by element (OpenMP over rows for large inputs): the ReLU's
// backward where a kernel could not apply it in its store (sddmm_dx off its one pass, Linear
// on a gemm).
template <class T>
void relu_backward_rows(ConstMatrixView<T> X, MatrixView<T> dX) noexcept {
  const std::int64_t K = dX.rows(), B = dX.cols();
#if SPRIG_HAS_OPENMP
#  pragma omp parallel for schedule(static) if (K * B >= kParallelMinWork && !omp_in_parallel())
#endif
  for (std::int64_t c = 0; c < K; ++c) {
    const T* x = X.row(c);
    T* d = dX.row(c);
    for (std::int64_t j = 0; j < B; ++j) d[j] = relu_backward(x[j], d[j]);
  }
}

}  // namespace detail

template <class T>
struct RowEpilogue {
  std::span<const T> bias;  // bias[i] added to row i; empty for none
  FusedActivation activation = FusedActivation::none;
};

}  // namespace sprig
