#include "sprig/nn/embedding.hpp"

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
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

// n token ids in [0, V) with repeats (V < n), from a fixed stream.
std::vector<std::int32_t> random_tokens(std::size_t n, std::int32_t V, std::uint64_t seed) {
  CounterRng rng(seed, 5);
  std::vector<std::int32_t> t(n);
  for (auto& v : t) v = static_cast<std::int32_t>(rng.uniform_below(static_cast<std::uint64_t>(V)));
  return t;
}

template <class T>
bool same_bits(const T* a, const T* b, std::size_t n) {
  return std::memcmp(a, b, n * sizeof(T)) == 0;
}

template <class V>
std::vector<typename V::value_type> as_vector(const V& v) {
  return {v.begin(), v.end()};
}

}  // namespace

TEMPLATE_TEST_CASE("TokenEmbedding and PositionalEmbedding forward against plain loops", "[nn][embedding]", float,
                   double) {
  using T = TestType;
  const std::int64_t V = 11, d = 7, B = 3, Tn = 5, N = B * Tn;
  TokenEmbedding<T> tok(V, d, 3, 1);
  PositionalEmbedding<T> pos(8, d, 3, 2);
  auto tokens = random_tokens(N, V, 4);
  tokens[0] = 0;
  tokens[1] = static_cast<std::int32_t>(V - 1);  // both ends of the vocabulary
  // Y inside a wider buffer: a strided view, columns outside it untouched
  Matrix<T> buf(d, N + 4, T(-7));
  const auto Y = buf.view().block(0, 2, d, N);
  tok.forward(tokens, Y);
  for (std::int64_t i = 0; i < d; ++i)
    for (std::int64_t n = 0; n < N; ++n)
      REQUIRE(Y(i, n) == tok.table.value[std::size_t(tokens[std::size_t(n)] * d + i)]);
  pos.forward_add(Tn, Y);
  for (std::int64_t i = 0; i < d; ++i)
    for (std::int64_t n = 0; n < N; ++n) {
      const T want =
          tok.table.value[std::size_t(tokens[std::size_t(n)] * d + i)] + pos.table.value[std::size_t((n % Tn) * d + i)];
      REQUIRE(Y(i, n) == want);
    }
  pos.forward(Tn, Y);
  for (std::int64_t i = 0; i < d; ++i)
    for (std::int64_t n = 0; n < N; ++n) REQUIRE(Y(i, n) == pos.table.value[std::size_t((n % Tn) * d + i)]);
  for (std::int64_t i = 0; i < d; ++i) {
    CHECK(buf(i, 0) == T(-7));
    CHECK(buf(i, 1) == T(-7));
    CHECK(buf(i, N + 2) == T(-7));
    CHECK(buf(i, N + 3) == T(-7));
  }
  // a sequence as long as the block, and one sequence
  Matrix<T> Z(d, 8);
  pos.forward(8, Z.view());
  for (std::int64_t i = 0; i < d; ++i)
    for (std::int64_t t = 0; t < 8; ++t) REQUIRE(Z(i, t) == pos.table.value[std::size_t(t * d + i)]);
}

TEST_CASE("Embedding initialisation: normal(0, 0.02), not decayed, keyed by seed and layer", "[nn][embedding]") {
  TokenEmbedding<double> tok(200, 64, 9, 0);
  PositionalEmbedding<double> pos(200, 64, 9, 0);
  CHECK_FALSE(tok.table.decay);
  CHECK_FALSE(pos.table.decay);
  CHECK(tok.table.rows == 200);
  CHECK(tok.table.cols == 64);
  CHECK(tok.vocabulary() == 200);
  CHECK(tok.d_model() == 64);
  CHECK(pos.block_size() == 200);
  for (const auto* table : {&tok.table.value, &pos.table.value}) {
    double sum = 0, sq = 0;
    for (double v : *table) {
      sum += v;
      sq += v * v;
    }
    const double n = double(table->size()), mean = sum / n, sd = std::sqrt(sq / n - mean * mean);
    // 12800 draws: the mean's standard error is 0.02 / 113 = 1.8e-4, the sd's about 0.6%
    CHECK(std::abs(mean) < 1e-3);
    CHECK(sd == Approx(0.02).epsilon(0.03));
  }
  CHECK(tok.table.value != pos.table.value);  // same seed and key, another table
  CHECK(tok.table.value == TokenEmbedding<double>(200, 64, 9, 0).table.value);
  CHECK(tok.table.value != TokenEmbedding<double>(200, 64, 9, 1).table.value);
  CHECK(tok.table.value != TokenEmbedding<double>(200, 64, 10, 0).table.value);
  // the float table is the double one rounded
  TokenEmbedding<float> tf(200, 64, 9, 0);
  for (std::size_t k = 0; k < tf.table.value.size(); ++k) REQUIRE(tf.table.value[k] == float(tok.table.value[k]));
  std::size_t visited = 0;
  tok.for_each_parameter([&](DenseParameter<double>& p) { visited += &p == &tok.table; });
  pos.for_each_parameter([&](DenseParameter<double>& p) { visited += &p == &pos.table; });
  CHECK(visited == 2);
  CHECK(tok.weight_bytes() >= 200 * 64 * 8);
  CHECK(tok.dense_weight_bytes() == 200 * 64 * 8);
}

TEST_CASE("Embedding gradients match central differences, repeated tokens included", "[nn][embedding][gradcheck]") {
  const std::int64_t V = 6, d = 5, B = 3, Tn = 4, N = B * Tn, block = 7;
  TokenEmbedding<double> tok(V, d, 1, 0);
  PositionalEmbedding<double> pos(block, d, 1, 1);
  // 12 tokens over 6 ids: 3 appears four times, 5 twice, 4 never
  const std::vector<std::int32_t> tokens = {3, 0, 3, 5, 1, 3, 2, 5, 3, 0, 1, 2};
  const auto R = random_matrix<double>(d, N, 8);  // loss = sum R .* (tok + pos)
  Matrix<double> Y(d, N);
  auto loss = [&] {
    tok.forward(tokens, Y.view());
    pos.forward_add(Tn, Y.view());
    return sprig_test::dot<double>(Y.view(), R.view());
  };
  // garbage in the gradients first: backward overwrites them
  for (auto& g : tok.table.grad) g = 99.0;
  for (auto& g : pos.table.grad) g = -99.0;
  loss();
  tok.backward(tokens, R.view());
  pos.backward(Tn, R.view());
  // against the scatter-add as a plain loop, in the documented order (tokens in order): exact
  std::vector<double> want_tok(std::size_t(V * d), 0.0), want_pos(std::size_t(block * d), 0.0);
  for (std::int64_t n = 0; n < N; ++n)
    for (std::int64_t i = 0; i < d; ++i) {
      want_tok[std::size_t(tokens[std::size_t(n)] * d + i)] += R(i, n);
      want_pos[std::size_t((n % Tn) * d + i)] += R(i, n);
    }
  CHECK(as_vector(tok.table.grad) == want_tok);
  CHECK(as_vector(pos.table.grad) == want_pos);
  for (std::int64_t i = 0; i < d; ++i) {
    CHECK(tok.table.grad[std::size_t(4 * d + i)] == 0.0);   // token 4 absent
    CHECK(pos.table.grad[std::size_t(Tn * d + i)] == 0.0);  // positions past T
    CHECK(pos.table.grad[std::size_t((block - 1) * d + i)] == 0.0);
  }
  const std::vector<double> gt = as_vector(tok.table.grad), gp = as_vector(pos.table.grad);
  sprig_test::check_gradient(loss, tok.table.value, gt, sprig_test::some_indices(gt.size()));
  sprig_test::check_gradient(loss, pos.table.value, gp, sprig_test::some_indices(gp.size()));
  // twice: the same gradient, not accumulated
  tok.backward(tokens, R.view());
  pos.backward(Tn, R.view());
  CHECK(as_vector(tok.table.grad) == gt);
  CHECK(as_vector(pos.table.grad) == gp);
}

TEMPLATE_TEST_CASE("Embeddings: bad inputs throw with the values and write nothing", "[nn][embedding]", float, double) {
  using T = TestType;
  TokenEmbedding<T> tok(65, 4, 1);
  PositionalEmbedding<T> pos(8, 4, 1);
  Matrix<T> Y(4, 6, T(5)), dY(4, 6, T(1));
  std::vector<std::int32_t> tokens = {1, 2, 64, 70, 3, 4};
  auto message_of = [](auto&& fn) {
    try {
      fn();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no throw");
  };
  CHECK_THROWS_AS(tok.forward(tokens, Y.view()), ArgumentError);
  CHECK(message_of([&] { tok.forward(tokens, Y.view()); }) ==
        "TokenEmbedding::forward: token id 70 >= vocabulary 65 at position 3");
  CHECK(Y(0, 0) == T(5));  // checked before writing
  tokens[3] = -1;
  CHECK(message_of([&] { tok.backward(tokens, dY.view()); }) ==
        "TokenEmbedding::backward: token id -1 < 0 at position 3");
  tokens[3] = 0;
  tok.forward(tokens, Y.view());  // valid now
  Matrix<T> wrong_rows(5, 6), wrong_cols(4, 5);
  CHECK_THROWS_AS(tok.forward(tokens, wrong_rows.view()), ShapeError);
  CHECK_THROWS_AS(tok.forward(tokens, wrong_cols.view()), ShapeError);
  CHECK_THROWS_AS(tok.backward(tokens, wrong_cols.view()), ShapeError);
  CHECK(message_of([&] { tok.forward(tokens, wrong_cols.view()); }).find("4x5, expected 4x6") != std::string::npos);
  // sequence length: 0, past the block size, not dividing the columns
  Matrix<T> Z(4, 18);
  CHECK_THROWS_AS(pos.forward(0, Z.view()), ArgumentError);
  CHECK(message_of([&] { pos.forward(9, Z.view()); }) ==
        "PositionalEmbedding::forward: sequence length 9 > block size 8");
  CHECK_THROWS_AS(pos.forward_add(9, Z.view()), ArgumentError);
  CHECK_THROWS_AS(pos.backward(9, Z.view()), ArgumentError);
  CHECK_THROWS_AS(pos.forward(5, Z.view()), ShapeError);  // 18 columns, T = 5
  CHECK(message_of([&] { pos.forward_add(5, Z.view()); }).find("multiple of the sequence length 5") !=
        std::string::npos);
  CHECK_THROWS_AS(pos.forward(6, wrong_rows.view()), ShapeError);
  CHECK_NOTHROW(pos.forward(6, Z.view()));
  CHECK_THROWS_AS(TokenEmbedding<T>(0, 4, 1), ShapeError);
  CHECK_THROWS_AS(TokenEmbedding<T>(4, 0, 1), ShapeError);
  CHECK_THROWS_AS(PositionalEmbedding<T>(0, 4, 1), ShapeError);
  CHECK_THROWS_AS(PositionalEmbedding<T>(4, -1, 1), ShapeError);
  // a table whose gradient lost its entries
  tok.table.grad.resize(3);
  CHECK_THROWS_AS(tok.backward(tokens, dY.view()), ShapeError);
}

TEMPLATE_TEST_CASE("Embeddings: bitwise identical for 1, 2 and 3 threads", "[nn][embedding][threads]", float, double) {
  using T = TestType;
  // d x N = 64 x 1100 = 70400 >= kParallelMinWork: the passes run on threads; 40 ids over 1100
  // tokens, so every gradient row sums many columns
  const std::int64_t V = 40, d = 64, B = 20, Tn = 55, N = B * Tn;
  REQUIRE(d * N >= detail::kParallelMinWork);
  const auto tokens = random_tokens(N, V, 12);
  const auto dY = random_matrix<T>(d, N, 13);
  struct Out {
    Matrix<T> Y;
    std::vector<T> gt, gp;
  };
  auto run = [&](int threads) {
    Out out{Matrix<T>(d, N), {}, {}};
    with_threads(threads, [&] {
      TokenEmbedding<T> tok(V, d, 2);
      PositionalEmbedding<T> pos(64, d, 2);
      tok.forward(tokens, out.Y.view());
      pos.forward_add(Tn, out.Y.view());
      tok.backward(tokens, dY.view());
      pos.backward(Tn, dY.view());
      out.gt.assign(tok.table.grad.begin(), tok.table.grad.end());
      out.gp.assign(pos.table.grad.begin(), pos.table.grad.end());
    });
    return out;
  };
  const Out one = run(1);
  for (const int threads : {2, 3}) {
    CAPTURE(threads);
    const Out other = run(threads);
    CHECK(same_bits(one.Y.data(), other.Y.data(), std::size_t(d * N)));
    CHECK(same_bits(one.gt.data(), other.gt.data(), one.gt.size()));
    CHECK(same_bits(one.gp.data(), other.gp.data(), one.gp.size()));
  }
  // and against the plain scatter loop, in token order
  std::vector<T> want(std::size_t(V * d), T(0));
  for (std::int64_t n = 0; n < N; ++n)
    for (std::int64_t i = 0; i < d; ++i) want[std::size_t(tokens[std::size_t(n)] * d + i)] += dY(i, n);
  CHECK(same_bits(one.gt.data(), want.data(), want.size()));
}

TEST_CASE("Embeddings: steady-state passes allocate nothing", "[nn][embedding]") {
  const std::int64_t V = 40, d = 64, B = 20, Tn = 55, N = B * Tn;  // threaded size
  const auto tokens = random_tokens(N, V, 12);
  const auto dY = random_matrix<float>(d, N, 13);
  Matrix<float> Y(d, N);
  TokenEmbedding<float> tok(V, d, 2);
  PositionalEmbedding<float> pos(64, d, 2);
  auto step = [&] {
    tok.forward(tokens, Y.view());
    pos.forward_add(Tn, Y.view());
    tok.backward(tokens, dY.view());
    pos.backward(Tn, dY.view());
  };
  step();  // the OpenMP runtime's first parallel region may allocate
  const long before = g_allocations.load();
  for (int k = 0; k < 3; ++k) step();
  CHECK(g_allocations.load() - before == 0);
}
