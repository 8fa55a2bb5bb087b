#include "sprig/kernels/dense_gemm.hpp"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <tuple>
#include <vector>

#include <catch2/catch.hpp>

#include "test_nn_gradcheck.hpp"
#include "with_threads.hpp"

using namespace sprig;
using sprig_test::random_matrix;

// Built twice by tests/nn.cmake: once portable, once with SPRIG_USE_CBLAS and OpenBLAS.
TEMPLATE_TEST_CASE("gemm equals the triple loop for every transpose combination", "[nn][gemm]", float, double) {
  using T = TestType;
  const double eps = std::is_same_v<T, float> ? 1.2e-7 : 2.3e-16;
  // 33 x 65 and 3 x 80: odd row counts (a last tile of one row) and column counts that leave
  // one-register tiles and scalar columns after the four-register tiles of the portable path
  for (auto [M, N, K] : {std::tuple{1, 1, 1}, std::tuple{5, 7, 3}, std::tuple{33, 65, 130}, std::tuple{4, 3, 0},
                         std::tuple{70, 9, 600}, std::tuple{3, 80, 37}})
    for (Trans ta : {Trans::no, Trans::yes})
      for (Trans tb : {Trans::no, Trans::yes})
        for (double beta : {0.0, 1.0, -0.5}) {
          const auto A =
              ta == Trans::no ? random_matrix<T>(M, K, 1, -1, 1, K + 3) : random_matrix<T>(K, M, 1, -1, 1, M + 1);
          const auto B =
              tb == Trans::no ? random_matrix<T>(K, N, 2, -1, 1, N + 2) : random_matrix<T>(N, K, 2, -1, 1, K + 5);
          auto C = random_matrix<T>(M, N, 3, -1, 1, N + 4);
          const Matrix<T> C0 = C;
          if (beta == 0.0) C.fill(std::numeric_limits<T>::quiet_NaN());  // beta 0: C not read
          const T alpha = T(1.5);
          gemm<T>(ta, tb, alpha, A.view(), B.view(), T(beta), C.view());
          for (int i = 0; i < M; ++i)
            for (int j = 0; j < N; ++j) {
              double ref = 0.0, mag = 0.0;
              for (int k = 0; k < K; ++k) {
                const double a = ta == Trans::no ? A(i, k) : A(k, i);
                const double b = tb == Trans::no ? B(k, j) : B(j, k);
                ref += a * b;
                mag += std::abs(a * b);
              }
              ref = alpha * ref + (beta == 0.0 ? 0.0 : beta * C0(i, j));
              // Any summation order: |err| <= K eps sum|a b| (plus the beta term's rounding).
              INFO("M N K " << M << " " << N << " " << K << " ta " << int(ta) << " tb " << int(tb) << " beta " << beta);
              REQUIRE(std::abs(C(i, j) - ref) <= (K + 2) * eps * (1.5 * mag + 1.0));
            }
        }
}

TEST_CASE("gemm rejects mismatched shapes", "[nn][gemm]") {
  Matrix<float> A(3, 4), B(5, 2), C(3, 2);
  CHECK_THROWS_AS(gemm<float>(Trans::no, Trans::no, 1.f, A.view(), B.view(), 0.f, C.view()), ShapeError);
  Matrix<float> B2(4, 2), C2(2, 2);
  CHECK_THROWS_AS(gemm<float>(Trans::no, Trans::no, 1.f, A.view(), B2.view(), 0.f, C2.view()), ShapeError);
  CHECK_NOTHROW(gemm<float>(Trans::no, Trans::no, 1.f, A.view(), B2.view(), 0.f, C.view()));
}

// C over A or B would be read after it was written: rejected before anything is written
// (beta's read of C itself is the intended in/out). Before the check, gemm(A, A, C = A)
// returned quietly with a C unlike A A.
TEST_CASE("gemm rejects a C that overlaps A or B", "[nn][gemm][overlap]") {
  using Catch::Matchers::Contains;
  Matrix<float> A(4, 4, 1.f), B(4, 4, 2.f);
  CHECK_THROWS_AS(gemm<float>(Trans::no, Trans::no, 1.f, A.view(), B.view(), 0.f, A.view()), ArgumentError);
  CHECK_THROWS_WITH(gemm<float>(Trans::no, Trans::yes, 1.f, A.view(), B.view(), 1.f, A.view()),
                    Contains("gemm: C overlaps A"));
  CHECK_THROWS_WITH(gemm<float>(Trans::yes, Trans::no, 1.f, A.view(), B.view(), 0.f, B.view()),
                    Contains("gemm: C overlaps B"));
  bool untouched = true;
  for (std::int64_t i = 0; i < 4; ++i)
    for (std::int64_t j = 0; j < 4; ++j) untouched = untouched && A(i, j) == 1.f && B(i, j) == 2.f;
  CHECK(untouched);
  Matrix<float> AB(8, 4, 1.f);  // C in the rows after A in one buffer: fine
  CHECK_NOTHROW(
      gemm<float>(Trans::no, Trans::no, 1.f, AB.view().block(0, 0, 4, 4), B.view(), 0.f, AB.view().block(4, 0, 4, 4)));
  CHECK(AB(4, 0) == 8.f);
}

// 8 or more rows of op(A) run packed panels of op(B) shared out among threads (the weight
// gradient dY X^T, a dense layer's forward and dX): every shape edge (rows past the last
// 4-row tile, columns past the last panel, k past the last square of the packing's
// transposes) against exact sums (small integers, so any summation order gives the same
// value), and the same bits at 1, 2 and 3 threads.
TEST_CASE("gemm with 8 or more rows: exact at every edge, the same bits for any thread count", "[nn][gemm]") {
  for (auto [M, N, K] : {std::tuple{8, 1, 1}, std::tuple{9, 17, 15}, std::tuple{23, 64, 16}, std::tuple{37, 129, 33},
                         std::tuple{70, 200, 130}, std::tuple{16, 31, 1000}})
    for (Trans ta : {Trans::no, Trans::yes})
      for (Trans tb : {Trans::no, Trans::yes}) {
        Matrix<float> A = ta == Trans::no ? Matrix<float>(M, K + 3) : Matrix<float>(K, M + 1);
        Matrix<float> B = tb == Trans::no ? Matrix<float>(K, N + 2) : Matrix<float>(N, K + 5);
        for (std::int64_t i = 0; i < A.rows(); ++i)
          for (std::int64_t k = 0; k < A.cols(); ++k) A(i, k) = float((i * 7 + k * 3) % 9) - 4.f;
        for (std::int64_t j = 0; j < B.rows(); ++j)
          for (std::int64_t k = 0; k < B.cols(); ++k) B(j, k) = float((j * 5 + k * 11) % 7) - 3.f;
        const auto a_view = ta == Trans::no ? A.view().block(0, 0, M, K) : A.view().block(0, 0, K, M);
        const auto b_view = tb == Trans::no ? B.view().block(0, 0, K, N) : B.view().block(0, 0, N, K);
        std::vector<Matrix<float>> runs;
        for (int threads : {1, 2, 3}) {
          Matrix<float> C(M, N, 0.5f);
          sprig_test::with_threads(threads, [&] { gemm<float>(ta, tb, 2.f, a_view, b_view, 1.f, C.view()); });
          runs.push_back(C);
        }
        INFO("M N K " << M << " " << N << " " << K << " ta " << int(ta) << " tb " << int(tb));
        for (std::int64_t i = 0; i < M; ++i)
          for (std::int64_t j = 0; j < N; ++j) {
            double ref = 0.0;
            for (std::int64_t k = 0; k < K; ++k)
              ref += double(ta == Trans::no ? A(i, k) : A(k, i)) * (tb == Trans::no ? B(k, j) : B(j, k));
            REQUIRE(runs[0](i, j) == float(0.5 + 2.0 * ref));
            REQUIRE(std::memcmp(&runs[0](i, j), &runs[1](i, j), sizeof(float)) == 0);
            REQUIRE(std::memcmp(&runs[0](i, j), &runs[2](i, j), sizeof(float)) == 0);
          }
      }
}
