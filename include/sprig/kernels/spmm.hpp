// sprig/kernels/spmm.hpp — Y[M,B] = W[M,K] * X[K,B] (or +=), W PaddedCSR, X and Y dense
// feature-major. PLACEHOLDER: forwards to the reference until the xsimd kernel lands.
#pragma once

#include <type_traits>

#include "reference.hpp"
#include "update_mode.hpp"

namespace sprig {

template <Value T, ColumnIndex Index>
void spmm(const PaddedCSR<T, Index>& W, std::type_identity_t<ConstMatrixView<T>> X, std::type_identity_t<MatrixView<T>> Y, Update mode = Update::overwrite) {
  reference::spmm(W, X, Y, mode);
}

}  // namespace sprig
