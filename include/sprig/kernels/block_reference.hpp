// sprig/kernels/block_reference.hpp — plain scalar loops for the block-sparse kernels
// (BlockPaddedCSR): the test oracle, as reference.hpp is for the unstructured ones.
// Written for obviousness, not speed; shapes are validated like the fast kernels (ShapeError).
// Independent of the code it checks: no kernel and not the umbrella header include it, and it
// shares nothing with the kernels' own scalar paths. Include it yourself (tests, benchmarks).
// Outputs must not overlap inputs (unchecked here). One thread; O(nnz_blocks x R x C x B).
//
// Every loop visits only the entries of a live block that lie inside the M x K matrix: an
// edge block's out-of-matrix entries are never multiplied, and no row of an operand outside
// the matrix is read or written.
#pragma once

#include <type_traits>

#include <algorithm>
#include <cstdint>
#include <span>

#include "../core/block_padded_csr.hpp"
#include "../core/matrix.hpp"
#include "update_mode.hpp"

namespace sprig::reference {

// Y[M,B] (=|+=) W[M,K] * X[K,B].
template <Value T, ColumnIndex Index, int R, int C>
void block_spmm(const BlockPaddedCSR<T, Index, R, C>& W, std::type_identity_t<ConstMatrixView<T>> X,
                std::type_identity_t<MatrixView<T>> Y, Update mode = Update::overwrite) {
  const std::int64_t M = W.rows(), K = W.cols();
  if (X.rows() != K || Y.rows() != M || Y.cols() != X.cols())
    throw ShapeError(detail::message("reference::block_spmm: W is ", M, "x", K, " (", R, "x", C, " blocks), X is ",
                                     X.rows(), "x", X.cols(), ", Y is ", Y.rows(), "x", Y.cols()));
  if (mode == Update::overwrite) Y.fill(T(0));
  const auto& P = W.pattern();
  const auto cols = P.col_indices();
  const auto vals = W.values();
  for (std::int64_t bi = 0; bi < P.rows(); ++bi)
    for (std::int64_t s = P.row_start(bi), e = s + P.row_nnz(bi); s < e; ++s) {
      const std::int64_t bj = cols[s];
      for (std::int64_t r = 0; r < R && bi * R + r < M; ++r)
        for (std::int64_t c = 0; c < C && bj * C + c < K; ++c) {
          const T w = vals[s * R * C + r * C + c];
          for (std::int64_t b = 0; b < X.cols(); ++b) Y(bi * R + r, b) += w * X(bj * C + c, b);
        }
    }
}

// dX[K,B] (=|+=) W^T[K,M] * dY[M,B].
template <Value T, ColumnIndex Index, int R, int C>
void block_spmm_transposed(const BlockPaddedCSR<T, Index, R, C>& W, std::type_identity_t<ConstMatrixView<T>> dY,
                           std::type_identity_t<MatrixView<T>> dX, Update mode = Update::overwrite) {
  const std::int64_t M = W.rows(), K = W.cols();
  if (dY.rows() != M || dX.rows() != K || dX.cols() != dY.cols())
    throw ShapeError(detail::message("reference::block_spmm_transposed: W is ", M, "x", K, " (", R, "x", C,
                                     " blocks), dY is ", dY.rows(), "x", dY.cols(), ", dX is ", dX.rows(), "x",
                                     dX.cols()));
  if (mode == Update::overwrite) dX.fill(T(0));
  const auto& P = W.pattern();
  const auto cols = P.col_indices();
  const auto vals = W.values();
  for (std::int64_t bi = 0; bi < P.rows(); ++bi)
    for (std::int64_t s = P.row_start(bi), e = s + P.row_nnz(bi); s < e; ++s) {
      const std::int64_t bj = cols[s];
      for (std::int64_t r = 0; r < R && bi * R + r < M; ++r)
        for (std::int64_t c = 0; c < C && bj * C + c < K; ++c) {
          const T w = vals[s * R * C + r * C + c];
          for (std::int64_t b = 0; b < dY.cols(); ++b) dX(bj * C + c, b) += w * dY(bi * R + r, b);
        }
    }
}

// For every live block slot s = (bi, bj) and every (r, c) with bi*R + r < M and bj*C + c < K:
// grad[s*R*C + r*C + c] (=|+=) dot(dY[bi*R + r, :], X[bj*C + c, :]). The out-of-matrix entries
// of a live edge block, and all entries of padding and dead slots, get 0 (overwrite) or are
// left unchanged (accumulate). grad.size() == W.storage_size() * R * C.
template <Value T, ColumnIndex Index, int R, int C>
void block_sddmm(const BlockPaddedCSR<T, Index, R, C>& W, std::type_identity_t<ConstMatrixView<T>> dY,
                 std::type_identity_t<ConstMatrixView<T>> X, std::type_identity_t<std::span<T>> grad,
                 Update mode = Update::overwrite) {
  const std::int64_t M = W.rows(), K = W.cols();
  if (dY.rows() != M || X.rows() != K || dY.cols() != X.cols() || std::ssize(grad) != W.storage_size() * R * C)
    throw ShapeError(detail::message("reference::block_sddmm: W is ", M, "x", K, " (", R, "x", C, " blocks) with ",
                                     W.storage_size(), " slots, dY is ", dY.rows(), "x", dY.cols(), ", X is ", X.rows(),
                                     "x", X.cols(), ", grad has ", grad.size(), " entries (need ",
                                     W.storage_size() * R * C, ")"));
  if (mode == Update::overwrite) std::fill(grad.begin(), grad.end(), T(0));
  const auto& P = W.pattern();
  const auto cols = P.col_indices();
  for (std::int64_t bi = 0; bi < P.rows(); ++bi)
    for (std::int64_t s = P.row_start(bi), e = s + P.row_nnz(bi); s < e; ++s) {
      const std::int64_t bj = cols[s];
      for (std::int64_t r = 0; r < R && bi * R + r < M; ++r)
        for (std::int64_t c = 0; c < C && bj * C + c < K; ++c) {
          T acc = T(0);
          for (std::int64_t b = 0; b < X.cols(); ++b) acc += dY(bi * R + r, b) * X(bj * C + c, b);
          grad[static_cast<std::size_t>(s * R * C + r * C + c)] += acc;
        }
    }
}

}  // namespace sprig::reference
