// sprig/nn/layer_norm.hpp — LayerNorm<T> over the features of each column of a feature-major
// activation X [d x N] (N = B*T tokens), with a learned gain and bias (Ba, Kiros & Hinton):
//
//   mean[n] = (1/d) sum_i X[i, n]            var[n] = (1/d) sum_i (X[i, n] - mean[n])^2
//   rstd[n] = 1 / sqrt(var[n] + eps)          xhat[i, n] = (X[i, n] - mean[n]) * rstd[n]
//   Y[i, n] = gain[i] * xhat[i, n] + bias[i]                (eps = 1e-5 by default, biased var)
//
// backward, for dY = dL/dY (the standard LayerNorm gradient; g = gain):
//   dbias[i] = sum_n dY[i, n]                 dgain[i] = sum_n dY[i, n] * xhat[i, n]
//   dX[i, n] = rstd[n] * (g[i] dY[i, n] - (1/d) sum_k g[k] dY[k, n]
//                        - xhat[i, n] * (1/d) sum_k g[k] dY[k, n] xhat[k, n])
//
// Numerics: two passes over each column (the mean, then the sum of squared deviations from it),
// both accumulated in double for float and double alike, each column's sum in row order, so the
// variance has no cancellation even for |mean| >> std; the column sums of the backward are
// accumulated in double too. mean and rstd are kept in T for the backward. The gain's and
// bias's gradients are row sums in T in a fixed order (bias.hpp's sum_rows). The column passes
// run on kernels/elementwise.hpp's layer_norm_forward / layer_norm_backward (xsimd, dispatched
// in a dispatching build), which state where they fuse a multiply-add.
//
// Shapes: X, Y, dY, dX [d x N], N >= 0 (a strided sub-view is fine). gain, bias: DenseParameter
// d x 1, gain starts at 1 and bias at 0, neither decayed. forward(X, Y) keeps mean and rstd
// per column for the backward, which must get the same X (unchanged) as the last forward.
// No in-place mode: Y must not overlap X, and dX must not overlap X or dY (checked).
//
// Cost: forward three passes over X, backward five, each O(d x N). Buffers (mean and rstd, two
// T per column) are grown on the first call with a larger N and reused: a steady-state
// step allocates nothing. Threads: the column passes run over fixed blocks of kColumnBlock
// columns (each block in strips a few registers wide, down all d rows, with the sums in
// registers), the blocks split over OpenMP threads when d x N >= kParallelMinWork; the
// gradient row sums split the rows. Every value is computed by one thread in an order that
// does not depend on the thread count, so results are bitwise identical for any thread count.
// One layer serves one thread at a time.
//
// Throws: ShapeError for mismatched shapes, ArgumentError for overlapping operands, a backward
// without a forward of N columns, or (constructor) d < 1 or eps not finite and >= 0.
#pragma once

#include <type_traits>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "../core/concepts.hpp"
#include "../core/config.hpp"
#include "../core/error.hpp"
#include "../core/matrix.hpp"
#include "../kernels/elementwise.hpp"
#include "bias.hpp"
#include "parameter.hpp"
#include "rows.hpp"

namespace sprig {

template <Value T>
class LayerNorm {
public:
  using value_type = T;

  DenseParameter<T> gain;  // d x 1, starts at 1, not decayed
  DenseParameter<T> bias;  // d x 1, starts at 0, not decayed

  // Columns per block of the column passes: 128 columns of a d = 640 input are 320 KB of
  // float, which stay in L2 between the passes over a block.
  static constexpr std::int64_t kColumnBlock = 128;

  // Throws ShapeError for d < 1, ArgumentError unless eps is finite and >= 0.
  explicit LayerNorm(std::int64_t d, double eps = 1e-5) : eps_(eps) {
    if (d < 1) throw ShapeError(detail::message("LayerNorm: d must be > 0, got ", d));
    if (!(eps >= 0.0 && std::isfinite(eps)))
      throw ArgumentError(detail::message("LayerNorm: eps ", eps, " must be finite and >= 0"));
    gain = DenseParameter<T>(d, 1, T(1));
    bias = DenseParameter<T>(d, 1, T(0));
    gain.decay = false;
    bias.decay = false;
  }

  std::int64_t features() const noexcept { return gain.rows; }
  double eps() const noexcept { return eps_; }

  // Y = gain * xhat + bias, column by column; keeps mean and rstd of X's columns (mean(),
  // rstd()). Throws ShapeError unless X and Y are both d x N, ArgumentError if Y overlaps X.
  void forward(std::type_identity_t<ConstMatrixView<T>> X, std::type_identity_t<MatrixView<T>> Y) {
    const std::int64_t d = features();
    if (X.rows() != d || Y.rows() != d || Y.cols() != X.cols())
      throw ShapeError(detail::message("LayerNorm::forward: layer has ", d, " features, X is ", X.rows(), "x", X.cols(),
                                       ", Y is ", Y.rows(), "x", Y.cols()));
    detail::check_no_overlap("LayerNorm::forward", "Y", Y, "X", X);
    reserve(X.cols());
    cols_ = X.cols();
    const auto kernel = detail::layer_norm_forward_kernel<T>();
    for_column_blocks(d, cols_, [&](std::int64_t c0, std::int64_t len) {
      kernel({X.data() + c0, X.stride(), gain.value.data(), bias.value.data(), Y.data() + c0, Y.stride(),
              mean_.data() + c0, rstd_.data() + c0, d, len, eps_});
    });
  }

  // Overwrites gain.grad, bias.grad and dX (all three as the formulas above) for the X of the
  // last forward and dY. Throws ShapeError unless X, dY and dX are d x N, ArgumentError if the
  // last forward had another N (or none) or dX overlaps X or dY, ShapeError for misaligned
  // parameter arrays.
  void backward(std::type_identity_t<ConstMatrixView<T>> X, std::type_identity_t<ConstMatrixView<T>> dY,
                std::type_identity_t<MatrixView<T>> dX) {
    const std::int64_t d = features();
    if (X.rows() != d || dY.rows() != d || dX.rows() != d || dY.cols() != X.cols() || dX.cols() != X.cols())
      throw ShapeError(detail::message("LayerNorm::backward: layer has ", d, " features, X is ", X.rows(), "x",
                                       X.cols(), ", dY is ", dY.rows(), "x", dY.cols(), ", dX is ", dX.rows(), "x",
                                       dX.cols()));
    if (cols_ != X.cols())
      throw ArgumentError(detail::message("LayerNorm::backward: X has ", X.cols(), " columns but the last forward had ",
                                          cols_ < 0 ? std::string("none") : std::to_string(cols_),
                                          " (call forward on this X first)"));
    detail::check_no_overlap("LayerNorm::backward", "dX", dX, "X", X);
    detail::check_no_overlap("LayerNorm::backward", "dX", dX, "dY", dY);
    gain.check_aligned("LayerNorm::backward");
    bias.check_aligned("LayerNorm::backward");
    const std::int64_t N = cols_;
    // dX as scratch: dY * xhat, whose row sums are dgain
    const auto dy_xhat = detail::layer_norm_dy_xhat_kernel<T>();
    detail::for_rows(d, N,
                     [&](std::int64_t i) { dy_xhat(X.row(i), dY.row(i), mean_.data(), rstd_.data(), dX.row(i), N); });
    detail::sum_rows<T>(dX, gain.grad);
    detail::sum_rows<T>(dY, bias.grad);
    const auto kernel = detail::layer_norm_backward_kernel<T>();
    for_column_blocks(d, N, [&](std::int64_t c0, std::int64_t len) {
      kernel({X.data() + c0, X.stride(), dY.data() + c0, dY.stride(), gain.value.data(), mean_.data() + c0,
              rstd_.data() + c0, dX.data() + c0, dX.stride(), d, len});
    });
  }

  // The per-column mean and 1/sqrt(var + eps) of the last forward's X (N entries), O(1).
  std::span<const T> mean() const noexcept { return {mean_.data(), cached_cols()}; }
  std::span<const T> rstd() const noexcept { return {rstd_.data(), cached_cols()}; }

  // Calls fn(gain) then fn(bias): what an optimizer's step visits.
  template <class Fn>
  void for_each_parameter(Fn&& fn) {
    fn(gain);
    fn(bias);
  }
  template <class Fn>
  void for_each_parameter(Fn&& fn) const {
    fn(gain);
    fn(bias);
  }

  // Bytes of gain and bias; the same (dense); and everything the layer owns (parameters,
  // their gradients and optimizer state, the per-column buffers).
  std::int64_t weight_bytes() const noexcept { return gain.weight_bytes() + bias.weight_bytes(); }
  std::int64_t dense_weight_bytes() const noexcept { return 2 * features() * static_cast<std::int64_t>(sizeof(T)); }
  std::int64_t memory_bytes() const noexcept {
    return weight_bytes() + gain.state_bytes() + bias.state_bytes() +
           static_cast<std::int64_t>((mean_.capacity() + rstd_.capacity()) * sizeof(T));
  }

private:
  // Calls fn(c0, len) for the blocks [c0, c0 + len) of kColumnBlock columns (the last one
  // shorter), concurrently for rows x cols >= kParallelMinWork. The blocks do not depend on
  // the thread count, so neither does any column's arithmetic.
  template <class Fn>
  static void for_column_blocks(std::int64_t rows, std::int64_t cols, Fn&& fn) {
    const std::int64_t blocks = (cols + kColumnBlock - 1) / kColumnBlock;
#if SPRIG_HAS_OPENMP
#  pragma omp parallel for schedule(static) if (rows * cols >= detail::kParallelMinWork)
#else
    (void)rows;
#endif
    for (std::int64_t k = 0; k < blocks; ++k) {
      const std::int64_t c0 = k * kColumnBlock;
      fn(c0, std::min(kColumnBlock, cols - c0));
    }
  }

  std::size_t cached_cols() const noexcept { return cols_ < 0 ? 0 : static_cast<std::size_t>(cols_); }

  void reserve(std::int64_t n) {
    const auto need = static_cast<std::size_t>(n);
    if (mean_.size() >= need) return;
    mean_.resize(need);
    rstd_.resize(need);
  }

  double eps_;
  std::int64_t cols_ = -1;  // N of the last forward, -1 before the first
  std::vector<T> mean_, rstd_;
};

}  // namespace sprig
