// Per-layer control of the DST algorithms: excluded sparse layers keep their mask bit for bit
// while the others update; bad exclusions are rejected; constant_fan_in, the exclusions and
// an algorithm's configuration (GraNet's sparsities) travel in checkpoints.
#include "sprig/dst/algorithm.hpp"

#include <bit>
#include <cstdint>
#include <random>
#include <set>
#include <tuple>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>

#include "sprig/dst/granet.hpp"
#include "sprig/models/mlp.hpp"
#include "sprig/dst/rigl.hpp"
#include "sprig/dst/set.hpp"
#include "sprig/dst/snfs.hpp"
#include "sprig/io/checkpoint.hpp"
#include "sprig/nn/softmax_cross_entropy.hpp"
#include "sprig/optim/adamw.hpp"

using namespace sprig;

namespace {

using Model = Sequential<float, std::int32_t>;

// 10-32-24-20-3: three sparse layers (the output is dense).
Model make_model(double sparsity = 0.8) {
  return models::build_mlp<float, std::int32_t>(
      {.widths = {10, 32, 24, 20, 3}, .sparsity = sparsity, .seed = 4, .growth_reserve = 0.125});
}

// Trains steps [from, to); `last`, if given, receives the report of the last update step.
// (The data lives in this function: the layers' recorded inputs are only valid inside it.)
void train(Model& model, AdamW<float>& opt, dst::SparsityAlgorithm<float, std::int32_t>& algo, std::int64_t from,
           std::int64_t to, dst::UpdateReport* last = nullptr) {
  SoftmaxCrossEntropy<float> loss;
  Matrix<float> x(10, 8);
  std::vector<int> y(8);
  for (std::int64_t t = from; t < to; ++t) {
    std::mt19937 gen(static_cast<unsigned>(t));  // the data of step t, whatever ran before
    std::normal_distribution<float> n(0.0f, 1.0f);
    for (std::int64_t b = 0; b < 8; ++b) {
      y[b] = static_cast<int>(gen() % 3);
      for (std::int64_t f = 0; f < 10; ++f) x(f, b) = n(gen) + (f % 3 == y[b] ? 1.0f : 0.0f);
    }
    const auto z = model.forward(x);
    loss.forward_backward(z, y, model.output_grad());
    model.backward();
    dst::apply_step(algo, opt, model, t, last);
  }
}

// The positions of a layer, row by row.
std::set<std::pair<std::int64_t, std::int64_t>> positions(const PaddedCSR<float, std::int32_t>& W) {
  std::set<std::pair<std::int64_t, std::int64_t>> p;
  W.for_each_live([&](std::int64_t r, std::int64_t c, float, std::int64_t) { p.insert({r, c}); });
  return p;
}

// Per parameter: row by row, (column, value bits, state bits...) of each live slot in slot
// order; for a dense parameter its values and state.
std::vector<std::vector<std::uint32_t>> training_image(Model& model) {
  std::vector<std::vector<std::uint32_t>> image;
  auto bits = [](float v) { return std::bit_cast<std::uint32_t>(v); };
  model.for_each_parameter([&](const auto& p) {
    std::vector<std::uint32_t> out;
    if constexpr (requires { p.matrix; }) {
      for (std::int64_t i = 0; i < p.matrix.rows(); ++i) {
        out.push_back(0xFFFFFFFFu);  // row separator
        for (std::int64_t q = 0; q < p.matrix.row_nnz(i); ++q) {
          const auto s = static_cast<std::size_t>(p.matrix.row_start(i) + q);
          out.push_back(static_cast<std::uint32_t>(p.matrix.col_indices()[s]));
          out.push_back(bits(p.matrix.values()[s]));
          for (const auto& st : p.state)
            if (!st.empty()) out.push_back(bits(st[s]));
        }
      }
    } else {
      for (float v : p.value) out.push_back(bits(v));
      for (const auto& st : p.state)
        for (float v : st) out.push_back(bits(v));
    }
    image.push_back(std::move(out));
  });
  return image;
}

}  // namespace

TEST_CASE("an excluded layer keeps its mask bit for bit while the others change", "[dst][exclude]") {
  const dst::UpdateSchedule sched{.delta_t = 5, .t_begin = 0, .t_end = 60, .alpha = 0.3};
  for (int which = 0; which < 3; ++which) {
    Model model = make_model();
    AdamW<float> opt({.lr = 1e-2});
    std::unique_ptr<dst::SparsityAlgorithm<float, std::int32_t>> algo;
    if (which == 0) algo = std::make_unique<dst::RigL<float, std::int32_t>>(sched, 3);
    if (which == 1) algo = std::make_unique<dst::SET<float, std::int32_t>>(sched, 3);
    if (which == 2) algo = std::make_unique<dst::SNFS<float, std::int32_t>>(sched, 3);
    INFO(algo->name());
    algo->set_excluded_layers({1});
    CHECK(algo->excluded(1));
    CHECK_FALSE(algo->excluded(0));
    const auto layers0 = model.sparse_layers();
    const auto before1 = positions(layers0[1].layer->weight.matrix);
    const auto before0 = positions(layers0[0].layer->weight.matrix);
    const auto before2 = positions(layers0[2].layer->weight.matrix);
    const std::int64_t active_live = layers0[0].layer->weight.matrix.nnz() + layers0[2].layer->weight.matrix.nnz();
    dst::UpdateReport r;
    train(model, opt, *algo, 0, 46, &r);  // the last update is at step 45
    REQUIRE(r.step == 45);
    const auto layers = model.sparse_layers();
    CHECK(positions(layers[1].layer->weight.matrix) == before1);
    CHECK(positions(layers[0].layer->weight.matrix) != before0);
    CHECK(positions(layers[2].layer->weight.matrix) != before2);
    // the total over the layers that take part is preserved (SNFS moves weights between them)
    CHECK(layers[0].layer->weight.matrix.nnz() + layers[2].layer->weight.matrix.nnz() == active_live);
    // a report names every layer, the excluded one unchanged
    REQUIRE(r.layers.size() == 3);
    CHECK(r.layers[1].live_before == r.layers[1].live_after);
    CHECK(r.layers[1].stats.dropped == 0);
    CHECK(r.layers[1].stats.grown == 0);
    CHECK(r.layers[0].stats.dropped > 0);
  }
}

TEST_CASE("exclusions are validated", "[dst][exclude]") {
  dst::RigL<float, std::int32_t> rigl({.delta_t = 5, .t_begin = 0, .t_end = 60}, 3);
  CHECK_THROWS_AS(rigl.set_excluded_layers({-1}), ArgumentError);
  CHECK_THROWS_WITH(rigl.set_excluded_layers({2, 0, 2}), Catch::Contains("sparse layer 2 is excluded twice"));
  CHECK(rigl.excluded_layers().empty());  // a rejected list changes nothing
  rigl.set_excluded_layers({2, 0});
  CHECK(rigl.excluded_layers() == std::vector<std::int64_t>{0, 2});
  rigl.set_excluded_layers({7});
  Model model = make_model();
  AdamW<float> opt;
  const auto before = positions(model.sparse_layers()[0].layer->weight.matrix);
  CHECK_THROWS_WITH(train(model, opt, rigl, 0, 1), Catch::Contains("excludes sparse layer 7 but the model has 3"));
  CHECK(positions(model.sparse_layers()[0].layer->weight.matrix) == before);
}

TEST_CASE("checkpoints carry constant_fan_in, exclusions and the algorithm's configuration",
          "[dst][exclude][checkpoint]") {
  const dst::UpdateSchedule sched{.delta_t = 5, .t_begin = 0, .t_end = 60, .alpha = 0.3};
  const dst::GraNetOptions options{.initial_sparsity = {0.5, 0.5, 0.5}, .final_sparsity = {0.9, 0.8, 0.9}};
  Model model = make_model(0.5);
  AdamW<float> opt({.lr = 1e-2});
  dst::GraNet<float, std::int32_t> granet(sched, 9, options);
  granet.set_excluded_layers({2});
  train(model, opt, granet, 0, 21);
  const auto bytes = encode_training_state(model, opt, {.step = 21}, &granet);

  // resumed into a GraNet built with the same options but without the exclusion: the load
  // restores it, and training continues bitwise as the uninterrupted run
  Model resumed = make_model(0.5);
  AdamW<float> opt2({.lr = 1e-2});
  dst::GraNet<float, std::int32_t> granet2(sched, 9, options);
  granet2.constant_fan_in = false;
  decode_training_state(bytes, "c.sprig", resumed, opt2, &granet2);
  CHECK(granet2.excluded_layers() == std::vector<std::int64_t>{2});
  CHECK_FALSE(granet2.constant_fan_in);
  train(model, opt, granet, 21, 50);
  train(resumed, opt2, granet2, 21, 50);
  // what training is a function of (io/checkpoint.hpp's resume contract): each row's live
  // entries in slot order with their optimizer state, and the dense parameters; not the
  // layout (the loaded matrices are tight where the saved rows had relocated)
  CHECK(training_image(model) == training_image(resumed));
  CHECK(opt.step_count() == opt2.step_count());
  CHECK(model.sparse_layers()[2].layer->weight.matrix.nnz() == 240);  // excluded: never pruned

  // another configuration is rejected
  Model other = make_model(0.5);
  AdamW<float> opt3({.lr = 1e-2});
  dst::GraNet<float, std::int32_t> different(sched, 9,
                                             {.initial_sparsity = {0.5, 0.5, 0.5}, .final_sparsity = {0.9, 0.9, 0.9}});
  CHECK_THROWS_WITH(decode_training_state(bytes, "c.sprig", other, opt3, &different),
                    Catch::Contains("the DST configuration differs"));

  // constant_fan_in is restored as saved
  dst::SET<float, std::int32_t> set(sched, 9);
  set.constant_fan_in = true;
  Model m4 = make_model();
  AdamW<float> o4;
  const auto set_bytes = encode_training_state(m4, o4, {}, &set);
  dst::SET<float, std::int32_t> set2(sched, 9);
  Model m5 = make_model();
  AdamW<float> o5;
  decode_training_state(set_bytes, "s.sprig", m5, o5, &set2);
  CHECK(set2.constant_fan_in);
}
