// sprig/nn/gemm.hpp — dense C = alpha * op(A) * op(B) + beta * C on row-major views.
//
// With SPRIG_USE_CBLAS defined by the consumer (who then links a CBLAS, e.g. Debian's
// OpenBLAS), this calls cblas_sgemm / cblas_dgemm. Otherwise a portable blocked loop nest
// runs; it is written so the compiler vectorises the innermost loop over contiguous rows
// (about 5-10x slower than OpenBLAS, fine for small heads and for tests).
//
// beta == 0 follows BLAS: C is not read, so NaN or garbage there does not propagate.
//
// Reproducibility: the portable loop nest runs on one thread in a fixed order, so its bits,
// like those of sprig's sparse kernels, do not depend on the thread count. OpenBLAS's do: the
// Fashion-MNIST example (its 10-way output layer is dense) trains to different bits at 1 and
// 2 threads from the first step with SPRIG_USE_CBLAS, and to the same bits without it.
#pragma once

#include <type_traits>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "../core/concepts.hpp"
#include "../core/error.hpp"
#include "../core/matrix.hpp"

#if defined(SPRIG_USE_CBLAS)
#  include <cblas.h>
#endif

namespace sprig {

enum class Trans { no, yes };

namespace detail {

// C[M,N] = alpha * op(A) op(B) + beta * C; op(A) is M x K, op(B) is K x N.
template <class T>
void gemm_portable(Trans ta, Trans tb, std::int64_t M, std::int64_t N, std::int64_t K, T alpha, ConstMatrixView<T> A,
                   ConstMatrixView<T> B, T beta, MatrixView<T> C) {
  for (std::int64_t i = 0; i < M; ++i) {
    T* c = C.row(i);
    if (beta == T(0))
      std::fill_n(c, N, T(0));
    else if (beta != T(1))
      for (std::int64_t j = 0; j < N; ++j) c[j] *= beta;
  }
  if (K == 0 || alpha == T(0)) return;
  // Blocks keep a K-panel of B (kb rows of nb) in L2 while a C block stays in L1.
  constexpr std::int64_t kb = 128, nb = 512, mb = 32;
  if (tb == Trans::no) {
    // C[i,:] += alpha * a(i,k) * B[k,:]: contiguous axpy over rows of B.
    for (std::int64_t j0 = 0; j0 < N; j0 += nb) {
      const std::int64_t j1 = std::min(N, j0 + nb);
      for (std::int64_t k0 = 0; k0 < K; k0 += kb) {
        const std::int64_t k1 = std::min(K, k0 + kb);
        for (std::int64_t i0 = 0; i0 < M; i0 += mb)
          for (std::int64_t i = i0; i < std::min(M, i0 + mb); ++i) {
            T* __restrict c = C.row(i);
            for (std::int64_t k = k0; k < k1; ++k) {
              const T a = alpha * (ta == Trans::no ? A(i, k) : A(k, i));
              if (a == T(0)) continue;
              const T* __restrict b = B.row(k);
              for (std::int64_t j = j0; j < j1; ++j) c[j] += a * b[j];
            }
          }
      }
    }
  } else {
    // op(B) = B^T: C[i,j] += alpha * dot(op(A)[i,:], B[j,:]); with A not transposed both
    // rows are contiguous. For A transposed, gather the column once per i.
    std::vector<T> arow(static_cast<std::size_t>(ta == Trans::yes ? K : 0));
    for (std::int64_t i = 0; i < M; ++i) {
      const T* a = nullptr;
      if (ta == Trans::no) {
        a = A.row(i);
      } else {
        for (std::int64_t k = 0; k < K; ++k) arow[static_cast<std::size_t>(k)] = A(k, i);
        a = arow.data();
      }
      T* c = C.row(i);
      for (std::int64_t j = 0; j < N; ++j) {
        const T* __restrict b = B.row(j);
        T acc0 = T(0), acc1 = T(0), acc2 = T(0), acc3 = T(0);
        std::int64_t k = 0;
        for (; k + 4 <= K; k += 4) {
          acc0 += a[k] * b[k];
          acc1 += a[k + 1] * b[k + 1];
          acc2 += a[k + 2] * b[k + 2];
          acc3 += a[k + 3] * b[k + 3];
        }
        for (; k < K; ++k) acc0 += a[k] * b[k];
        c[j] += alpha * ((acc0 + acc1) + (acc2 + acc3));
      }
    }
  }
}

}  // namespace detail

// C = alpha * op(A) * op(B) + beta * C. Shapes: op(A) is M x K, op(B) is K x N, C is M x N.
template <Value T>
void gemm(Trans ta, Trans tb, T alpha, std::type_identity_t<ConstMatrixView<T>> A,
          std::type_identity_t<ConstMatrixView<T>> B, T beta, std::type_identity_t<MatrixView<T>> C) {
  const std::int64_t M = ta == Trans::no ? A.rows() : A.cols();
  const std::int64_t K = ta == Trans::no ? A.cols() : A.rows();
  const std::int64_t Kb = tb == Trans::no ? B.rows() : B.cols();
  const std::int64_t N = tb == Trans::no ? B.cols() : B.rows();
  if (K != Kb || C.rows() != M || C.cols() != N)
    throw ShapeError(detail::message("gemm: op(A) is ", M, "x", K, ", op(B) is ", Kb, "x", N, ", C is ", C.rows(), "x",
                                     C.cols(), " (expected ", M, "x", N, ")"));
  if (M == 0 || N == 0) return;
#if defined(SPRIG_USE_CBLAS)
  if (K > 0) {
    const auto ca = ta == Trans::no ? CblasNoTrans : CblasTrans;
    const auto cb = tb == Trans::no ? CblasNoTrans : CblasTrans;
    // BLAS wants lda >= 1 even for a 0-column view.
    const auto lda = static_cast<int>(std::max<std::int64_t>(1, A.stride()));
    const auto ldb = static_cast<int>(std::max<std::int64_t>(1, B.stride()));
    if constexpr (std::is_same_v<T, float>)
      cblas_sgemm(CblasRowMajor, ca, cb, static_cast<int>(M), static_cast<int>(N), static_cast<int>(K), alpha,
                  A.data(), lda, B.data(), ldb, beta, C.data(), static_cast<int>(C.stride()));
    else
      cblas_dgemm(CblasRowMajor, ca, cb, static_cast<int>(M), static_cast<int>(N), static_cast<int>(K), alpha,
                  A.data(), lda, B.data(), ldb, beta, C.data(), static_cast<int>(C.stride()));
    return;
  }
#endif
  detail::gemm_portable<T>(ta, tb, M, N, K, alpha, A, B, beta, C);
}

}  // namespace sprig
