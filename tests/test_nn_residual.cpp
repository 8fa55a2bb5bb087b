#include "sprig/nn/residual.hpp"

#include <atomic>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>

#include "sprig/core/config.hpp"

#include "observed_new.hpp"
#include "test_nn_gradcheck.hpp"
#include "with_threads.hpp"

// Counts heap allocations, to check that the adds make none.
static std::atomic<long> g_allocations{0};
void sprig_test_observe_new(std::size_t) noexcept { g_allocations.fetch_add(1, std::memory_order_relaxed); }

using namespace sprig;
using sprig_test::random_matrix;

TEMPLATE_TEST_CASE("residual_add and add_into against plain loops, strided and in place", "[nn][residual]", float,
                   double) {
  using T = TestType;
  const std::int64_t r = 5, c = 19;
  const auto Abuf = random_matrix<T>(r, c + 3, 1);
  const auto Bbuf = random_matrix<T>(r, c + 2, 2);
  const auto A = Abuf.view().block(0, 3, r, c);
  const auto B = Bbuf.view().block(0, 1, r, c);
  Matrix<T> Ybuf(r, c + 4, T(-3));
  const auto Y = Ybuf.view().block(0, 2, r, c);
  residual_add<T>(A, B, Y);
  for (std::int64_t i = 0; i < r; ++i)
    for (std::int64_t j = 0; j < c; ++j) REQUIRE(Y(i, j) == A(i, j) + B(i, j));
  add_into<T>(A, Y);
  for (std::int64_t i = 0; i < r; ++i) {
    for (std::int64_t j = 0; j < c; ++j) REQUIRE(Y(i, j) == (A(i, j) + B(i, j)) + A(i, j));
    CHECK(Ybuf(i, 0) == T(-3));
    CHECK(Ybuf(i, 1) == T(-3));
    CHECK(Ybuf(i, c + 2) == T(-3));
    CHECK(Ybuf(i, c + 3) == T(-3));
  }
  // in place: Y is A, Y is B, Y += Y
  auto M = random_matrix<T>(r, c, 3);
  const auto M0 = M;
  residual_add<T>(M.view(), B, M.view());
  for (std::int64_t i = 0; i < r; ++i)
    for (std::int64_t j = 0; j < c; ++j) REQUIRE(M(i, j) == M0(i, j) + B(i, j));
  M = M0;
  residual_add<T>(B, M.view(), M.view());
  for (std::int64_t i = 0; i < r; ++i)
    for (std::int64_t j = 0; j < c; ++j) REQUIRE(M(i, j) == B(i, j) + M0(i, j));
  M = M0;
  add_into<T>(M.view(), M.view());
  for (std::int64_t i = 0; i < r; ++i)
    for (std::int64_t j = 0; j < c; ++j) REQUIRE(M(i, j) == M0(i, j) + M0(i, j));
  // empty
  Matrix<T> E(3, 0);
  CHECK_NOTHROW(add_into<T>(E.view(), E.view()));
}

TEST_CASE("residual_add: the gradient of each input is the output's (central differences)",
          "[nn][residual][gradcheck]") {
  auto A = random_matrix<double>(4, 7, 11);
  auto B = random_matrix<double>(4, 7, 12);
  const auto R = random_matrix<double>(4, 7, 13);
  Matrix<double> Y(4, 7);
  auto loss = [&] {
    residual_add<double>(A.view(), B.view(), Y.view());
    return sprig_test::dot<double>(Y.view(), R.view());
  };
  // the backward of a residual connection: dX = dF + dY, made with add_into
  Matrix<double> dA(4, 7, 0.0);
  add_into<double>(R.view(), dA.view());
  const std::vector<double> g(dA.data(), dA.data() + 28);
  sprig_test::check_gradient(loss, std::span<double>(A.data(), 28), g, sprig_test::some_indices(28));
  sprig_test::check_gradient(loss, std::span<double>(B.data(), 28), g, sprig_test::some_indices(28));
}

TEMPLATE_TEST_CASE("residual adds: bad inputs throw", "[nn][residual]", float, double) {
  using T = TestType;
  Matrix<T> A(4, 6), B(4, 6), Y(4, 6), wide(4, 7), tall(5, 6), big(6, 8);
  CHECK_THROWS_AS(residual_add<T>(A.view(), B.view(), wide.view()), ShapeError);
  CHECK_THROWS_AS(residual_add<T>(A.view(), tall.view(), Y.view()), ShapeError);
  CHECK_THROWS_AS(add_into<T>(tall.view(), Y.view()), ShapeError);
  try {
    add_into<T>(wide.view(), Y.view());
    FAIL("no throw");
  } catch (const ShapeError& e) {
    CHECK(std::string(e.what()) == "add_into: A is 4x7 but Y is 4x6");
  }
  // partial overlaps: Y one column or one row over from A
  const auto a = big.view().block(0, 0, 4, 6);
  CHECK_THROWS_AS(add_into<T>(a, big.view().block(0, 1, 4, 6)), ArgumentError);
  CHECK_THROWS_AS(add_into<T>(a, big.view().block(1, 0, 4, 6)), ArgumentError);
  CHECK_THROWS_AS(residual_add<T>(A.view(), a, big.view().block(0, 2, 4, 6)), ArgumentError);
  // the same data with another stride is not the same view
  CHECK_THROWS_AS(add_into<T>(ConstMatrixView<T>(big.data(), 4, 6, 8), MatrixView<T>(big.data(), 4, 6, 7)),
                  ArgumentError);
  CHECK_NOTHROW(add_into<T>(a, a));
}

TEMPLATE_TEST_CASE("residual adds: bitwise identical for 1, 2 and 3 threads, no allocation", "[nn][residual][threads]",
                   float, double) {
  using T = TestType;
  const std::int64_t r = 64, c = 1100;  // >= kParallelMinWork: rows split over threads
  REQUIRE(r * c >= detail::kParallelMinWork);
  const auto A = random_matrix<T>(r, c, 21);
  const auto B = random_matrix<T>(r, c, 22);
  std::vector<Matrix<T>> out;
  for (const int threads : {1, 2, 3}) {
    Matrix<T> Y(r, c);
    sprig_test::with_threads(threads, [&] {
      residual_add<T>(A.view(), B.view(), Y.view());  // the first parallel region may allocate
      const long before = g_allocations.load();
      residual_add<T>(A.view(), B.view(), Y.view());
      add_into<T>(A.view(), Y.view());
      CHECK(g_allocations.load() - before == 0);
    });
    out.push_back(std::move(Y));
  }
  for (std::size_t k = 1; k < out.size(); ++k)
    CHECK(std::memcmp(out[0].data(), out[k].data(), std::size_t(r * c) * sizeof(T)) == 0);
  for (std::int64_t i = 0; i < r; ++i)
    for (std::int64_t j = 0; j < c; ++j) REQUIRE(out[0](i, j) == (A(i, j) + B(i, j)) + A(i, j));
}
