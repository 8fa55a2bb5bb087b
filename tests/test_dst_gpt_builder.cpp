#include "sprig/models/gpt.hpp"

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <tuple>
#include <utility>
#include <variant>
#include <vector>

#include <catch2/catch.hpp>

#include "sprig/dst/granet.hpp"
#include "sprig/dst/live_count.hpp"
#include "sprig/dst/rigl.hpp"
#include "sprig/nn/softmax_cross_entropy.hpp"
#include "sprig/optim/adamw.hpp"
#include "test_nn_gradcheck.hpp"

using namespace sprig;
using namespace sprig::dst;
using namespace sprig::models;

namespace {

constexpr GPTConfig kConfig{.layers = 3, .heads = 4, .d_model = 32, .d_ff = 128, .block_size = 16, .vocab = 20};

// The live count of projection j of block l (the full size for a dense one), and its size.
template <class T, class Index>
std::pair<std::int64_t, std::int64_t> live_and_size(GPT<T, Index>& model, std::size_t l, GPTProjection j) {
  return std::visit(
      [](const auto& layer) -> std::pair<std::int64_t, std::int64_t> {
        const std::int64_t size = layer.in_features() * layer.out_features();
        if constexpr (requires { layer.weight.live_count(); })
          return {layer.weight.live_count(), size};
        else
          return {size, size};
      },
      model.projection(l, j));
}

template <class T, class Index>
bool is_dense(GPT<T, Index>& model, std::size_t l, GPTProjection j) {
  return std::holds_alternative<Linear<T>>(model.projection(l, j));
}

std::string message_of(auto&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "no throw";
}

// Each sparse layer's live count against live_count(its size, sparsities[k]), over the block
// grid in a block model (the stand-in's shape).
template <class Model>
void check_live_counts(Model& model, const std::vector<double>& sparsities) {
  const auto refs = model.sparse_layers();
  REQUIRE(refs.size() == sparsities.size());
  for (std::size_t k = 0; k < refs.size(); ++k) {
    INFO("sparse layer " << k << " (position " << refs[k].position << ")");
    const auto& m = refs[k].layer->weight.matrix;
    CHECK(refs[k].layer->weight.live_count() == live_count(m.rows() * m.cols(), sparsities[k]));
  }
}

// A fixed batch of 2 sequences of 8 tokens over a vocabulary of 11, and its labels.
struct FixedBatch {
  std::vector<std::int32_t> tokens;
  std::vector<int> labels;
  FixedBatch() {
    for (int n = 0; n < 16; ++n) {
      tokens.push_back((n * 7 + 3) % 11);
      labels.push_back((n * 5 + 1) % 11);
    }
  }
};

// `steps` steps of AdamW (lr 1e-2, no decay) on `batch`, through apply_step with `algorithm`;
// returns the first and the last loss.
template <class Model, class Algorithm>
std::pair<double, double> train_on(Model& model, Algorithm& algorithm, const FixedBatch& batch, std::int64_t steps) {
  using T = typename Model::value_type;
  SoftmaxCrossEntropy<T> ce;
  AdamW<T> opt({.lr = 1e-2, .weight_decay = 0.0});
  T first = 0, last = 0;
  for (std::int64_t t = 0; t < steps; ++t) {
    const auto Z = model.forward(batch.tokens, 2, 8);
    last = ce.forward_backward(Z, batch.labels, model.output_grad());
    if (t == 0) first = last;
    model.backward();
    apply_step(algorithm, opt, model, t);
  }
  return {first, last};
}

}  // namespace

TEMPLATE_TEST_CASE("build_gpt uniform: every attention matrix at 1 - attn_sparsity, every FFN one at 1 - ffn_sparsity",
                   "[dst][gpt_builder]", (std::tuple<float, std::int32_t>), (std::tuple<double, std::int64_t>),
                   (std::tuple<float, std::int16_t>)) {
  using T = std::tuple_element_t<0, TestType>;
  using Index = std::tuple_element_t<1, TestType>;
  const GPTSpec spec{.config = kConfig, .attn_sparsity = 0.7, .ffn_sparsity = 0.9, .seed = 4};
  const auto dens = gpt_densities(spec);
  REQUIRE(dens.size() == 3);
  for (const auto& b : dens) {
    CHECK(b.qkv == 1.0 - 0.7);
    CHECK(b.proj == 1.0 - 0.7);
    CHECK(b.fc == 1.0 - 0.9);
    CHECK(b.fc_proj == 1.0 - 0.9);
  }
  auto model = build_gpt<T, Index>(spec);
  CHECK(model.sparse_layers().size() == 12);
  // each layer holds round(density x size) live weights: 0.3 x 3072, 0.3 x 1024, 0.1 x 4096
  const std::int64_t expected[] = {922, 307, 410, 410};
  for (std::size_t l = 0; l < 3; ++l)
    for (std::size_t j = 0; j < 4; ++j) {
      INFO("block " << l << " projection " << j);
      CHECK_FALSE(is_dense(model, l, GPTProjection(j)));
      CHECK(live_and_size(model, l, GPTProjection(j)).first == expected[j]);
    }
  // embeddings, layer norms and the head stay dense (the 12 sparse layers are the projections)
  CHECK(model.head().weight.size() == 20 * 32);
  CHECK(model.token_embedding().table.size() == 20 * 32);
  // the builder's model is the one the constructor builds from the same densities and options
  GPT<T, Index> direct(kConfig, dens, {.seed = 4});
  std::vector<T> a, b;
  auto collect = [](std::vector<T>& out) {
    return [&out](const auto& p) {
      if constexpr (requires { p.matrix.values(); })
        out.insert(out.end(), p.matrix.values().begin(), p.matrix.values().end());
      else
        out.insert(out.end(), p.value.begin(), p.value.end());
    };
  };
  model.for_each_parameter(collect(a));
  direct.for_each_parameter(collect(b));
  CHECK(a == b);
}

TEST_CASE("build_gpt: a group at sparsity 0 is dense Linear layers", "[dst][gpt_builder]") {
  auto ffn_only = build_gpt<float>({.config = kConfig, .attn_sparsity = 0, .ffn_sparsity = 0.9});
  CHECK(ffn_only.sparse_layers().size() == 6);
  for (std::size_t l = 0; l < 3; ++l) {
    CHECK(is_dense(ffn_only, l, GPTProjection::qkv));
    CHECK(is_dense(ffn_only, l, GPTProjection::proj));
    CHECK_FALSE(is_dense(ffn_only, l, GPTProjection::fc));
    CHECK_FALSE(is_dense(ffn_only, l, GPTProjection::fc_proj));
  }
  auto dense = build_gpt<double>({.config = kConfig, .distribution = Distribution::erk});
  CHECK(dense.sparse_layers().empty());
  CHECK(dense.weight_bytes() == dense.dense_weight_bytes());
}

TEMPLATE_TEST_CASE("build_gpt ERK: each group's live count is its target, proj denser than qkv", "[dst][gpt_builder]",
                   (std::tuple<float, std::int32_t>), (std::tuple<double, std::int64_t>)) {
  using T = std::tuple_element_t<0, TestType>;
  using Index = std::tuple_element_t<1, TestType>;
  const double sa = 0.3, sf = 0.9;
  const GPTSpec spec{.config = kConfig, .attn_sparsity = sa, .ffn_sparsity = sf, .distribution = Distribution::erk};
  const auto dens = gpt_densities(spec);
  // ERK by hand for d = 32: qkv 3d x d has weight 4d / 3d^2, proj d x d has 2d / d^2; with
  // eps solving eps (4d + 2d) = (1 - S) 4 d^2: eps = 0.7 x 4 x 32 / 6, qkv density eps 4 / 3d,
  // proj eps 2 / d (both < 1, so neither is made dense). fc and fc_proj have one weight: 1 - S.
  const double eps = (1.0 - sa) * 4.0 * 32.0 / 6.0;
  for (const auto& b : dens) {
    CHECK(b.qkv == Approx(eps * 4.0 / 96.0).epsilon(1e-12));
    CHECK(b.proj == Approx(eps * 2.0 / 32.0).epsilon(1e-12));
    CHECK(b.fc == Approx(1.0 - sf).epsilon(1e-12));
    CHECK(b.fc_proj == Approx(1.0 - sf).epsilon(1e-12));
  }
  auto model = build_gpt<T, Index>(spec);
  std::int64_t attn_live = 0, attn_size = 0, ffn_live = 0, ffn_size = 0;
  for (std::size_t l = 0; l < 3; ++l)
    for (std::size_t j = 0; j < 4; ++j) {
      const auto [live, size] = live_and_size(model, l, GPTProjection(j));
      (j < 2 ? attn_live : ffn_live) += live;
      (j < 2 ? attn_size : ffn_size) += size;
    }
  CHECK(attn_size == 3 * 4 * 32 * 32);
  CHECK(ffn_size == 3 * 2 * 32 * 128);
  // each of the 6 layers of a group rounds its own count: within 3 of the target
  CHECK(std::abs(double(attn_live) - (1.0 - sa) * double(attn_size)) <= 3.0);
  CHECK(std::abs(double(ffn_live) - (1.0 - sf) * double(ffn_size)) <= 3.0);
}

TEST_CASE("build_gpt ERK: a matrix whose share exceeds 1 is a dense Linear", "[dst][gpt_builder]") {
  // at attention sparsity 0.1 proj's ERK density 9.6 x 2 / 32 > 1: proj is dense and qkv
  // takes the rest, 0.9 x 4 d^2 - d^2 = 2.6 d^2 live of its 3 d^2
  const GPTSpec spec{.config = kConfig, .attn_sparsity = 0.1, .distribution = Distribution::erk};
  const auto dens = gpt_densities(spec);
  for (const auto& b : dens) {
    CHECK(b.proj == 1.0);
    CHECK(b.qkv == Approx(2.6 / 3.0).epsilon(1e-12));
    CHECK(b.fc == 1.0);
  }
  auto model = build_gpt<float>(spec);
  CHECK(model.sparse_layers().size() == 3);
  for (std::size_t l = 0; l < 3; ++l) {
    CHECK(is_dense(model, l, GPTProjection::proj));
    CHECK_FALSE(is_dense(model, l, GPTProjection::qkv));
  }
}

TEST_CASE("build_gpt and gpt_densities: bad specs throw naming the call, the field and the value",
          "[dst][gpt_builder][errors]") {
  for (double bad : {1.0, -0.1, 1.5, std::numeric_limits<double>::quiet_NaN()}) {
    INFO("sparsity " << bad);
    CHECK_THROWS_AS(build_gpt<float>({.config = kConfig, .attn_sparsity = bad}), ArgumentError);
    CHECK_THROWS_AS(gpt_densities({.config = kConfig, .ffn_sparsity = bad}), ArgumentError);
  }
  CHECK(message_of([] { build_gpt<float>({.config = kConfig, .attn_sparsity = 1.0}); }) ==
        "models::build_gpt: attn_sparsity 1 outside [0, 1)");
  CHECK(message_of([] { build_gpt<float>({.config = kConfig, .ffn_sparsity = -0.25}); }) ==
        "models::build_gpt: ffn_sparsity -0.25 outside [0, 1)");
  CHECK(message_of([] { gpt_densities({.config = kConfig, .attn_sparsity = 2}); }) ==
        "models::gpt_densities: attn_sparsity 2 outside [0, 1)");
  GPTConfig odd = kConfig;
  odd.heads = 5;
  CHECK(message_of([&] { build_gpt<float>({.config = odd}); }) ==
        "models::build_gpt: d_model 32 is not divisible by heads 5");
  GPTConfig none = kConfig;
  none.layers = 0;
  CHECK(message_of([&] { gpt_densities({.config = none}); }) == "models::gpt_densities: layers must be >= 1, got 0");
  CHECK_THROWS_WITH(build_gpt<float>({.config = kConfig, .padding_ratio = 65}),
                    Catch::Contains("models::build_gpt: padding_ratio 65"));
  CHECK_THROWS_WITH(build_gpt<float>({.config = kConfig, .growth_reserve = -1}),
                    Catch::Contains("models::build_gpt: growth_reserve -1"));
  // a projection whose share rounds to nothing: fc is 4 x 2 at density 0.05
  const GPTConfig tiny{.layers = 1, .heads = 1, .d_model = 2, .d_ff = 4, .block_size = 4, .vocab = 3};
  CHECK(message_of([&] { build_gpt<float>({.config = tiny, .ffn_sparsity = 0.95}); }) ==
        "models::build_gpt: block 0's fc (4x2) at density 0.05 keeps no weight");
  // fc_proj's 40000 columns do not fit a 16-bit index
  const GPTConfig wide{.layers = 1, .heads = 1, .d_model = 2, .d_ff = 40000, .block_size = 4, .vocab = 3};
  CHECK_THROWS_WITH((build_gpt<float, std::int16_t>({.config = wide, .ffn_sparsity = 0.5})),
                    Catch::Contains("block 0's fc_proj has 40000 columns"));
}

TEST_CASE("build_gpt with RigL: topology updates keep live counts and exact gradients", "[dst][gpt_builder][rigl]") {
  using T = double;
  const GPTConfig config{.layers = 2, .heads = 2, .d_model = 16, .d_ff = 32, .block_size = 8, .vocab = 11};
  auto model = build_gpt<T>({.config = config,
                             .attn_sparsity = 0.5,
                             .ffn_sparsity = 0.7,
                             .seed = 3,
                             .growth_reserve = SparseParameter<T, std::int32_t>::kGrowthReserve});
  REQUIRE(model.sparse_layers().size() == 8);
  std::vector<std::int64_t> live;
  std::vector<TopologyKey> keys;
  for (const auto& r : model.sparse_layers()) {
    live.push_back(r.layer->weight.live_count());
    keys.push_back(r.layer->weight.matrix.topology_key());
  }
  const FixedBatch batch;
  RigL<T, std::int32_t> rigl({.delta_t = 5, .t_begin = 0, .t_end = 30, .alpha = 0.3}, 1);
  const auto [first, last] = train_on(model, rigl, batch, 40);
  CHECK(last < first * 0.5);
  SoftmaxCrossEntropy<T> ce;
  const auto refs = model.sparse_layers();
  for (std::size_t k = 0; k < refs.size(); ++k) {
    INFO("sparse layer " << k);
    CHECK(refs[k].layer->weight.live_count() == live[k]);
    CHECK_FALSE(refs[k].layer->weight.matrix.topology_key() == keys[k]);
  }
  // after the updates the gradient of every sparse weight is still the loss's
  const auto Z = model.forward(batch.tokens, 2, 8);
  ce.forward_backward(Z, batch.labels, model.output_grad());
  model.backward();
  auto loss = [&] { return double(ce.forward(model.forward(batch.tokens, 2, 8), batch.labels)); };
  for (const auto& r : refs) {
    auto& p = r.layer->weight;
    std::vector<double> analytic(p.grad.begin(), p.grad.end());
    std::vector<std::size_t> slots;
    p.matrix.for_each_live([&](std::int64_t, std::int64_t, T, std::int64_t s) { slots.push_back(std::size_t(s)); });
    std::vector<std::size_t> which;
    for (std::size_t q : sprig_test::some_indices(slots.size(), 8)) which.push_back(slots[q]);
    sprig_test::check_gradient(loss, p.matrix.values(), analytic, which);
  }
}

TEST_CASE("gpt_sparsities: each sparse projection's sparsity in sparse_layers() order, as the builders draw it",
          "[dst][gpt_builder]") {
  const GPTSpec uniform{.config = kConfig, .attn_sparsity = 0.7, .ffn_sparsity = 0.9, .seed = 2};
  std::vector<double> expected;
  for (int l = 0; l < 3; ++l) expected.insert(expected.end(), {0.7, 0.7, 0.9, 0.9});
  CHECK(gpt_sparsities(uniform) == expected);
  CHECK(gpt_sparsities(uniform, 8, 8) == expected);  // uniform: the same fraction of every grid
  // a dense group is no part of the list (its projections are Linear)
  CHECK(gpt_sparsities({.config = kConfig, .ffn_sparsity = 0.9}) == std::vector<double>(6, 0.9));
  CHECK(gpt_sparsities({.config = kConfig}).empty());
  // ERK: proj gets 3/2 of qkv's density (models/gpt.hpp); the builders keep round((1 - s) x size)
  GPTSpec erk = uniform;
  erk.distribution = Distribution::erk;
  const std::vector<double> s = gpt_sparsities(erk);
  REQUIRE(s.size() == 12);
  CHECK((1.0 - s[1]) / (1.0 - s[0]) == Approx(1.5));
  auto model = build_gpt<float>(erk);
  check_live_counts(model, s);
  // over 8x1 block grids ERK weighs the shapes otherwise (qkv 12 x 32 blocks, fc 16 x 32, fc_proj 4 x 128)
  const std::vector<double> s8 = gpt_sparsities(erk, 8, 1);
  CHECK(s8 != s);
  auto blocks = build_block_gpt<float, std::int32_t, 8, 1>(erk);
  check_live_counts(blocks, s8);
  CHECK(message_of([] { gpt_sparsities({.config = kConfig, .attn_sparsity = 1.0}); }) ==
        "models::gpt_sparsities: attn_sparsity 1 outside [0, 1)");
  CHECK(message_of([&] { gpt_sparsities(uniform, 0, 4); }) ==
        "models::gpt_sparsities: block shape 0x4 (rows and columns must be >= 1)");
}

namespace {
// GraNet over a GPT built at `start`, pruning to `end`'s sparsities (gpt_sparsities over R x C
// grids): the model starts at the first list, holds live_count(size, end's) after the last
// update, and trains (the loss halves).
template <class Model>
void check_granet_prunes(Model model, const GPTSpec& start, const GPTSpec& end, std::int64_t R, std::int64_t C) {
  using T = typename Model::value_type;
  using Index = typename Model::index_type;
  const GraNetOptions options{.initial_sparsity = gpt_sparsities(start, R, C),
                              .final_sparsity = gpt_sparsities(end, R, C)};
  check_live_counts(model, options.initial_sparsity);
  GraNet<T, Index> granet({.delta_t = 4, .t_begin = 0, .t_end = 20, .alpha = 0.3}, 1, options);
  const auto [first, last] = train_on(model, granet, FixedBatch{}, 30);
  CHECK(granet.updates() == 6);  // steps 0, 4, ..., 20
  CHECK(last < first * 0.5);
  check_live_counts(model, options.final_sparsity);
}
}  // namespace

TEST_CASE("gpt_sparsities give GraNet a GPT's lists: pruned from one spec's sparsities to another's",
          "[dst][gpt_builder][granet]") {
  const GPTConfig config{.layers = 2, .heads = 2, .d_model = 16, .d_ff = 32, .block_size = 8, .vocab = 11};
  GPTSpec start{.config = config,
                .attn_sparsity = 0.3,
                .ffn_sparsity = 0.5,
                .distribution = Distribution::erk,
                .seed = 3,
                .growth_reserve = SparseParameter<double, std::int32_t>::kGrowthReserve};
  GPTSpec end = start;
  end.attn_sparsity = 0.6;
  end.ffn_sparsity = 0.8;
  SECTION("unstructured") { check_granet_prunes(build_gpt<double>(start), start, end, 1, 1); }
  SECTION("in 4x4 blocks") {
    check_granet_prunes(build_block_gpt<double, std::int32_t, 4, 4>(start), start, end, 4, 4);
  }
}
