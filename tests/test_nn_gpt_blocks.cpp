// GPT with block-sparse projections (GPT<T, Index, BlockSparseLinear<T, Index, R, C>>, built
// by models::build_block_gpt): central-difference gradients at in-matrix entries of live blocks
// and of the dense parameters, the block-grid densities of the builder, RigL updates on the
// block grid through dst::apply_step, and a training-state round trip that resumes bitwise.
#include "sprig/models/gpt.hpp"

#include <bit>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <vector>

#include <catch2/catch.hpp>

#include "sprig/dst/rigl.hpp"
#include "sprig/io/checkpoint.hpp"
#include "sprig/nn/softmax_cross_entropy.hpp"
#include "sprig/optim/adamw.hpp"
#include "sprig/optim/clip.hpp"
#include "file_test_support.hpp"
#include "test_nn_gradcheck.hpp"

using namespace sprig;

template <class T>
using BlockGPT = GPT<T, std::int32_t, BlockSparseLinear<T, std::int32_t, 4, 4>>;

static_assert(TrainableModel<BlockGPT<float>>);

namespace {

// d_ff = 22: fc (22 x 16) and fc_proj (16 x 22) have edge blocks partly outside the matrix.
models::GPTSpec tiny_spec(std::uint64_t seed = 3) {
  return {.config = {.layers = 2, .heads = 2, .d_model = 16, .d_ff = 22, .block_size = 8, .vocab = 11},
          .attn_sparsity = 0.5,
          .ffn_sparsity = 0.6,
          .seed = seed,
          .growth_reserve = 0.25};
}

std::vector<std::int32_t> ids(std::size_t n, std::uint64_t seed) {
  CounterRng rng(seed, 5);
  std::vector<std::int32_t> out(n);
  for (auto& t : out) t = static_cast<std::int32_t>(rng.uniform(0.0, 11.0)) % 11;
  return out;
}

template <class T>
T step(BlockGPT<T>& model, const std::vector<std::int32_t>& tokens, const std::vector<int>& labels) {
  SoftmaxCrossEntropy<T> ce;
  const auto Z = model.forward(tokens, 2, 8);
  const T loss = ce.forward_backward(Z, labels, model.output_grad());
  model.backward();
  return loss;
}

// Trains steps [from, to) with AdamW and RigL (data of step t from t alone).
template <class T>
void train(BlockGPT<T>& model, AdamW<T>& opt, dst::RigL<T, std::int32_t>& rigl, std::int64_t from, std::int64_t to) {
  for (std::int64_t t = from; t < to; ++t) {
    const auto tokens = ids(16, 100 + static_cast<std::uint64_t>(t));
    const auto y = ids(16, 200 + static_cast<std::uint64_t>(t));
    step(model, tokens, std::vector<int>(y.begin(), y.end()));
    dst::apply_step(rigl, opt, model, t);
  }
}

// Every parameter's values and state, as bits, in for_each_parameter order; a block-sparse
// one block by block (row, column, values, state), rows in order and slot order within a row
// (what a tight reload keeps), so storage layout does not count.
template <class T>
std::vector<std::uint64_t> image(const BlockGPT<T>& model) {
  using Bits = std::conditional_t<sizeof(T) == 4, std::uint32_t, std::uint64_t>;
  std::vector<std::uint64_t> out;
  auto put = [&](T v) { out.push_back(std::bit_cast<Bits>(v)); };
  model.for_each_parameter([&](const auto& p) {
    if constexpr (requires { p.matrix.pattern(); }) {
      p.matrix.for_each_block([&](std::int64_t i, std::int64_t j, std::int64_t s, const T* b) {
        out.push_back(static_cast<std::uint64_t>(i));
        out.push_back(static_cast<std::uint64_t>(j));
        for (int q = 0; q < 16; ++q) put(b[q]);
        for (const auto& st : p.state)
          for (int q = 0; q < 16 && !st.empty(); ++q) put(st[static_cast<std::size_t>(s * 16 + q)]);
      });
    } else {
      for (T v : p.value) put(v);
      for (const auto& st : p.state)
        for (T v : st) put(v);
    }
  });
  return out;
}

}  // namespace

TEST_CASE("block GPT: central differences at live block entries and dense parameters", "[nn][gpt][blocks][gradcheck]") {
  BlockGPT<double> model = models::build_block_gpt<double, std::int32_t, 4, 4>(tiny_spec());
  REQUIRE(model.sparse_layers().size() == 8);
  for (const auto& ref : model.sparse_layers()) CHECK(ref.blocks != nullptr);
  const auto tokens = ids(16, 11);
  const auto y = ids(16, 12);
  const std::vector<int> labels(y.begin(), y.end());
  step(model, tokens, labels);
  SoftmaxCrossEntropy<double> ce;
  auto loss = [&] { return double(ce.forward(model.forward(tokens, 2, 8), labels)); };
  std::size_t blocks = 0;
  model.for_each_parameter([&](auto& p) {
    std::vector<double> analytic(p.grad.begin(), p.grad.end());
    if constexpr (requires { p.matrix.pattern(); }) {
      ++blocks;
      const auto& W = p.matrix;
      std::vector<std::size_t> inside;  // in-matrix entries of live blocks
      W.for_each_block([&](std::int64_t i, std::int64_t j, std::int64_t s, const double*) {
        for (std::int64_t r = 0; r < 4; ++r)
          for (std::int64_t c = 0; c < 4; ++c)
            if (i * 4 + r < W.rows() && j * 4 + c < W.cols()) inside.push_back(std::size_t(s * 16 + r * 4 + c));
      });
      std::vector<std::size_t> which;
      for (std::size_t k : sprig_test::some_indices(inside.size(), 12)) which.push_back(inside[k]);
      sprig_test::check_gradient(loss, p.matrix.values(), analytic, which);
    } else {
      sprig_test::check_gradient(loss, std::span<double>(p.value), analytic,
                                 sprig_test::some_indices(p.value.size(), 6));
    }
  });
  CHECK(blocks == 8);
}

TEST_CASE("block GPT: the builder spreads densities over block grids", "[nn][gpt][blocks]") {
  const models::GPTSpec spec = tiny_spec();
  const auto model = models::build_block_gpt<float, std::int32_t, 4, 4>(spec);
  const auto densities = models::gpt_densities(spec);  // uniform: the same on grids and elements
  const auto* fc = std::get_if<BlockSparseLinear<float, std::int32_t, 4, 4>>(&model.projection(1, GPTProjection::fc));
  REQUIRE(fc);
  CHECK(fc->weight.matrix.nnz_blocks() == std::llround(densities[1].fc * 6 * 4));  // 22 x 16: a 6 x 4 grid
  models::GPTSpec erk = spec;
  erk.distribution = models::Distribution::erk;
  erk.ffn_sparsity = 0.0;  // attention only: qkv 12 x 4 blocks, proj 4 x 4
  const auto m = models::build_block_gpt<float, std::int32_t, 4, 4>(erk);
  std::int64_t live = 0;
  for (auto which : {GPTProjection::qkv, GPTProjection::proj})
    for (std::size_t l = 0; l < 2; ++l)
      live += std::get<BlockSparseLinear<float, std::int32_t, 4, 4>>(m.projection(l, which)).weight.matrix.nnz_blocks();
  CHECK(std::abs(live - std::llround(0.5 * 2 * (48 + 16))) <= 2);  // ERK keeps the group's block count
  models::GPTSpec none = spec;
  none.attn_sparsity = 0.999;
  CHECK_THROWS_WITH((models::build_block_gpt<float, std::int32_t, 4, 4>(none)), Catch::Contains("keeps no block"));
}

TEST_CASE("block GPT: RigL on the block grid, and a checkpoint that resumes bitwise", "[nn][gpt][blocks][dst]") {
  using T = float;
  const dst::UpdateSchedule schedule{.delta_t = 3, .t_begin = 0, .t_end = 30, .alpha = 0.3};
  BlockGPT<T> model = models::build_block_gpt<T, std::int32_t, 4, 4>(tiny_spec());
  AdamW<T> opt({.lr = 1e-2});
  dst::RigL<T, std::int32_t> rigl(schedule, 5);
  std::vector<std::int64_t> counts;
  for (const auto& ref : model.sparse_layers()) counts.push_back(ref.layer->weight.matrix.nnz());
  std::vector<std::int64_t> cols_before;
  for (auto c : std::get<1>(model.projection(0, GPTProjection::qkv)).weight.matrix.pattern().col_indices())
    cols_before.push_back(c);
  train(model, opt, rigl, 1, 7);  // updates at 3 and 6
  CHECK(rigl.updates() == 2);
  std::size_t k = 0;
  for (const auto& ref : model.sparse_layers()) CHECK(ref.layer->weight.matrix.nnz() == counts[k++]);
  std::vector<std::int64_t> cols_after;
  for (auto c : std::get<1>(model.projection(0, GPTProjection::qkv)).weight.matrix.pattern().col_indices())
    cols_after.push_back(c);
  CHECK(cols_after != cols_before);  // the topology moved
  model.for_each_parameter([](const auto& p) {
    if constexpr (requires { p.matrix.pattern(); }) p.matrix.check_invariants();
  });

  const sprig::test::TempDir dir;  // a fixed name would collide with a concurrent run of the suite
  const auto file = dir.path / "block_gpt.state";
  save_training_state(file, model, opt, {.step = 7, .seed = 5}, &rigl);
  train(model, opt, rigl, 7, 12);
  const auto straight = image(model);

  BlockGPT<T> other = models::build_block_gpt<T, std::int32_t, 4, 4>(tiny_spec(99));
  AdamW<T> opt2({.lr = 1e-2});
  dst::RigL<T, std::int32_t> rigl2(schedule, 5);
  const TrainingProgress at = load_training_state(file, other, opt2, &rigl2);
  CHECK(at.step == 7);
  other.reserve_growth(0.25);
  train(other, opt2, rigl2, 7, 12);
  CHECK(image(other) == straight);
}

TEST_CASE("block GPT: gradient clipping and memory accounting count live blocks", "[nn][gpt][blocks][clip]") {
  BlockGPT<double> model = models::build_block_gpt<double, std::int32_t, 4, 4>(tiny_spec());
  const auto tokens = ids(16, 31);
  const auto y = ids(16, 32);
  step(model, tokens, std::vector<int>(y.begin(), y.end()));
  double sum = 0;  // by hand: every in-matrix entry of live blocks, every dense element
  std::int64_t live = 0;
  model.for_each_parameter([&](const auto& p) {
    if constexpr (requires { p.matrix.pattern(); }) {
      p.matrix.for_each_block([&](std::int64_t, std::int64_t, std::int64_t s, const double*) {
        for (int q = 0; q < 16; ++q) sum += p.grad[std::size_t(s * 16 + q)] * p.grad[std::size_t(s * 16 + q)];
        live += 16;
      });
    } else {
      for (double g : p.grad) sum += g * g;
      live += p.rows * p.cols;
    }
  });
  CHECK(grad_norm(model) == Approx(std::sqrt(sum)).epsilon(1e-12));
  CHECK(parameter_memory(model).parameters == live);
  const double before = clip_grad_norm(model, 0.5 * std::sqrt(sum));
  CHECK(before == Approx(std::sqrt(sum)).epsilon(1e-12));
  CHECK(grad_norm(model) == Approx(0.5 * std::sqrt(sum)).epsilon(1e-6));
}
