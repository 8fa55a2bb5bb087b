// Bias add and bias gradient (nn/bias.hpp) against a double-precision oracle on odd batch
// widths (SIMD body, tail, widths below one register), and identical for 1 and 2 threads.
#include <sprig/core/rng.hpp>
#include <sprig/nn/bias.hpp>

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <vector>

#if SPRIG_HAS_OPENMP
#  include <omp.h>
#endif

using namespace sprig;

TEMPLATE_TEST_CASE("add_bias and sum_rows agree with a double oracle and with any thread count", "[nn][bias]", float,
                   double) {
  using T = TestType;
  CounterRng rng(5);
  for (std::int64_t rows : {1, 7, 600}) {  // 600 x 129 crosses the threading threshold
    for (std::int64_t cols : {0, 1, 3, 7, 8, 15, 16, 17, 33, 129}) {
      Matrix<T> Y(rows, cols);
      std::vector<T> b(static_cast<std::size_t>(rows));
      for (std::int64_t i = 0; i < rows; ++i) {
        b[static_cast<std::size_t>(i)] = T(rng.uniform(-0.5, 0.5));
        for (std::int64_t j = 0; j < cols; ++j) Y(i, j) = T(rng.uniform(-2.0, 2.0));
      }
      const Matrix<T> before = Y;
      detail::add_bias<T>(b, Y.view());
      for (std::int64_t i = 0; i < rows; ++i)
        for (std::int64_t j = 0; j < cols; ++j) REQUIRE(Y(i, j) == T(before(i, j) + b[static_cast<std::size_t>(i)]));

      std::vector<T> g(static_cast<std::size_t>(rows), T(-1));
      detail::sum_rows<T>(ConstMatrixView<T>(before.view()), g);
      for (std::int64_t i = 0; i < rows; ++i) {
        double want = 0.0, scale = 0.0;
        for (std::int64_t j = 0; j < cols; ++j) {
          want += static_cast<double>(before(i, j));
          scale += std::abs(static_cast<double>(before(i, j)));
        }
        const double eps = std::is_same_v<T, float> ? 1e-6 : 1e-14;
        REQUIRE(std::abs(static_cast<double>(g[static_cast<std::size_t>(i)]) - want) <= eps * (scale + 1.0));
      }
#if SPRIG_HAS_OPENMP
      const int saved = omp_get_max_threads();
      std::vector<T> g1(g.size()), g2(g.size());
      omp_set_num_threads(1);
      detail::sum_rows<T>(ConstMatrixView<T>(before.view()), g1);
      omp_set_num_threads(2);
      detail::sum_rows<T>(ConstMatrixView<T>(before.view()), g2);
      omp_set_num_threads(saved);
      REQUIRE(g1 == g2);
      REQUIRE(g1 == g);
#endif
    }
  }
}
