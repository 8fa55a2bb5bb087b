// BlockSparseLinear: forward against dense W X + b, finite-difference gradients (weights at
// every in-matrix entry of live blocks, bias, input, through relu and gelu input
// activations), init, argument checks, a topology change seen by dX, and optimizers that
// update live blocks only and keep out-of-matrix entries zero. Precision::bf16: forward,
// weight gradient and dX against double references of the bf16-rounded W, X and dY (rounded
// here with sprig::bfloat16) within gamma_n * sum |products|, 8x8, 4x4 and 16x1 blocks, an
// empty and a full block row; bitwise identical for 1 and 2 threads; errors.
#include <sprig/nn/block_sparse_linear.hpp>

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <tuple>
#include <vector>

#include <sprig/nn/gelu.hpp>
#include <sprig/nn/relu.hpp>
#include <sprig/nn/sequential.hpp>
#include <sprig/optim/adamw.hpp>
#include <sprig/optim/sgd.hpp>

#include "test_nn_gradcheck.hpp"
#include "with_threads.hpp"

using namespace sprig;
using sprig_test::random_matrix;

namespace {

template <class Index, int R, int C>
struct Shape {
  using Idx = Index;
  static constexpr int kR = R;
  static constexpr int kC = C;
};
// A square, a wide and a tall block, over the three index types (the kernels' own tests cover
// every shape; each shape here is another set of kernel instantiations to compile).
using Shapes = std::tuple<Shape<std::int32_t, 4, 4>, Shape<std::int16_t, 1, 4>, Shape<std::int64_t, 8, 1>>;

}  // namespace

TEMPLATE_LIST_TEST_CASE("BlockSparseLinear forward equals dense act(W X + b)", "[nn][block_sparse_linear]", Shapes) {
  using Index = typename TestType::Idx;
  constexpr int R = TestType::kR, C = TestType::kC;
  for (std::int64_t in : {std::int64_t{7}, std::int64_t{C * 5}, std::int64_t{C * 3 + 1}})
    for (std::int64_t out : {std::int64_t{R * 2}, std::int64_t{R * 3 + 1}}) {
      BlockSparseLinear<double, Index, R, C> layer(in, out, {.density = 0.4, .seed = 3, .layer_key = 1});
      for (std::size_t i = 0; i < layer.bias.value.size(); ++i) layer.bias.value[i] = 0.05 * double(i % 7) - 0.1;
      layer.weight.matrix.check_invariants();
      const std::int64_t B = 9;
      const auto X = random_matrix<double>(in, B, 11);
      Matrix<double> Y(out, B), Yr(out, B);
      const Matrix<double> W = layer.weight.matrix.to_dense();
      for (FusedActivation act : {FusedActivation::none, FusedActivation::relu}) {
        layer.forward(X.view(), Y.view(), act);
        for (std::int64_t i = 0; i < out; ++i)
          for (std::int64_t b = 0; b < B; ++b) {
            double ref = layer.bias.value[i];
            for (std::int64_t c = 0; c < in; ++c) ref += W(i, c) * X(c, b);
            if (act == FusedActivation::relu) ref = ref > 0 ? ref : 0;
            REQUIRE(Y(i, b) == Approx(ref).margin(1e-12));
          }
      }
    }
}

TEMPLATE_LIST_TEST_CASE("BlockSparseLinear backward matches central differences (double)",
                        "[nn][block_sparse_linear][gradcheck]", Shapes) {
  using Index = typename TestType::Idx;
  constexpr int R = TestType::kR, C = TestType::kC;
  const std::int64_t in = 3 * C + 2 + (C == 1 ? 4 : 0), out = 2 * R + 1 + (R == 1 ? 4 : 0), B = 5;
  BlockSparseLinear<double, Index, R, C> layer(in, out, {.density = 0.5, .seed = 21, .layer_key = 4});
  for (std::size_t i = 0; i < layer.bias.value.size(); ++i) layer.bias.value[i] = 0.1 * double(i % 5) - 0.2;
  // An irregular layout: relocate a block row and delete a block, replaying the log.
  SlotLog log;
  layer.weight.matrix.reserve_row(0, 6, &log);
  const auto& P = layer.weight.matrix.pattern();
  if (P.row_nnz(1) > 0) layer.weight.matrix.erase_block(1, P.col_indices()[P.row_start(1)], &log);
  layer.weight.apply(log);
  layer.weight.matrix.check_invariants();

  auto X = random_matrix<double>(in, B, 1);
  const auto dgelu = random_matrix<double>(in, B, 5, 0.1, 1.0);  // a GELU derivative stand-in
  const auto Rm = random_matrix<double>(out, B, 2);              // L = <Y, R>, dL/dY = R
  Matrix<double> Y(out, B), dX(in, B, std::nan(""));
  layer.forward(X.view(), Y.view());
  layer.backward(X.view(), Rm.view(), dX.view());

  auto loss = [&] {
    layer.forward(X.view(), Y.view());
    return sprig_test::dot<double>(Y.view(), Rm.view());
  };
  constexpr std::int64_t S = std::int64_t{R} * C;
  const auto vals = layer.weight.matrix.values();
  const std::vector<double> gw(layer.weight.grad.begin(), layer.weight.grad.end());
  std::vector<std::size_t> inside;
  layer.weight.matrix.for_each_block([&](std::int64_t i, std::int64_t j, std::int64_t s, const double*) {
    for (std::int64_t r = 0; r < R; ++r)
      for (std::int64_t c = 0; c < C; ++c) {
        const auto e = static_cast<std::size_t>(s * S + r * C + c);
        if (i * R + r < out && j * C + c < in)
          inside.push_back(e);
        else
          REQUIRE(layer.weight.grad[e] == 0.0);  // out-of-matrix entries get no gradient
      }
  });
  REQUIRE(!inside.empty());
  sprig_test::check_gradient(loss, vals, gw, inside);
  const std::vector<double> gb(layer.bias.grad.begin(), layer.bias.grad.end());
  sprig_test::check_gradient(loss, layer.bias.value, gb, sprig_test::some_indices(out));
  std::vector<double> gx(in * B);
  for (std::int64_t c = 0; c < in; ++c)
    for (std::int64_t b = 0; b < B; ++b) gx[c * B + b] = dX(c, b);
  sprig_test::check_gradient(loss, std::span<double>(X.data(), in * B), gx, sprig_test::some_indices(in * B, 60));

  // Input activations: dX gets relu_backward(X, .) and x_derivative * . respectively.
  Matrix<double> dXr(in, B), dXg(in, B);
  layer.backward(X.view(), Rm.view(), dXr.view(), FusedActivation::relu);
  layer.backward(X.view(), Rm.view(), dXg.view(), FusedActivation::gelu, dgelu.view());
  for (std::int64_t c = 0; c < in; ++c)
    for (std::int64_t b = 0; b < B; ++b) {
      REQUIRE(dXr(c, b) == (X(c, b) > 0 ? dX(c, b) : 0.0));
      REQUIRE(dXg(c, b) == dX(c, b) * dgelu(c, b));
    }
  // The two-argument backward gives the same parameter gradients.
  layer.weight.zero_grad();
  layer.backward(X.view(), Rm.view());
  CHECK(std::vector<double>(layer.weight.grad.begin(), layer.weight.grad.end()) == gw);
}

TEST_CASE("BlockSparseLinear init: exact block count, Kaiming bound from the effective fan-in, zero bias",
          "[nn][block_sparse_linear]") {
  BlockSparseLinear<float, std::int32_t, 4, 4> layer(256, 128, {.density = 0.1, .seed = 9});
  const auto& W = layer.weight.matrix;
  REQUIRE(W.nnz_blocks() == 205);  // round(0.1 * 32 * 64)
  const double bound = std::sqrt(6.0 / (205.0 * 16.0 / 128.0));
  double largest = 0;
  for (float v : W.values()) largest = std::max(largest, double(std::abs(v)));
  REQUIRE(largest <= bound);
  REQUIRE(largest > 0.9 * bound);
  for (float b : layer.bias.value) REQUIRE(b == 0.0f);
  REQUIRE_FALSE(layer.bias.decay);
  // the same options give the same layer; another key another one
  BlockSparseLinear<float, std::int32_t, 4, 4> same(256, 128, {.density = 0.1, .seed = 9});
  BlockSparseLinear<float, std::int32_t, 4, 4> other(256, 128, {.density = 0.1, .seed = 9, .layer_key = 1});
  REQUIRE(std::equal(W.values().begin(), W.values().end(), same.weight.matrix.values().begin()));
  REQUIRE_FALSE(std::equal(W.values().begin(), W.values().end(), other.weight.matrix.values().begin()));
  REQUIRE(layer.weight_bytes() < layer.dense_weight_bytes() / 5);  // 10% of the blocks, 20% padding
}

TEST_CASE("BlockSparseLinear validates its arguments", "[nn][block_sparse_linear]") {
  using L = BlockSparseLinear<float, std::int32_t, 4, 4>;
  REQUIRE_THROWS_AS(L(0, 8, {.density = 0.5}), ShapeError);
  REQUIRE_THROWS_AS(L(8, -1, {.density = 0.5}), ShapeError);
  REQUIRE_THROWS_AS(L(8, 8, {}), ArgumentError);  // density required
  REQUIRE_THROWS_AS(L(8, 8, {.density = 1.5}), ArgumentError);
  REQUIRE_THROWS_AS(L(8, 8, {.density = 0.01}), ArgumentError);  // 4 blocks: rounds to none
  REQUIRE_THROWS_AS(L(8, 8, {.density = 0.5, .growth_reserve = -1}), ArgumentError);
  L layer(10, 6, {.density = 0.5, .seed = 1});
  Matrix<float> X(10, 3), Y(6, 3), bad(5, 3), dX(10, 3);
  REQUIRE_THROWS_AS(layer.forward(bad.view(), Y.view()), ShapeError);
  REQUIRE_THROWS_AS(layer.forward(X.view(), bad.view()), ShapeError);
  REQUIRE_THROWS_AS(layer.forward(X.view(), Y.view(), FusedActivation::gelu), ArgumentError);
  REQUIRE_THROWS_AS(layer.backward(X.view(), bad.view(), dX.view()), ShapeError);
  REQUIRE_THROWS_AS(layer.backward(X.view(), Y.view(), bad.view()), ShapeError);
  REQUIRE_THROWS_AS(layer.backward(X.view(), Y.view(), dX.view(), FusedActivation::gelu, bad.view()), ShapeError);
  layer.weight.grad.pop_back();  // misaligned gradient
  REQUIRE_THROWS_AS(layer.backward(X.view(), Y.view()), ShapeError);
}

TEST_CASE("BlockSparseLinear dX follows a topology change (transposed pattern rebuilt)", "[nn][block_sparse_linear]") {
  BlockSparseLinear<double, std::int32_t, 4, 4> layer(13, 9, {.density = 0.3, .seed = 5});
  const auto X = random_matrix<double>(13, 4, 3);
  const auto dY = random_matrix<double>(9, 4, 4);
  Matrix<double> dX(13, 4);
  layer.backward(X.view(), dY.view(), dX.view());
  SlotLog log;
  std::vector<double> block(16, 0.0);
  for (int q = 0; q < 16; ++q) block[q] = 0.25 * (q % 3);
  std::vector<double> edge(16, 0.0);  // block column 3 holds only column 12: entries c = 0 only
  for (int r = 0; r < 4; ++r) edge[r * 4] = 0.5;
  for (std::int64_t j = 0; j < 4; ++j)
    if (layer.weight.matrix.find_block(0, j) < 0) layer.weight.matrix.insert_block(0, j, j == 3 ? edge : block, &log);
  layer.weight.apply(log);
  layer.weight.matrix.values()[0] += 1.0;  // value-only
  layer.backward(X.view(), dY.view(), dX.view());
  const Matrix<double> W = layer.weight.matrix.to_dense();
  for (std::int64_t c = 0; c < 13; ++c)
    for (std::int64_t b = 0; b < 4; ++b) {
      double ref = 0.0;
      for (std::int64_t i = 0; i < 9; ++i) ref += W(i, c) * dY(i, b);
      REQUIRE(dX(c, b) == Approx(ref).margin(1e-12));
    }
}

TEMPLATE_TEST_CASE("BlockSparseLinear: optimizers update live blocks and keep out-of-matrix entries zero",
                   "[nn][block_sparse_linear][optim]", AdamW<double>, SGD<double>) {
  BlockSparseLinear<double, std::int32_t, 4, 4> layer(14, 10, {.density = 0.6, .seed = 2});
  SlotLog log;
  layer.weight.matrix.reserve_row(1, 5, &log);  // leaves dead slots behind
  layer.weight.apply(log);
  auto opt = [] {
    if constexpr (std::is_same_v<TestType, AdamW<double>>)
      return AdamW<double>({.lr = 0.01, .weight_decay = 0.1});
    else
      return SGD<double>({.lr = 0.01, .momentum = 0.9, .weight_decay = 0.1});
  }();
  const auto X = random_matrix<double>(14, 6, 7);
  const auto dY = random_matrix<double>(10, 6, 8);
  Matrix<double> Y(10, 6);
  const auto before = layer.weight.matrix.to_dense();
  for (int step = 0; step < 3; ++step) {
    layer.forward(X.view(), Y.view());
    layer.backward(X.view(), dY.view());
    opt.step(layer);
  }
  layer.weight.matrix.check_invariants();  // padding, dead slots and out-of-matrix entries still 0
  const auto after = layer.weight.matrix.to_dense();
  std::int64_t changed = 0;
  for (std::int64_t i = 0; i < 10; ++i)
    for (std::int64_t c = 0; c < 14; ++c) {
      const bool live = layer.weight.matrix.find_block(i / 4, c / 4) >= 0;
      if (!live) REQUIRE(after(i, c) == 0.0);
      changed += after(i, c) != before(i, c);
    }
  REQUIRE(changed > 0);
  REQUIRE(std::ssize(layer.weight.state[0]) == layer.weight.entry_count());
}

TEST_CASE("Sequential with block-sparse layers: the same bits as the layers chained by hand",
          "[nn][block_sparse_linear][sequential]") {
  using B44 = BlockSparseLinear<double, std::int32_t, 4, 4>;
  using B81 = BlockSparseLinear<double, std::int32_t, 8, 1>;
  Sequential<double, std::int32_t, B44, B81> model;
  model.add(B44(21, 30, {.density = 0.5, .seed = 1, .layer_key = 0}));
  model.add(ReLU<double>{});
  model.add(B81(30, 17, {.density = 0.5, .seed = 1, .layer_key = 1}));
  model.add(GELU<double>{});
  model.add(SparseLinear<double, std::int32_t>(17, 5, {.density = 0.6, .seed = 1, .layer_key = 2}));
  // the same layers, run one by one without fusions
  B44 l0(21, 30, {.density = 0.5, .seed = 1, .layer_key = 0});
  B81 l2(30, 17, {.density = 0.5, .seed = 1, .layer_key = 1});
  SparseLinear<double, std::int32_t> l4(17, 5, {.density = 0.6, .seed = 1, .layer_key = 2});
  ReLU<double> relu;
  GELU<double> gelu;
  const auto X = random_matrix<double>(21, 7, 3);
  const auto R = random_matrix<double>(5, 7, 4);
  const auto Z = model.forward(X.view());
  Matrix<double> a0(30, 7), a1(30, 7), a2(17, 7), a3(17, 7), z(5, 7);
  l0.forward(X.view(), a0.view());
  relu.forward(a0.view(), a1.view());
  l2.forward(a1.view(), a2.view());
  gelu.forward(a2.view(), a3.view());
  l4.forward(a3.view(), z.view());
  for (std::int64_t i = 0; i < 5; ++i)
    for (std::int64_t b = 0; b < 7; ++b) REQUIRE(Z(i, b) == z(i, b));
  const auto dZ = model.output_grad();
  for (std::int64_t i = 0; i < 5; ++i)
    for (std::int64_t b = 0; b < 7; ++b) dZ(i, b) = R(i, b);
  model.backward();
  Matrix<double> d3(17, 7), d2(17, 7), d1(30, 7), d0(30, 7);
  l4.backward(a3.view(), R.view(), d3.view());
  gelu.backward(a2.view(), d3.view(), d2.view());
  l2.backward(a1.view(), d2.view(), d1.view());
  relu.backward(a0.view(), d1.view(), d0.view());
  l0.backward(X.view(), d0.view());
  const auto& m0 = std::get<B44>(model.layer(0));
  const auto& m2 = std::get<B81>(model.layer(2));
  REQUIRE(std::vector<double>(m0.weight.grad.begin(), m0.weight.grad.end()) ==
          std::vector<double>(l0.weight.grad.begin(), l0.weight.grad.end()));
  REQUIRE(std::vector<double>(m2.weight.grad.begin(), m2.weight.grad.end()) ==
          std::vector<double>(l2.weight.grad.begin(), l2.weight.grad.end()));
  const auto refs = model.sparse_layers();  // two block layers (through their stand-ins), one element layer
  REQUIRE(refs.size() == 3);
  CHECK(refs[0].blocks == &m0);
  CHECK(refs[1].blocks == &m2);
  CHECK(refs[2].blocks == nullptr);
  CHECK(refs[2].position == 4);
  REQUIRE(model.weight_bytes() == m0.weight_bytes() + m2.weight_bytes() +
                                      std::get<SparseLinear<double, std::int32_t>>(model.layer(4)).weight_bytes());
  // and an optimizer steps every parameter of the model
  AdamW<double> opt({.lr = 0.01});
  opt.step(model);
  REQUIRE(std::ssize(m0.weight.state[0]) == m0.weight.entry_count());
}

namespace {

double bf16_rounded(float v) { return static_cast<double>(static_cast<float>(sprig::bfloat16(v))); }

// gamma_n = n u / (1 - n u), u = 2^-24: the float summation bound.
double bf16_gamma(std::int64_t n) {
  const double nu = static_cast<double>(n) * std::ldexp(1.0, -24);
  return nu / (1.0 - nu);
}

sprig::Matrix<float> bf16_random(std::int64_t rows, std::int64_t cols, std::uint64_t seed) {
  sprig::Matrix<float> m(rows, cols);
  sprig::CounterRng rng(seed, 7);
  for (std::int64_t i = 0; i < rows; ++i)
    for (std::int64_t j = 0; j < cols; ++j) m(i, j) = static_cast<float>(rng.uniform(-2.0, 2.0));
  return m;
}

// A 37 x 29 (out x in) layer in R x C blocks: block row 0 empty, block row 1 full, the rest
// at about 30% of the blocks, a bias.
template <int R, int C>
sprig::BlockSparseLinear<float, std::int32_t, R, C> bf16_odd_layer() {
  const std::int64_t out = 37, in = 29;
  sprig::Matrix<float> dense(out, in, 0.0f);
  sprig::CounterRng rng(13, 5);
  for (std::int64_t bi = 0; bi * R < out; ++bi)
    for (std::int64_t bj = 0; bj * C < in; ++bj) {
      if (bi == 0 || (bi != 1 && rng.uniform01() >= 0.3)) continue;
      for (std::int64_t r = 0; r < R && bi * R + r < out; ++r)
        for (std::int64_t c = 0; c < C && bj * C + c < in; ++c)
          dense(bi * R + r, bj * C + c) = static_cast<float>(rng.uniform(0.1, 1.0));
    }
  sprig::BlockSparseLinear<float, std::int32_t, R, C> layer(
      sprig::BlockPaddedCSR<float, std::int32_t, R, C>::from_dense(dense.view()));
  for (std::int64_t i = 0; i < out; ++i) layer.bias.value[std::size_t(i)] = 0.1f * float(i % 5) - 0.2f;
  return layer;
}

template <int R, int C>
void check_block_layer_bf16() {
  auto layer = bf16_odd_layer<R, C>();
  layer.set_precision(sprig::Precision::bf16);
  REQUIRE(layer.precision() == sprig::Precision::bf16);
  const std::int64_t out = 37, in = 29;
  const sprig::Matrix<float> Wd = layer.weight.matrix.to_dense();
  for (const std::int64_t B : {1, 13, 40}) {
    CAPTURE(R, C, B);
    const auto X = bf16_random(in, B, 20 + B), dY = bf16_random(out, B, 60 + B);
    const std::vector<float> masters(layer.weight.matrix.values().begin(), layer.weight.matrix.values().end());
    sprig::Matrix<float> Y(out, B), dX(in, B);
    layer.forward(X.view(), Y.view(), sprig::FusedActivation::relu);
    CHECK(std::vector<float>(layer.weight.matrix.values().begin(), layer.weight.matrix.values().end()) == masters);
    layer.backward(X.view(), dY.view(), dX.view());
    for (std::int64_t i = 0; i < out; ++i)
      for (std::int64_t b = 0; b < B; ++b) {
        double want = layer.bias.value[std::size_t(i)], S = std::abs(want);
        std::int64_t n = 1;
        for (std::int64_t k = 0; k < in; ++k)
          if (Wd(i, k) != 0.0f) {
            want += bf16_rounded(Wd(i, k)) * bf16_rounded(X(k, b));
            S += std::abs(bf16_rounded(Wd(i, k)) * bf16_rounded(X(k, b)));
            ++n;
          }
        want = std::max(want, 0.0);
        if (!(std::abs(double(Y(i, b)) - want) <= bf16_gamma(n + 2) * S))
          FAIL_CHECK("Y(" << i << "," << b << ") " << Y(i, b) << " vs " << want);
      }
    for (std::int64_t k = 0; k < in; ++k)
      for (std::int64_t b = 0; b < B; ++b) {
        double want = 0, S = 0;
        std::int64_t n = 0;
        for (std::int64_t i = 0; i < out; ++i)
          if (Wd(i, k) != 0.0f) {
            want += bf16_rounded(Wd(i, k)) * bf16_rounded(dY(i, b));
            S += std::abs(bf16_rounded(Wd(i, k)) * bf16_rounded(dY(i, b)));
            ++n;
          }
        if (!(std::abs(double(dX(k, b)) - want) <= bf16_gamma(n + 2) * S))
          FAIL_CHECK("dX(" << k << "," << b << ") " << dX(k, b) << " vs " << want);
      }
    layer.weight.matrix.for_each_block([&](std::int64_t bi, std::int64_t bj, std::int64_t s, const float*) {
      for (std::int64_t r = 0; r < R && bi * R + r < out; ++r)
        for (std::int64_t c = 0; c < C && bj * C + c < in; ++c) {
          double want = 0, S = 0;
          for (std::int64_t b = 0; b < B; ++b) {
            want += bf16_rounded(dY(bi * R + r, b)) * bf16_rounded(X(bj * C + c, b));
            S += std::abs(bf16_rounded(dY(bi * R + r, b)) * bf16_rounded(X(bj * C + c, b)));
          }
          const float got = layer.weight.grad[std::size_t(s * R * C + r * C + c)];
          if (!(std::abs(double(got) - want) <= bf16_gamma(B + 2) * S))
            FAIL_CHECK("grad at (" << bi * R + r << "," << bj * C + c << ") " << got << " vs " << want);
        }
    });
    for (std::int64_t i = 0; i < out; ++i) {
      double want = 0;
      for (std::int64_t b = 0; b < B; ++b) want += dY(i, b);
      CHECK(std::abs(double(layer.bias.grad[std::size_t(i)]) - want) <= 1e-4 * (1 + std::abs(want)));
    }
  }
}

}  // namespace

TEST_CASE("BlockSparseLinear bf16: forward, weight gradient and dX match the double reference of the rounded operands",
          "[nn][block_sparse_linear][bf16]") {
  check_block_layer_bf16<8, 8>();
  check_block_layer_bf16<4, 4>();
  check_block_layer_bf16<16, 1>();
}

TEST_CASE("BlockSparseLinear bf16: bitwise the same for 1 and 2 threads; errors", "[nn][block_sparse_linear][bf16]") {
  const std::int64_t in = 300, out = 200, B = 64;
  const auto X = bf16_random(in, B, 8), dY = bf16_random(out, B, 9);
  std::vector<float> y[2], dx[2], g[2];
  for (int t = 0; t < 2; ++t)
    sprig_test::with_threads(t + 1, [&] {
      sprig::BlockSparseLinear<float, std::int32_t, 8, 8> layer(in, out, {.density = 0.2, .seed = 3});
      layer.set_precision(sprig::Precision::bf16);
      sprig::Matrix<float> Y(out, B), dX(in, B);
      layer.forward(X.view(), Y.view());
      layer.backward(X.view(), dY.view(), dX.view());
      y[t].assign(Y.data(), Y.data() + out * B);
      dx[t].assign(dX.data(), dX.data() + in * B);
      g[t] = std::vector<float>(layer.weight.grad.begin(), layer.weight.grad.end());
    });
  CHECK(y[0] == y[1]);
  CHECK(dx[0] == dx[1]);
  CHECK(g[0] == g[1]);

  sprig::BlockSparseLinear<double, std::int32_t, 4, 4> d(8, 8, {.density = 0.5, .seed = 1});
  CHECK_THROWS_AS(d.set_precision(sprig::Precision::bf16), sprig::ArgumentError);
  CHECK_NOTHROW(d.set_precision(sprig::Precision::fp32));
  auto layer = bf16_odd_layer<8, 8>();
  layer.set_precision(sprig::Precision::bf16);
  const auto X4 = bf16_random(29, 4, 1), dY4 = bf16_random(37, 4, 2);
  sprig::Matrix<float> dX4(29, 4), Y4(37, 4), Y5(36, 4);
  CHECK_THROWS_AS(layer.backward(X4.view(), dY4.view(), dX4.view()), sprig::ArgumentError);  // no forward yet
  CHECK_THROWS_AS(layer.forward(X4.view(), Y5.view()), sprig::ShapeError);
  CHECK_THROWS_AS(layer.forward(X4.view(), Y4.view(), sprig::FusedActivation::gelu), sprig::ArgumentError);
  layer.forward(X4.view(), Y4.view());
  CHECK_NOTHROW(layer.backward(X4.view(), dY4.view(), dX4.view()));
  layer.set_precision(sprig::Precision::fp32);  // back to the float kernels, the shadow freed
  CHECK_NOTHROW(layer.forward(X4.view(), Y4.view()));
}
