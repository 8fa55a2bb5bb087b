// sprig/kernels/reference.hpp — plain scalar loops for every kernel: the test oracle.
// Written for obviousness, not speed; shapes are validated like the fast kernels (ShapeError).
// Independent of the code it checks: no kernel and not the umbrella header include it, and it
// shares nothing with the kernels' own scalar path. Include it yourself (tests, benchmarks).
// Outputs must not overlap inputs (unchecked here). One thread; O(nnz x B) per product.
#pragma once

#include <type_traits>

#include <cstdint>
#include <span>
#include <vector>

#include "../core/matrix.hpp"
#include "../core/padded_csr.hpp"
#include "update_mode.hpp"

namespace sprig::reference {

// Y[M,B] (=|+=) W[M,K] * X[K,B].
template <Value T, ColumnIndex Index>
void spmm(const PaddedCSR<T, Index>& W, std::type_identity_t<ConstMatrixView<T>> X,
          std::type_identity_t<MatrixView<T>> Y, Update mode = Update::overwrite) {
  if (X.rows() != W.cols() || Y.rows() != W.rows() || Y.cols() != X.cols())
    throw ShapeError(detail::message("reference::spmm: W is ", W.rows(), "x", W.cols(), ", X is ", X.rows(), "x",
                                     X.cols(), ", Y is ", Y.rows(), "x", Y.cols()));
  for (std::int64_t i = 0; i < W.rows(); ++i) {
    if (mode == Update::overwrite)
      for (std::int64_t b = 0; b < Y.cols(); ++b) Y(i, b) = T(0);
    const auto r = W.row(i);
    for (std::size_t q = 0; q < r.cols.size(); ++q)
      for (std::int64_t b = 0; b < Y.cols(); ++b) Y(i, b) += r.values[q] * X(r.cols[q], b);
  }
}

// grad[s] (=|+=) dot(dY[i,:], X[c,:]) for every live slot s = (i, c) of W; padding and dead
// slots get 0 (overwrite) or are left unchanged (accumulate). grad.size() == W.storage_size().
template <Value T, ColumnIndex Index>
void sddmm(const PaddedCSR<T, Index>& W, std::type_identity_t<ConstMatrixView<T>> dY,
           std::type_identity_t<ConstMatrixView<T>> X, std::type_identity_t<std::span<T>> grad,
           Update mode = Update::overwrite) {
  if (dY.rows() != W.rows() || X.rows() != W.cols() || dY.cols() != X.cols() || std::ssize(grad) != W.storage_size())
    throw ShapeError(detail::message("reference::sddmm: W is ", W.rows(), "x", W.cols(), " with ", W.storage_size(),
                                     " slots, dY is ", dY.rows(), "x", dY.cols(), ", X is ", X.rows(), "x", X.cols(),
                                     ", grad has ", grad.size(), " entries"));
  if (mode == Update::overwrite)
    for (T& g : grad) g = T(0);
  for (std::int64_t i = 0; i < W.rows(); ++i) {
    const auto r = W.row(i);
    for (std::size_t q = 0; q < r.cols.size(); ++q) {
      T acc = T(0);
      for (std::int64_t b = 0; b < X.cols(); ++b) acc += dY(i, b) * X(r.cols[q], b);
      grad[static_cast<std::size_t>(r.start) + q] += acc;
    }
  }
}

// W^T as a dense-free list: for each column c of W, the (row, value, slot) entries in
// ascending row order. The oracle for transpose(): the fast one must hold the same live
// entries, and its permutation must point at these slots.
template <Value T, ColumnIndex Index>
struct TransposeEntry {
  std::int64_t row;
  T value;
  std::int64_t slot;
};
template <Value T, ColumnIndex Index>
std::vector<std::vector<TransposeEntry<T, Index>>> transpose_entries(const PaddedCSR<T, Index>& W) {
  std::vector<std::vector<TransposeEntry<T, Index>>> cols(static_cast<std::size_t>(W.cols()));
  W.for_each_live([&](std::int64_t i, std::int64_t c, T v, std::int64_t s) { cols[c].push_back({i, v, s}); });
  return cols;
}

}  // namespace sprig::reference
