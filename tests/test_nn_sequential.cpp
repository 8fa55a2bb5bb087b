#include "sprig/nn/sequential.hpp"

#include <atomic>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <span>
#include <stdexcept>
#include <tuple>
#include <variant>
#include <vector>

#include <catch2/catch.hpp>

#include "sprig/core/config.hpp"
#if SPRIG_HAS_OPENMP
#  include <omp.h>
#endif

#include "sprig/kernels/reference.hpp"
#include "sprig/nn/softmax_cross_entropy.hpp"
#include "sprig/optim/adamw.hpp"
#include "sprig/optim/sgd.hpp"
#include "observed_new.hpp"
#include "test_nn_gradcheck.hpp"

// Counts heap allocations (every form of operator new), to check that a steady-state
// training step makes none.
static std::atomic<long> g_allocations{0};
void sprig_test_observe_new(std::size_t) noexcept { g_allocations.fetch_add(1, std::memory_order_relaxed); }

using namespace sprig;
using sprig_test::random_matrix;

using Indices = std::tuple<std::int16_t, std::int32_t, std::int64_t>;

namespace {

// Central-difference check of every parameter gradient of a model against backward(), for
// the loss mean softmax-cross-entropy(model(X), y).
template <class Model>
void gradcheck_model(Model& model, Matrix<double>& X, const std::vector<int>& y) {
  SoftmaxCrossEntropy<double> ce;
  const auto Z = model.forward(X.view());  // forward before output_grad(): not in one expression
  ce.forward_backward(Z, y, model.output_grad());
  model.backward();
  auto loss = [&] { return double(ce.forward(model.forward(X.view()), y)); };
  std::size_t checked = 0;
  model.for_each_parameter([&](auto& p) {
    const std::vector<double> g(p.grad.begin(), p.grad.end());
    std::span<double> values;
    std::vector<std::size_t> which;
    if constexpr (requires { p.matrix.values(); }) {
      values = p.matrix.values();
      p.matrix.for_each_live(
          [&](std::int64_t, std::int64_t, double, std::int64_t s) { which.push_back(std::size_t(s)); });
    } else {
      values = p.value;
      which = sprig_test::some_indices(p.value.size(), 40);
    }
    sprig_test::check_gradient(loss, values, g, which);
    checked += which.size();
  });
  CHECK(checked > 100);
}

}  // namespace

TEMPLATE_LIST_TEST_CASE("3-layer sparse MLP: backward matches central differences", "[nn][sequential][gradcheck]",
                        Indices) {
  using Index = TestType;
  Sequential<double, Index> model;
  model.add(SparseLinear<double, Index>(10, 14, {.density = 0.4, .seed = 1, .layer_key = 0}));
  model.add(ReLU<double>{});
  model.add(SparseLinear<double, Index>(14, 12, {.density = 0.5, .seed = 1, .layer_key = 1}));
  model.add(GELU<double>{});
  model.add(SparseLinear<double, Index>(12, 5, {.density = 0.6, .seed = 1, .layer_key = 2}));
  model.for_each_parameter([](auto& p) {  // non-zero biases so their gradients matter
    if constexpr (requires { p.rows; })
      for (std::size_t k = 0; k < p.value.size(); ++k) p.value[k] = 0.05 * double(k % 7) - 0.1;
  });
  auto X = random_matrix<double>(10, 9, 3);
  std::vector<int> y = {0, 1, 2, 3, 4, 0, 1, 2, 3};
  gradcheck_model(model, X, y);
  REQUIRE(model.sparse_layers().size() == 3);
}

TEST_CASE("3-layer dense MLP: backward matches central differences", "[nn][sequential][gradcheck]") {
  Sequential<double> model;
  model.add(Linear<double>(8, 11, 2, 0));
  model.add(ReLU<double>{});
  model.add(Linear<double>(11, 9, 2, 1));
  model.add(ReLU<double>{});
  model.add(Linear<double>(9, 4, 2, 2));
  auto X = random_matrix<double>(8, 7, 5);
  std::vector<int> y = {3, 2, 1, 0, 1, 2, 3};
  gradcheck_model(model, X, y);
  CHECK(model.sparse_layers().empty());
}

TEST_CASE("Sequential validates layer widths and call order", "[nn][sequential]") {
  Sequential<float> model;
  Matrix<float> X(6, 4);
  CHECK_THROWS_AS(model.forward(X.view()), ArgumentError);
  model.add(Linear<float>(6, 5, 1));
  CHECK_THROWS_AS(model.backward(), ArgumentError);
  model.add(SparseLinear<float, std::int32_t>(4, 3, {.density = 0.5, .seed = 1}));  // expects 4 inputs, gets 5
  CHECK_THROWS_WITH(model.forward(X.view()), Catch::Contains("Sequential::forward: layer 1 takes 4 inputs but gets 5"));
  CHECK_THROWS_AS(model.layer(2), ArgumentError);
  CHECK_THROWS_AS(model.act(2), ArgumentError);
  CHECK_THROWS_AS(model.grad(2), ArgumentError);
}

TEST_CASE("Sequential: add() after forward() asks for a forward before backward", "[nn][sequential]") {
  Sequential<float> model;
  model.add(Linear<float>(6, 5, 1));
  const auto X = random_matrix<float>(6, 4, 2);
  model.forward(X.view());
  model.add(ReLU<float>{});  // the buffers of the last forward no longer fit the model
  CHECK_THROWS_WITH(model.backward(), Catch::Contains("call forward first"));
  CHECK_THROWS_AS(model.backward(), ArgumentError);
  CHECK_THROWS_WITH(model.output_grad(), Catch::Contains("call forward first"));
  model.forward(X.view());
  CHECK_NOTHROW(model.output_grad());
  CHECK_NOTHROW(model.backward());
  // a forward that fails leaves no forward behind it either
  const auto wrong = random_matrix<float>(7, 4, 3);
  CHECK_THROWS_AS(model.forward(wrong.view()), ShapeError);
  CHECK_THROWS_WITH(model.backward(), Catch::Contains("call forward first"));
}

TEST_CASE("Sequential exposes each sparse layer's input and output gradient", "[nn][sequential]") {
  Sequential<float> model;
  model.add(SparseLinear<float, std::int32_t>(6, 8, {.density = 0.5, .seed = 1, .layer_key = 0}));
  model.add(ReLU<float>{});
  model.add(SparseLinear<float, std::int32_t>(8, 3, {.density = 0.5, .seed = 1, .layer_key = 1}));
  const auto X = random_matrix<float>(6, 5, 1);
  std::vector<int> y = {0, 1, 2, 0, 1};
  SoftmaxCrossEntropy<float> ce;
  const auto Z = model.forward(X.view());
  ce.forward_backward(Z, y, model.output_grad());
  model.backward();
  const auto refs = model.sparse_layers();
  REQUIRE(refs.size() == 2);
  CHECK(refs[0].position == 0);
  CHECK(refs[1].position == 2);
  CHECK(refs[1].sparse_index == 1);
  CHECK(refs[0].input.data() == X.data());             // the caller's batch
  CHECK(refs[1].input.data() == model.act(1).data());  // output of the ReLU
  CHECK(refs[1].output_grad.data() == model.grad(2).data());
  CHECK(refs[0].output_grad.data() == model.grad(0).data());
  CHECK(refs[0].output_grad.rows() == 8);
  CHECK(refs[0].output_grad.cols() == 5);
  // The layer's weight gradient is the SDDMM of exactly these two matrices.
  std::vector<float> g(static_cast<std::size_t>(refs[1].layer->weight.matrix.storage_size()));
  reference::sddmm(refs[1].layer->weight.matrix, refs[1].output_grad, refs[1].input, std::span<float>(g));
  for (std::size_t s = 0; s < g.size(); ++s) CHECK(g[s] == Approx(refs[1].layer->weight.grad[s]).margin(1e-6));
  CHECK(model.dense_weight_bytes() == (6 * 8 + 8 + 8 * 3 + 3) * 4);
  CHECK(model.weight_bytes() > 0);
  // the ReLU computed its dX over its dY: one buffer holds both, now the sparse layer's dY
  CHECK(model.grad(1).data() == model.grad(0).data());
  CHECK(model.grad(2).data() != model.grad(1).data());
}

TEST_CASE("Sequential: element-wise layers share their gradient buffer with the layer below", "[nn][sequential]") {
  // GELU, ReLU, ReLU in a row: one buffer carries all four gradients below the last linear
  Sequential<double> shared;
  shared.add(Linear<double>(5, 7, 3));
  shared.add(GELU<double>{});
  shared.add(ReLU<double>{});
  shared.add(Linear<double>(7, 4, 4));
  shared.add(ReLU<double>{});  // ends element-wise: its dX goes over output_grad()
  const auto X = random_matrix<double>(5, 6, 5);
  const auto dOut = random_matrix<double>(4, 6, 6);
  shared.forward(X.view());
  for (std::int64_t i = 0; i < 4; ++i)
    for (std::int64_t j = 0; j < 6; ++j) shared.output_grad()(i, j) = dOut(i, j);
  CHECK(shared.grad(0).data() == shared.grad(1).data());
  CHECK(shared.grad(1).data() == shared.grad(2).data());
  CHECK(shared.grad(3).data() == shared.grad(4).data());
  CHECK(shared.grad(2).data() != shared.grad(3).data());  // below a linear layer: its own
  // the ReLU after a linear layer runs in that layer's store and shares its buffer; the
  // ReLU after the GELU does not
  CHECK(shared.act(3).data() == shared.act(4).data());
  CHECK(shared.act(1).data() != shared.act(2).data());
  CHECK(shared.act(0).data() != shared.act(1).data());
  const Matrix<double> out = [&] {
    Matrix<double> m(4, 6);
    for (std::int64_t i = 0; i < 4; ++i)
      for (std::int64_t j = 0; j < 6; ++j) m(i, j) = shared.act(4)(i, j);
    return m;
  }();
  shared.backward();
  // the same parameters' gradients as a chain computed out of place by hand
  Linear<double> l0(5, 7, 3), l3(7, 4, 4);
  GELU<double> gelu;
  ReLU<double> relu;
  Matrix<double> z0(7, 6), a1(7, 6), a2(7, 6), z3(4, 6), d3(4, 6), d2(7, 6), d1(7, 6), d0(7, 6);
  l0.forward(X.view(), z0.view());
  gelu.forward(z0.view(), a1.view());
  relu.forward(a1.view(), a2.view());
  l3.forward(a2.view(), z3.view());
  relu.backward(z3.view(), dOut.view(), d3.view());
  l3.backward(a2.view(), d3.view(), d2.view());
  relu.backward(a1.view(), d2.view(), d1.view());
  gelu.backward(z0.view(), d1.view(), d0.view());
  l0.backward(X.view(), d0.view());
  std::int64_t compared = 0;
  std::vector<const double*> got, want;
  shared.for_each_parameter([&](auto& p) { got.push_back(p.grad.data()); });
  l0.for_each_parameter([&](auto& p) { want.push_back(p.grad.data()); });
  l3.for_each_parameter([&](auto& p) { want.push_back(p.grad.data()); });
  REQUIRE(got.size() == want.size());
  const std::int64_t sizes[] = {7 * 5, 7, 4 * 7, 4};
  for (std::size_t q = 0; q < got.size(); ++q)
    for (std::int64_t e = 0; e < sizes[q]; ++e, ++compared) REQUIRE(got[q][e] == want[q][e]);
  CHECK(compared == 7 * 5 + 7 + 4 * 7 + 4);
  for (std::int64_t i = 0; i < 7; ++i)
    for (std::int64_t j = 0; j < 6; ++j) CHECK(shared.grad(0)(i, j) == d0(i, j));
  Matrix<double> a4(4, 6);
  relu.forward(z3.view(), a4.view());
  std::int64_t same_out = 0, clamped = 0;
  for (std::int64_t i = 0; i < 4; ++i)
    for (std::int64_t j = 0; j < 6; ++j) {
      same_out += out(i, j) == a4(i, j);
      clamped += a4(i, j) == 0.0;
    }
  CHECK(same_out == 4 * 6);
  CHECK(clamped > 0);
}

TEST_CASE("Sequential: a linear layer applies the ReLU's backward below it to its dX bit for bit", "[nn][sequential]") {
  // sparse - ReLU - sparse - ReLU - sparse - ReLU - dense: the middle sparse layers mask their
  // dX for the ReLU below them (sddmm_dx's one pass at 1 thread and a batch of whole
  // registers; the two kernels and a masking pass otherwise), the dense head (5 rows: the
  // narrow kernels) in its backward's store, and the ReLU passes are skipped.
  // Against the same layers run apart, every ReLU backward its own pass.
  const std::int64_t N = static_cast<std::int64_t>(detail::simd_width<float>());
  for (const std::int64_t B : {4 * N, 4 * N + 3}) {
    for (const int threads : {1, 2}) {
      CAPTURE(B, threads);
#if SPRIG_HAS_OPENMP
      const int saved = omp_get_max_threads();
      omp_set_num_threads(threads);
#else
      if (threads > 1) continue;
#endif
      auto sparse = [](std::int64_t in, std::int64_t out, std::uint64_t key) {
        return SparseLinear<float, std::int32_t>(in, out, {.density = 0.3, .seed = 21, .layer_key = key});
      };
      Sequential<float, std::int32_t> model;
      model.add(sparse(30, 50, 0));
      model.add(ReLU<float>{});
      model.add(sparse(50, 40, 1));
      model.add(ReLU<float>{});
      model.add(sparse(40, 60, 2));
      model.add(ReLU<float>{});
      model.add(Linear<float>(60, 5, 21, 3));
      const auto X = random_matrix<float>(30, B, 22);
      const auto dOut = random_matrix<float>(5, B, 23);
      model.forward(X.view());
      for (std::int64_t i = 0; i < 5; ++i)
        for (std::int64_t j = 0; j < B; ++j) model.output_grad()(i, j) = dOut(i, j);
      model.backward();

      auto l0 = sparse(30, 50, 0), l2 = sparse(50, 40, 1), l4 = sparse(40, 60, 2);
      Linear<float> l6(60, 5, 21, 3);
      ReLU<float> relu;
      Matrix<float> z0(50, B), a1(50, B), z2(40, B), a3(40, B), z4(60, B), a5(60, B), z6(5, B);
      Matrix<float> d5(60, B), d4(60, B), d3(40, B), d2(40, B), d1(50, B), d0(50, B);
      l0.forward(X.view(), z0.view());
      relu.forward(z0.view(), a1.view());
      l2.forward(a1.view(), z2.view());
      relu.forward(z2.view(), a3.view());
      l4.forward(a3.view(), z4.view());
      relu.forward(z4.view(), a5.view());
      l6.forward(a5.view(), z6.view());
      l6.backward(a5.view(), dOut.view(), d5.view());
      relu.backward(z4.view(), d5.view(), d4.view());
      l4.backward(a3.view(), d4.view(), d3.view());
      relu.backward(z2.view(), d3.view(), d2.view());
      l2.backward(a1.view(), d2.view(), d1.view());
      relu.backward(z0.view(), d1.view(), d0.view());
      l0.backward(X.view(), d0.view());
#if SPRIG_HAS_OPENMP
      omp_set_num_threads(saved);
#endif
      std::vector<std::span<const float>> got, want;
      model.for_each_parameter([&](auto& p) { got.emplace_back(p.grad.data(), p.grad.size()); });
      for (auto* l : {&l0, &l2, &l4})
        l->for_each_parameter([&](auto& p) { want.emplace_back(p.grad.data(), p.grad.size()); });
      l6.for_each_parameter([&](auto& p) { want.emplace_back(p.grad.data(), p.grad.size()); });
      REQUIRE(got.size() == want.size());
      std::int64_t differ = 0, compared = 0;
      for (std::size_t q = 0; q < got.size(); ++q) {
        REQUIRE(got[q].size() == want[q].size());
        for (std::size_t e = 0; e < got[q].size(); ++e, ++compared)
          differ += std::memcmp(&got[q][e], &want[q][e], sizeof(float)) != 0;
      }
      CHECK(differ == 0);
      // every live weight, the dense head and the biases were compared
      CHECK(compared >=
            l0.weight.matrix.nnz() + l2.weight.matrix.nnz() + l4.weight.matrix.nnz() + 60 * 5 + 50 + 40 + 60 + 5);
      // the gradient the first layer got (its dY) is the masked one, as the ReLU leaves it
      std::int64_t zeros = 0;
      for (std::int64_t i = 0; i < 50; ++i)
        for (std::int64_t j = 0; j < B; ++j) {
          CHECK(model.grad(0)(i, j) == d0(i, j));
          zeros += d0(i, j) == 0.0f && d1(i, j) != 0.0f;
        }
      CHECK(zeros > 0);
    }
  }
}

namespace {
std::int64_t bitwise_differences(ConstMatrixView<float> a, ConstMatrixView<float> b) {
  std::int64_t n = 0;
  for (std::int64_t i = 0; i < a.rows(); ++i)
    for (std::int64_t j = 0; j < a.cols(); ++j) n += std::memcmp(&a(i, j), &b(i, j), sizeof(float)) != 0;
  return n;
}
std::int64_t bitwise_differences(std::span<const float> a, std::span<const float> b) {
  std::int64_t n = 0;
  for (std::size_t e = 0; e < a.size(); ++e) n += std::memcmp(&a[e], &b[e], sizeof(float)) != 0;
  return n;
}
}  // namespace

TEST_CASE("Sequential: a GELU between linear layers keeps its derivative and its backward runs in the layer above",
          "[nn][sequential]") {
  // sparse - GELU - sparse - GELU - dense(5: narrow) and dense(16: gemms) - GELU - dense: each
  // GELU computes gelu' into the buffer of the layer below it in its forward, the layer above
  // multiplies its dX by it (sddmm_dx's store, the narrow kernel's pass, a pass after the gemm)
  // and the GELU's backward pass is skipped. Against the same layers run apart, bit for bit.
  const std::int64_t N = static_cast<std::int64_t>(detail::simd_width<float>());
  for (const bool sparse_model : {true, false}) {
    for (const std::int64_t B : {4 * N, 4 * N + 3}) {
      for (const int threads : {1, 2}) {
        CAPTURE(sparse_model, B, threads);
#if SPRIG_HAS_OPENMP
        const int saved = omp_get_max_threads();
        omp_set_num_threads(threads);
#else
        if (threads > 1) continue;
#endif
        using Layer = std::variant<SparseLinear<float, std::int32_t>, Linear<float>>;
        auto make = [&](std::int64_t in, std::int64_t out, std::uint64_t key, bool sparse) -> Layer {
          if (sparse) return SparseLinear<float, std::int32_t>(in, out, {.density = 0.3, .seed = 21, .layer_key = key});
          return Linear<float>(in, out, 21, key);
        };
        const std::int64_t w0 = 30, w1 = 50, w2 = sparse_model ? 40 : 16, w3 = 5;
        std::vector<Layer> apart;
        apart.push_back(make(w0, w1, 0, sparse_model));
        apart.push_back(make(w1, w2, 1, sparse_model));
        apart.push_back(make(w2, w3, 2, false));
        Sequential<float, std::int32_t> model;
        const std::int64_t widths[] = {w0, w1, w2, w3};
        for (std::uint64_t k = 0; k < 3; ++k) {  // the same layers as `apart` (same seeds and keys)
          std::visit([&](auto&& x) { model.add(std::move(x)); },
                     make(widths[k], widths[k + 1], k, sparse_model && k < 2));
          if (k < 2) model.add(GELU<float>{});
        }
        REQUIRE(model.size() == 5);
        const auto X = random_matrix<float>(w0, B, 22);
        const auto dOut = random_matrix<float>(w3, B, 23);
        model.forward(X.view());
        for (std::int64_t i = 0; i < w3; ++i)
          for (std::int64_t j = 0; j < B; ++j) model.output_grad()(i, j) = dOut(i, j);
        model.backward();

        GELU<float> gelu;
        Matrix<float> z0(w1, B), a1(w1, B), z2(w2, B), a3(w2, B), z4(w3, B);
        Matrix<float> d3(w2, B), d2(w2, B), d1(w1, B), d0(w1, B);
        auto fwd = [](Layer& l, ConstMatrixView<float> x, MatrixView<float> y) {
          std::visit([&](auto& layer) { layer.forward(x, y); }, l);
        };
        auto bwd = [](Layer& l, ConstMatrixView<float> x, ConstMatrixView<float> dy, MatrixView<float>* dx) {
          std::visit([&](auto& layer) { dx ? layer.backward(x, dy, *dx) : layer.backward(x, dy); }, l);
        };
        fwd(apart[0], X.view(), z0.view());
        gelu.forward(z0.view(), a1.view());
        fwd(apart[1], a1.view(), z2.view());
        gelu.forward(z2.view(), a3.view());
        fwd(apart[2], a3.view(), z4.view());
        MatrixView<float> d3v = d3.view(), d1v = d1.view();
        bwd(apart[2], a3.view(), dOut.view(), &d3v);
        gelu.backward(z2.view(), d3.view(), d2.view());
        bwd(apart[1], a1.view(), d2.view(), &d1v);
        gelu.backward(z0.view(), d1.view(), d0.view());
        bwd(apart[0], X.view(), d0.view(), nullptr);
#if SPRIG_HAS_OPENMP
        omp_set_num_threads(saved);
#endif
        CHECK(bitwise_differences(model.act(4), z4.view()) == 0);  // the output
        std::vector<std::span<const float>> got, want;
        model.for_each_parameter([&](auto& p) { got.emplace_back(p.grad.data(), p.grad.size()); });
        for (auto& l : apart)
          std::visit(
              [&](auto& layer) {
                layer.for_each_parameter([&](auto& p) { want.emplace_back(p.grad.data(), p.grad.size()); });
              },
              l);
        REQUIRE(got.size() == want.size());
        std::int64_t differ = 0;
        for (std::size_t q = 0; q < got.size(); ++q) {
          REQUIRE(got[q].size() == want[q].size());
          differ += bitwise_differences(got[q], want[q]);
        }
        CHECK(differ == 0);
        // the first layer's dY is the GELU's input gradient; act(0) holds gelu'(z0)
        CHECK(bitwise_differences(model.grad(0), d0.view()) == 0);
        Matrix<float> ones(w1, B), der(w1, B);
        for (std::int64_t i = 0; i < w1; ++i)
          for (std::int64_t j = 0; j < B; ++j) ones(i, j) = 1.0f;
        gelu.backward(z0.view(), ones.view(), der.view());
        CHECK(bitwise_differences(model.act(0), der.view()) == 0);
      }
    }
  }
}

TEST_CASE("Sequential: a ReLU fused into the linear layer below holds no buffer of its own", "[nn][sequential]") {
  auto build = [](bool relu_after_linear) {
    Sequential<float> m;
    m.add(Linear<float>(8, 16, 1));
    if (relu_after_linear)
      m.add(ReLU<float>{});
    else
      m.add(GELU<float>{});
    m.add(Linear<float>(16, 3, 2));
    return m;
  };
  auto fused = build(true), apart = build(false);
  const auto X = random_matrix<float>(8, 32, 7);
  fused.forward(X.view());
  apart.forward(X.view());
  // the same layer shapes; the GELU model keeps one 16 x 32 activation more
  const std::int64_t one_act = 16 * Sequential<float>::activation_stride(32) * std::int64_t(sizeof(float));
  CHECK(apart.memory_bytes() - fused.memory_bytes() == one_act);
}

TEMPLATE_LIST_TEST_CASE(
    "a sparse MLP learns a synthetic problem to 100% training accuracy; steady steps allocate nothing",
    "[nn][sequential][train]", Indices) {
  using Index = TestType;
  // 6 Gaussian clusters in 8 dimensions (centres on the first two axes), 3 classes that are
  // not linearly separable (opposite clusters share a class), noise well below the spacing.
  const std::int64_t n = 240, dims = 8, classes = 3;
  Matrix<float> X(dims, n);
  std::vector<int> y(n);
  CounterRng rng(5);
  for (std::int64_t b = 0; b < n; ++b) {
    const std::int64_t cluster = b % 6;
    const double angle = 2.0 * 3.141592653589793 * double(cluster) / 6.0;
    for (std::int64_t d = 0; d < dims; ++d) X(d, b) = float(0.15 * rng.normal());
    X(0, b) += float(2.0 * std::cos(angle));
    X(1, b) += float(2.0 * std::sin(angle));
    y[b] = int(cluster % classes);
  }
  Sequential<float, Index> model;
  model.add(SparseLinear<float, Index>(dims, 64, {.density = 0.5, .seed = 3, .layer_key = 0}));
  model.add(ReLU<float>{});
  model.add(SparseLinear<float, Index>(64, 64, {.density = 0.3, .seed = 3, .layer_key = 1}));
  model.add(ReLU<float>{});
  model.add(Linear<float>(64, classes, 3, 2));
  AdamW<float> opt({.lr = 0.01, .weight_decay = 0.0});
  SoftmaxCrossEntropy<float> ce;
  float first_loss = 0, loss = 0;
  long steady_allocations = -1, first_step_allocations = -1;
  for (int step = 0; step < 300; ++step) {
    const long before = g_allocations.load();
    const auto Z = model.forward(X.view());
    loss = ce.forward_backward(Z, y, model.output_grad());
    model.backward();
    opt.step(model);
    if (step == 5) steady_allocations = g_allocations.load() - before;
    if (step == 0) {
      first_loss = loss;
      first_step_allocations = g_allocations.load() - before;
    }
  }
  CHECK(first_step_allocations > 0);  // the counter sees the buffers the first step creates
  CHECK(steady_allocations == 0);
  CHECK(loss < 0.1 * first_loss);
  const auto Z = model.forward(X.view());
  CHECK(SoftmaxCrossEntropy<float>::count_correct(Z, y) == n);
  for (const auto& ref : model.sparse_layers()) ref.layer->weight.matrix.check_invariants();
}

#if SPRIG_HAS_OPENMP
TEST_CASE("training steps of a sparse MLP with a dense head give the same bits at 1 and 2 threads",
          "[nn][sequential][threads]") {
  // The whole step (fused bias + ReLU forward, loss, weight gradients, dX, AdamW) at sizes
  // where every kernel and element-wise pass runs on OpenMP threads; the dense head takes the
  // portable GEMM (the tests do not define SPRIG_USE_CBLAS; OpenBLAS would differ: gemm.hpp).
  auto train = [](int threads) {
    const int saved = omp_get_max_threads();
    omp_set_num_threads(threads);
    Sequential<float, std::int32_t> model;
    model.add(SparseLinear<float, std::int32_t>(300, 700, {.density = 0.3, .seed = 11, .layer_key = 0}));
    model.add(ReLU<float>{});
    model.add(SparseLinear<float, std::int32_t>(700, 500, {.density = 0.2, .seed = 11, .layer_key = 1}));
    model.add(ReLU<float>{});
    model.add(Linear<float>(500, 10, 11, 2));
    AdamW<float> opt({.lr = 0.01, .weight_decay = 1e-4});
    SoftmaxCrossEntropy<float> ce;
    CounterRng rng(12);
    const Matrix<float> X = random_matrix<float>(300, 96, 13);
    std::vector<int> y(96);
    for (auto& label : y) label = static_cast<int>(rng.uniform_below(10));
    for (int step = 0; step < 4; ++step) {
      const auto Z = model.forward(X.view());
      ce.forward_backward(Z, y, model.output_grad());
      model.backward();
      opt.step(model);
    }
    omp_set_num_threads(saved);
    std::vector<float> bits;
    model.for_each_parameter([&](auto& p) {
      if constexpr (requires { p.matrix.values(); })
        bits.insert(bits.end(), p.matrix.values().begin(), p.matrix.values().end());
      else
        bits.insert(bits.end(), p.value.begin(), p.value.end());
    });
    return bits;
  };
  const std::vector<float> one = train(1), two = train(2);
  REQUIRE(one.size() == two.size());
  std::size_t differ = 0;
  for (std::size_t q = 0; q < one.size(); ++q) differ += std::memcmp(&one[q], &two[q], sizeof(float)) != 0;
  CHECK(differ == 0);
}
#endif

TEST_CASE("Sequential: an attached LayerClock times each layer that runs, with the same bits", "[nn][sequential]") {
  // sparse(0) - ReLU(1) - sparse(2) - GELU(3) - dense(4) - ReLU(5). By the fusion rules at the
  // top of sequential.hpp: ReLU 1's forward runs in layer 0's store and its backward in layer
  // 2's dX; GELU 3 runs its forward (keeping its derivative) and layer 4 applies its backward;
  // ReLU 5's forward runs in layer 4's store, its backward on its own (nothing above it).
  auto build = [] {
    Sequential<float, std::int32_t> m;
    m.add(SparseLinear<float, std::int32_t>(10, 14, {.density = 0.4, .seed = 3, .layer_key = 0}));
    m.add(ReLU<float>{});
    m.add(SparseLinear<float, std::int32_t>(14, 12, {.density = 0.5, .seed = 3, .layer_key = 1}));
    m.add(GELU<float>{});
    m.add(Linear<float>(12, 6, 3, 2));
    m.add(ReLU<float>{});
    return m;
  };
  Sequential<float, std::int32_t> timed = build(), plain = build();
  LayerClock clock;
  timed.set_layer_clock(&clock);
  SGD<float> opt_timed({.lr = 0.1f}), opt_plain({.lr = 0.1f});
  const auto X = random_matrix<float>(10, 9, 4);
  const auto dOut = random_matrix<float>(6, 9, 5);
  constexpr int kSteps = 3;
  for (int step = 0; step < kSteps; ++step) {
    for (auto* m : {&timed, &plain}) {
      m->forward(X.view());
      for (std::int64_t i = 0; i < 6; ++i)
        for (std::int64_t j = 0; j < 9; ++j) m->output_grad()(i, j) = dOut(i, j);
      m->backward();
    }
    for (std::size_t k = 0; k < timed.size(); ++k) {
      const auto a = timed.act(k), b = plain.act(k);
      for (std::int64_t i = 0; i < a.rows(); ++i)
        for (std::int64_t j = 0; j < a.cols(); ++j)
          REQUIRE(std::bit_cast<std::uint32_t>(a(i, j)) == std::bit_cast<std::uint32_t>(b(i, j)));
    }
    std::vector<float> ga, gb;
    timed.for_each_parameter([&](auto& p) {
      for (const float g : p.grad) ga.push_back(g);
    });
    plain.for_each_parameter([&](auto& p) {
      for (const float g : p.grad) gb.push_back(g);
    });
    REQUIRE(!ga.empty());
    REQUIRE(std::memcmp(ga.data(), gb.data(), ga.size() * sizeof(float)) == 0);
    opt_timed.step(timed);
    opt_plain.step(plain);
  }
  using P = LayerClock::Pass;
  const std::int64_t forward_calls[] = {kSteps, 0, kSteps, kSteps, kSteps, 0};
  const std::int64_t backward_calls[] = {kSteps, 0, kSteps, 0, kSteps, kSteps};
  REQUIRE(clock.layers() == 6);
  for (std::size_t k = 0; k < 6; ++k) {
    CAPTURE(k);
    CHECK(clock.calls(k, P::forward) == forward_calls[k]);
    CHECK(clock.calls(k, P::backward) == backward_calls[k]);
    CHECK((clock.seconds(k, P::forward) > 0.0) == (forward_calls[k] > 0));
    CHECK((clock.seconds(k, P::backward) > 0.0) == (backward_calls[k] > 0));
  }
  CHECK(clock.total_seconds() > 0.0);
  clock.reset();
  CHECK(clock.layers() == 6);
  CHECK(clock.total_seconds() == 0.0);
  CHECK(clock.calls(0, P::forward) == 0);
  timed.set_layer_clock(nullptr);  // detached: nothing more is added
  timed.forward(X.view());
  CHECK(clock.calls(0, P::forward) == 0);
  CHECK(clock.calls(99, P::backward) == 0);  // never timed
  CHECK(clock.seconds(99, P::backward) == 0.0);
}

TEST_CASE("LayerClock passes an exception through and counts nothing for that call", "[nn][sequential]") {
  LayerClock clock;
  CHECK_THROWS_WITH(clock.time(2, LayerClock::Pass::backward, [] { throw std::runtime_error("inside"); }), "inside");
  CHECK(clock.calls(2, LayerClock::Pass::backward) == 0);
  CHECK(clock.seconds(2, LayerClock::Pass::backward) == 0.0);
  int ran = 0;
  clock.time(2, LayerClock::Pass::backward, [&] { ++ran; });
  CHECK(ran == 1);
  CHECK(clock.calls(2, LayerClock::Pass::backward) == 1);
  CHECK(clock.calls(2, LayerClock::Pass::forward) == 0);
}
