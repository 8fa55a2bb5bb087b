// sprig/nn/bias.hpp — per-feature bias on feature-major activations [features x batch].
#pragma once

#include <cstdint>
#include <span>

#include "../core/matrix.hpp"

namespace sprig::detail {

// Y[i, :] += b[i].
template <class T>
void add_bias(std::span<const T> b, MatrixView<T> Y) noexcept {
  for (std::int64_t i = 0; i < Y.rows(); ++i) {
    T* __restrict y = Y.row(i);
    const T bi = b[static_cast<std::size_t>(i)];
    for (std::int64_t j = 0; j < Y.cols(); ++j) y[j] += bi;
  }
}

// g[i] = sum_j dY[i, j]  (the bias gradient).
template <class T>
void sum_rows(ConstMatrixView<T> dY, std::span<T> g) noexcept {
  for (std::int64_t i = 0; i < dY.rows(); ++i) {
    const T* __restrict d = dY.row(i);
    T acc = T(0);
    for (std::int64_t j = 0; j < dY.cols(); ++j) acc += d[j];
    g[static_cast<std::size_t>(i)] = acc;
  }
}

}  // namespace sprig::detail
