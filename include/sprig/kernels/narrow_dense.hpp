// sprig/kernels/narrow_dense.hpp — a dense layer with few outputs (a classifier's head:
// out <= kNarrowMaxRows), forward and backward, without a GEMM library.
//
// Shapes (feature-major, as Linear): W [m x K], X [K x B], Y and dY [m x B], dW [m x K],
// dX [K x B], m <= kNarrowMaxRows.
//   narrow_forward:  Y = act(W X + b)  with the bias and the activation in the store
//   narrow_backward: dW = dY X^T and, if asked, dX = W^T dY (with x_activation = relu:
//                    relu_backward(X, W^T dY)), in one pass over the K rows of X (with
//                    gelu: times x_derivative, in a pass after it)
//
// Why: a GEMM library packs both operands and its register tiles assume large m; at m = 10
// that leaves most of its speed unused and costs extra passes for the bias and the ReLU.
// Here all m output rows of a batch register are accumulated at once (m registers) while X
// streams past once; backward loads each X row once for both products: dW's m dot products
// and dX's m multiply-adds share the dY loads (dY, m x B, stays in L1), and dX is masked with
// the X row in registers before its one store (docs/design.md, "narrow kernels").
//
// Order of operations (fixed, independent of the thread count): Y(i, j) sums k = 0..K-1 in
// order and then adds the bias; dX(k, j) sums i = 0..m-1 in order; dW(i, k) sums the batch
// lane-wise (lane l adds columns l, l + N, ...), reduces the lanes, then adds the tail
// columns in order. OpenMP splits forward over batch registers and backward over k.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <utility>

#include "../core/config.hpp"
#include "../core/error.hpp"
#include "../core/matrix.hpp"
#include "dispatch.hpp"
#include "parallel.hpp"
#include "row_epilogue.hpp"
#include "simd.hpp"

namespace sprig {

// The most output rows the narrow kernels take (backward holds one accumulator register per
// row): up to 12 they beat a GEMM library's three calls plus the fused passes; at 16 the
// backward no longer did (docs/design.md).
inline constexpr std::int64_t kNarrowMaxRows = 12;

namespace detail {

template <class T>
SPRIG_ALWAYS_INLINE T narrow_store_value(T v, T bias, FusedActivation act) noexcept {
  const T y = v + bias;
  return act == FusedActivation::relu ? (y > T(0) ? y : T(0)) : y;
}

// W's rows are K apart (4 KiB at K = 1024 floats), so reading all m of them at one k puts m
// lines in one L1 set: past the set's ways every k misses (docs/design.md, "Narrow kernels").
// Forward therefore works in balanced groups of at most 8 rows, each group reading X once. Backward does m x B multiply-adds twice per k, which hides the misses.
inline constexpr std::int64_t kNarrowForwardGroup = 8;

// Forward of output rows [0, M) over batch columns [j0, j1) (j0 a multiple of the register
// width; j1 either a multiple of it or B). C registers of columns are accumulated together so
// that M * C >= 8 chains hide the multiply-add latency when M is small.
template <class A, class T, int M>
void narrow_forward_columns(ConstMatrixView<T> W, ConstMatrixView<T> X, MatrixView<T> Y, std::span<const T> bias,
                            FusedActivation act, std::int64_t j0, std::int64_t j1) noexcept {
  const std::int64_t K = X.rows();
  std::int64_t j = j0;
#if SPRIG_KERNEL_SIMD
  if constexpr (kSimdFor<T, A>) {
    using B = Batch<T, A>;
    constexpr std::int64_t N = B::size;
    constexpr int C = M >= 8 ? 1 : (8 + M - 1) / M;
    auto block = [&]<int Cn>(std::integral_constant<int, Cn>) SPRIG_ALWAYS_INLINE_LAMBDA {
      B acc[M][Cn];
      SPRIG_UNROLL for (int i = 0; i < M; ++i) SPRIG_UNROLL for (int c = 0; c < Cn; ++c) acc[i][c] = B(T(0));
      for (std::int64_t k = 0; k < K; ++k) {
        const T* x = X.row(k) + j;
        B xv[Cn];
        SPRIG_UNROLL for (int c = 0; c < Cn; ++c) xv[c] = B::load_unaligned(x + c * N);
        SPRIG_UNROLL for (int i = 0; i < M; ++i) {
          const B w(W.row(i)[k]);
          SPRIG_UNROLL for (int c = 0; c < Cn; ++c) acc[i][c] = xsimd::fma(w, xv[c], acc[i][c]);
        }
      }
      SPRIG_UNROLL for (int i = 0; i < M; ++i) {
        const B b(bias.empty() ? T(0) : bias[static_cast<std::size_t>(i)]);
        SPRIG_UNROLL for (int c = 0; c < Cn; ++c) {
          B y = acc[i][c] + b;
          if (act == FusedActivation::relu) y = xsimd::select(y > B(T(0)), y, B(T(0)));
          y.store_unaligned(Y.row(i) + j + c * N);
        }
      }
      j += Cn * N;
    };
    while (j + C * N <= j1) block(std::integral_constant<int, C>{});
    while (j + N <= j1) block(std::integral_constant<int, 1>{});
  }
#endif
  for (; j < j1; ++j)
    for (int i = 0; i < M; ++i) {
      const T* w = W.row(i);
      T acc = T(0);
      for (std::int64_t k = 0; k < K; ++k) acc += w[k] * X.row(k)[j];
      Y.row(i)[j] = narrow_store_value(acc, bias.empty() ? T(0) : bias[static_cast<std::size_t>(i)], act);
    }
}

// Batch column j of one k's backward, off the SIMD registers (the batch tail, or every column
// without SIMD): adds dY(i, j) x_j to dot[i] and returns sum_i w[i] dY(i, j). Not inlined, so
// that the same instructions (the same contraction into fused multiply-adds) serve every
// variant of narrow_backward_rows: dX with and without the ReLU mask agree bit for bit.
template <class T, int M>
SPRIG_NOINLINE T narrow_backward_column(const T* w, T xj, ConstMatrixView<T> dY, std::int64_t j, T* dot) noexcept {
  T g = w[0] * dY.row(0)[j];
  dot[0] += dY.row(0)[j] * xj;
  for (int i = 1; i < M; ++i) {
    dot[i] += dY.row(i)[j] * xj;
    g += w[i] * dY.row(i)[j];
  }
  return g;
}

// Backward over rows [k0, k1) of X: dW(:, k) for each, and dX(k, :) when WithDx.
template <class A, class T, int M, bool WithDx, bool Relu>
void narrow_backward_rows(ConstMatrixView<T> W, ConstMatrixView<T> X, ConstMatrixView<T> dY, MatrixView<T> dW,
                          MatrixView<T> dX, std::int64_t k0, std::int64_t k1) noexcept {
  const std::int64_t Bn = X.cols();
  for (std::int64_t k = k0; k < k1; ++k) {
    const T* x = X.row(k);
    T* dx = WithDx ? dX.row(k) : nullptr;
    T w[M];
    for (int i = 0; i < M; ++i) w[i] = W.row(i)[k];
    T dot[M];
    std::int64_t j = 0;
#if SPRIG_KERNEL_SIMD
    if constexpr (kSimdFor<T, A>) {
      using B = Batch<T, A>;
      constexpr std::int64_t N = B::size;
      B acc[M];
      SPRIG_UNROLL for (int i = 0; i < M; ++i) acc[i] = B(T(0));
      for (; j + N <= Bn; j += N) {
        const B xv = B::load_unaligned(x + j);
        B d = B::load_unaligned(dY.row(0) + j);
        acc[0] = xsimd::fma(d, xv, acc[0]);
        B g(T(0));
        if constexpr (WithDx) g = B(w[0]) * d;
        SPRIG_UNROLL for (int i = 1; i < M; ++i) {
          d = B::load_unaligned(dY.row(i) + j);
          acc[i] = xsimd::fma(d, xv, acc[i]);
          if constexpr (WithDx) g = xsimd::fma(B(w[i]), d, g);
        }
        if constexpr (WithDx) {
          if constexpr (Relu) g = xsimd::select(xv > B(T(0)), g, B(T(0)));
          g.store_unaligned(dx + j);
        }
      }
      SPRIG_UNROLL for (int i = 0; i < M; ++i) dot[i] = reduce_add(acc[i]);
    } else
#endif
    {
      for (int i = 0; i < M; ++i) dot[i] = T(0);
    }
    for (; j < Bn; ++j) {
      const T g = narrow_backward_column<T, M>(w, x[j], dY, j, dot);
      if constexpr (WithDx) dx[j] = Relu ? relu_backward(x[j], g) : g;
    }
    for (int i = 0; i < M; ++i) dW.row(i)[k] = dot[i];
  }
}

// Calls fn(std::integral_constant<int, m>) for the runtime m in [1, kNarrowMaxRows].
template <class Fn>
void with_narrow_rows(std::int64_t m, Fn&& fn) {
  [&]<int... I>(std::integer_sequence<int, I...>) {
    (void)((m == I + 1 ? (fn(std::integral_constant<int, I + 1>{}), true) : false) || ...);
  }
  (std::make_integer_sequence<int, static_cast<int>(kNarrowMaxRows)>{});
}

template <class T>
void check_narrow(const char* who, ConstMatrixView<T> W) {
  if (W.rows() < 1 || W.rows() > kNarrowMaxRows)
    throw ShapeError(message(who, ": W has ", W.rows(), " rows, the narrow kernels take 1 to ", kNarrowMaxRows));
}

// The kernels on architecture A once their operands are checked: what a dispatching build's
// table points to (dispatch.hpp).
template <class A, class T>
void narrow_forward_on(ConstMatrixView<T> W, ConstMatrixView<T> X, MatrixView<T> Y, std::span<const T> bias,
                       FusedActivation act) {
  const std::int64_t Bn = X.cols();
  constexpr std::int64_t N = static_cast<std::int64_t>(simd_width<T, A>());
  const std::int64_t blocks = (Bn + N - 1) / N;  // batch registers; the last may be a tail
  // rows in balanced groups of at most kNarrowForwardGroup (see there); X is read once per group
  const std::int64_t m = W.rows(), groups = (m + kNarrowForwardGroup - 1) / kNarrowForwardGroup;
  auto run = [&](std::int64_t b0, std::int64_t b1) {
    if (b0 >= b1) return;
    for (std::int64_t g = 0, i0 = 0; g < groups; ++g) {
      const std::int64_t rows = m / groups + (g < m % groups ? 1 : 0);
      with_narrow_rows(rows, [&]<int M>(std::integral_constant<int, M>) {
        narrow_forward_columns<A, T, M>(W.block(i0, 0, rows, W.cols()), X, Y.block(i0, 0, rows, Bn),
                                        bias.empty() ? bias : bias.subspan(static_cast<std::size_t>(i0), rows), act,
                                        b0 * N, std::min(Bn, b1 * N));
      });
      i0 += rows;
    }
  };
  run_even_split(m * X.rows() * Bn, blocks, run);
}

template <class A, class T>
void narrow_backward_on(ConstMatrixView<T> W, ConstMatrixView<T> X, ConstMatrixView<T> dY, MatrixView<T> dW,
                        MatrixView<T> dX, FusedActivation x_activation, ConstMatrixView<T> x_derivative) {
  const bool with_dx = dX.rows() != 0;
  const std::int64_t K = X.rows();
  with_narrow_rows(W.rows(), [&]<int M>(std::integral_constant<int, M>) {
    auto run = [&](std::int64_t k0, std::int64_t k1) {
      if (!with_dx)
        narrow_backward_rows<A, T, M, false, false>(W, X, dY, dW, dX, k0, k1);
      else if (x_activation == FusedActivation::relu)
        narrow_backward_rows<A, T, M, true, true>(W, X, dY, dW, dX, k0, k1);
      else
        narrow_backward_rows<A, T, M, true, false>(W, X, dY, dW, dX, k0, k1);
    };
    run_even_split(W.rows() * K * X.cols(), K, run);
  });
  if (with_dx && x_activation == FusedActivation::gelu) input_activation_rows<T>(x_activation, X, x_derivative, dX);
}

}  // namespace detail

// Y = act(W X + b): bias empty for none, else W.rows() values; act none or relu.
// Preconditions: 1 <= W.rows() <= kNarrowMaxRows, X is W.cols() x B, Y is W.rows() x B and
// the bias empty or W.rows() long (else ShapeError); act is not gelu, and Y shares no memory
// with W, X or the bias (else ArgumentError). Y is overwritten, never read.
// Complexity: O(m x K x B) multiply-adds, X read once per group of at most 8 rows.
// Threads: OpenMP over batch registers; each Y element is summed over k in order, so the
// result is bitwise identical for any thread count.
template <class T>
void narrow_forward(std::type_identity_t<ConstMatrixView<T>> W, std::type_identity_t<ConstMatrixView<T>> X,
                    std::type_identity_t<MatrixView<T>> Y, std::span<const T> bias = {},
                    FusedActivation act = FusedActivation::none) {
  detail::check_narrow<T>("narrow_forward", W);
  detail::check_forward_activation("narrow_forward", act);
  if (W.cols() != X.rows() || Y.rows() != W.rows() || Y.cols() != X.cols() ||
      (!bias.empty() && static_cast<std::int64_t>(bias.size()) != W.rows()))
    throw ShapeError(detail::message("narrow_forward: W is ", W.rows(), "x", W.cols(), ", X ", X.rows(), "x", X.cols(),
                                     ", Y ", Y.rows(), "x", Y.cols(), ", bias ", bias.size()));
  detail::check_no_overlap("narrow_forward", "Y", Y, "W", W);
  detail::check_no_overlap("narrow_forward", "Y", Y, "X", X);
  detail::check_no_overlap("narrow_forward", "Y", Y, "the bias", bias);
  detail::narrow_forward_kernel<T>()(W, X, Y, bias, act);
}

// dW = dY X^T (overwritten). With dX non-empty also dX = W^T dY, or with x_activation = relu
// dX = relu_backward(X, W^T dY) (X the output of a ReLU), in the same pass; with gelu
// dX = x_derivative * W^T dY (row_epilogue.hpp), in a pass after it.
// Preconditions: 1 <= W.rows() <= kNarrowMaxRows, X is W.cols() x B, dY is W.rows() x B, dW
// has W's shape, dX (if given) X's and, with gelu, x_derivative X's (else ShapeError); dW and
// dX share no memory with each other or with W, X, dY or x_derivative (else ArgumentError).
// Complexity: O(m x K x B) multiply-adds for each product, one pass over X for both.
// Threads: OpenMP over the rows of X; the order of every sum is fixed (see the top of this
// file), so the result is bitwise identical for any thread count.
template <class T>
void narrow_backward(std::type_identity_t<ConstMatrixView<T>> W, std::type_identity_t<ConstMatrixView<T>> X,
                     std::type_identity_t<ConstMatrixView<T>> dY, std::type_identity_t<MatrixView<T>> dW,
                     std::type_identity_t<MatrixView<T>> dX = {}, FusedActivation x_activation = FusedActivation::none,
                     std::type_identity_t<ConstMatrixView<T>> x_derivative = {}) {
  detail::check_narrow<T>("narrow_backward", W);
  const bool with_dx = dX.rows() != 0;
  if (W.cols() != X.rows() || dY.rows() != W.rows() || dY.cols() != X.cols() || dW.rows() != W.rows() ||
      dW.cols() != W.cols() || (with_dx && (dX.rows() != X.rows() || dX.cols() != X.cols())))
    throw ShapeError(detail::message("narrow_backward: W is ", W.rows(), "x", W.cols(), ", X ", X.rows(), "x", X.cols(),
                                     ", dY ", dY.rows(), "x", dY.cols(), ", dW ", dW.rows(), "x", dW.cols(), ", dX ",
                                     dX.rows(), "x", dX.cols()));
  if (with_dx) detail::check_input_activation<T>("narrow_backward", x_activation, X, x_derivative);
  {
    constexpr const char* fn = "narrow_backward";
    const bool gelu = with_dx && x_activation == FusedActivation::gelu;
    const ConstMatrixView<T> xd = gelu ? x_derivative : ConstMatrixView<T>{};
    detail::check_no_overlap(fn, "dW", dW, "W", W);
    detail::check_no_overlap(fn, "dW", dW, "X", X);
    detail::check_no_overlap(fn, "dW", dW, "dY", dY);
    detail::check_no_overlap(fn, "dW", dW, "dX", dX);
    detail::check_no_overlap(fn, "dW", dW, "x_derivative", xd);
    detail::check_no_overlap(fn, "dX", dX, "W", W);
    detail::check_no_overlap(fn, "dX", dX, "X", X);
    detail::check_no_overlap(fn, "dX", dX, "dY", dY);
    detail::check_no_overlap(fn, "dX", dX, "x_derivative", xd);
  }
  detail::narrow_backward_kernel<T>()(W, X, dY, dW, dX, x_activation, x_derivative);
}

}  // namespace sprig
