// sprig/kernels/dense_gemm.hpp — dense C = alpha * op(A) * op(B) + beta * C on row-major views.
//
// With SPRIG_USE_CBLAS defined by the consumer (who then links a CBLAS, e.g. Debian's
// OpenBLAS), this calls cblas_sgemm / cblas_dgemm. Otherwise a portable blocked loop nest
// runs, on one thread: register tiles of C over rows of B, and xsimd dot products for
// op(B) = B^T. It is meant for the small dense layers of a sparse model (a 10-wide output
// layer, where it is on par with a BLAS); on large layers a BLAS's packed, cache-blocked
// kernels are faster (docs/design.md, "Measurements behind the code").
//
// beta == 0 follows BLAS: C is not read, so NaN or garbage there does not propagate.
//
// Reproducibility: the portable loop nest runs on one thread in a fixed order, so its bits,
// like those of sprig's sparse kernels, do not depend on the thread count. A threaded BLAS's
// may: with SPRIG_USE_CBLAS and OpenBLAS, training runs to different bits at 1 and 2 threads.
#pragma once

#include <type_traits>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "../core/concepts.hpp"
#include "../core/error.hpp"
#include "../core/matrix.hpp"
#include "simd.hpp"

#if defined(SPRIG_USE_CBLAS)
#  include <cblas.h>
#endif

namespace sprig {

// Whether gemm uses an operand as stored (no) or transposed (yes).
enum class Trans { no, yes };

namespace detail {

#if SPRIG_KERNEL_SIMD
// C[i0 + r, j + v w ..] += alpha * sum over k in [k0, k1) of a[r][k] B[k, j + v w ..], r < rows,
// v < regs: a tile of 2 x regs registers that stays in registers over the k loop. a[r] points
// to op(A)'s row i0 + r (a[1] == a[0] when rows is 1), with element stride a_step.
template <int regs, class Arch, class T>
SPRIG_ALWAYS_INLINE void axpy_tile(T alpha, const T* const* a, std::int64_t a_step, std::int64_t rows, std::int64_t k0,
                                   std::int64_t k1, ConstMatrixView<T> B, std::int64_t j, T* c0, T* c1) {
  using V = Batch<T, Arch>;
  constexpr auto w = static_cast<std::int64_t>(V::size);
  V acc0[regs], acc1[regs];
  SPRIG_UNROLL for (int v = 0; v < regs; ++v) acc0[v] = acc1[v] = V(T(0));
  for (std::int64_t k = k0; k < k1; ++k) {
    const T* b = B.row(k) + j;
    const V a0(a[0][k * a_step]), a1(a[1][k * a_step]);
    SPRIG_UNROLL for (int v = 0; v < regs; ++v) {
      const V bv = V::load_unaligned(b + v * w);
      acc0[v] = xsimd::fma(a0, bv, acc0[v]);
      acc1[v] = xsimd::fma(a1, bv, acc1[v]);
    }
  }
  const V al(alpha);
  SPRIG_UNROLL for (int v = 0; v < regs; ++v) {
    xsimd::fma(al, acc0[v], V::load_unaligned(c0 + v * w)).store_unaligned(c0 + v * w);
    if (rows > 1) xsimd::fma(al, acc1[v], V::load_unaligned(c1 + v * w)).store_unaligned(c1 + v * w);
  }
}
#endif

// C[i,:] += alpha * sum_k op(A)(i,k) B[k,:] for op(B) = B. Blocks keep a K-panel of B (kb rows
// of nb columns) in L2. Inside one, a tile of two C rows by four SIMD registers of columns
// stays in registers over the panel's k (axpy_tile), so each B load serves two rows and the
// tile is read and written once per panel rather than once per k (plain axpy loops lose to
// a BLAS by a wide margin on a 10-wide output layer). Columns left over, and the scalar
// build, run the axpy loops.
template <class Arch, class T>
void gemm_rows_axpy_rows(Trans ta, std::int64_t M, std::int64_t N, std::int64_t K, T alpha, ConstMatrixView<T> A,
                         ConstMatrixView<T> B, MatrixView<T> C) {
  constexpr std::int64_t kb = 128, nb = 512;
  // op(A)(i, k) = a_row(i)[k * a_step]
  const std::int64_t a_step = ta == Trans::no ? 1 : A.stride();
  const auto a_row = [&](std::int64_t i) { return ta == Trans::no ? A.row(i) : A.data() + i; };
  for (std::int64_t j0 = 0; j0 < N; j0 += nb) {
    const std::int64_t j1 = std::min(N, j0 + nb);
    for (std::int64_t k0 = 0; k0 < K; k0 += kb) {
      const std::int64_t k1 = std::min(K, k0 + kb);
      for (std::int64_t i0 = 0; i0 < M; i0 += 2) {
        const std::int64_t rows = std::min<std::int64_t>(2, M - i0);
        std::int64_t j = j0;
#if SPRIG_KERNEL_SIMD
        if constexpr (kSimdFor<T, Arch>) {
          constexpr auto w = static_cast<std::int64_t>(Batch<T, Arch>::size);
          const T* a[2] = {a_row(i0), a_row(i0 + rows - 1)};
          T* c0 = C.row(i0);
          T* c1 = C.row(i0 + rows - 1);
          for (; j + 4 * w <= j1; j += 4 * w) axpy_tile<4, Arch>(alpha, a, a_step, rows, k0, k1, B, j, c0 + j, c1 + j);
          for (; j + w <= j1; j += w) axpy_tile<1, Arch>(alpha, a, a_step, rows, k0, k1, B, j, c0 + j, c1 + j);
        }
#endif
        for (std::int64_t r = 0; r < rows && j < j1; ++r) {
          T* __restrict c = C.row(i0 + r);
          const T* ar = a_row(i0 + r);
          for (std::int64_t k = k0; k < k1; ++k) {
            const T a = alpha * ar[k * a_step];
            if (a == T(0)) continue;
            const T* __restrict b = B.row(k);
            for (std::int64_t jj = j; jj < j1; ++jj) c[jj] += a * b[jj];
          }
        }
      }
    }
  }
}

// C[i,j] += alpha * dot(op(A)[i,:], B[j,:]) for op(B) = B^T: every entry is a dot product of
// two contiguous rows (op(A)'s rows are copied out when A is transposed). Four rows of op(A)
// share each B row they are dotted with, and the dots run over whole SIMD registers (lane l
// sums the k = l mod width terms, the tail adds after the lanes): four scalar accumulators
// per dot are not vectorised by compilers.
template <class Arch, class T>
void gemm_rows_dot_rows(Trans ta, std::int64_t M, std::int64_t N, std::int64_t K, T alpha, ConstMatrixView<T> A,
                        ConstMatrixView<T> B, MatrixView<T> C) {
  constexpr std::int64_t kRows = 4;
  std::vector<T> copied(static_cast<std::size_t>(ta == Trans::yes ? kRows * K : 0));
  for (std::int64_t i0 = 0; i0 < M; i0 += kRows) {
    const std::int64_t rows = std::min(kRows, M - i0);
    const T* a[kRows];
    for (std::int64_t r = 0; r < kRows; ++r) {
      const std::int64_t i = i0 + std::min(r, rows - 1);  // a short block repeats its last row
      if (ta == Trans::no) {
        a[r] = A.row(i);
      } else {
        T* dst = copied.data() + r * K;
        for (std::int64_t k = 0; k < K; ++k) dst[k] = A(k, i);
        a[r] = dst;
      }
    }
    for (std::int64_t j = 0; j < N; ++j) {
      const T* __restrict b = B.row(j);
      T dot[kRows] = {};
      std::int64_t k = 0;
#if SPRIG_KERNEL_SIMD
      if constexpr (kSimdFor<T, Arch>) {
        using V = Batch<T, Arch>;
        constexpr auto w = static_cast<std::int64_t>(V::size);
        V acc[kRows] = {V(T(0)), V(T(0)), V(T(0)), V(T(0))};
        for (; k + w <= K; k += w) {
          const V bv = V::load_unaligned(b + k);
          SPRIG_UNROLL for (std::int64_t r = 0; r < kRows; ++r) acc[r] =
              xsimd::fma(V::load_unaligned(a[r] + k), bv, acc[r]);
        }
        SPRIG_UNROLL for (std::int64_t r = 0; r < kRows; ++r) dot[r] = reduce_add(acc[r]);
      }
#endif
      for (; k < K; ++k)
        for (std::int64_t r = 0; r < kRows; ++r) dot[r] += a[r][k] * b[k];
      for (std::int64_t r = 0; r < rows; ++r) C(i0 + r, j) += alpha * dot[r];
    }
  }
}

// C[M,N] = alpha * op(A) op(B) + beta * C; op(A) is M x K, op(B) is K x N.
template <class T, class Arch = KernelArch>
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
  if (tb == Trans::no) {
    gemm_rows_axpy_rows<Arch, T>(ta, M, N, K, alpha, A, B, C);
  } else {
    gemm_rows_dot_rows<Arch, T>(ta, M, N, K, alpha, A, B, C);
  }
}

}  // namespace detail

// C = alpha * op(A) * op(B) + beta * C.
// Preconditions: op(A) is M x K, op(B) is K x N and C is M x N (else ShapeError); C shares no
// memory with A or B (else ArgumentError; C is the in/out operand beta reads). With
// SPRIG_USE_CBLAS every dimension and stride must fit an int.
// Complexity: O(M x N x K) multiply-adds; the portable path allocates 4 x K elements when A
// is transposed and op(B) = B^T.
// Threads: the portable path runs on the calling thread and gives the same bits for any
// OpenMP thread count; a CBLAS may thread and may not.
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
  detail::check_no_overlap("gemm", "C", C, "A", A);
  detail::check_no_overlap("gemm", "C", C, "B", B);
  if (M == 0 || N == 0) return;
#if defined(SPRIG_USE_CBLAS)
  if (K > 0) {
    const auto ca = ta == Trans::no ? CblasNoTrans : CblasTrans;
    const auto cb = tb == Trans::no ? CblasNoTrans : CblasTrans;
    // BLAS wants lda >= 1 even for a 0-column view.
    const auto lda = static_cast<int>(std::max<std::int64_t>(1, A.stride()));
    const auto ldb = static_cast<int>(std::max<std::int64_t>(1, B.stride()));
    if constexpr (std::is_same_v<T, float>)
      cblas_sgemm(CblasRowMajor, ca, cb, static_cast<int>(M), static_cast<int>(N), static_cast<int>(K), alpha, A.data(),
                  lda, B.data(), ldb, beta, C.data(), static_cast<int>(C.stride()));
    else
      cblas_dgemm(CblasRowMajor, ca, cb, static_cast<int>(M), static_cast<int>(N), static_cast<int>(K), alpha, A.data(),
                  lda, B.data(), ldb, beta, C.data(), static_cast<int>(C.stride()));
    return;
  }
#endif
  detail::gemm_portable<T>(ta, tb, M, N, K, alpha, A, B, beta, C);
}

}  // namespace sprig
