// sprig/kernels/sddmm.hpp — weight gradient at live slots: grad[s] = dot(dY[i,:], X[c,:]).
// PLACEHOLDER: forwards to the reference until the xsimd kernel lands.
#pragma once

#include <type_traits>

#include "reference.hpp"
#include "update_mode.hpp"

namespace sprig {

template <Value T, ColumnIndex Index>
void sddmm(const PaddedCSR<T, Index>& W, std::type_identity_t<ConstMatrixView<T>> dY, std::type_identity_t<ConstMatrixView<T>> X, std::type_identity_t<std::span<T>> grad,
           Update mode = Update::overwrite) {
  reference::sddmm(W, dY, X, grad, mode);
}

}  // namespace sprig
