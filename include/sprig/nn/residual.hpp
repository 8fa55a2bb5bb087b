// sprig/nn/residual.hpp — the element-wise sums of a residual connection, x + f(x), on
// feature-major activations [features x N]:
//   residual_add(A, B, Y):  Y = A + B   (forward: the block's output from its input and f's)
//   add_into(A, Y):         Y += A      (backward: the skip path's gradient added to f's dX)
// T is given explicitly, as for transpose_into: add_into<float>(A, Y) (views convert).
// Y may be exactly A or B (the same data and stride: in place); any other overlap with an
// input throws. Each element is one addition (vectorised, kernels/elementwise.hpp's add_arrays,
// dispatched in a dispatching build), so the result does not depend on the thread count or the
// register width; rows split over OpenMP threads for rows x cols >= kParallelMinWork (rows.hpp).
// O(rows x cols), no allocation. Throws ShapeError unless all operands have one shape,
// ArgumentError for a partial overlap.
#pragma once

#include <type_traits>

#include <cstdint>

#include "../core/concepts.hpp"
#include "../core/error.hpp"
#include "../core/matrix.hpp"
#include "../kernels/elementwise.hpp"
#include "rows.hpp"

namespace sprig {

namespace detail {
template <class T>
void check_residual_operand(const char* fn, const char* name, ConstMatrixView<T> A, MatrixView<T> Y) {
  if (A.rows() != Y.rows() || A.cols() != Y.cols())
    throw ShapeError(message(fn, ": ", name, " is ", A.rows(), "x", A.cols(), " but Y is ", Y.rows(), "x", Y.cols()));
  const bool same = A.data() == Y.data() && (A.stride() == Y.stride() || A.rows() <= 1);
  if (!same) check_no_overlap(fn, "Y", Y, name, A);
}
}  // namespace detail

// Y = A + B. Throws ShapeError unless A, B and Y have one shape, ArgumentError if Y overlaps
// A or B without being exactly it.
template <Value T>
void residual_add(std::type_identity_t<ConstMatrixView<T>> A, std::type_identity_t<ConstMatrixView<T>> B,
                  std::type_identity_t<MatrixView<T>> Y) {
  detail::check_residual_operand<T>("residual_add", "A", A, Y);
  detail::check_residual_operand<T>("residual_add", "B", B, Y);
  const auto add = detail::add_arrays_kernel<T>();
  detail::for_rows(Y.rows(), Y.cols(), [&](std::int64_t i) { add(A.row(i), B.row(i), Y.row(i), Y.cols()); });
}

// Y += A. Throws ShapeError unless A and Y have one shape, ArgumentError if they overlap
// without being the same view (Y += Y doubles Y).
template <Value T>
void add_into(std::type_identity_t<ConstMatrixView<T>> A, std::type_identity_t<MatrixView<T>> Y) {
  detail::check_residual_operand<T>("add_into", "A", A, Y);
  const auto add = detail::add_arrays_kernel<T>();
  detail::for_rows(Y.rows(), Y.cols(), [&](std::int64_t i) { add(A.row(i), Y.row(i), Y.row(i), Y.cols()); });
}

}  // namespace sprig
