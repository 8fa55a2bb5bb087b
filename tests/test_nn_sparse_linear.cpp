#include "sprig/nn/sparse_linear.hpp"

#include <bit>
#include <cmath>
#include <cstdint>
#include <tuple>

#include <catch2/catch.hpp>

#include "sprig/kernels/reference.hpp"
#include "sprig/nn/relu.hpp"
#include "test_nn_gradcheck.hpp"

using namespace sprig;
using sprig_test::random_matrix;

using Indices = std::tuple<std::int16_t, std::int32_t, std::int64_t>;

TEMPLATE_LIST_TEST_CASE("SparseLinear forward equals dense W X + b", "[nn][sparse_linear]", Indices) {
  using Index = TestType;
  for (double density : {0.05, 0.3, 1.0}) {
    for (std::int64_t B : {1, 7, 33}) {
      SparseLinear<float, Index> layer(37, 23, density, 11, 2);
      for (float& b : layer.bias.value) b = 0.25f;
      layer.bias.value[3] = -1.5f;
      const auto X = random_matrix<float>(37, B, 5, -1, 1, B + 3);  // strided input
      Matrix<float> Y(23, B, B + 1, std::nanf(""));                 // overwrite must not read Y
      layer.forward(X.view(), Y.view());
      const Matrix<float> W = layer.weight.weight.to_dense();
      for (std::int64_t i = 0; i < 23; ++i)
        for (std::int64_t b = 0; b < B; ++b) {
          double ref = layer.bias.value[static_cast<std::size_t>(i)];
          for (std::int64_t c = 0; c < 37; ++c) ref += double(W(i, c)) * X(c, b);
          // float accumulation of at most 37 products of magnitude <= bound: |err| <= 37 eps sum|terms|
          REQUIRE(std::abs(Y(i, b) - ref) <= 37 * 1.2e-7 * (1.0 + 37.0));
        }
    }
  }
}

TEMPLATE_LIST_TEST_CASE("SparseLinear forward with a fused ReLU is bitwise forward, then ReLU", "[nn][sparse_linear]",
                        Indices) {
  using Index = TestType;
  for (double density : {0.05, 0.5, 1.0})
    for (std::int64_t B : {1, 7, 33, 130}) {
      SparseLinear<float, Index> layer(37, 23, density, 11, 2);
      for (std::size_t i = 0; i < layer.bias.value.size(); ++i) layer.bias.value[i] = 0.1f * float(i) - 1.0f;
      const auto X = random_matrix<float>(37, B, 5, -1, 1, B + 3);
      Matrix<float> Z(23, B), want(23, B), got(23, B, B + 1, std::nanf(""));
      layer.forward(X.view(), Z.view());
      ReLU<float>{}.forward(Z.view(), want.view());
      layer.forward(X.view(), got.view(), FusedActivation::relu);
      std::int64_t same = 0, zeros = 0;
      for (std::int64_t i = 0; i < 23; ++i)
        for (std::int64_t b = 0; b < B; ++b) {
          same += std::bit_cast<std::uint32_t>(got(i, b)) == std::bit_cast<std::uint32_t>(want(i, b));
          zeros += want(i, b) == 0.0f;
        }
      CHECK(same == 23 * B);
      CHECK(zeros > 0);
    }
}

TEST_CASE("SparseLinear init: exact live count, Kaiming bound from the effective fan-in, zero bias",
          "[nn][sparse_linear]") {
  const std::int64_t in = 400, out = 300;
  const double density = 0.1;
  SparseLinear<double, std::int32_t> layer(in, out, density, 3, 1);
  layer.weight.weight.check_invariants();
  CHECK(layer.weight.weight.nnz() == std::llround(density * in * out));
  const double bound = std::sqrt(6.0 / (in * density));
  double sum2 = 0.0, maxabs = 0.0;
  layer.weight.weight.for_each_live([&](std::int64_t, std::int64_t, double v, std::int64_t) {
    sum2 += v * v;
    maxabs = std::max(maxabs, std::abs(v));
  });
  const double n = static_cast<double>(layer.weight.weight.nnz());
  CHECK(maxabs <= bound);
  CHECK(maxabs > 0.95 * bound);
  // U(-b, b) has variance b^2/3 = 2/fan_in; with n = 12000 samples the sample variance is
  // within 3% of it with overwhelming probability (its relative sd is sqrt(0.8/n) = 0.8%).
  CHECK(sum2 / n == Approx(bound * bound / 3).epsilon(0.03));
  for (double b : layer.bias.value) CHECK(b == 0.0);
  CHECK_FALSE(layer.bias.decay);
  CHECK(layer.weight.grad.size() == static_cast<std::size_t>(layer.weight.weight.storage_size()));

  // Same (seed, key) -> same layer; another key -> another topology.
  SparseLinear<double, std::int32_t> same(in, out, density, 3, 1), other(in, out, density, 3, 2);
  CHECK(same.weight.weight.to_csr().col_indices == layer.weight.weight.to_csr().col_indices);
  CHECK(other.weight.weight.to_csr().col_indices != layer.weight.weight.to_csr().col_indices);
}

TEST_CASE("SparseLinear validates its arguments", "[nn][sparse_linear]") {
  CHECK_THROWS_AS((SparseLinear<float, std::int32_t>(10, 10, 0.0, 1)), ArgumentError);
  CHECK_THROWS_AS((SparseLinear<float, std::int32_t>(10, 10, 1.5, 1)), ArgumentError);
  CHECK_THROWS_AS((SparseLinear<float, std::int32_t>(10, 10, std::nan(""), 1)), ArgumentError);
  CHECK_THROWS_AS((SparseLinear<float, std::int32_t>(0, 10, 0.5, 1)), ShapeError);
  CHECK_THROWS_AS((SparseLinear<float, std::int16_t>(40000, 10, 0.5, 1)), ArgumentError);  // cols > int16
  SparseLinear<float, std::int32_t> layer(8, 4, 0.5, 1);
  Matrix<float> X(8, 3), Y(4, 3), bad(5, 3), dX(8, 3);
  CHECK_THROWS_AS(layer.forward(bad.view(), Y.view()), ShapeError);
  CHECK_THROWS_AS(layer.forward(X.view(), bad.view()), ShapeError);
  CHECK_THROWS_AS(layer.backward(X.view(), bad.view(), dX.view()), ShapeError);
  CHECK_THROWS_AS(layer.backward(X.view(), Y.view(), bad.view()), ShapeError);
  // A structural change without SparseParameter::apply leaves grad misaligned: caught.
  for (std::int64_t i = 0; i < 4; ++i) layer.weight.weight.reserve_row(i, 8);
  REQUIRE(std::ssize(layer.weight.grad) != layer.weight.weight.storage_size());
  CHECK_THROWS_AS(layer.backward(X.view(), Y.view(), dX.view()), ShapeError);
}

TEMPLATE_LIST_TEST_CASE("SparseLinear backward matches central differences (double)", "[nn][sparse_linear][gradcheck]",
                        Indices) {
  using Index = TestType;
  const std::int64_t in = 19, out = 13, B = 6;
  SparseLinear<double, Index> layer(in, out, 0.35, 21, 4);
  for (std::size_t i = 0; i < layer.bias.value.size(); ++i) layer.bias.value[i] = 0.1 * double(i % 5) - 0.2;
  // Make the layout irregular: relocate a row and delete an entry, replaying the log.
  SlotLog log;
  layer.weight.weight.reserve_row(2, 15, &log);
  const auto r5 = layer.weight.weight.row(5);
  if (!r5.cols.empty()) layer.weight.weight.erase_slot(5, r5.start, &log);
  layer.weight.apply(log);

  auto X = random_matrix<double>(in, B, 1);
  const auto R = random_matrix<double>(out, B, 2);  // L = <Y, R>, dL/dY = R
  Matrix<double> Y(out, B), dX(in, B, std::nan(""));
  layer.forward(X.view(), Y.view());
  layer.backward(X.view(), R.view(), dX.view());

  auto loss = [&] {
    layer.forward(X.view(), Y.view());
    return sprig_test::dot<double>(Y.view(), R.view());
  };
  const auto vals = layer.weight.weight.values();
  const std::vector<double> gw(layer.weight.grad.begin(), layer.weight.grad.end());
  std::vector<std::size_t> live;
  layer.weight.weight.for_each_live([&](std::int64_t, std::int64_t, double, std::int64_t s) { live.push_back(s); });
  sprig_test::check_gradient(loss, vals, gw, live);
  // Padding and dead slots carry a zero gradient.
  for (std::int64_t s = 0; s < layer.weight.weight.storage_size(); ++s)
    if (layer.weight.weight.col_indices()[s] < 0) REQUIRE(layer.weight.grad[s] == 0.0);

  const std::vector<double> gb(layer.bias.grad.begin(), layer.bias.grad.end());
  sprig_test::check_gradient(loss, layer.bias.value, gb, sprig_test::some_indices(out));

  std::vector<double> gx(in * B);
  for (std::int64_t c = 0; c < in; ++c)
    for (std::int64_t b = 0; b < B; ++b) gx[c * B + b] = dX(c, b);
  sprig_test::check_gradient(loss, std::span<double>(X.data(), in * B), gx, sprig_test::some_indices(in * B, 60));

  // The two-argument backward gives the same parameter gradients.
  const std::vector<double> gw_before(layer.weight.grad.begin(), layer.weight.grad.end());
  layer.weight.zero_grad();
  layer.backward(X.view(), R.view());
  CHECK(std::vector<double>(layer.weight.grad.begin(), layer.weight.grad.end()) == gw_before);
}

TEST_CASE("SparseLinear dX follows a topology change (transpose cache rebuilt)", "[nn][sparse_linear]") {
  SparseLinear<double, std::int32_t> layer(12, 9, 0.3, 5);
  const auto X = random_matrix<double>(12, 4, 3);
  const auto dY = random_matrix<double>(9, 4, 4);
  Matrix<double> dX(12, 4);
  layer.backward(X.view(), dY.view(), dX.view());
  SlotLog log;
  for (std::int64_t c = 0; c < 12; ++c)
    if (layer.weight.weight.find(0, c) < 0) layer.weight.weight.insert_new(0, c, 0.5, &log);
  layer.weight.apply(log);
  layer.weight.weight.values()[static_cast<std::size_t>(layer.weight.weight.row_start(1))] += 1.0;  // value-only
  layer.backward(X.view(), dY.view(), dX.view());
  const Matrix<double> W = layer.weight.weight.to_dense();
  for (std::int64_t c = 0; c < 12; ++c)
    for (std::int64_t b = 0; b < 4; ++b) {
      double ref = 0.0;
      for (std::int64_t i = 0; i < 9; ++i) ref += W(i, c) * dY(i, b);
      REQUIRE(dX(c, b) == Approx(ref).margin(1e-12));
    }
}
