#include "sprig/nn/gpt_generate.hpp"

#include <cmath>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "sprig/core/rng.hpp"
#include "sprig/kernels/narrow_spmm.hpp"
#include "sprig/kernels/reference.hpp"
#include "sprig/nn/block_sparse_linear.hpp"
#include "sprig/nn/gpt.hpp"
#include "sprig/nn/sampling.hpp"

using namespace sprig;

namespace {

constexpr GPTConfig kSmall{.layers = 2, .heads = 2, .d_model = 16, .d_ff = 32, .block_size = 8, .vocab = 11};

const std::vector<GPTBlockDensity> kSparse = {{.qkv = 0.5, .proj = 1.0, .fc = 0.5, .fc_proj = 0.5},
                                              {.qkv = 0.5, .proj = 0.5, .fc = 1.0, .fc_proj = 0.5}};

std::vector<std::int32_t> prompt_of(std::int64_t len, std::int64_t vocab) {
  std::vector<std::int32_t> p;
  for (std::int64_t i = 0; i < len; ++i) p.push_back(static_cast<std::int32_t>((3 * i + 1) % vocab));
  return p;
}

// Dense parameters (embeddings, norms, dense projections, head) redrawn in [-0.4, 0.4), far
// from the init's small embeddings, so the logits are spread and not near ties.
template <class Model>
void spread_weights(Model& model) {
  std::uint64_t k = 0;
  model.for_each_parameter([&](auto& p) {
    if constexpr (requires { p.value; }) {
      CounterRng rng(99, k++, 0);
      for (auto& v : p.value) v = static_cast<float>(rng.uniform01() - 0.5) * 0.8f;
    }
  });
}

// The generator against full-window recomputation (sprig::generate) and GPT::forward's logits.
template <class Model>
void check_against_full_forward(Model& model) {
  const std::int64_t block = model.block_size(), vocab = model.vocab_size();
  for (const std::int64_t len : {std::int64_t{1}, std::int64_t{5}, block - 1}) {
    const std::vector<std::int32_t> prompt = prompt_of(len, vocab);
    for (const double temperature : {0.0, 1.0}) {
      CAPTURE(len, temperature);
      const auto full = generate(model, prompt, 3 * block, temperature, 42);  // past the block size
      const auto cached = generate_cached(model, prompt, 3 * block, temperature, 42);
      CHECK(cached == full);
    }
    // logits of the last position after a prefill, then after each single-token append
    GPTGenerator<Model> gen(model);
    std::vector<std::int32_t> context = prompt;
    ConstMatrixView<float> logits = gen.append(context);
    for (std::int32_t next = 0;; next = (next + 4) % static_cast<std::int32_t>(vocab)) {
      const auto z = model.forward(context, 1, std::ssize(context));
      for (std::int64_t v = 0; v < vocab; ++v) {
        CAPTURE(len, std::ssize(context), v);
        CHECK(logits(v, 0) == Approx(z(v, std::ssize(context) - 1)).margin(1e-5).epsilon(1e-5));
      }
      if (std::ssize(context) == block) break;
      context.push_back(next);
      logits = gen.append(std::span<const std::int32_t>(&context.back(), 1));
    }
    CHECK(gen.length() == block);
  }
}

}  // namespace

TEST_CASE("GPTGenerator gives the tokens and logits of full-window recomputation", "[nn][gpt][generate]") {
  SECTION("dense") {
    GPT<float> model(kSmall, {}, {.seed = 3});
    spread_weights(model);
    check_against_full_forward(model);
  }
  SECTION("sparse (SparseLinear, narrow_spmm at one column)") {
    GPT<float> model(kSmall, kSparse, {.seed = 4});
    spread_weights(model);
    check_against_full_forward(model);
  }
  SECTION("block-sparse (BlockSparseLinear 4x4)") {
    GPT<float, std::int32_t, BlockSparseLinear<float, std::int32_t, 4, 4>> model(kSmall, kSparse, {.seed = 5});
    spread_weights(model);
    check_against_full_forward(model);
  }
}

TEST_CASE("GPTGenerator rejects bad input, naming it", "[nn][gpt][generate]") {
  GPT<float> model(kSmall, kSparse, {.seed = 1});
  GPTGenerator<GPT<float>> gen(model);
  const std::vector<std::int32_t> ok = {1, 2}, bad = {1, 11}, negative = {-1};
  using Catch::Matchers::Contains;
  CHECK_THROWS_AS(gen.generate({}, 3, 0.0, 1), ArgumentError);
  CHECK_THROWS_WITH(gen.generate({}, 3, 0.0, 1), Contains("prompt is empty"));
  CHECK_THROWS_AS(gen.generate(bad, 3, 0.0, 1), ArgumentError);
  CHECK_THROWS_WITH(gen.generate(bad, 3, 0.0, 1), Contains("token id 11 at index 1"));
  CHECK_THROWS_AS(gen.generate(negative, 3, 0.0, 1), ArgumentError);
  CHECK_THROWS_WITH(gen.generate(negative, 3, 0.0, 1), Contains("token id -1 at index 0"));
  CHECK_THROWS_AS(gen.generate(ok, -1, 0.0, 1), ArgumentError);
  CHECK_THROWS_WITH(gen.generate(ok, -1, 0.0, 1), Contains("new_tokens -1"));
  CHECK_THROWS_AS(gen.generate(ok, 3, -0.5, 1), ArgumentError);
  CHECK_THROWS_WITH(gen.generate(ok, 3, -0.5, 1), Contains("temperature"));
  CHECK_THROWS_AS(gen.append({}), ArgumentError);
  CHECK_THROWS_WITH(gen.append({}), Contains("no tokens"));
  CHECK_THROWS_AS(gen.append(bad), ArgumentError);
  CHECK_THROWS_WITH(gen.append(bad), Contains("token id 11"));
  const std::vector<std::int32_t> window(static_cast<std::size_t>(kSmall.block_size), 1);
  gen.append(window);
  CHECK_THROWS_AS(gen.append(ok), ArgumentError);
  CHECK_THROWS_WITH(gen.append(ok), Contains("> block size 8"));
  CHECK(gen.length() == kSmall.block_size);  // the refused call changed nothing
  CHECK(gen.generate(ok, 0, 0.0, 1) == ok);
}

TEMPLATE_TEST_CASE("narrow_spmm equals the reference spmm at 1 to 8 columns", "[kernels][narrow_spmm]", float, double) {
  using T = TestType;
  // 37 x 29 at density 0.2, with an empty row and a full row, then one more row of padding
  Matrix<T> dense(37, 29);
  CounterRng rng(7, 0, 0);
  for (std::int64_t i = 0; i < dense.rows(); ++i)
    for (std::int64_t c = 0; c < dense.cols(); ++c) {
      const bool live = i == 5 || (i != 3 && rng.uniform01() < 0.2);
      dense(i, c) = live ? static_cast<T>(rng.uniform01() - 0.5) : T(0);
    }
  const auto W = PaddedCSR<T, std::int32_t>::from_dense(dense.view(), T(0), 0.5);
  std::vector<T> bias(37);
  for (T& b : bias) b = static_cast<T>(rng.uniform01());
  for (std::int64_t n = 1; n <= kNarrowSpmmMaxColumns; ++n) {
    CAPTURE(n);
    Matrix<T> X(29, 11), Y(37, 11, T(-7)), R(37, n);  // X and Y strided sub-views
    for (std::int64_t c = 0; c < 29; ++c)
      for (std::int64_t b = 0; b < 11; ++b) X(c, b) = static_cast<T>(rng.uniform01() - 0.5);
    const ConstMatrixView<T> x = X.view().block(0, 1, 29, n);
    narrow_spmm(W, x, Y.view().block(0, 2, 37, n), std::span<const T>(bias));
    reference::spmm(W, x, R.view());
    for (std::int64_t i = 0; i < 37; ++i) {
      for (std::int64_t b = 0; b < n; ++b) CHECK(Y(i, 2 + b) == Approx(R(i, b) + bias[i]).margin(1e-6));
      CHECK(Y(i, 1) == T(-7));  // outside the view: untouched
      if (n + 2 < 11) CHECK(Y(i, n + 2) == T(-7));
    }
    narrow_spmm(W, x, Y.view().block(0, 2, 37, n));  // no bias
    for (std::int64_t b = 0; b < n; ++b) CHECK(Y(3, 2 + b) == T(0));
  }
  Matrix<T> X9(29, 9), Y9(37, 9);
  CHECK_THROWS_AS(narrow_spmm(W, X9.view(), Y9.view()), ArgumentError);
  CHECK_THROWS_WITH(narrow_spmm(W, X9.view(), Y9.view()), Catch::Matchers::Contains("9 columns"));
  Matrix<T> Xbad(28, 1), Y1(37, 1);
  CHECK_THROWS_AS(narrow_spmm(W, Xbad.view(), Y1.view()), ShapeError);
}
