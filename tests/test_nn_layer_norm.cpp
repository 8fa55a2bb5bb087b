#include "sprig/nn/layer_norm.hpp"

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include <catch2/catch.hpp>

#include "sprig/core/config.hpp"
#if SPRIG_HAS_OPENMP
#  include <omp.h>
#endif

#include "observed_new.hpp"
#include "test_nn_gradcheck.hpp"
#include "with_threads.hpp"

// Counts heap allocations, to check that steady-state passes make none.
static std::atomic<long> g_allocations{0};
void sprig_test_observe_new(std::size_t) noexcept { g_allocations.fetch_add(1, std::memory_order_relaxed); }

using namespace sprig;
using sprig_test::random_matrix;
using sprig_test::with_threads;

namespace {

using LD = long double;

// The layer norm of X's columns as plain loops in long double: Y, mean, rstd, and for a dY the
// gradients (the textbook formulas, independent of the layer's pass structure).
template <class T>
struct Reference {
  std::vector<LD> Y, mean, rstd, dX, dgain, dbias;

  Reference(ConstMatrixView<T> X, const std::vector<T>& gain, const std::vector<T>& bias, ConstMatrixView<T> dY,
            LD eps = 1e-5L) {
    const std::int64_t d = X.rows(), N = X.cols();
    Y.assign(std::size_t(d * N), 0);
    dX.assign(std::size_t(d * N), 0);
    mean.assign(std::size_t(N), 0);
    rstd.assign(std::size_t(N), 0);
    dgain.assign(std::size_t(d), 0);
    dbias.assign(std::size_t(d), 0);
    for (std::int64_t n = 0; n < N; ++n) {
      LD m = 0, v = 0;
      for (std::int64_t i = 0; i < d; ++i) m += X(i, n);
      m /= LD(d);
      for (std::int64_t i = 0; i < d; ++i) v += (X(i, n) - m) * (X(i, n) - m);
      v /= LD(d);
      const LD r = 1 / std::sqrt(v + eps);
      mean[std::size_t(n)] = m;
      rstd[std::size_t(n)] = r;
      LD a = 0, b = 0;  // (1/d) sum g dy, (1/d) sum g dy xhat
      for (std::int64_t i = 0; i < d; ++i) {
        const LD xh = (X(i, n) - m) * r, gi = gain[std::size_t(i)], dy = dY(i, n);
        Y[std::size_t(i * N + n)] = gi * xh + bias[std::size_t(i)];
        dgain[std::size_t(i)] += dy * xh;
        dbias[std::size_t(i)] += dy;
        a += gi * dy;
        b += gi * dy * xh;
      }
      a /= LD(d);
      b /= LD(d);
      for (std::int64_t i = 0; i < d; ++i) {
        const LD xh = (X(i, n) - m) * r;
        dX[std::size_t(i * N + n)] = r * (LD(gain[std::size_t(i)]) * dY(i, n) - a - xh * b);
      }
    }
  }
};

template <class T>
void randomize_affine(LayerNorm<T>& ln, std::uint64_t seed) {
  CounterRng rng(seed);
  for (auto& g : ln.gain.value) g = static_cast<T>(rng.uniform(0.5, 1.5));
  for (auto& b : ln.bias.value) b = static_cast<T>(rng.uniform(-0.5, 0.5));
}

template <class T>
bool same_bits(const T* a, const T* b, std::size_t n) {
  return std::memcmp(a, b, n * sizeof(T)) == 0;
}

}  // namespace

TEMPLATE_TEST_CASE("LayerNorm forward and backward against plain loops on strided views", "[nn][layer_norm]", float,
                   double) {
  using T = TestType;
  const LD tol = std::is_same_v<T, float> ? 2e-5L : 1e-12L;
  // N = 300: two whole column blocks and a partial one; d = 13; views inside wider buffers
  for (const std::int64_t N : {std::int64_t(1), std::int64_t(37), std::int64_t(300)}) {
    CAPTURE(N);
    const std::int64_t d = 13;
    const auto Xbuf = random_matrix<T>(d, N + 5, 3, -2.0, 3.0);
    const auto dYbuf = random_matrix<T>(d, N + 5, 4);
    Matrix<T> Ybuf(d, N + 5, T(-9)), dXbuf(d, N + 5, T(-9));
    const auto X = Xbuf.view().block(0, 2, d, N);
    const auto dY = dYbuf.view().block(0, 1, d, N);
    const auto Y = Ybuf.view().block(0, 3, d, N);
    const auto dX = dXbuf.view().block(0, 4, d, N);
    LayerNorm<T> ln(d);
    randomize_affine(ln, 5);
    ln.forward(X, Y);
    ln.backward(X, dY, dX);
    const Reference<T> ref(X, std::vector<T>(ln.gain.value.begin(), ln.gain.value.end()),
                           std::vector<T>(ln.bias.value.begin(), ln.bias.value.end()), dY);
    REQUIRE(ln.mean().size() == std::size_t(N));
    for (std::int64_t n = 0; n < N; ++n) {
      REQUIRE(std::abs(ln.mean()[std::size_t(n)] - ref.mean[std::size_t(n)]) <= tol);
      REQUIRE(std::abs(ln.rstd()[std::size_t(n)] - ref.rstd[std::size_t(n)]) <= tol * ref.rstd[std::size_t(n)]);
    }
    LD scale_dx = 0;
    for (LD v : ref.dX) scale_dx = std::max(scale_dx, std::abs(v));
    for (std::int64_t i = 0; i < d; ++i)
      for (std::int64_t n = 0; n < N; ++n) {
        REQUIRE(std::abs(Y(i, n) - ref.Y[std::size_t(i * N + n)]) <= tol * 4);
        REQUIRE(std::abs(dX(i, n) - ref.dX[std::size_t(i * N + n)]) <= tol * 4 * (1 + scale_dx));
      }
    for (std::int64_t i = 0; i < d; ++i) {
      REQUIRE(std::abs(ln.gain.grad[std::size_t(i)] - ref.dgain[std::size_t(i)]) <= tol * LD(N));
      REQUIRE(std::abs(ln.bias.grad[std::size_t(i)] - ref.dbias[std::size_t(i)]) <= tol * LD(N));
      // outside the views: untouched
      CHECK(Ybuf(i, 0) == T(-9));
      CHECK(dXbuf(i, 0) == T(-9));
    }
    // the normalised columns: mean 0 and variance var/(var + eps) before the affine step
    LayerNorm<T> plain(d);
    plain.forward(X, Y);
    for (std::int64_t n = 0; n < N; ++n) {
      LD m = 0;
      for (std::int64_t i = 0; i < d; ++i) m += Y(i, n);
      REQUIRE(std::abs(m / d) <= tol * 4);
    }
  }
}

TEST_CASE("LayerNorm gradients match central differences", "[nn][layer_norm][gradcheck]") {
  const std::int64_t d = 7, N = 11;
  auto X = random_matrix<double>(d, N, 21, -2.0, 2.0);
  const auto R = random_matrix<double>(d, N, 22);  // loss = sum R .* LN(X)
  Matrix<double> Y(d, N), dX(d, N);
  LayerNorm<double> ln(d);
  randomize_affine(ln, 23);
  auto loss = [&] {
    ln.forward(X.view(), Y.view());
    return sprig_test::dot<double>(Y.view(), R.view());
  };
  loss();
  for (auto& g : ln.gain.grad) g = 42.0;  // overwritten, not accumulated
  ln.backward(X.view(), R.view(), dX.view());
  const std::vector<double> gx(dX.data(), dX.data() + d * N);
  const std::vector<double> gg(ln.gain.grad.begin(), ln.gain.grad.end());
  const std::vector<double> gb(ln.bias.grad.begin(), ln.bias.grad.end());
  sprig_test::check_gradient(loss, std::span<double>(X.data(), std::size_t(d * N)), gx,
                             sprig_test::some_indices(std::size_t(d * N), 77));
  sprig_test::check_gradient(loss, ln.gain.value, gg, sprig_test::some_indices(gg.size()));
  sprig_test::check_gradient(loss, ln.bias.value, gb, sprig_test::some_indices(gb.size()));
  // dX of a layer norm is orthogonal to the constant and to xhat in each column (the sums of
  // the formula): check the first
  for (std::int64_t n = 0; n < N; ++n) {
    double s = 0;
    for (std::int64_t i = 0; i < d; ++i) s += dX(i, n);
    REQUIRE(std::abs(s) < 1e-12);
  }
}

TEMPLATE_TEST_CASE("LayerNorm: large offsets keep the variance (two-pass, double sums)", "[nn][layer_norm]", float,
                   double) {
  using T = TestType;
  // columns of mean 1e4 and spread 1e-1: a one-pass float E[x^2] - E[x]^2 loses every digit
  const std::int64_t d = 256, N = 9;
  Matrix<T> X(d, N), Y(d, N);
  CounterRng rng(31);
  for (std::int64_t i = 0; i < d; ++i)
    for (std::int64_t n = 0; n < N; ++n) X(i, n) = static_cast<T>(1e4 + 0.1 * rng.uniform(-1.0, 1.0));
  LayerNorm<T> ln(d);
  ln.forward(X.view(), Y.view());
  const Matrix<T> dY(d, N, T(0));
  const Reference<T> ref(X.view(), std::vector<T>(std::size_t(d), T(1)), std::vector<T>(std::size_t(d), T(0)),
                         dY.view());
  const LD tol = std::is_same_v<T, float> ? 1e-5L : 1e-12L;
  for (std::int64_t n = 0; n < N; ++n)
    REQUIRE(std::abs(ln.rstd()[std::size_t(n)] - ref.rstd[std::size_t(n)]) <= tol * ref.rstd[std::size_t(n)]);
  // a constant column: variance 0, xhat 0, Y = bias, dX finite (rstd = 1/sqrt(eps))
  Matrix<T> C(d, 3, T(5)), dC(d, 3);
  const auto dYc = random_matrix<T>(d, 3, 32);
  LayerNorm<T> lc(d);
  for (auto& b : lc.bias.value) b = T(0.25);
  lc.forward(C.view(), Y.view().block(0, 0, d, 3));
  lc.backward(C.view(), dYc.view(), dC.view());
  for (std::int64_t i = 0; i < d; ++i)
    for (std::int64_t n = 0; n < 3; ++n) {
      REQUIRE(Y(i, n) == T(0.25));
      REQUIRE(std::isfinite(dC(i, n)));
    }
}

TEMPLATE_TEST_CASE("LayerNorm: bad inputs throw with the values", "[nn][layer_norm]", float, double) {
  using T = TestType;
  LayerNorm<T> ln(4);
  CHECK(ln.features() == 4);
  CHECK(ln.eps() == 1e-5);
  CHECK_FALSE(ln.gain.decay);
  CHECK_FALSE(ln.bias.decay);
  for (std::size_t i = 0; i < 4; ++i) {
    CHECK(ln.gain.value[i] == T(1));
    CHECK(ln.bias.value[i] == T(0));
  }
  int visited = 0;
  ln.for_each_parameter([&](DenseParameter<T>& p) { visited += (&p == &ln.gain) * 1 + (&p == &ln.bias) * 10; });
  CHECK(visited == 11);
  Matrix<T> X(4, 6), Y(4, 6), dY(4, 6), dX(4, 6), bad(3, 6), narrow(4, 5);
  auto message_of = [](auto&& fn) {
    try {
      fn();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no throw");
  };
  // backward before any forward
  CHECK(message_of([&] { ln.backward(X.view(), dY.view(), dX.view()); }) ==
        "LayerNorm::backward: X has 6 columns but the last forward had none (call forward on this X first)");
  CHECK_THROWS_AS(ln.forward(bad.view(), Y.view()), ShapeError);
  CHECK(message_of([&] { ln.forward(X.view(), narrow.view()); }) ==
        "LayerNorm::forward: layer has 4 features, X is 4x6, Y is 4x5");
  CHECK_THROWS_AS(ln.forward(X.view(), X.view()), ArgumentError);  // no in-place mode
  ln.forward(X.view(), Y.view());
  CHECK_THROWS_AS(ln.backward(bad.view(), dY.view(), dX.view()), ShapeError);
  CHECK_THROWS_AS(ln.backward(X.view(), narrow.view(), dX.view()), ShapeError);
  CHECK_THROWS_AS(ln.backward(X.view(), dY.view(), narrow.view()), ShapeError);
  CHECK_THROWS_AS(ln.backward(X.view(), dY.view(), dY.view()), ArgumentError);
  CHECK_THROWS_AS(ln.backward(X.view(), dY.view(), X.view()), ArgumentError);
  Matrix<T> X5(4, 5), dY5(4, 5), dX5(4, 5);
  CHECK(message_of([&] { ln.backward(X5.view(), dY5.view(), dX5.view()); }) ==
        "LayerNorm::backward: X has 5 columns but the last forward had 6 (call forward on this X first)");
  CHECK_NOTHROW(ln.backward(X.view(), dY.view(), dX.view()));
  CHECK_THROWS_AS(LayerNorm<T>(0), ShapeError);
  CHECK_THROWS_AS(LayerNorm<T>(4, -1e-5), ArgumentError);
  CHECK_THROWS_AS(LayerNorm<T>(4, std::nan("")), ArgumentError);
  CHECK_THROWS_AS(LayerNorm<T>(4, INFINITY), ArgumentError);
  ln.gain.grad.resize(2);
  CHECK_THROWS_AS(ln.backward(X.view(), dY.view(), dX.view()), ShapeError);
}

TEMPLATE_TEST_CASE("LayerNorm: bitwise identical for 1, 2 and 3 threads", "[nn][layer_norm][threads]", float, double) {
  using T = TestType;
  // 64 x 1100 >= kParallelMinWork: both the column blocks (8 full, one of 76) and the row sums
  // run on threads
  const std::int64_t d = 64, N = 1100;
  REQUIRE(d * N >= detail::kParallelMinWork);
  const auto X = random_matrix<T>(d, N, 41, -3.0, 2.0);
  const auto dY = random_matrix<T>(d, N, 42);
  struct Out {
    Matrix<T> Y, dX;
    std::vector<T> gg, gb, mean, rstd;
  };
  auto run = [&](int threads) {
    Out out{Matrix<T>(d, N), Matrix<T>(d, N), {}, {}, {}, {}};
    with_threads(threads, [&] {
      LayerNorm<T> ln(d);
      randomize_affine(ln, 43);
      ln.forward(X.view(), out.Y.view());
      ln.backward(X.view(), dY.view(), out.dX.view());
      out.gg.assign(ln.gain.grad.begin(), ln.gain.grad.end());
      out.gb.assign(ln.bias.grad.begin(), ln.bias.grad.end());
      out.mean.assign(ln.mean().begin(), ln.mean().end());
      out.rstd.assign(ln.rstd().begin(), ln.rstd().end());
    });
    return out;
  };
  const Out one = run(1);
  for (const int threads : {2, 3}) {
    CAPTURE(threads);
    const Out other = run(threads);
    CHECK(same_bits(one.Y.data(), other.Y.data(), std::size_t(d * N)));
    CHECK(same_bits(one.dX.data(), other.dX.data(), std::size_t(d * N)));
    CHECK(same_bits(one.gg.data(), other.gg.data(), one.gg.size()));
    CHECK(same_bits(one.gb.data(), other.gb.data(), one.gb.size()));
    CHECK(same_bits(one.mean.data(), other.mean.data(), one.mean.size()));
    CHECK(same_bits(one.rstd.data(), other.rstd.data(), one.rstd.size()));
  }
}

TEST_CASE("LayerNorm: steady-state passes allocate nothing", "[nn][layer_norm]") {
  const std::int64_t d = 64, N = 1100;
  const auto X = random_matrix<float>(d, N, 51);
  const auto dY = random_matrix<float>(d, N, 52);
  Matrix<float> Y(d, N), dX(d, N);
  LayerNorm<float> ln(d);
  const long first = g_allocations.load();
  ln.forward(X.view(), Y.view());
  ln.backward(X.view(), dY.view(), dX.view());
  CHECK(g_allocations.load() - first > 0);  // the counter sees the buffers the first call sizes
  const long before = g_allocations.load();
  for (int k = 0; k < 3; ++k) {
    ln.forward(X.view(), Y.view());
    ln.backward(X.view(), dY.view(), dX.view());
  }
  // a narrower batch reuses the buffers
  ln.forward(X.view().block(0, 0, d, 500), Y.view().block(0, 0, d, 500));
  ln.backward(X.view().block(0, 0, d, 500), dY.view().block(0, 0, d, 500), dX.view().block(0, 0, d, 500));
  CHECK(g_allocations.load() - before == 0);
  // at least gain and bias (2 x d floats) and mean and rstd (2 floats a column)
  CHECK(ln.memory_bytes() >= 2 * d * 4 + N * 2 * 4);
}
