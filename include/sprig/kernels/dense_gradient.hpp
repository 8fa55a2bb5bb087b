// sprig/kernels/dense_gradient.hpp — rows of a layer's dense weight gradient dL/dW = dY X^T,
// elementwise or summed in absolute value over R x C blocks: what a DST grow rule that ranks
// positions by gradient magnitude (RigL, SNFS) streams, a block of rows at a time, so that
// the rows x cols gradient is never stored whole.
//
// Both are one dense GEMM (kernels/dense_gemm.hpp) plus, for blocks, sums in a fixed order:
// their bits are the GEMM's, so they do not depend on the thread count on the portable path
// (with SPRIG_USE_CBLAS a threaded BLAS may change them).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <type_traits>

#include "../core/bfloat16.hpp"
#include "../core/concepts.hpp"
#include "../core/error.hpp"
#include "../core/matrix.hpp"
#include "bfloat16_convert.hpp"
#include "dense_gemm.hpp"

namespace sprig {

// out = rows [r0, r0 + out.rows()) of dY X^T: dY is [rows x B], X is [cols x B], out is
// [n x cols]. Throws ShapeError if the operands do not fit (0 <= r0, r0 + n <= dY's rows,
// B and cols agreeing), ArgumentError if out overlaps dY or X. O(n x cols x B).
template <Value T>
void dense_gradient_rows(ConstMatrixView<T> dY, ConstMatrixView<T> X, std::int64_t r0, MatrixView<T> out) {
  if (r0 < 0 || r0 + out.rows() > dY.rows())
    throw ShapeError(detail::message("dense_gradient_rows: rows [", r0, ", ", r0 + out.rows(), ") outside dY's ",
                                     dY.rows(), " rows"));
  gemm<T>(Trans::no, Trans::yes, T(1), dY.block(r0, 0, out.rows(), dY.cols()), X, T(0), out);
}

// out(i, j) = sum of |g(r, c)| over rows [i R, (i + 1) R) and columns [j C, (j + 1) C) of g,
// clipped to g (0 for a block row past it): block_gradient_sums' last step, for a caller that
// formed the rows of dY X^T itself. Preconditions (not checked): R, C >= 1 and out.cols() ==
// ceil(g.cols() / C). O(g.rows() x g.cols()).
template <Value T>
void block_abs_sums(ConstMatrixView<T> g, std::int64_t R, std::int64_t C, MatrixView<T> out) noexcept {
  const std::int64_t erows = g.rows(), in = g.cols();
  for (std::int64_t i = 0; i < out.rows(); ++i)
    for (std::int64_t j = 0; j < out.cols(); ++j) {
      T sum = T(0);
      for (std::int64_t r = i * R; r < std::min(erows, (i + 1) * R); ++r)
        for (std::int64_t c = j * C; c < std::min(in, (j + 1) * C); ++c) sum += std::abs(g(r, c));
      out(i, j) = sum;
    }
}

// out(i, j) = sum of |dY X^T| over the in-matrix entries of block (r0 + i, j) of the R x C
// block grid: rows [(r0 + i) R, (r0 + i + 1) R) and columns [j C, (j + 1) C), clipped to
// dY's rows and X's rows. `scratch` holds the elementwise rows of one call (resized here: a
// caller that reuses it allocates once). Throws ShapeError if R or C < 1, if block row r0
// is not in the grid or out.cols() is not its width (rows of out past the grid get 0);
// ArgumentError as gemm. O(out.rows() x R x cols x B).
template <Value T>
void block_gradient_sums(ConstMatrixView<T> dY, ConstMatrixView<T> X, std::int64_t R, std::int64_t C, std::int64_t r0,
                         MatrixView<T> out, Matrix<T>& scratch) {
  const char* fn = "block_gradient_sums";
  if (R < 1 || C < 1) throw ShapeError(detail::message(fn, ": block ", R, "x", C));
  const std::int64_t rows = out.rows(), in = X.rows(), e0 = r0 * R;
  if (r0 < 0 || (rows > 0 && e0 >= dY.rows()) || out.cols() != (in + C - 1) / C)
    throw ShapeError(detail::message(fn, ": block rows [", r0, ", ", r0 + rows, ") x ", out.cols(),
                                     " block columns outside the grid of ", dY.rows(), "x", in, " in ", R, "x", C,
                                     " blocks"));
  const std::int64_t erows = std::min(dY.rows(), (r0 + rows) * R) - e0;
  scratch.resize(erows, in);
  gemm<T>(Trans::no, Trans::yes, T(1), dY.block(e0, 0, erows, dY.cols()), X, T(0), scratch.view());
  block_abs_sums<T>(scratch.view(), R, C, out);
}

namespace detail {
// Rows [r0, r0 + rows) and columns [c0, c0 + cols) of an operand held in T (`wide`) or, where
// `narrow` is non-empty, in bf16 (widened exactly into `buffer`).
template <Value T>
ConstMatrixView<T> columns_in_t(ConstMatrixView<T> wide, ConstMatrixView<bfloat16> narrow, std::int64_t r0,
                                std::int64_t rows, std::int64_t c0, std::int64_t cols, Matrix<T>& buffer) {
  if (!narrow.data()) return wide.block(r0, c0, rows, cols);
  buffer.resize(rows, cols);
  for (std::int64_t i = 0; i < rows; ++i) {
    const bfloat16* from = narrow.row(r0 + i) + c0;
    if constexpr (std::is_same_v<T, float>)
      to_float(std::span<const bfloat16>(from, static_cast<std::size_t>(cols)),
               std::span<float>(buffer.row(i), static_cast<std::size_t>(cols)));
    else
      for (std::int64_t j = 0; j < cols; ++j) buffer(i, j) = static_cast<T>(static_cast<float>(from[j]));
  }
  return buffer.view();
}
}  // namespace detail

// dense_gradient_rows for operands that may be held in bf16: each of dY and X is read from its
// bf16 view where that view is non-empty, else from its T view. Over chunks of 128 batch
// columns, each widened (exactly) into x_buffer / dy_buffer, the products accumulated in chunk
// order: the scratch is 128 columns, not the batch. Preconditions (not checked): the operands
// fit as for dense_gradient_rows. O(n x cols x B).
template <Value T>
void widened_gradient_rows(ConstMatrixView<T> dY, ConstMatrixView<bfloat16> dY_bf16, ConstMatrixView<T> X,
                           ConstMatrixView<bfloat16> X_bf16, std::int64_t r0, MatrixView<T> out, Matrix<T>& x_buffer,
                           Matrix<T>& dy_buffer) {
  constexpr std::int64_t kChunk = 128;
  const std::int64_t B = X_bf16.data() ? X_bf16.cols() : X.cols(), in = X_bf16.data() ? X_bf16.rows() : X.rows();
  for (std::int64_t c0 = 0; c0 < B || c0 == 0; c0 += kChunk) {
    const std::int64_t nc = std::min(kChunk, B - c0);
    const auto x = detail::columns_in_t(X, X_bf16, 0, in, c0, nc, x_buffer);
    const auto dy = detail::columns_in_t(dY, dY_bf16, r0, out.rows(), c0, nc, dy_buffer);
    gemm<T>(Trans::no, Trans::yes, T(1), dy, x, c0 == 0 ? T(0) : T(1), out);
  }
}

}  // namespace sprig
