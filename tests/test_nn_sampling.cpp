#include "sprig/nn/sampling.hpp"

#include "sprig/core/matrix.hpp"
#include "sprig/core/rng.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

namespace {

using Catch::Matchers::Contains;

// softmax(z / temperature) in long double, the reference the draws are checked against.
std::vector<long double> softmax_ref(const std::vector<double>& z, double temperature) {
  long double top = -INFINITY;
  for (double v : z) top = std::max<long double>(top, v);
  std::vector<long double> p(z.size());
  long double total = 0;
  for (std::size_t i = 0; i < z.size(); ++i)
    total += p[i] = std::exp((static_cast<long double>(z[i]) - top) / temperature);
  for (auto& v : p) v /= total;
  return p;
}

template <class T>
sprig::Matrix<T> column_matrix(const std::vector<double>& z, std::int64_t cols = 3, std::int64_t at = 1) {
  sprig::Matrix<T> m(static_cast<std::int64_t>(z.size()), cols, cols + 5, T(-7));  // other columns are noise
  for (std::size_t i = 0; i < z.size(); ++i) m(static_cast<std::int64_t>(i), at) = static_cast<T>(z[i]);
  return m;
}

// A language model whose next token is (last + 1) mod V for certain: logit 1e4 there, 0
// elsewhere. Records every context it is given.
struct SuccessorLM {
  std::int64_t vocab = 7;
  std::int64_t block = 4;
  sprig::Matrix<double> logits;
  std::vector<std::vector<std::int32_t>> contexts;

  std::int64_t block_size() const { return block; }
  sprig::ConstMatrixView<double> forward(std::span<const std::int32_t> tokens, std::int64_t batch,
                                         std::int64_t seq_len) {
    REQUIRE(batch == 1);
    REQUIRE(seq_len == static_cast<std::int64_t>(tokens.size()));
    REQUIRE(seq_len <= block);
    contexts.emplace_back(tokens.begin(), tokens.end());
    logits.resize(vocab, seq_len);
    for (std::int64_t t = 0; t < seq_len; ++t) logits((tokens[static_cast<std::size_t>(t)] + 1) % vocab, t) = 1e4;
    return logits.view();
  }
};

// A model with pseudo-random logits that depend on the whole context, float, returning a
// mutable view.
struct NoisyLM {
  std::int64_t vocab = 11;
  sprig::Matrix<float> logits;
  int calls = 0;

  std::int64_t block_size() const { return 5; }
  sprig::MatrixView<float> forward(std::span<const std::int32_t> tokens, std::int64_t, std::int64_t seq_len) {
    ++calls;
    logits.resize(vocab, seq_len);
    std::uint64_t h = 0;
    for (std::int32_t t : tokens) h = h * 31 + static_cast<std::uint64_t>(t) + 1;
    sprig::CounterRng rng(h);
    for (std::int64_t i = 0; i < vocab; ++i)
      for (std::int64_t t = 0; t < seq_len; ++t) logits(i, t) = static_cast<float>(rng.normal());
    return logits.view();
  }
};

// A model whose logits have the wrong number of columns.
struct BrokenLM {
  sprig::Matrix<double> logits{3, 1};
  std::int64_t block_size() const { return 8; }
  sprig::ConstMatrixView<double> forward(std::span<const std::int32_t>, std::int64_t, std::int64_t) {
    return logits.view();
  }
};

}  // namespace

TEMPLATE_TEST_CASE("sample_token inverts the CDF of the softmax", "[nn][sampling]", float, double) {
  using T = TestType;
  // probabilities 0.1, 0.2, 0.3, 0.4: cut points 0.1, 0.3, 0.6
  const std::vector<double> z{std::log(1.0), std::log(2.0), std::log(3.0), std::log(4.0)};
  const auto m = column_matrix<T>(z);
  const sprig::ConstMatrixView<T> v = m.view();
  CHECK(sprig::sample_token(v, 1, 1.0, 0.0) == 0);
  CHECK(sprig::sample_token(v, 1, 1.0, 0.0999) == 0);
  CHECK(sprig::sample_token(v, 1, 1.0, 0.1001) == 1);
  CHECK(sprig::sample_token(v, 1, 1.0, 0.2999) == 1);
  CHECK(sprig::sample_token(v, 1, 1.0, 0.3001) == 2);
  CHECK(sprig::sample_token(v, 1, 1.0, 0.5999) == 2);
  CHECK(sprig::sample_token(v, 1, 1.0, 0.6001) == 3);
  CHECK(sprig::sample_token(v, 1, 1.0, std::nextafter(1.0, 0.0)) == 3);
  // temperature 0.5 squares the weights: 1, 4, 9, 16 over 30, cut points 1/30, 5/30, 14/30
  CHECK(sprig::sample_token(v, 1, 0.5, 0.033) == 0);
  CHECK(sprig::sample_token(v, 1, 0.5, 0.034) == 1);
  CHECK(sprig::sample_token(v, 1, 0.5, 0.166) == 1);
  CHECK(sprig::sample_token(v, 1, 0.5, 0.167) == 2);
  CHECK(sprig::sample_token(v, 1, 0.5, 0.466) == 2);
  CHECK(sprig::sample_token(v, 1, 0.5, 0.467) == 3);
}

TEST_CASE("sample_token over a grid of u matches the softmax probabilities", "[nn][sampling]") {
  // u_k = (k + 1/2) / N: token i is drawn for the u in [F_(i-1), F_i), so its count is
  // N * p_i to within one
  sprig::CounterRng rng(3, 1);
  std::vector<double> z(9);
  for (auto& v : z) v = rng.normal() * 2.0;
  z[4] = -std::numeric_limits<double>::infinity();  // probability 0
  const auto m = column_matrix<double>(z, 2, 0);
  const int n = 200000;
  for (double temperature : {0.3, 1.0, 2.5}) {
    const auto p = softmax_ref(z, temperature);
    std::vector<int> count(z.size(), 0);
    for (int k = 0; k < n; ++k)
      ++count[static_cast<std::size_t>(sprig::sample_token(m.view(), 0, temperature, (k + 0.5) / n))];
    for (std::size_t i = 0; i < z.size(); ++i) CHECK(std::abs(count[i] - static_cast<double>(p[i] * n)) <= 1.0);
    CHECK(count[4] == 0);
  }
}

TEST_CASE("sample_token with random u passes a chi-square test", "[nn][sampling]") {
  const std::vector<double> z{0.5, -1.0, 2.0, 0.0, 1.0, -0.5, 1.5, 0.25, -2.0, 0.75};
  const auto m = column_matrix<float>(z);
  const auto p = softmax_ref(std::vector<double>(z.begin(), z.end()), 0.8);
  sprig::CounterRng rng(42, 9);
  const int n = 50000;
  std::vector<int> count(z.size(), 0);
  for (int k = 0; k < n; ++k) ++count[static_cast<std::size_t>(sprig::sample_token(m.view(), 1, 0.8, rng.uniform01()))];
  double chi2 = 0.0;
  for (std::size_t i = 0; i < z.size(); ++i) {
    const double e = static_cast<double>(p[i]) * n;
    chi2 += (count[i] - e) * (count[i] - e) / e;
  }
  CHECK(chi2 < 27.88);  // 9 degrees of freedom, p = 0.001
}

TEMPLATE_TEST_CASE("sample_token: temperature 0 takes the first largest logit, whatever u", "[nn][sampling]", float,
                   double) {
  const auto m = column_matrix<TestType>({1.0, 3.0, -2.0, 3.0, 2.0});
  for (double u : {0.0, 0.3, 0.999}) CHECK(sprig::sample_token(m.view(), 1, 0.0, u) == 1);
  const auto all_low = column_matrix<TestType>({-std::numeric_limits<double>::infinity(), -5.0});
  CHECK(sprig::sample_token(all_low.view(), 1, 0.0, 0.5) == 1);
}

TEMPLATE_TEST_CASE("sample_token is stable for logits of 1e4", "[nn][sampling]", float, double) {
  using T = TestType;
  // 1e4 and 1e4 - 1 (exact in float): p = 1 / (1 + e^-1) = 0.7310585786..., e^-1 / (1 + e^-1);
  // the others have probability exp(-1e4) = 0 in double
  const auto m = column_matrix<T>({-1e4, 1e4, 1e4 - 1.0, 0.0});
  const double cut = 1.0 / (1.0 + std::exp(-1.0));
  CHECK(sprig::sample_token(m.view(), 1, 1.0, 0.0) == 1);
  CHECK(sprig::sample_token(m.view(), 1, 1.0, cut - 1e-6) == 1);
  CHECK(sprig::sample_token(m.view(), 1, 1.0, cut + 1e-6) == 2);
  CHECK(sprig::sample_token(m.view(), 1, 1.0, std::nextafter(1.0, 0.0)) == 2);
  CHECK(sprig::sample_token(m.view(), 1, 1e-3, 0.999) == 1);  // a cold softmax is the argmax
  CHECK(sprig::sample_token(m.view(), 1, 1e6, 0.2) == 0);     // a hot one is nearly uniform: cut 1/4
  CHECK(sprig::sample_token(m.view(), 1, 1e6, 0.3) == 1);
  // all equal and huge: uniform, cut points k / 4
  const auto flat = column_matrix<T>({3e4, 3e4, 3e4, 3e4});
  CHECK(sprig::sample_token(flat.view(), 1, 1.0, 0.249) == 0);
  CHECK(sprig::sample_token(flat.view(), 1, 1.0, 0.251) == 1);
  CHECK(sprig::sample_token(flat.view(), 1, 1.0, 0.749) == 2);
  CHECK(sprig::sample_token(flat.view(), 1, 1.0, 0.751) == 3);
}

TEST_CASE("sample_token rejects bad arguments with their values", "[nn][sampling]") {
  const auto m = column_matrix<double>({0.0, 1.0, 2.0});
  const sprig::ConstMatrixView<double> v = m.view();
  CHECK_THROWS_WITH(sprig::sample_token(v, 1, -0.5, 0.5), Contains("temperature -0.5"));
  CHECK_THROWS_AS(sprig::sample_token(v, 1, std::nan(""), 0.5), sprig::ArgumentError);
  CHECK_THROWS_AS(sprig::sample_token(v, 1, std::numeric_limits<double>::infinity(), 0.5), sprig::ArgumentError);
  CHECK_THROWS_WITH(sprig::sample_token(v, 1, 1.0, 1.0), Contains("u 1 is outside [0, 1)"));
  CHECK_THROWS_WITH(sprig::sample_token(v, 1, 1.0, -0.25), Contains("u -0.25"));
  CHECK_THROWS_AS(sprig::sample_token(v, 1, 1.0, std::nan("")), sprig::ArgumentError);
  CHECK_THROWS_WITH(sprig::sample_token(v, 3, 1.0, 0.5), Contains("column 3 is outside [0, 3)"));
  CHECK_THROWS_WITH(sprig::sample_token(v, -1, 0.0, 0.5), Contains("column -1"));
  sprig::Matrix<double> empty(0, 2);
  CHECK_THROWS_AS(sprig::sample_token(empty.view(), 0, 1.0, 0.5), sprig::ShapeError);

  auto bad = column_matrix<double>({0.0, std::nan(""), 2.0});
  CHECK_THROWS_WITH(sprig::sample_token(bad.view(), 1, 1.0, 0.5), Contains("logit nan at row 1"));
  bad(1, 1) = std::numeric_limits<double>::infinity();
  CHECK_THROWS_WITH(sprig::sample_token(bad.view(), 1, 0.0, 0.5), Contains("logit inf at row 1"));
  const auto none = column_matrix<double>({-INFINITY, -INFINITY});
  CHECK_THROWS_WITH(sprig::sample_token(none.view(), 1, 1.0, 0.5), Contains("every logit of column 1 is -inf"));
}

TEST_CASE("generate continues a prompt, cropping the context to the block", "[nn][sampling]") {
  SuccessorLM lm;
  const std::vector<std::int32_t> prompt{2, 5};
  const auto out = sprig::generate(lm, prompt, 6, 1.0, 123);
  CHECK(out == std::vector<std::int32_t>{2, 5, 6, 0, 1, 2, 3, 4});
  REQUIRE(lm.contexts.size() == 6);
  // the model saw the last min(block, length) tokens of what had been generated
  for (std::size_t i = 0; i < lm.contexts.size(); ++i) {
    const std::size_t len = std::min<std::size_t>(4, prompt.size() + i);
    const std::vector<std::int32_t> expected(out.begin() + static_cast<std::ptrdiff_t>(prompt.size() + i - len),
                                             out.begin() + static_cast<std::ptrdiff_t>(prompt.size() + i));
    CHECK(lm.contexts[i] == expected);
  }
  // a prompt longer than the block is cropped too
  SuccessorLM lm2;
  const std::vector<std::int32_t> long_prompt{0, 1, 2, 3, 4, 5};
  CHECK(sprig::generate(lm2, long_prompt, 1, 0.0, 0) == std::vector<std::int32_t>{0, 1, 2, 3, 4, 5, 6});
  CHECK(lm2.contexts.front() == std::vector<std::int32_t>{2, 3, 4, 5});
  // nothing to generate: the prompt, no forward
  SuccessorLM lm3;
  CHECK(sprig::generate(lm3, prompt, 0, 1.0, 0) == prompt);
  CHECK(lm3.contexts.empty());
}

TEST_CASE("generate: temperature 0 is greedy and seed-independent; a seed fixes a sampled run", "[nn][sampling]") {
  NoisyLM lm;
  const std::vector<std::int32_t> prompt{3};
  const auto greedy = sprig::generate(lm, prompt, 12, 0.0, 1);
  CHECK(sprig::generate(lm, prompt, 12, 0.0, 99) == greedy);
  // each greedy token is the argmax of the logits of its context, computed here
  for (std::size_t i = 1; i < greedy.size(); ++i) {
    const std::size_t len = std::min<std::size_t>(5, i);
    std::span<const std::int32_t> ctx(greedy.data() + (i - len), len);
    const auto logits = lm.forward(ctx, 1, static_cast<std::int64_t>(len));
    std::int64_t best = 0;
    for (std::int64_t r = 1; r < logits.rows(); ++r)
      if (logits(r, logits.cols() - 1) > logits(best, logits.cols() - 1)) best = r;
    CHECK(greedy[i] == best);
  }

  const auto a = sprig::generate(lm, prompt, 40, 1.0, 7);
  const auto b = sprig::generate(lm, prompt, 40, 1.0, 7);
  const auto c = sprig::generate(lm, prompt, 40, 1.0, 8);
  CHECK(a == b);
  CHECK(a != c);
  CHECK(a != std::vector<std::int32_t>(greedy.begin(), greedy.end()));
  // the i-th new token uses u = CounterRng(seed, i, kSampleStream).uniform01()
  for (std::size_t i = 1; i < a.size(); ++i) {
    const std::size_t len = std::min<std::size_t>(5, i);
    const auto logits =
        lm.forward(std::span<const std::int32_t>(a.data() + (i - len), len), 1, static_cast<std::int64_t>(len));
    sprig::CounterRng rng(7, i - 1, sprig::kSampleStream);
    CHECK(a[i] == sprig::sample_token(logits, logits.cols() - 1, 1.0, rng.uniform01()));
  }
}

TEST_CASE("generate rejects bad arguments before the model runs", "[nn][sampling]") {
  NoisyLM lm;
  const std::vector<std::int32_t> prompt{1, 2};
  CHECK_THROWS_WITH(sprig::generate(lm, std::span<const std::int32_t>(), 3, 1.0, 0), Contains("prompt is empty"));
  CHECK_THROWS_WITH(sprig::generate(lm, prompt, -1, 1.0, 0), Contains("new_tokens -1"));
  CHECK_THROWS_WITH(sprig::generate(lm, prompt, 3, -1.0, 0), Contains("generate: temperature -1"));
  CHECK_THROWS_AS(sprig::generate(lm, prompt, 3, std::nan(""), 0), sprig::ArgumentError);
  CHECK(lm.calls == 0);
  SuccessorLM no_block;
  no_block.block = 0;
  CHECK_THROWS_WITH(sprig::generate(no_block, prompt, 3, 1.0, 0), Contains("block_size() is 0"));
  BrokenLM broken;
  CHECK_THROWS_AS(sprig::generate(broken, prompt, 3, 1.0, 0), sprig::ShapeError);
  CHECK_THROWS_WITH(sprig::generate(broken, prompt, 3, 1.0, 0), Contains("3x1 logits for a context of 2 tokens"));
}
