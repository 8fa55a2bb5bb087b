// sprig/kernels/dense_gemm.hpp — dense C = alpha * op(A) * op(B) + beta * C on row-major views.
//
// With SPRIG_USE_CBLAS defined by the consumer (who then links a CBLAS, e.g. Debian's
// OpenBLAS), this calls cblas_sgemm / cblas_dgemm. Otherwise a portable loop nest runs: for
// op(A) of 8 or more rows, panels of op(B) packed k-major and swept by outer-product register
// tiles, shared out among OpenMP threads, at about OpenBLAS's rate on the library's shapes
// (docs/performance.md, "The portable dense GEMM"); for fewer rows (where packing would cost
// more than the product) register tiles of C over rows of B, or xsimd dot products for
// op(B) = B^T, on the calling thread.
//
// beta == 0 follows BLAS: C is not read, so NaN or garbage there does not propagate.
//
// Reproducibility: the portable path sums each entry of C in an order fixed by the shapes
// alone, so its bits, like those of sprig's sparse kernels, do not depend on the thread
// count. A threaded BLAS's may: with SPRIG_USE_CBLAS and OpenBLAS, training runs to different
// bits at 1 and 2 threads.
#pragma once

#include <type_traits>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "../core/concepts.hpp"
#include "../core/error.hpp"
#include "../core/matrix.hpp"
#include "parallel.hpp"
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

// C[i,:] += alpha * sum_k op(A)(i,k) B[k,:] for op(B) = B, for op(A) of few rows and the
// scalar build (gemm_rows_packed serves the rest). Blocks keep a K-panel of B (kb rows
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

#if SPRIG_KERNEL_SIMD
// panel[k nc + c] = op(B)(k0 + k, j0 + c) for c < cols, 0 for cols <= c < nc, k < K: for
// op(B) = B a copy of row segments; for B^T w x w squares transposed in registers
// (transpose_square), the edges one element at a time.
template <class Arch, class T>
void pack_panel(Trans tb, ConstMatrixView<T> B, std::int64_t k0, std::int64_t j0, std::int64_t cols, std::int64_t K,
                std::int64_t nc, T* __restrict panel) {
  using V = Batch<T, Arch>;
  constexpr auto w = static_cast<std::int64_t>(V::size);
  if (tb == Trans::no) {
    for (std::int64_t k = 0; k < K; ++k) {
      std::copy_n(B.row(k0 + k) + j0, cols, panel + k * nc);
      std::fill(panel + k * nc + cols, panel + (k + 1) * nc, T(0));
    }
    return;
  }
  std::int64_t c = 0;
  for (; c + w <= cols; c += w) {
    std::int64_t k = 0;
    for (; k + w <= K; k += w) {
      V v[w];
      SPRIG_UNROLL for (std::int64_t i = 0; i < w; ++i) v[i] = V::load_unaligned(B.row(j0 + c + i) + k0 + k);
      transpose_square(v);
      SPRIG_UNROLL for (std::int64_t i = 0; i < w; ++i) v[i].store_aligned(panel + (k + i) * nc + c);
    }
    for (; k < K; ++k)
      for (std::int64_t i = 0; i < w; ++i) panel[k * nc + c + i] = B(j0 + c + i, k0 + k);
  }
  for (std::int64_t k = 0; k < K; ++k)
    for (std::int64_t i = c; i < nc; ++i) panel[k * nc + i] = i < cols ? B(j0 + i, k0 + k) : T(0);
}

// C[i0 + r, j0 + c] += alpha * sum over k < K of a[r][k a_step] * panel[k nc + c] for r < rows
// and c < cols, nc = NV w: a tile of MR x NV registers that stays in registers over all of k,
// each panel load serving MR rows and each broadcast of op(A) NV registers. a[r] points to
// op(A)'s row i0 + r at the panel's first k (a short tile repeats its last row). Each entry is
// one fma chain over k in order, whatever the tile: its bits do not depend on the tiling.
template <int MR, int NV, class Arch, class T>
SPRIG_ALWAYS_INLINE void panel_tile(T alpha, const T* const* a, std::int64_t a_step, std::int64_t K,
                                    const T* __restrict panel, std::int64_t rows, std::int64_t cols, MatrixView<T> C,
                                    std::int64_t i0, std::int64_t j0) {
  using V = Batch<T, Arch>;
  constexpr auto w = static_cast<std::int64_t>(V::size), nc = NV * w;
  V acc[MR][NV];
  SPRIG_UNROLL for (int r = 0; r < MR; ++r) SPRIG_UNROLL for (int v = 0; v < NV; ++v) acc[r][v] = V(T(0));
  for (std::int64_t k = 0; k < K; ++k) {
    V bv[NV];
    SPRIG_UNROLL for (int v = 0; v < NV; ++v) bv[v] = in_register(V::load_aligned(panel + k * nc + v * w));
    SPRIG_UNROLL for (int r = 0; r < MR; ++r) {
      const V av(a[r][k * a_step]);
      SPRIG_UNROLL for (int v = 0; v < NV; ++v) acc[r][v] = xsimd::fma(av, bv[v], acc[r][v]);
    }
  }
  const V al(alpha);
  for (std::int64_t r = 0; r < rows; ++r) {
    T* c = C.row(i0 + r) + j0;
    if (cols == nc) {
      SPRIG_UNROLL for (int v = 0; v < NV; ++v) xsimd::fma(al, acc[r][v], V::load_unaligned(c + v * w))
          .store_unaligned(c + v * w);
    } else {
      alignas(64) T sums[nc];
      SPRIG_UNROLL for (int v = 0; v < NV; ++v) acc[r][v].store_aligned(sums + v * w);
      for (std::int64_t j = 0; j < cols; ++j) c[j] = std::fma(alpha, sums[j], c[j]);
    }
  }
}

#endif

// C[i,j] += alpha * dot(op(A)[i,:], B[j,:]) for op(B) = B^T, for op(A) of few rows (where
// packing op(B) would cost more than the product) and the scalar build: every entry is a dot
// product of two contiguous rows (op(A)'s rows are copied out when A is transposed). Four
// rows of op(A) share each B row they are dotted with, and the dots run over whole SIMD
// registers (lane l sums the k = l mod width terms, the tail adds after the lanes): four
// scalar accumulators per dot are not vectorised by compilers.
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
#if SPRIG_KERNEL_SIMD
// C += alpha op(A) op(B) for op(A) of at least kPackMinRows rows: panels of nc columns by
// kKc rows of op(B) packed k-major on the stack (pack_panel, zero-padded past N; 64 KiB, so
// that a steady state allocates nothing), each swept by tiles of 4 rows of op(A) by nc = 4
// registers of columns (2 where the ISA has 16 vector registers; panel_tile) that stay in
// registers over the panel's k: no horizontal sums, C read and written once per kKc. Column
// panels are shared out among OpenMP threads (run_even_split); each entry's sums run in an
// order fixed by K alone, so the bits do not depend on the thread count.
inline constexpr std::int64_t kPackMinRows = 8;
template <class Arch, class T>
void gemm_rows_packed(Trans ta, Trans tb, std::int64_t M, std::int64_t N, std::int64_t K, T alpha, ConstMatrixView<T> A,
                      ConstMatrixView<T> B, MatrixView<T> C) {
  constexpr int MR = 4, NV = kVectorRegistersOf<Arch> >= 32 ? 4 : 2;
  constexpr auto nc = static_cast<std::int64_t>(NV * Batch<T, Arch>::size);
  constexpr std::int64_t kKc = (std::int64_t{64} << 10) / (nc * std::int64_t{sizeof(T)});
  const std::int64_t a_step = ta == Trans::no ? 1 : A.stride();
  const auto a_row = [&](std::int64_t i) { return ta == Trans::no ? A.row(i) : A.data() + i; };
  run_even_split(M * N * K, (N + nc - 1) / nc, [&](std::int64_t p0, std::int64_t p1) {
    alignas(64) T panel[kKc * nc];
    for (std::int64_t p = p0; p < p1; ++p) {
      const std::int64_t j0 = p * nc, cols = std::min(nc, N - j0);
      for (std::int64_t k0 = 0; k0 < K; k0 += kKc) {
        const std::int64_t kn = std::min(kKc, K - k0);
        pack_panel<Arch>(tb, B, k0, j0, cols, kn, nc, panel);
        for (std::int64_t i0 = 0; i0 < M; i0 += MR) {
          const std::int64_t rows = std::min<std::int64_t>(MR, M - i0);
          const T* a[MR];
          for (std::int64_t r = 0; r < MR; ++r) a[r] = a_row(i0 + std::min(r, rows - 1)) + k0 * a_step;
          panel_tile<MR, NV, Arch>(alpha, a, a_step, kn, panel, rows, cols, C, i0, j0);
        }
      }
    }
  });
}
#endif

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
#if SPRIG_KERNEL_SIMD
  if constexpr (kSimdFor<T, Arch>)
    if (M >= kPackMinRows) return gemm_rows_packed<Arch, T>(ta, tb, M, N, K, alpha, A, B, C);
#endif
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
// Complexity: O(M x N x K) multiply-adds; the portable path packs O(N x K) elements of
// op(B) into 64 KiB on each thread's stack, and allocates 4 x K elements only with fewer
// than 8 rows, A transposed and op(B) = B^T.
// Threads: the portable path runs on OpenMP threads from 8 rows of op(A) and
// kParallelMinWork multiply-adds (a call inside a parallel region runs on its caller), and
// gives the same bits for any thread count; a CBLAS may thread and may not.
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
