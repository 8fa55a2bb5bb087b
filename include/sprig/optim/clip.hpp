// sprig/optim/clip.hpp — global-norm gradient clipping, as torch.nn.utils.clip_grad_norm_.
//
//   norm = sqrt(sum over every parameter of sum over its gradient entries of g^2)
//   if max_norm / (norm + 1e-6) < 1:  g = g * (max_norm / (norm + 1e-6))  for every g
//
// The model is anything with for_each_parameter(fn) calling fn(SparseParameter<T, Index>&),
// fn(BlockSparseParameter<T, Index, R, C>&) or fn(DenseParameter<T>&) (Sequential, a GPT,
// nn/model.hpp). A sparse parameter counts and scales its live slots only ([row_start,
// row_start + row_nnz) of every row; for a block-sparse one, the R x C entries of each): the
// gradient at padding and dead slots carries no meaning (nn/parameter.hpp) and is neither
// read nor written. A dense parameter counts every element. Call it between backward and the
// optimizer's step.
//
// Arithmetic: squares are accumulated in double (vectorised: kernels/elementwise.hpp's
// sum_squares, dispatched); the scale is computed in double and rounded
// to T once, then every gradient entry is multiplied by it (torch's float32 coefficient
// likewise). The scale is applied exactly when torch applies it, so a norm in
// (max_norm - 1e-6, max_norm] is scaled by a factor just below 1.
//
// Determinism: each parameter is cut into at most kClipChunks pieces whose boundaries depend
// on its shape alone (dense: element ranges; sparse: row ranges); a piece's sum is formed in a
// fixed order, the pieces are added in order, then the parameters in the model's order. Pieces
// run on OpenMP threads for parameters of kParallelMinWork slots or more, so the norm is
// bitwise the same for any thread count, and so are the scaled gradients (one multiply each).
// No allocation. Cost: one read of every live gradient entry, plus one read-modify-write of
// each when it scales.
//
// A gradient with an infinity or a NaN has no finite norm: grad_norm returns it (inf or nan),
// clip_grad_norm throws ArgumentError naming the norm and the first parameter (in
// for_each_parameter order) whose sum is not finite, and scales nothing, so the caller can
// skip the step (torch by default returns the norm and multiplies every gradient by nan).
//
// check_finite(value, "loss", step) is the divergence check of a training loop: it throws
// DivergenceError naming the quantity, its value and the step when a loss or a gradient norm
// is NaN or infinite, so a diverged run stops with an error instead of training on NaN.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "../core/concepts.hpp"
#include "../core/config.hpp"
#include "../core/error.hpp"
#include "../kernels/elementwise.hpp"
#include "../nn/parameter.hpp"
#include "live_ranges.hpp"

namespace sprig {

// A training quantity (a loss, a gradient norm) that is NaN or infinite: the run diverged.
// Carries the quantity's name, its value and the step, for a trainer that wants to react
// (restore a checkpoint, lower the learning rate) rather than stop.
class DivergenceError : public Error {
public:
  DivergenceError(std::string quantity, double value, std::int64_t step)
      : Error(detail::message("the run diverged: ", quantity, " is ", value, " at step ", step)),
        quantity_(std::move(quantity)),
        value_(value),
        step_(step) {}

  const std::string& quantity() const noexcept { return quantity_; }
  double value() const noexcept { return value_; }
  std::int64_t step() const noexcept { return step_; }

private:
  std::string quantity_;
  double value_;
  std::int64_t step_;
};

// Returns value if it is finite; otherwise throws DivergenceError("the run diverged:
// <quantity> is <value> at step <step>"). O(1), no allocation unless it throws. Call it on
// the loss after the forward pass and on grad_norm's result (clip_grad_norm throws
// ArgumentError itself for a non-finite norm); on several ranks, on a value every rank
// shares (an averaged loss), so that every rank stops at the same step.
inline double check_finite(double value, std::string_view quantity, std::int64_t step) {
  if (!std::isfinite(value)) throw DivergenceError(std::string(quantity), value, step);
  return value;
}

namespace detail {

// The most pieces a parameter's sum of squares is cut into, and the fewest slots a piece
// covers: a piece is enough work for a thread, and its partial sum lives on the stack.
inline constexpr std::int64_t kClipChunks = 256;
inline constexpr std::int64_t kClipChunkMinSlots = 4096;

// sum of double(g)^2 over p[0, n) (kernels/elementwise.hpp: a fixed order for a given n and
// register width).
template <Value T>
double sum_squares(const T* p, std::int64_t n) {
  return sum_squares_kernel<T>()(p, n);
}

// How many pieces a parameter of `slots` slots over `units` rows or elements is cut into.
inline std::int64_t clip_chunks(std::int64_t slots, std::int64_t units) noexcept {
  return std::max<std::int64_t>(1, std::min({kClipChunks, slots / kClipChunkMinSlots, units}));
}

// The sum of squares of one parameter's live gradient entries (see the header comment).
template <Value T, ColumnIndex Index>
double grad_sum_squares(const SparseParameter<T, Index>& p) {
  const auto& w = p.matrix;
  const std::int64_t rows = w.rows();
  const std::int64_t k = clip_chunks(w.storage_size(), rows);
  double part[kClipChunks];
  const T* g = p.grad.data();
#if SPRIG_HAS_OPENMP
#  pragma omp parallel for schedule(static) if (k > 1 && w.storage_size() >= kParallelMinWork)
#endif
  for (std::int64_t j = 0; j < k; ++j) {
    double s = 0.0;
    for (std::int64_t i = rows * j / k, e = rows * (j + 1) / k; i < e; ++i)
      s += sum_squares(g + w.row_start(i), w.row_nnz(i));
    part[j] = s;
  }
  double total = 0.0;
  for (std::int64_t j = 0; j < k; ++j) total += part[j];
  return total;
}

// A block-sparse parameter: the R x C entries of its live blocks (block rows cut as rows);
// out-of-matrix entries hold 0.
template <Value T, ColumnIndex Index, int R, int C>
double grad_sum_squares(const BlockSparseParameter<T, Index, R, C>& p) {
  const auto& w = p.matrix.pattern();
  constexpr std::int64_t width = std::int64_t{R} * C;
  const std::int64_t rows = w.rows();
  const std::int64_t k = clip_chunks(w.storage_size() * width, rows);
  double part[kClipChunks];
  const T* g = p.grad.data();
#if SPRIG_HAS_OPENMP
#  pragma omp parallel for schedule(static) if (k > 1 && w.storage_size() * width >= kParallelMinWork)
#endif
  for (std::int64_t j = 0; j < k; ++j) {
    double s = 0.0;
    for (std::int64_t i = rows * j / k, e = rows * (j + 1) / k; i < e; ++i)
      s += sum_squares(g + w.row_start(i) * width, w.row_nnz(i) * width);
    part[j] = s;
  }
  double total = 0.0;
  for (std::int64_t j = 0; j < k; ++j) total += part[j];
  return total;
}

template <Value T>
double grad_sum_squares(const DenseParameter<T>& p) {
  const std::int64_t n = p.size();
  const std::int64_t k = clip_chunks(n, n);
  double part[kClipChunks];
  const T* g = p.grad.data();
#if SPRIG_HAS_OPENMP
#  pragma omp parallel for schedule(static) if (k > 1 && n >= kParallelMinWork)
#endif
  for (std::int64_t j = 0; j < k; ++j) {
    const std::int64_t b = n * j / k, e = n * (j + 1) / k;
    part[j] = sum_squares(g + b, e - b);
  }
  double total = 0.0;
  for (std::int64_t j = 0; j < k; ++j) total += part[j];
  return total;
}

struct GradNorm {
  double norm = 0.0;
  std::int64_t first_non_finite = -1;  // index of the first parameter whose sum is not finite
};

// Checks every parameter's alignment (ShapeError naming fn) and sums the squares.
template <class M>
GradNorm grad_norm_of(const char* fn, M& model) {
  GradNorm out;
  double total = 0.0;
  std::int64_t index = 0;
  model.for_each_parameter([&](auto& p) {
    p.check_aligned(fn);
    const double s = grad_sum_squares(p);
    if (!std::isfinite(s) && out.first_non_finite < 0) out.first_non_finite = index;
    total += s;
    ++index;
  });
  out.norm = std::sqrt(total);
  return out;
}

}  // namespace detail

// The global L2 norm of the model's gradients (live slots of sparse parameters, every element
// of dense ones), without changing them; inf or nan when a gradient entry is. Throws
// ShapeError if a parameter's gradient is not aligned with its slots.
template <class M>
double grad_norm(M& model) {
  return detail::grad_norm_of("grad_norm", model).norm;
}

// Clips the model's gradients to a global L2 norm of max_norm (see the header comment) and
// returns the norm before clipping. Throws, before scaling anything: ArgumentError for a
// max_norm that is not finite or not > 0, and for a gradient whose norm is not finite (naming
// the norm and the first parameter whose gradient holds a non-finite entry or overflows);
// ShapeError if a parameter's gradient is not aligned with its slots.
template <class M>
double clip_grad_norm(M& model, double max_norm) {
  if (!(max_norm > 0.0 && std::isfinite(max_norm)))
    throw ArgumentError(detail::message("clip_grad_norm: max_norm ", max_norm, " must be finite and > 0"));
  const detail::GradNorm n = detail::grad_norm_of("clip_grad_norm", model);
  if (!std::isfinite(n.norm))
    throw ArgumentError(detail::message("clip_grad_norm: the gradient norm is ", n.norm,
                                        n.first_non_finite >= 0
                                            ? " (parameter " + std::to_string(n.first_non_finite) +
                                                  " in for_each_parameter order has a non-finite gradient)"
                                            : std::string(" (the sum of squares overflows)"),
                                        "; nothing was scaled"));
  const double coef = max_norm / (n.norm + 1e-6);
  if (!(coef < 1.0)) return n.norm;
  model.for_each_parameter([&](auto& p) {
    using T = typename std::remove_cvref_t<decltype(p)>::value_type;
    const T c = static_cast<T>(coef);
    T* g = p.grad.data();
    const auto scale = detail::scale_array_kernel<T>();
    detail::for_each_live_range(p, [&](std::int64_t b, std::int64_t e) {
      scale(g + b, c, e - b);
    });
  });
  return n.norm;
}

}  // namespace sprig
