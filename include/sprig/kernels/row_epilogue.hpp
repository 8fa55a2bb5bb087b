// sprig/kernels/row_epilogue.hpp — what a forward kernel does to a finished output row
// before it stores it: add the row's bias, then apply an activation. Done in registers, it
// replaces the separate passes over Y that a layer would otherwise make (bias add, ReLU).
// Also what a linear layer's backward applies to its dX for the element-wise layer that
// produced its input (the ReLU's backward, or a GELU's derivative), in its dX store.
#pragma once

#include <cstdint>
#include <span>

#include "../core/config.hpp"
#include "../core/error.hpp"
#include "../core/matrix.hpp"

#if SPRIG_HAS_OPENMP
#  include <omp.h>
#endif

namespace sprig {

// An activation fused into a linear layer.
// Forward (RowEpilogue, Linear / SparseLinear ::forward): the activation applied in the store;
// relu is max(x, 0) with the semantics of ReLU<T> (x > 0 ? x : 0: NaN and -0 become +0). gelu
// is not a forward epilogue (check_forward_activation throws).
// Backward (x_activation of sddmm_dx, narrow_backward, Linear / SparseLinear ::backward): the
// activation that produced the layer's input X, whose backward dX gets too: relu gives
// relu_backward(X, W^T dY); gelu gives x_derivative * W^T dY element by element, with
// x_derivative = gelu'(the GELU's input) as GELU::forward_keep_derivative leaves it.
enum class FusedActivation { none, relu, gelu };

// The ReLU's backward for one element: the gradient d passes where the ReLU's input x is > 0
// and is +0 elsewhere (NaN included). Its output has the same sign, so x may be either.
template <class T>
constexpr T relu_backward(T x, T d) noexcept {
  return x > T(0) ? d : T(0);
}

namespace detail {

// dX(i, j) = f(A(i, j), dX(i, j)) element by element, OpenMP over rows for large inputs. In
// place on purpose: each element is read and then written by one thread, so A may even be dX
// itself. O(rows x cols); the same bits for any thread count.
template <class T, class U, class F>
void combine_rows(ConstMatrixView<U> A, MatrixView<T> dX, F f) noexcept {
  const std::int64_t K = dX.rows(), B = dX.cols();
#if SPRIG_HAS_OPENMP
#  pragma omp parallel for schedule(static) if (K * B >= kParallelMinWork && !omp_in_parallel())
#endif
  for (std::int64_t c = 0; c < K; ++c) {
    const U* a = A.row(c);
    T* d = dX.row(c);
    for (std::int64_t j = 0; j < B; ++j) d[j] = f(a[j], d[j]);
  }
}

// The backward's x_activation applied by a pass over dX, where a kernel could not apply it in
// its store (sddmm_dx off its one pass, the narrow kernels for gelu, Linear on a gemm): relu
// gives relu_backward(X, dX); gelu gives dX * x_derivative, what GELU::backward computes from
// the same derivative, so the bits are the same; none leaves dX alone. X may be bf16 (a layer
// whose input is kept in bf16): relu then reads its widened values.
template <class T, class XT>
void input_activation_rows(FusedActivation x_activation, ConstMatrixView<XT> X, ConstMatrixView<T> x_derivative,
                           MatrixView<T> dX) noexcept {
  if (x_activation == FusedActivation::relu)
    combine_rows<T>(X, dX, [](XT x, T d) { return relu_backward(static_cast<T>(x), d); });
  else if (x_activation == FusedActivation::gelu)
    combine_rows<T>(x_derivative, dX, [](T s, T d) { return d * s; });
}

// Throws ArgumentError unless act can be a forward epilogue (none or relu).
inline void check_forward_activation(const char* who, FusedActivation act) {
  if (act == FusedActivation::gelu)
    throw ArgumentError(message(who, ": gelu is not a forward epilogue (GELU::forward_keep_derivative computes it)"));
}

// Throws ShapeError unless x_derivative has X's shape when x_activation is gelu.
template <class T, class XT>
void check_input_activation(const char* who, FusedActivation x_activation, ConstMatrixView<XT> X,
                            ConstMatrixView<T> x_derivative) {
  if (x_activation == FusedActivation::gelu && (x_derivative.rows() != X.rows() || x_derivative.cols() != X.cols()))
    throw ShapeError(message(who, ": x_activation gelu needs x_derivative of X's shape ", X.rows(), "x", X.cols(),
                             ", got ", x_derivative.rows(), "x", x_derivative.cols()));
}

}  // namespace detail

// What spmm's epilogue overload does to each output row i before its store: y + bias[i]
// (no bias when empty), then the activation (none or relu; gelu is rejected). The bias must
// not share memory with the output (ArgumentError).
template <class T>
struct RowEpilogue {
  std::span<const T> bias;  // bias[i] added to row i; empty for none
  FusedActivation activation = FusedActivation::none;
};

namespace detail {
// The checks every forward kernel's epilogue overload makes, with fn naming the kernel:
// ShapeError unless the bias is empty or has `rows` entries (W's rows); ArgumentError for an
// activation that is not a forward epilogue (gelu) or a bias that overlaps Y. O(1).
template <class T, class Out>
void check_row_epilogue(const char* fn, const RowEpilogue<T>& epilogue, std::int64_t rows, const Out& Y) {
  if (!epilogue.bias.empty() && std::ssize(epilogue.bias) != rows)
    throw ShapeError(message(fn, ": bias has ", epilogue.bias.size(), " entries, W has ", rows, " rows"));
  check_forward_activation(fn, epilogue.activation);
  check_no_overlap(fn, "Y", Y, "the bias", epilogue.bias);
}
}  // namespace detail

}  // namespace sprig
