// GraNet and gradual magnitude pruning (dst/granet.hpp): the density of every layer follows
// the cubic schedule exactly at every update and ends at the target; without regrowth the
// survivors are exactly the largest magnitudes; pruned storage is compacted; bad options and
// a mismatched model are rejected.
#include "sprig/dst/granet.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <vector>

#include <catch2/catch.hpp>

#include "sprig/models/mlp.hpp"
#include "sprig/dst/static_topology.hpp"
#include "sprig/nn/softmax_cross_entropy.hpp"
#include "sprig/optim/adamw.hpp"

using namespace sprig;

namespace {

// A 12-40-30-3 MLP with both hidden layers sparse at `sparsity`, and a step of random data.
struct Run {
  Sequential<float, std::int32_t> model;
  AdamW<float> opt{{.lr = 1e-2}};
  SoftmaxCrossEntropy<float> loss;
  Matrix<float> x{12, 16};
  std::vector<int> y = std::vector<int>(16);
  std::mt19937 gen{3};
  explicit Run(double sparsity)
      : model(models::build_mlp<float, std::int32_t>({.widths = {12, 40, 30, 3}, .sparsity = sparsity, .seed = 5})) {}
  template <class A>
  dst::UpdateReport step(A& algo, std::int64_t t) {
    std::normal_distribution<float> n(0.0f, 1.0f);
    for (std::int64_t b = 0; b < 16; ++b) {
      y[b] = static_cast<int>(gen() % 3);
      for (std::int64_t f = 0; f < 12; ++f) x(f, b) = n(gen) + (f % 3 == y[b] ? 1.0f : 0.0f);
    }
    const auto z = model.forward(x);
    loss.forward_backward(z, y, model.output_grad());
    model.backward();
    dst::UpdateReport r;
    dst::apply_step(algo, opt, model, t, &r);
    return r;
  }
};

// Zhu & Gupta's cubic sparsity, written from the paper: s(p) = s_f + (s_i - s_f)(1 - p)^3.
double cubic(double si, double sf, double p) { return sf + (si - sf) * std::pow(1.0 - p, 3.0); }

}  // namespace

TEST_CASE("GraNet: every layer's live count follows the cubic schedule exactly and ends at the target",
          "[dst][granet]") {
  for (const bool regrow : {true, false}) {
    INFO("regrow " << regrow);
    Run run(0.5);
    const dst::UpdateSchedule sched{.delta_t = 10, .t_begin = 0, .t_end = 100, .alpha = 0.3};
    dst::GraNet<float, std::int32_t> algo(
        sched, 1, {.initial_sparsity = {0.5, 0.5}, .final_sparsity = {0.9, 0.95}, .regrow = regrow});
    CHECK(algo.name() == (regrow ? "granet" : "gmp"));
    const std::int64_t sizes[] = {40 * 12, 30 * 40};
    std::int64_t updates = 0, grown = 0;
    for (std::int64_t t = 0; t < 130; ++t) {
      const auto r = run.step(algo, t);
      if (!sched.is_update_step(t)) continue;
      ++updates;
      REQUIRE(r.step == t);
      const double p = static_cast<double>(t) / 100.0;  // the last update step is 100
      const auto layers = run.model.sparse_layers();
      for (std::size_t l = 0; l < 2; ++l) {
        const double s = cubic(0.5, l == 0 ? 0.9 : 0.95, p);
        const auto want = static_cast<std::int64_t>(std::llround((1.0 - s) * static_cast<double>(sizes[l])));
        INFO("step " << t << " layer " << l << " target sparsity " << s);
        CHECK(layers[l].layer->weight.matrix.nnz() == want);
        CHECK(r.layers[l].live_after == want);
        if (!regrow) CHECK(r.layers[l].stats.grown == 0);
        grown += r.layers[l].stats.grown;
        layers[l].layer->weight.matrix.check_invariants();
        layers[l].layer->weight.check_aligned("test");
      }
    }
    CHECK(updates == 11);
    CHECK((grown > 0) == regrow);  // regrowth by gradient between the prunes
    const auto layers = run.model.sparse_layers();
    CHECK(layers[0].layer->weight.matrix.nnz() == std::llround(0.1 * 480));
    CHECK(layers[1].layer->weight.matrix.nnz() == std::llround(0.05 * 1200));
  }
}

TEST_CASE("gmp keeps exactly the largest magnitudes, with their values", "[dst][granet]") {
  Run run(0.5);
  const dst::UpdateSchedule sched{.delta_t = 10, .t_begin = 10, .t_end = 50, .alpha = 0.3};
  dst::GraNet<float, std::int32_t> gmp(sched, 1,
                                       {.initial_sparsity = {0.5, 0.5}, .final_sparsity = {0.8, 0.8}, .regrow = false});
  dst::Static<float, std::int32_t> frozen(sched, 1);  // trains without changing the topology
  for (std::int64_t t = 0; t < 20; ++t) run.step(frozen, t);
  auto layers = run.model.sparse_layers();
  const auto& W = layers[0].layer->weight.matrix;
  REQUIRE(W.nnz() == 240);
  const PaddedCSR<float, std::int32_t> before = W;
  std::vector<float> magnitudes;
  before.for_each_live([&](std::int64_t, std::int64_t, float v, std::int64_t) { magnitudes.push_back(std::abs(v)); });
  std::sort(magnitudes.begin(), magnitudes.end(), std::greater<>());
  gmp.update(layers, 20);  // p = 0.25
  const auto keep = static_cast<std::int64_t>(std::llround((1.0 - cubic(0.5, 0.8, 0.25)) * 480.0));
  REQUIRE(W.nnz() == keep);
  REQUIRE(keep < std::ssize(magnitudes));
  REQUIRE(magnitudes[static_cast<std::size_t>(keep - 1)] >
          magnitudes[static_cast<std::size_t>(keep)]);  // no tie at the cut
  W.for_each_live([&](std::int64_t r, std::int64_t c, float v, std::int64_t) {
    CHECK(std::abs(v) >= magnitudes[static_cast<std::size_t>(keep - 1)]);
    const std::int64_t s = before.find(r, c);
    REQUIRE(s >= 0);
    CHECK(before.values()[s] == v);
  });
}

TEST_CASE("GraNet compacts pruned storage", "[dst][granet]") {
  Run run(0.5);
  const dst::UpdateSchedule sched{.delta_t = 5, .t_begin = 0, .t_end = 40, .alpha = 0.3};
  dst::GraNet<float, std::int32_t> algo(sched, 2, {.initial_sparsity = {0.5, 0.5}, .final_sparsity = {0.95, 0.95}});
  const std::int64_t start_storage = run.model.sparse_layers()[1].layer->weight.matrix.storage_size();
  bool compacted = false;
  for (std::int64_t t = 0; t <= 40; ++t) {
    const auto r = run.step(algo, t);
    for (const auto& l : r.layers) compacted = compacted || l.compacted;
  }
  CHECK(compacted);
  const auto& W = run.model.sparse_layers()[1].layer->weight.matrix;
  std::int64_t tight = 0;
  for (std::int64_t i = 0; i < W.rows(); ++i)
    tight += PaddedCSR<float, std::int32_t>::capacity_for(W.row_nnz(i), W.padding_ratio());
  CHECK(static_cast<double>(W.storage_size()) <= 1.2 * static_cast<double>(tight));
  CHECK(W.storage_size() < start_storage / 4);
}

TEST_CASE("GraNet rejects bad sparsities and a model layer it has no sparsity for", "[dst][granet]") {
  const dst::UpdateSchedule sched{.delta_t = 5, .t_begin = 0, .t_end = 40};
  using G = dst::GraNet<float, std::int32_t>;
  CHECK_THROWS_AS(G(sched, 1, {.initial_sparsity = {0.5}, .final_sparsity = {0.9, 0.9}}), ArgumentError);
  CHECK_THROWS_AS(G(sched, 1, {.initial_sparsity = {0.9}, .final_sparsity = {0.5}}), ArgumentError);  // grows
  CHECK_THROWS_AS(G(sched, 1, {.initial_sparsity = {0.5}, .final_sparsity = {1.0}}), ArgumentError);
  CHECK_THROWS_AS(G(sched, 1, {.initial_sparsity = {-0.1}, .final_sparsity = {0.5}}), ArgumentError);
  CHECK_THROWS_AS(G(sched, 1, {.initial_sparsity = {0.5}, .final_sparsity = {std::nan("")}}), ArgumentError);
  Run run(0.5);
  G one(sched, 1, {.initial_sparsity = {0.5}, .final_sparsity = {0.9}});
  const auto before = run.model.sparse_layers()[0].layer->weight.matrix.nnz();
  CHECK_THROWS_WITH(run.step(one, 0), Catch::Contains("sparse layer 1 has no sparsity (1 were given)"));
  CHECK(run.model.sparse_layers()[0].layer->weight.matrix.nnz() == before);  // nothing changed
  one.set_excluded_layers({1});  // with layer 1 excluded, one list entry is enough
  CHECK_NOTHROW(run.step(one, 0));
}
