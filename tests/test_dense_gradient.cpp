#include "sprig/kernels/dense_gradient.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <tuple>

#include <catch2/catch.hpp>

#include "test_nn_gradcheck.hpp"

using namespace sprig;
using sprig_test::random_matrix;

namespace {

// (dY X^T)(i, j) by the triple loop, in double.
template <class T>
double gradient_at(const Matrix<T>& dY, const Matrix<T>& X, std::int64_t i, std::int64_t j) {
  double s = 0;
  for (std::int64_t b = 0; b < dY.cols(); ++b) s += double(dY(i, b)) * double(X(j, b));
  return s;
}

}  // namespace

TEMPLATE_TEST_CASE("dense_gradient_rows equals the triple loop on any row range", "[kernels][dense_gradient]", float,
                   double) {
  using T = TestType;
  const double eps = std::is_same_v<T, float> ? 1e-5 : 1e-12;
  for (auto [rows, cols, B] : {std::tuple{1, 1, 1}, std::tuple{13, 21, 9}, std::tuple{40, 7, 33}}) {
    const auto dY = random_matrix<T>(rows, B, 1, -1, 1, B + 3);
    const auto X = random_matrix<T>(cols, B, 2, -1, 1, B + 1);
    for (std::int64_t r0 : {0, rows / 3, rows - 1}) {
      const std::int64_t n = std::max<std::int64_t>(1, (rows - r0) / 2);
      Matrix<T> out(n, cols);
      dense_gradient_rows<T>(dY.view(), X.view(), r0, out.view());
      for (std::int64_t i = 0; i < n; ++i)
        for (std::int64_t j = 0; j < cols; ++j) CHECK(out(i, j) == Approx(gradient_at(dY, X, r0 + i, j)).margin(eps));
    }
  }
}

TEMPLATE_TEST_CASE("block_gradient_sums adds |dY X^T| over each clipped block", "[kernels][dense_gradient]", float,
                   double) {
  using T = TestType;
  const double eps = std::is_same_v<T, float> ? 1e-4 : 1e-11;
  // 10 x 11 in 4 x 3 blocks: the last block row and column are clipped (2 rows, 2 columns)
  const std::int64_t rows = 10, cols = 11, B = 17, R = 4, C = 3, grid_rows = 3, grid_cols = 4;
  const auto dY = random_matrix<T>(rows, B, 3, -1, 1, B);
  const auto X = random_matrix<T>(cols, B, 4, -1, 1, B + 2);
  Matrix<T> scratch;
  for (std::int64_t r0 : {0, 1, 2}) {
    const std::int64_t n = grid_rows - r0;
    Matrix<T> out(n, grid_cols);
    block_gradient_sums<T>(dY.view(), X.view(), R, C, r0, out.view(), scratch);
    for (std::int64_t i = 0; i < n; ++i)
      for (std::int64_t j = 0; j < grid_cols; ++j) {
        double sum = 0;
        for (std::int64_t r = (r0 + i) * R; r < std::min(rows, (r0 + i + 1) * R); ++r)
          for (std::int64_t c = j * C; c < std::min(cols, (j + 1) * C); ++c) sum += std::abs(gradient_at(dY, X, r, c));
        CHECK(out(i, j) == Approx(sum).margin(eps));
      }
  }
}

TEST_CASE("dense gradient kernels reject operands that do not fit", "[kernels][dense_gradient]") {
  const auto dY = random_matrix<float>(8, 5, 1, -1, 1, 5);
  const auto X = random_matrix<float>(6, 5, 2, -1, 1, 5);
  Matrix<float> out(3, 6), grid(2, 2), scratch;
  CHECK_THROWS_AS(dense_gradient_rows<float>(dY.view(), X.view(), 6, out.view()), ShapeError);
  CHECK_THROWS_AS(dense_gradient_rows<float>(dY.view(), X.view(), -1, out.view()), ShapeError);
  CHECK_THROWS_AS(block_gradient_sums<float>(dY.view(), X.view(), 0, 3, 0, grid.view(), scratch), ShapeError);
  CHECK_THROWS_AS(block_gradient_sums<float>(dY.view(), X.view(), 4, 2, 0, grid.view(), scratch),
                  ShapeError);  // 3 block cols
  CHECK_NOTHROW(block_gradient_sums<float>(dY.view(), X.view(), 4, 3, 0, grid.view(), scratch));
  CHECK_THROWS_AS(block_gradient_sums<float>(dY.view(), X.view(), 4, 3, 2, grid.view(), scratch), ShapeError);
}
