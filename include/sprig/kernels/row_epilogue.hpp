// sprig/kernels/row_epilogue.hpp — what a forward kernel does to a finished output row
// before it stores it: add the row's bias, then apply an activation. Done in registers, it
// replaces the separate passes over Y that a layer would otherwise make (bias add, ReLU).
#pragma once

#include <span>

namespace sprig {

// The activation a layer's forward can apply in its store. relu is max(x, 0) with the
// semantics of ReLU<T> (x > 0 ? x : 0: NaN and -0 become +0).
enum class FusedActivation { none, relu };

template <class T>
struct RowEpilogue {
  std::span<const T> bias;  // bias[i] added to row i; empty for none
  FusedActivation activation = FusedActivation::none;
};

}  // namespace sprig
