#include "sprig/nn/gelu.hpp"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <utility>

#include <catch2/catch.hpp>

#include "test_nn_gradcheck.hpp"

using namespace sprig;
using sprig_test::random_matrix;

TEST_CASE("GELU (tanh form) against known values and the erf form", "[nn][gelu]") {
  CHECK(GELU<double>::value(0.0) == 0.0);
  CHECK(GELU<double>::derivative(0.0) == 0.5);
  // far out: no inf or NaN from the overflowing exp, float and double
  CHECK(GELU<float>::value(-60.0f) == 0.0f);
  CHECK(GELU<float>::derivative(-60.0f) == 0.0f);
  CHECK(GELU<double>::derivative(-800.0) == 0.0);
  CHECK(GELU<float>::value(60.0f) == 60.0f);
  CHECK(GELU<float>::derivative(60.0f) == 1.0f);
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

TEMPLATE_TEST_CASE("GELU: the vectorised rows equal the scalar formula on wide strided inputs", "[nn][gelu]", float,
                   double) {
  using T = TestType;
  // 7 x 133 inside a wider buffer: SIMD body, scalar tail and a row stride that is not cols
  Matrix<T> Xbuf(7, 150), dYbuf(7, 150), Ybuf(7, 150), dXbuf(7, 150);
  CounterRng rng(17);
  for (std::int64_t i = 0; i < 7; ++i)
    for (std::int64_t j = 0; j < 150; ++j) {
      Xbuf(i, j) = static_cast<T>(rng.uniform(-6.0, 6.0));
      dYbuf(i, j) = static_cast<T>(rng.uniform(-1.0, 1.0));
    }
  const auto X = Xbuf.view().block(0, 3, 7, 133);
  const auto dY = dYbuf.view().block(0, 3, 7, 133);
  GELU<T> gelu;
  gelu.forward(X, Ybuf.view().block(0, 3, 7, 133));
  gelu.backward(X, dY, dXbuf.view().block(0, 3, 7, 133));
  // against the tanh form written out here in long double (the library computes it through
  // sigmoid(2u) with xsimd::exp, accurate to a few ulp)
  const T tol = std::is_same_v<T, float> ? T(2e-6) : T(1e-13);
  auto tanh_form = [](long double x) {
    const long double c = 0.7978845608028654L, k = 0.044715L;
    const long double t = std::tanh(c * (x + k * x * x * x));
    return std::pair{0.5L * x * (1 + t), 0.5L * (1 + t) + 0.5L * x * (1 - t * t) * c * (1 + 3 * k * x * x)};
  };
  for (std::int64_t i = 0; i < 7; ++i)
    for (std::int64_t j = 0; j < 133; ++j) {
      const T x = X(i, j);
      const auto [value, derivative] = tanh_form(x);
      REQUIRE(std::abs(Ybuf(i, j + 3) - value) <= tol * (T(1) + std::abs(x)));
      REQUIRE(std::abs(dXbuf(i, j + 3) - dY(i, j) * derivative) <= tol * (T(1) + std::abs(x)));
      REQUIRE(std::abs(Ybuf(i, j + 3) - GELU<T>::value(x)) <= tol * (T(1) + std::abs(x)));  // the scalar path
    }
  CHECK(Ybuf(0, 0) == T(0));  // outside the view: untouched
  // in place (dX over dY, as Sequential runs it): bitwise the out-of-place result
  gelu.backward(X, dY, dYbuf.view().block(0, 3, 7, 133));
  for (std::int64_t i = 0; i < 7; ++i)
    for (std::int64_t j = 3; j < 136; ++j) REQUIRE(dYbuf(i, j) == dXbuf(i, j));
}

TEMPLATE_TEST_CASE("GELU::forward_keep_derivative: forward's values and backward's derivative, bit for bit",
                   "[nn][gelu]", float, double) {
  using T = TestType;
  // 5 x 37 inside a wider buffer (SIMD body and scalar tail), values over the whole range,
  // including 0, -0, and large magnitudes where exp overflows
  Matrix<T> Zbuf(5, 45), Y(5, 37), want_y(5, 37), want_d(5, 37), ones(5, 37);
  CounterRng rng(23);
  for (std::int64_t i = 0; i < 5; ++i)
    for (std::int64_t j = 0; j < 45; ++j) Zbuf(i, j) = static_cast<T>(rng.uniform(-8.0, 8.0));
  Zbuf(0, 2) = T(0);
  Zbuf(1, 3) = -T(0);
  Zbuf(2, 4) = T(-500);
  Zbuf(3, 5) = T(500);
  for (std::int64_t i = 0; i < 5; ++i)
    for (std::int64_t j = 0; j < 37; ++j) ones(i, j) = T(1);
  const auto Z = Zbuf.view().block(0, 2, 5, 37);
  GELU<T> gelu;
  gelu.forward(Z, want_y.view());
  gelu.backward(Z, ones.view(), want_d.view());  // 1 * gelu'(z): exactly the derivative
  const T guard = Zbuf(0, 0);
  gelu.forward_keep_derivative(Z, Y.view());
  std::int64_t differ = 0;
  for (std::int64_t i = 0; i < 5; ++i)
    for (std::int64_t j = 0; j < 37; ++j) {
      differ += std::memcmp(&Y(i, j), &want_y(i, j), sizeof(T)) != 0;
      differ += std::memcmp(&Z(i, j), &want_d(i, j), sizeof(T)) != 0;
    }
  CHECK(differ == 0);
  CHECK(Zbuf(0, 0) == guard);  // outside the view: untouched
  CHECK(Z(2, 2) == T(0));      // gelu'(-500)
  CHECK(Z(3, 3) == T(1));      // gelu'(500)
  Matrix<T> bad(5, 36);
  CHECK_THROWS_AS(gelu.forward_keep_derivative(Z, bad.view()), ShapeError);
}
