#include "sprig/nn/sparse_linear.hpp"

#include <bit>
#include <cmath>
#include <cstdint>
#include <tuple>
#include <vector>

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
      SparseLinear<float, Index> layer(37, 23, {.density = density, .seed = 11, .layer_key = 2});
      for (float& b : layer.bias.value) b = 0.25f;
      layer.bias.value[3] = -1.5f;
      const auto X = random_matrix<float>(37, B, 5, -1, 1, B + 3);  // strided input
      Matrix<float> Y(23, B, B + 1, std::nanf(""));                 // overwrite must not read Y
      layer.forward(X.view(), Y.view());
      const Matrix<float> W = layer.weight.matrix.to_dense();
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
      SparseLinear<float, Index> layer(37, 23, {.density = density, .seed = 11, .layer_key = 2});
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
  SparseLinear<double, std::int32_t> layer(in, out, {.density = density, .seed = 3, .layer_key = 1});
  layer.weight.matrix.check_invariants();
  CHECK(layer.weight.matrix.nnz() == std::llround(density * in * out));
  const double bound = std::sqrt(6.0 / (in * density));
  double sum2 = 0.0, maxabs = 0.0;
  layer.weight.matrix.for_each_live([&](std::int64_t, std::int64_t, double v, std::int64_t) {
    sum2 += v * v;
    maxabs = std::max(maxabs, std::abs(v));
  });
  const double n = static_cast<double>(layer.weight.matrix.nnz());
  CHECK(maxabs <= bound);
  CHECK(maxabs > 0.95 * bound);
  // U(-b, b) has variance b^2/3 = 2/fan_in; with n = 12000 samples the sample variance is
  // within 3% of it with overwhelming probability (its relative sd is sqrt(0.8/n) = 0.8%).
  CHECK(sum2 / n == Approx(bound * bound / 3).epsilon(0.03));
  for (double b : layer.bias.value) CHECK(b == 0.0);
  CHECK_FALSE(layer.bias.decay);
  CHECK(layer.weight.grad.size() == static_cast<std::size_t>(layer.weight.matrix.storage_size()));

  // Same (seed, key) -> same layer; another key -> another topology.
  SparseLinear<double, std::int32_t> same(in, out, {.density = density, .seed = 3, .layer_key = 1});
  SparseLinear<double, std::int32_t> other(in, out, {.density = density, .seed = 3, .layer_key = 2});
  CHECK(same.weight.matrix.to_csr().col_indices == layer.weight.matrix.to_csr().col_indices);
  CHECK(other.weight.matrix.to_csr().col_indices != layer.weight.matrix.to_csr().col_indices);
}

TEST_CASE("SparseLinear validates its arguments", "[nn][sparse_linear]") {
  CHECK_THROWS_AS((SparseLinear<float, std::int32_t>(10, 10, {.density = 0.0, .seed = 1})), ArgumentError);
  CHECK_THROWS_AS((SparseLinear<float, std::int32_t>(10, 10, {.density = 1.5, .seed = 1})), ArgumentError);
  CHECK_THROWS_AS((SparseLinear<float, std::int32_t>(10, 10, {.density = std::nan(""), .seed = 1})), ArgumentError);
  CHECK_THROWS_AS((SparseLinear<float, std::int32_t>(0, 10, {.density = 0.5, .seed = 1})), ShapeError);
  // the density has no default: an options struct that leaves it out is rejected
  CHECK_THROWS_WITH((SparseLinear<float, std::int32_t>(10, 10, {.seed = 1})),
                    Catch::Contains("SparseLinear: density 0 outside (0, 1]"));
  CHECK_THROWS_WITH((SparseLinear<float, std::int32_t>(10, 10, {.density = 0.5, .padding_ratio = -0.1})),
                    Catch::Contains("SparseLinear: padding_ratio -0.1"));
  CHECK_THROWS_WITH((SparseLinear<float, std::int32_t>(10, 10, {.density = 0.5, .growth_reserve = 65.0})),
                    Catch::Contains("SparseLinear: growth_reserve 65"));
  {
    const SparseLinear<float, std::int32_t> grown(10, 10,
                                                  {.density = 0.5, .padding_ratio = 0.0, .growth_reserve = 0.5});
    CHECK(grown.weight.matrix.padding_ratio() == 0.0);
    CHECK(grown.weight.grad.capacity() >= grown.weight.grad.size() * 3 / 2);
  }
  // more columns than int16 holds
  CHECK_THROWS_AS((SparseLinear<float, std::int16_t>(40000, 10, {.density = 0.5, .seed = 1})), ArgumentError);
  SparseLinear<float, std::int32_t> layer(8, 4, {.density = 0.5, .seed = 1});
  Matrix<float> X(8, 3), Y(4, 3), bad(5, 3), dX(8, 3);
  CHECK_THROWS_AS(layer.forward(bad.view(), Y.view()), ShapeError);
  CHECK_THROWS_AS(layer.forward(X.view(), bad.view()), ShapeError);
  CHECK_THROWS_AS(layer.backward(X.view(), bad.view(), dX.view()), ShapeError);
  CHECK_THROWS_AS(layer.backward(X.view(), Y.view(), bad.view()), ShapeError);
  // gelu: a backward-only activation, whose derivative must have X's shape
  CHECK_THROWS_AS(layer.forward(X.view(), Y.view(), FusedActivation::gelu), ArgumentError);
  CHECK_THROWS_AS(layer.backward(X.view(), Y.view(), dX.view(), FusedActivation::gelu, bad.view()), ShapeError);
  // A structural change without SparseParameter::apply leaves grad misaligned: caught.
  for (std::int64_t i = 0; i < 4; ++i) layer.weight.matrix.reserve_row(i, 8);
  REQUIRE(std::ssize(layer.weight.grad) != layer.weight.matrix.storage_size());
  CHECK_THROWS_AS(layer.backward(X.view(), Y.view(), dX.view()), ShapeError);
}

TEMPLATE_LIST_TEST_CASE("SparseLinear backward matches central differences (double)", "[nn][sparse_linear][gradcheck]",
                        Indices) {
  using Index = TestType;
  const std::int64_t in = 19, out = 13, B = 6;
  SparseLinear<double, Index> layer(in, out, {.density = 0.35, .seed = 21, .layer_key = 4});
  for (std::size_t i = 0; i < layer.bias.value.size(); ++i) layer.bias.value[i] = 0.1 * double(i % 5) - 0.2;
  // Make the layout irregular: relocate a row and delete an entry, replaying the log.
  SlotLog log;
  layer.weight.matrix.reserve_row(2, 15, &log);
  const auto r5 = layer.weight.matrix.row(5);
  if (!r5.cols.empty()) layer.weight.matrix.erase_slot(5, r5.start, &log);
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
  const auto vals = layer.weight.matrix.values();
  const std::vector<double> gw(layer.weight.grad.begin(), layer.weight.grad.end());
  std::vector<std::size_t> live;
  layer.weight.matrix.for_each_live([&](std::int64_t, std::int64_t, double, std::int64_t s) { live.push_back(s); });
  sprig_test::check_gradient(loss, vals, gw, live);
  // Padding and dead slots carry a zero gradient.
  for (std::int64_t s = 0; s < layer.weight.matrix.storage_size(); ++s)
    if (layer.weight.matrix.col_indices()[s] < 0) REQUIRE(layer.weight.grad[s] == 0.0);

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
  SparseLinear<double, std::int32_t> layer(12, 9, {.density = 0.3, .seed = 5});
  const auto X = random_matrix<double>(12, 4, 3);
  const auto dY = random_matrix<double>(9, 4, 4);
  Matrix<double> dX(12, 4);
  layer.backward(X.view(), dY.view(), dX.view());
  SlotLog log;
  for (std::int64_t c = 0; c < 12; ++c)
    if (layer.weight.matrix.find(0, c) < 0) layer.weight.matrix.insert_new(0, c, 0.5, &log);
  layer.weight.apply(log);
  layer.weight.matrix.values()[static_cast<std::size_t>(layer.weight.matrix.row_start(1))] += 1.0;  // value-only
  layer.backward(X.view(), dY.view(), dX.view());
  const Matrix<double> W = layer.weight.matrix.to_dense();
  for (std::int64_t c = 0; c < 12; ++c)
    for (std::int64_t b = 0; b < 4; ++b) {
      double ref = 0.0;
      for (std::int64_t i = 0; i < 9; ++i) ref += W(i, c) * dY(i, b);
      REQUIRE(dX(c, b) == Approx(ref).margin(1e-12));
    }
}

TEMPLATE_LIST_TEST_CASE("SparseLinear keeps a wide layer's rows grouped by column block; state moves with its weights",
                        "[nn][sparse_linear][blocks]", Indices) {
  using Index = TestType;
  const std::int64_t in = 4096, out = 24, B = 128;
  const auto blocks = detail::spmm_column_blocks<float>(in, B);
  SparseLinear<float, Index> layer(in, out, {.density = 0.05, .seed = 7});
  // Momentum-like state and a gradient tagged with the weight they belong to.
  auto retag = [&] {
    auto& w = layer.weight;
    w.state.assign(1, AlignedVector<float>(w.grad.size(), 0.0f));
    for (std::size_t s = 0; s < w.grad.size(); ++s) {
      w.state[0][s] = 2.0f * w.matrix.values()[s];
      w.grad[s] = -3.0f * w.matrix.values()[s];
    }
  };
  // A topology change that leaves rows out of block order: erase the first live entry of
  // each row (the last one moves into its place) and insert one in the first block.
  SlotLog log;
  CounterRng rng(7, 1);
  for (std::int64_t i = 0; i < out; ++i) {
    auto& W = layer.weight.matrix;
    W.erase_slot(i, W.row_start(i), &log);
    std::int64_t c = static_cast<std::int64_t>(rng.uniform_below(blocks.width));
    while (W.find(i, c) >= 0) c = (c + 1) % blocks.width;
    W.insert_new(i, c, 0.25f + static_cast<float>(i), &log);
  }
  layer.weight.apply(log);
  retag();
  const PaddedCSR<float, Index> before = layer.weight.matrix;
  auto grouped_rows = [&] {
    const auto& W = layer.weight.matrix;
    std::vector<std::int64_t> bounds(static_cast<std::size_t>(out * (blocks.count + 1)));
    blocks.bounds(W.col_indices().data(), W.row_starts(), W.row_nnzs(), 0, out, bounds.data());
    std::int64_t n = 0;
    for (std::int64_t i = 0; i < out; ++i) n += bounds[static_cast<std::size_t>(i * (blocks.count + 1))] >= 0;
    return n;
  };
  const bool blocked = blocks.count > 1;  // not with the scalar kernels
  if (blocked) REQUIRE(grouped_rows() == 0);

  const auto X = random_matrix<float>(in, B, 9);
  Matrix<float> Y(out, B);
  layer.forward(X.view(), Y.view());
  if (blocked) CHECK(grouped_rows() == out);
  CHECK(layer.weight.matrix.nnz() == before.nnz());
  // the same entries, and the state and gradient still beside their weights
  std::int64_t same = 0, live = 0;
  layer.weight.matrix.for_each_live([&](std::int64_t i, std::int64_t c, float v, std::int64_t s) {
    ++live;
    same += before.values()[static_cast<std::size_t>(before.find(i, c))] == v &&
            layer.weight.state[0][static_cast<std::size_t>(s)] == 2.0f * v &&
            layer.weight.grad[static_cast<std::size_t>(s)] == -3.0f * v;
  });
  CHECK(same == live);
  REQUIRE_NOTHROW(layer.weight.matrix.check_invariants());
  // forward computed W X + b with the grouped layout (checked densely in double)
  const Matrix<float> D = before.to_dense();
  std::int64_t off = 0;
  for (std::int64_t i = 0; i < out; ++i)
    for (std::int64_t b = 0; b < B; b += 7) {
      double want = 0.0, mag = 0.0;
      for (std::int64_t c = 0; c < in; ++c) {
        want += double(D(i, c)) * X(c, b);
        mag += std::abs(double(D(i, c)) * X(c, b));
      }
      off += std::abs(Y(i, b) - want) > 1e-6 * (1.0 + mag);
    }
  CHECK(off == 0);
  // a second forward with no topology change regroups nothing
  const auto key = layer.weight.matrix.topology_key();
  layer.forward(X.view(), Y.view());
  CHECK(layer.weight.matrix.topology_key() == key);
}

namespace {
// Leaves every row of a wide layer out of column-block order: erases its first live entry (the
// last one moves into its place) and inserts one in the first block. Logged in `log`.
template <class Layer>
void scramble_rows(Layer& layer, std::int64_t block_width, std::uint64_t seed, SlotLog& log) {
  auto& W = layer.weight.matrix;
  CounterRng rng(seed, 1);
  for (std::int64_t i = 0; i < W.rows(); ++i) {
    W.erase_slot(i, W.row_start(i), &log);
    std::int64_t c = static_cast<std::int64_t>(rng.uniform_below(static_cast<std::uint64_t>(block_width)));
    while (W.find(i, c) >= 0) c = (c + 1) % block_width;
    W.insert_new(i, c, 0.25f + static_cast<float>(i), &log);
  }
}
}  // namespace

TEMPLATE_LIST_TEST_CASE("SparseLinear: a per-slot array kept by the caller follows the regrouping through a SlotLog",
                        "[nn][sparse_linear][blocks]", Indices) {
  using Index = TestType;
  const std::int64_t in = 4096, out = 24, B = 128;
  const auto blocks = detail::spmm_column_blocks<float>(in, B);
  const bool blocked = blocks.count > 1;  // not with the scalar kernels
  SparseLinear<float, Index> layer(in, out, {.density = 0.05, .seed = 7});
  // the caller's own per-slot array, tagged with the weight it belongs to
  std::vector<float> mine;
  auto tagged = [&] {
    std::int64_t ok = 0;
    layer.weight.matrix.for_each_live([&](std::int64_t, std::int64_t, float v, std::int64_t s) {
      ok += mine[static_cast<std::size_t>(s)] == 4.0f * v;
    });
    return ok;
  };
  SlotLog log;
  scramble_rows(layer, blocks.width, 7, log);
  layer.weight.apply(log);
  log.reset();
  mine.resize(layer.weight.grad.size());
  for (std::size_t s = 0; s < mine.size(); ++s) mine[s] = 4.0f * layer.weight.matrix.values()[s];
  const std::int64_t live = layer.weight.matrix.nnz();
  REQUIRE(tagged() == live);

  // forward regroups the rows and records it in the log the caller attached
  layer.set_slot_log(&log);
  CHECK(layer.slot_log() == &log);
  const auto X = random_matrix<float>(in, B, 9);
  Matrix<float> Y(out, B);
  const auto key = layer.weight.matrix.topology_key();
  layer.forward(X.view(), Y.view());
  CHECK(blocked == (layer.weight.matrix.topology_key() != key));  // the slots moved
  CHECK(blocked == !log.empty());
  log.apply(mine);
  log.reset();
  CHECK(tagged() == live);
  layer.forward(X.view(), Y.view());  // grouped already: nothing moves, nothing logged
  CHECK(log.empty());

  // the explicit call, after a topology change: one log for both, then forward has nothing to do
  layer.set_slot_log(nullptr);
  scramble_rows(layer, blocks.width, 8, log);
  layer.weight.apply(log);  // grad and state: the topology change (group_columns moves them itself)
  CHECK(layer.group_columns(B, &log) == blocked);
  CHECK_FALSE(layer.group_columns(B, &log));  // already grouped
  log.apply(mine);
  for (std::size_t s = 0; s < mine.size(); ++s)  // the newborn weights' entries read 0: tag them
    if (mine[s] == 0.0f) mine[s] = 4.0f * layer.weight.matrix.values()[s];
  log.reset();
  CHECK(tagged() == live);
  const auto grouped = layer.weight.matrix.topology_key();
  layer.forward(X.view(), Y.view());
  CHECK(layer.weight.matrix.topology_key() == grouped);
  CHECK_THROWS_AS(layer.group_columns(0), ShapeError);
}

// The deprecated positional constructor (kept one minor version) builds the options form's layer.
#if defined(__GNUC__)
#  pragma GCC diagnostic push
#  pragma GCC diagnostic ignored "-Wdeprecated-declarations"
#endif
TEST_CASE("SparseLinear's deprecated positional constructor equals the options form", "[nn][sparse_linear]") {
  const SparseLinear<float, std::int32_t> old_form(37, 23, 0.3, 7, 2, 0.5, 0.125);
  const SparseLinear<float, std::int32_t> options_form(
      37, 23, {.density = 0.3, .seed = 7, .layer_key = 2, .padding_ratio = 0.5, .growth_reserve = 0.125});
  const auto& a = old_form.weight.matrix;
  const auto& b = options_form.weight.matrix;
  REQUIRE(a.nnz() == b.nnz());
  REQUIRE(a.storage_size() == b.storage_size());
  for (std::int64_t r = 0; r < a.rows(); ++r) {
    REQUIRE(a.row_start(r) == b.row_start(r));
    REQUIRE(a.row_nnz(r) == b.row_nnz(r));
  }
  CHECK(std::vector<std::int32_t>(a.col_indices().begin(), a.col_indices().end()) ==
        std::vector<std::int32_t>(b.col_indices().begin(), b.col_indices().end()));
  CHECK(std::vector<float>(a.values().begin(), a.values().end()) ==
        std::vector<float>(b.values().begin(), b.values().end()));
  CHECK(old_form.weight.grad.size() == options_form.weight.grad.size());
  CHECK_THROWS_AS((SparseLinear<float, std::int32_t>(10, 10, 0.0, 1)), ArgumentError);
}
#if defined(__GNUC__)
#  pragma GCC diagnostic pop
#endif
