// sprig/nn/softmax_cross_entropy.hpp — softmax + cross-entropy on feature-major logits.
//
// logits Z is [classes x batch]; labels[b] in [0, classes) is the class of column b.
//   loss = (1/B) * sum_b ( logsumexp(Z[:, b]) - Z[labels[b], b] )
//   dZ   = (softmax(Z) - onehot(labels)) / B
// Numerically stable: every column is shifted by its maximum before exp, so no exp
// overflows and the largest term is exp(0) = 1. Loss sums are accumulated in double.
//
// Cost: O(classes x B) per call, on the calling thread (no OpenMP: the logits of a classifier
// are small), so the result is the same for any thread count. Column statistics are kept in
// the object between calls (reallocated only when B changes): one object per thread.
#pragma once

#include <type_traits>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include "../core/concepts.hpp"
#include "../core/error.hpp"
#include "../core/matrix.hpp"

namespace sprig {

template <Value T>
class SoftmaxCrossEntropy {
public:
  using value_type = T;

  // The mean loss. Throws ShapeError unless labels has Z.cols() entries and Z is non-empty,
  // ArgumentError for a label outside [0, Z.rows()).
  T forward(std::type_identity_t<ConstMatrixView<T>> Z, std::span<const int> labels) {
    check("SoftmaxCrossEntropy::forward", Z, labels);
    column_stats(Z);
    double loss = 0.0;
    for (std::int64_t b = 0; b < Z.cols(); ++b)
      loss += static_cast<double>(max_[b]) + std::log(static_cast<double>(sum_[b])) -
              static_cast<double>(Z(labels[static_cast<std::size_t>(b)], b));
    return static_cast<T>(loss / static_cast<double>(Z.cols()));
  }

  // The mean loss, and its gradient with respect to Z written into dZ (same shape, apart from
  // Z). Throws as forward, and ShapeError if dZ's shape differs from Z's (before writing dZ).
  T forward_backward(std::type_identity_t<ConstMatrixView<T>> Z, std::span<const int> labels,
                     std::type_identity_t<MatrixView<T>> dZ) {
    const T loss = forward(Z, labels);
    if (dZ.rows() != Z.rows() || dZ.cols() != Z.cols())
      throw ShapeError(detail::message("SoftmaxCrossEntropy::forward_backward: Z is ", Z.rows(), "x", Z.cols(),
                                       " but dZ is ", dZ.rows(), "x", dZ.cols()));
    const std::int64_t B = Z.cols();
    const T inv_b = T(1) / static_cast<T>(B);
    for (std::int64_t b = 0; b < B; ++b) scale_[b] = inv_b / sum_[b];
    for (std::int64_t i = 0; i < Z.rows(); ++i) {
      const T* z = Z.row(i);
      T* d = dZ.row(i);
      for (std::int64_t b = 0; b < B; ++b) d[b] = std::exp(z[b] - max_[b]) * scale_[b];
    }
    for (std::int64_t b = 0; b < B; ++b) dZ(labels[static_cast<std::size_t>(b)], b) -= inv_b;
    return loss;
  }

  // How many columns have their label as the (first) largest logit. O(classes x B). Throws
  // ShapeError unless labels has Z.cols() entries; a label outside [0, Z.rows()) never counts.
  static std::int64_t count_correct(std::type_identity_t<ConstMatrixView<T>> Z, std::span<const int> labels) {
    if (std::ssize(labels) != Z.cols())
      throw ShapeError(
          detail::message("SoftmaxCrossEntropy::count_correct: ", labels.size(), " labels for ", Z.cols(), " columns"));
    std::int64_t correct = 0;
    for (std::int64_t b = 0; b < Z.cols(); ++b) {
      std::int64_t best = 0;
      for (std::int64_t i = 1; i < Z.rows(); ++i)
        if (Z(i, b) > Z(best, b)) best = i;
      correct += best == labels[static_cast<std::size_t>(b)];
    }
    return correct;
  }

private:
  static void check(const char* fn, ConstMatrixView<T> Z, std::span<const int> labels) {
    if (std::ssize(labels) != Z.cols())
      throw ShapeError(detail::message(fn, ": ", labels.size(), " labels for ", Z.cols(), " columns of logits"));
    if (Z.rows() == 0 || Z.cols() == 0)
      throw ShapeError(detail::message(fn, ": empty logits ", Z.rows(), "x", Z.cols()));
    for (std::size_t b = 0; b < labels.size(); ++b)
      if (labels[b] < 0 || labels[b] >= Z.rows())
        throw ArgumentError(
            detail::message(fn, ": label ", labels[b], " of column ", b, " outside [0, ", Z.rows(), ")"));
  }

  // max_[b] = max_i Z[i, b];  sum_[b] = sum_i exp(Z[i, b] - max_[b])  (>= 1).
  void column_stats(ConstMatrixView<T> Z) {
    const auto B = static_cast<std::size_t>(Z.cols());
    if (max_.size() != B) {
      max_.resize(B);
      sum_.resize(B);
      scale_.resize(B);
    }
    std::fill(max_.begin(), max_.end(), -std::numeric_limits<T>::infinity());
    std::fill(sum_.begin(), sum_.end(), T(0));
    for (std::int64_t i = 0; i < Z.rows(); ++i) {
      const T* z = Z.row(i);
      for (std::size_t b = 0; b < B; ++b) max_[b] = std::max(max_[b], z[b]);
    }
    for (std::int64_t i = 0; i < Z.rows(); ++i) {
      const T* z = Z.row(i);
      for (std::size_t b = 0; b < B; ++b) sum_[b] += std::exp(z[b] - max_[b]);
    }
  }

  std::vector<T> max_, sum_, scale_;
};

}  // namespace sprig
