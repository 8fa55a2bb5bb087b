// sprig/kernels/row_epilogue.hpp — what a forward kernel does to a finished output row
// before it stores it: add the row's bias, then apply an activation. Done in registers, it
// replaces the separate passes over Y that a layer would otherwise make (bias add, ReLU).
// Also the ReLU's backward for one element, which sddmm_dx applies in its dX store.
#pragma once

#include <span>

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

template <class T>
struct RowEpilogue {
  std::span<const T> bias;  // bias[i] added to row i; empty for none
  FusedActivation activation = FusedActivation::none;
};

}  // namespace sprig
