#include "sprig/nn/linear.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>

#include <catch2/catch.hpp>

#include "sprig/nn/relu.hpp"
#include "test_nn_gradcheck.hpp"

using namespace sprig;
using sprig_test::random_matrix;

TEST_CASE("Linear forward equals W X + b", "[nn][linear]") {
  Linear<float> layer(29, 11, 5, 1);
  for (std::size_t i = 0; i < layer.bias.value.size(); ++i) layer.bias.value[i] = 0.1f * float(i);
  const auto X = random_matrix<float>(29, 10, 3, -1, 1, 13);
  Matrix<float> Y(11, 10);
  layer.forward(X.view(), Y.view());
  for (std::int64_t i = 0; i < 11; ++i)
    for (std::int64_t b = 0; b < 10; ++b) {
      double ref = layer.bias.value[i];
      for (std::int64_t c = 0; c < 29; ++c) ref += double(layer.weight.view()(i, c)) * X(c, b);
      REQUIRE(std::abs(Y(i, b) - ref) <= 29 * 1.2e-7 * 30);
    }
}

TEST_CASE("Linear forward with a fused ReLU is bitwise forward, then ReLU", "[nn][linear]") {
  Linear<float> layer(29, 33, 5, 1);
  for (std::size_t i = 0; i < layer.bias.value.size(); ++i) layer.bias.value[i] = 0.05f * float(i) - 0.8f;
  for (std::int64_t B : {1, 10, 130}) {
    const auto X = random_matrix<float>(29, B, 3, -1, 1, B + 2);
    Matrix<float> Z(33, B), want(33, B), got(33, B, std::nanf(""));
    layer.forward(X.view(), Z.view());
    ReLU<float>{}.forward(Z.view(), want.view());
    layer.forward(X.view(), got.view(), FusedActivation::relu);
    std::int64_t same = 0, zeros = 0;
    for (std::int64_t i = 0; i < 33; ++i)
      for (std::int64_t b = 0; b < B; ++b) {
        same += std::bit_cast<std::uint32_t>(got(i, b)) == std::bit_cast<std::uint32_t>(want(i, b));
        zeros += want(i, b) == 0.0f;
      }
    CHECK(same == 33 * B);
    CHECK(zeros > 0);
  }
}

TEST_CASE("Linear init is Kaiming-uniform with fan-in = in", "[nn][linear]") {
  Linear<double> layer(500, 40, 9);
  const double bound = std::sqrt(6.0 / 500);
  double sum2 = 0.0, maxabs = 0.0;
  for (double v : layer.weight.value) {
    sum2 += v * v;
    maxabs = std::max(maxabs, std::abs(v));
  }
  CHECK(maxabs <= bound);
  CHECK(maxabs > 0.95 * bound);
  // 20000 samples: relative sd of the variance estimate 0.6%.
  CHECK(sum2 / 20000 == Approx(bound * bound / 3).epsilon(0.03));
  CHECK(layer.weight.decay);
  CHECK_FALSE(layer.bias.decay);
}

TEST_CASE("Linear backward matches central differences (double)", "[nn][linear][gradcheck]") {
  // out = 9: the narrow kernels; out = 20: the gemms
  const std::int64_t out = GENERATE(9, 20);
  const std::int64_t in = 17, B = 5;
  Linear<double> layer(in, out, 2);
  CHECK(layer.narrow() == (out <= kNarrowMaxRows));
  auto X = random_matrix<double>(in, B, 4);
  const auto R = random_matrix<double>(out, B, 6);
  Matrix<double> Y(out, B), dX(in, B);
  layer.forward(X.view(), Y.view());
  layer.backward(X.view(), R.view(), dX.view());
  auto loss = [&] {
    layer.forward(X.view(), Y.view());
    return sprig_test::dot<double>(Y.view(), R.view());
  };
  const std::vector<double> gw(layer.weight.grad.begin(), layer.weight.grad.end());
  sprig_test::check_gradient(loss, layer.weight.value, gw, sprig_test::some_indices(gw.size(), 80));
  const std::vector<double> gb(layer.bias.grad.begin(), layer.bias.grad.end());
  sprig_test::check_gradient(loss, layer.bias.value, gb, sprig_test::some_indices(gb.size()));
  const std::vector<double> gx(dX.data(), dX.data() + in * B);
  sprig_test::check_gradient(loss, std::span<double>(X.data(), in * B), gx, sprig_test::some_indices(in * B, 60));
}

TEST_CASE("Linear backward with the ReLU or GELU below is bitwise dX masked or scaled by hand, narrow or on gemms",
          "[nn][linear]") {
  for (const std::int64_t out : {5, 12, 13, 40}) {
    for (const std::int64_t B : {3, 16, 37}) {
      CAPTURE(out, B);
      Linear<float> layer(23, out, 8, 2);
      CHECK(layer.narrow() == (out <= kNarrowMaxRows));
      const auto Z = random_matrix<float>(23, B, 30 + B);  // pre-activation of the layer below
      Matrix<float> X(23, B);
      ReLU<float>{}.forward(Z.view(), X.view());
      const auto dY = random_matrix<float>(out, B, 40 + B);
      Matrix<float> dX(23, B), want(23, B), got(23, B);
      layer.backward(X.view(), dY.view(), dX.view());
      const std::vector<float> dW(layer.weight.grad.begin(), layer.weight.grad.end());
      ReLU<float>{}.backward(X.view(), dX.view(), want.view());
      layer.backward(X.view(), dY.view(), got.view(), FusedActivation::relu);
      std::int64_t same = 0, masked = 0;
      for (std::int64_t i = 0; i < 23; ++i)
        for (std::int64_t b = 0; b < B; ++b) {
          same += std::bit_cast<std::uint32_t>(got(i, b)) == std::bit_cast<std::uint32_t>(want(i, b));
          masked += X(i, b) == 0.0f && dX(i, b) != 0.0f;
        }
      CHECK(same == 23 * B);
      CHECK(masked > 0);
      // a GELU's derivative: dX times it, bit for bit
      const auto D = random_matrix<float>(23, B, 50 + B);
      layer.backward(X.view(), dY.view(), got.view(), FusedActivation::gelu, D.view());
      same = 0;
      for (std::int64_t i = 0; i < 23; ++i)
        for (std::int64_t b = 0; b < B; ++b) {
          const float w = dX(i, b) * D(i, b);
          same += std::bit_cast<std::uint32_t>(got(i, b)) == std::bit_cast<std::uint32_t>(w);
        }
      CHECK(same == 23 * B);
      // the weight gradient is the same with the mask, and without dX
      CHECK(std::equal(dW.begin(), dW.end(), layer.weight.grad.begin()));
      layer.backward(X.view(), dY.view());
      CHECK(std::equal(dW.begin(), dW.end(), layer.weight.grad.begin()));
    }
  }
}

TEST_CASE("Linear validates shapes", "[nn][linear]") {
  CHECK_THROWS_AS(Linear<float>(0, 3, 1), ShapeError);
  Linear<float> layer(4, 3, 1);
  Matrix<float> X(4, 2), Y(3, 2), bad(2, 2), dX(4, 2);
  CHECK_THROWS_AS(layer.forward(bad.view(), Y.view()), ShapeError);
  CHECK_THROWS_AS(layer.backward(X.view(), bad.view(), dX.view()), ShapeError);
  CHECK_THROWS_AS(layer.backward(X.view(), Y.view(), bad.view()), ShapeError);
  CHECK_THROWS_AS(layer.backward(X.view(), Y.view(), dX.view(), FusedActivation::gelu, bad.view()), ShapeError);
  CHECK_THROWS_AS(layer.forward(X.view(), Y.view(), FusedActivation::gelu), ArgumentError);
}
