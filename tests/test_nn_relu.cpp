#include "sprig/nn/relu.hpp"

#include <cstdint>

#include <catch2/catch.hpp>

#include "test_nn_gradcheck.hpp"

using namespace sprig;
using sprig_test::random_matrix;

TEMPLATE_TEST_CASE("ReLU forward and backward", "[nn][relu]", float, double) {
  using T = TestType;
  const auto X = random_matrix<T>(7, 19, 1, -1, 1, 21);
  const auto dY = random_matrix<T>(7, 19, 2);
  Matrix<T> Y(7, 19), dX(7, 19);
  ReLU<T> relu;
  relu.forward(X.view(), Y.view());
  relu.backward(X.view(), dY.view(), dX.view());
  for (std::int64_t i = 0; i < 7; ++i)
    for (std::int64_t j = 0; j < 19; ++j) {
      REQUIRE(Y(i, j) == (X(i, j) > 0 ? X(i, j) : T(0)));
      REQUIRE(dX(i, j) == (X(i, j) > 0 ? dY(i, j) : T(0)));
    }
  // in place (dX over dY, as Sequential runs it): the same values
  Matrix<T> inplace = dY;
  relu.backward(X.view(), inplace.view(), inplace.view());
  for (std::int64_t i = 0; i < 7; ++i)
    for (std::int64_t j = 0; j < 19; ++j) REQUIRE(inplace(i, j) == dX(i, j));
  Matrix<T> bad(6, 19);
  CHECK_THROWS_AS(relu.forward(X.view(), bad.view()), ShapeError);
  CHECK_THROWS_AS(relu.backward(X.view(), dY.view(), bad.view()), ShapeError);
}

TEST_CASE("ReLU backward matches central differences away from the kink", "[nn][relu][gradcheck]") {
  auto X = random_matrix<double>(6, 8, 3);
  for (std::int64_t i = 0; i < 6; ++i)  // keep every input at least 0.05 from 0 (h = 1e-6)
    for (std::int64_t j = 0; j < 8; ++j)
      if (std::abs(X(i, j)) < 0.05) X(i, j) = 0.05 + 0.1 * double(j);
  const auto R = random_matrix<double>(6, 8, 4);
  Matrix<double> Y(6, 8), dX(6, 8);
  ReLU<double> relu;
  relu.backward(X.view(), R.view(), dX.view());
  auto loss = [&] {
    relu.forward(X.view(), Y.view());
    return sprig_test::dot<double>(Y.view(), R.view());
  };
  const std::vector<double> g(dX.data(), dX.data() + 48);
  sprig_test::check_gradient(loss, std::span<double>(X.data(), 48), g, sprig_test::some_indices(48));
}
