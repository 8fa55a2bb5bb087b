#include "sprig/nn/softmax_cross_entropy.hpp"

#include <cmath>
#include <cstdint>
#include <vector>

#include <catch2/catch.hpp>

#include "test_nn_gradcheck.hpp"

using namespace sprig;
using sprig_test::random_matrix;

TEST_CASE("SoftmaxCrossEntropy loss against hand values", "[nn][loss]") {
  SoftmaxCrossEntropy<double> ce;
  // Uniform logits over C classes: loss = log C for any label.
  Matrix<double> Z(4, 3, 0.7);
  std::vector<int> y = {0, 3, 2};
  CHECK(ce.forward(Z.view(), y) == Approx(std::log(4.0)).epsilon(1e-15));
  // Two classes, logits (2, 0) label 0: log(1 + e^-2).
  Matrix<double> Z2(2, 1);
  Z2(0, 0) = 2.0;
  std::vector<int> y2 = {0};
  CHECK(ce.forward(Z2.view(), y2) == Approx(std::log1p(std::exp(-2.0))).epsilon(1e-14));
}

TEST_CASE("SoftmaxCrossEntropy is stable for huge logits", "[nn][loss]") {
  SoftmaxCrossEntropy<float> ce;
  Matrix<float> Z(3, 2);
  Z(0, 0) = 1000.f;  // exp(1000) overflows float; the shifted form does not
  Z(1, 0) = 990.f;
  Z(2, 1) = -1000.f;
  std::vector<int> y = {1, 2};
  Matrix<float> dZ(3, 2);
  const float loss = ce.forward_backward(Z.view(), y, dZ.view());
  // column 0: 10 + log(1 + e^-10 + e^-1000) ~ 10.0000454; column 1: 1000 + log 2.
  const double expected = 0.5 * ((10.0 + std::log1p(std::exp(-10.0))) + (1000.0 + std::log(2.0)));
  CHECK(std::isfinite(loss));
  CHECK(loss == Approx(expected).epsilon(1e-6));
  for (std::int64_t i = 0; i < 3; ++i)
    for (std::int64_t b = 0; b < 2; ++b) CHECK(std::isfinite(dZ(i, b)));
}

TEST_CASE("SoftmaxCrossEntropy gradient matches central differences", "[nn][loss][gradcheck]") {
  SoftmaxCrossEntropy<double> ce;
  auto Z = random_matrix<double>(6, 11, 3, -3, 3, 13);
  std::vector<int> y(11);
  for (int b = 0; b < 11; ++b) y[b] = (b * 5) % 6;
  Matrix<double> dZ(6, 11);
  ce.forward_backward(Z.view(), y, dZ.view());
  // Each column of dZ sums to 0 (softmax sums to 1, minus the one-hot).
  for (std::int64_t b = 0; b < 11; ++b) {
    double s = 0.0;
    for (std::int64_t i = 0; i < 6; ++i) s += dZ(i, b);
    CHECK(std::abs(s) < 1e-15);
  }
  auto loss = [&] { return double(ce.forward(Z.view(), y)); };
  for (std::int64_t i = 0; i < 6; ++i)
    for (std::int64_t b = 0; b < 11; ++b) {
      double* z = &Z(i, b);
      const double saved = *z, h = 1e-6;
      *z = saved + h;
      const double fp = loss();
      *z = saved - h;
      const double fm = loss();
      *z = saved;
      INFO("(" << i << ", " << b << ")");
      REQUIRE(std::abs((fp - fm) / (2 * h) - dZ(i, b)) <= 1e-7);
    }
}

TEST_CASE("SoftmaxCrossEntropy validates labels and shapes; count_correct", "[nn][loss]") {
  SoftmaxCrossEntropy<float> ce;
  Matrix<float> Z(3, 2), dZ(3, 3);
  std::vector<int> bad_label = {0, 3}, short_labels = {0}, ok = {1, 2};
  CHECK_THROWS_AS(ce.forward(Z.view(), bad_label), ArgumentError);
  CHECK_THROWS_AS(ce.forward(Z.view(), short_labels), ShapeError);
  CHECK_THROWS_AS(ce.forward_backward(Z.view(), ok, dZ.view()), ShapeError);
  Z(1, 0) = 2.f;  // column 0 predicts 1
  Z(0, 1) = 1.f;  // column 1 predicts 0
  CHECK(SoftmaxCrossEntropy<float>::count_correct(Z.view(), ok) == 1);
}
