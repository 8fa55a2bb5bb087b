// sprig/kernels/narrow_spmm.hpp — Y = W X + b for a PaddedCSR W and a narrow X of 1 to
// kNarrowSpmmMaxColumns columns (one token per column: a language model's decoding step).
//
//   Y[i, n] = sum over live (i, c) of W(i, c) * X[c, n]  (+ bias[i] when a bias is given)
//
// Why a kernel of its own: spmm (kernels/spmm.hpp) packs X into 32-column panels and tiles Y
// in registers, which pays for itself at B = 128 columns; at B = 1 to 8 the panel is mostly
// padding and the packing and tile set-up dominate. Here each row keeps its N sums in
// registers (N a compile-time constant), walks its live weights once and reads the N
// contiguous values of X's row c per weight: O(nnz x N) multiply-adds, no packing, no
// workspace, no allocation, and W's slots never move (SparseLinear::forward may regroup them).
//
// Determinism: each output is summed in slot order, one thread, so results are reproducible;
// they may differ from spmm's in the last bits (another summation order). Threads: none
// (the work per call is one pass over W's live weights).
//
// Preconditions: Y apart from X and W's values. Throws ShapeError for mismatched shapes,
// ArgumentError for X.cols() outside [1, kNarrowSpmmMaxColumns] or a bias of a length
// other than 0 or W.rows().
#pragma once

#include <array>
#include <cstdint>
#include <span>

#include "../core/concepts.hpp"
#include "../core/error.hpp"
#include "../core/matrix.hpp"
#include "../core/padded_csr.hpp"

namespace sprig {

// The widest X narrow_spmm takes.
inline constexpr std::int64_t kNarrowSpmmMaxColumns = 8;

namespace detail {
// Rows [0, M) of Y = W X (+ bias) for X of exactly N columns: the row's N sums in registers.
template <int N, Value T, ColumnIndex Index>
void narrow_spmm_fixed(const PaddedCSR<T, Index>& W, ConstMatrixView<T> X, MatrixView<T> Y, std::span<const T> bias) {
  const T* __restrict values = W.values().data();
  const Index* __restrict cols = W.col_indices().data();
  for (std::int64_t i = 0; i < W.rows(); ++i) {
    std::array<T, N> acc{};
    const std::int64_t s0 = W.row_start(i), s1 = s0 + W.row_nnz(i);
    for (std::int64_t s = s0; s < s1; ++s) {
      const T w = values[s];
      const T* __restrict x = X.row(cols[s]);
      for (int n = 0; n < N; ++n) acc[n] += w * x[n];
    }
    T* __restrict y = Y.row(i);
    const T b = bias.empty() ? T(0) : bias[static_cast<std::size_t>(i)];
    for (int n = 0; n < N; ++n) y[n] = acc[n] + b;
  }
}

// N = 1, a sparse dot per row: four chains of sums (slot k into chain k % 4), so the adds do
// not wait on each other's latency; added at the end as (c0 + c1) + (c2 + c3).
template <Value T, ColumnIndex Index>
void narrow_spmm_one(const PaddedCSR<T, Index>& W, ConstMatrixView<T> X, MatrixView<T> Y, std::span<const T> bias) {
  const T* __restrict values = W.values().data();
  const Index* __restrict cols = W.col_indices().data();
  const T* __restrict x = X.data();
  const std::int64_t stride = X.stride();
  for (std::int64_t i = 0; i < W.rows(); ++i) {
    T c0 = T(0), c1 = T(0), c2 = T(0), c3 = T(0);
    const std::int64_t s0 = W.row_start(i), s1 = s0 + W.row_nnz(i);
    std::int64_t s = s0;
    for (; s + 4 <= s1; s += 4) {
      c0 += values[s] * x[cols[s] * stride];
      c1 += values[s + 1] * x[cols[s + 1] * stride];
      c2 += values[s + 2] * x[cols[s + 2] * stride];
      c3 += values[s + 3] * x[cols[s + 3] * stride];
    }
    for (; s < s1; ++s) c0 += values[s] * x[cols[s] * stride];
    Y(i, 0) = ((c0 + c1) + (c2 + c3)) + (bias.empty() ? T(0) : bias[static_cast<std::size_t>(i)]);
  }
}
}  // namespace detail

// Y = W X + bias (bias empty: none) for 1 <= X.cols() <= kNarrowSpmmMaxColumns (see the top).
// O(nnz x N + M) time, no allocation.
template <Value T, ColumnIndex Index>
void narrow_spmm(const PaddedCSR<T, Index>& W, std::type_identity_t<ConstMatrixView<T>> X,
                 std::type_identity_t<MatrixView<T>> Y, std::span<const T> bias = {}) {
  if (X.rows() != W.cols() || Y.rows() != W.rows() || Y.cols() != X.cols())
    throw ShapeError(detail::message("narrow_spmm: W is ", W.rows(), "x", W.cols(), ", X is ", X.rows(), "x", X.cols(),
                                     ", Y is ", Y.rows(), "x", Y.cols()));
  if (X.cols() < 1 || X.cols() > kNarrowSpmmMaxColumns)
    throw ArgumentError(
        detail::message("narrow_spmm: X has ", X.cols(), " columns; takes 1 to ", kNarrowSpmmMaxColumns));
  if (!bias.empty() && std::ssize(bias) != W.rows())
    throw ArgumentError(detail::message("narrow_spmm: bias has ", bias.size(), " entries for ", W.rows(), " rows"));
  switch (X.cols()) {
    case 1: return detail::narrow_spmm_one(W, X, Y, bias);
    case 2: return detail::narrow_spmm_fixed<2>(W, X, Y, bias);
    case 3: return detail::narrow_spmm_fixed<3>(W, X, Y, bias);
    case 4: return detail::narrow_spmm_fixed<4>(W, X, Y, bias);
    case 5: return detail::narrow_spmm_fixed<5>(W, X, Y, bias);
    case 6: return detail::narrow_spmm_fixed<6>(W, X, Y, bias);
    case 7: return detail::narrow_spmm_fixed<7>(W, X, Y, bias);
    default: return detail::narrow_spmm_fixed<8>(W, X, Y, bias);
  }
}

}  // namespace sprig
