#include "sprig/nn/gelu.hpp"

#include <cmath>
#include <cstdint>

#include <catch2/catch.hpp>

#include "test_nn_gradcheck.hpp"

using namespace sprig;
using sprig_test::random_matrix;

TEST_CASE("GELU (tanh form) against known values and the erf form", "[nn][gelu]") {
  CHECK(GELU<double>::value(0.0) == 0.0);
  // Large |x|: gelu(x) -> x for x >> 0 and -> 0 for x << 0.
  CHECK(GELU<double>::value(10.0) == Approx(10.0).epsilon(1e-12));
  CHECK(std::abs(GELU<double>::value(-10.0)) < 1e-12);
  // The tanh approximation stays within 5e-4 of x * Phi(x) (Hendrycks & Gimpel).
  for (double x = -6.0; x <= 6.0; x += 0.01) {
    const double exact = 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));
    REQUIRE(std::abs(GELU<double>::value(x) - exact) < 5e-4);
  }
  // Hand value at x = 1: u = sqrt(2/pi) * 1.044715 = 0.833554..., 0.5 * (1 + tanh(u)).
  const double u = std::sqrt(2.0 / 3.141592653589793) * 1.044715;
  CHECK(GELU<double>::value(1.0) == Approx(0.5 * (1.0 + std::tanh(u))).epsilon(1e-15));
}

TEMPLATE_TEST_CASE("GELU derivative matches central differences", "[nn][gelu][gradcheck]", double) {
  auto X = random_matrix<double>(5, 9, 7, -4, 4);
  const auto R = random_matrix<double>(5, 9, 8);
  Matrix<double> Y(5, 9), dX(5, 9);
  GELU<double> gelu;
  gelu.backward(X.view(), R.view(), dX.view());
  auto loss = [&] {
    gelu.forward(X.view(), Y.view());
    return sprig_test::dot<double>(Y.view(), R.view());
  };
  const std::vector<double> g(dX.data(), dX.data() + 45);
  sprig_test::check_gradient(loss, std::span<double>(X.data(), 45), g, sprig_test::some_indices(45));
  Matrix<double> bad(5, 8);
  CHECK_THROWS_AS(gelu.forward(X.view(), bad.view()), ShapeError);
}

TEST_CASE("GELU float agrees with double", "[nn][gelu]") {
  for (double x = -8.0; x <= 8.0; x += 0.37) {
    CHECK(GELU<float>::value(float(x)) == Approx(GELU<double>::value(x)).margin(1e-6).epsilon(1e-6));
    CHECK(GELU<float>::derivative(float(x)) == Approx(GELU<double>::derivative(x)).margin(1e-6).epsilon(1e-6));
  }
}
