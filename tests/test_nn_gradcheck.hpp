// Shared helpers for the nn/optim tests: random matrices and central-difference checks.
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include <catch2/catch.hpp>

#include "sprig/core/matrix.hpp"
#include "sprig/core/rng.hpp"

namespace sprig_test {

template <class T>
sprig::Matrix<T> random_matrix(std::int64_t rows, std::int64_t cols, std::uint64_t seed, double lo = -1.0,
                               double hi = 1.0, std::int64_t stride = -1) {
  sprig::Matrix<T> m(rows, cols, stride < cols ? cols : stride, T(0));
  sprig::CounterRng rng(seed, 77);
  for (std::int64_t i = 0; i < rows; ++i)
    for (std::int64_t j = 0; j < cols; ++j) m(i, j) = static_cast<T>(rng.uniform(lo, hi));
  return m;
}

// sum_ij A(i,j) * R(i,j): the scalar "loss" whose gradient with respect to A is R.
template <class T>
double dot(sprig::ConstMatrixView<T> A, sprig::ConstMatrixView<T> R) {
  double s = 0.0;
  for (std::int64_t i = 0; i < A.rows(); ++i)
    for (std::int64_t j = 0; j < A.cols(); ++j) s += static_cast<double>(A(i, j)) * static_cast<double>(R(i, j));
  return s;
}

// Central differences: for every k in `which`, (f(x + h e_k) - f(x - h e_k)) / 2h must
// match analytic[k]. The error of the central difference is h^2/6 * f''' (truncation)
// plus about eps * |f| / h (rounding of f); with h = 1e-6 in double and |f|, |f'''| of
// order 10..100 both stay below 1e-7, so tol = 1e-6 * (1 + |g|) separates a correct
// gradient from a wrong one (any real error is O(|g|)).
inline void check_gradient(const std::function<double()>& f, std::span<double> x, std::span<const double> analytic,
                           const std::vector<std::size_t>& which, double h = 1e-6, double rel = 1e-6) {
  for (std::size_t k : which) {
    const double saved = x[k];
    x[k] = saved + h;
    const double fp = f();
    x[k] = saved - h;
    const double fm = f();
    x[k] = saved;
    const double numeric = (fp - fm) / (2 * h);
    INFO("element " << k << ": numeric " << numeric << " analytic " << analytic[k]);
    REQUIRE(std::abs(numeric - analytic[k]) <= rel * (1.0 + std::abs(analytic[k])));
  }
}

// All indices [0, n), or `count` spread evenly when n is larger.
inline std::vector<std::size_t> some_indices(std::size_t n, std::size_t count = 64) {
  std::vector<std::size_t> out;
  if (n <= count) {
    for (std::size_t k = 0; k < n; ++k) out.push_back(k);
  } else {
    for (std::size_t q = 0; q < count; ++q) out.push_back(q * n / count + (q * 7) % (n / count));
  }
  return out;
}

}  // namespace sprig_test
