// Dynamic sparse training at block granularity: Static, SET, RigL, SNFS, GraNet and gmp on
// BlockSparseLinear layers through their stand-in over the block grid. Checked against
// oracles written here: the dropped blocks are those of smallest Frobenius norm, RigL's grown
// blocks those of largest sum of |dY X^T| (computed in double from the recorded X and dY),
// GraNet's live counts those of its cubic schedule on the grid, SNFS's grown counts the
// redistribution by each layer's mean |first moment| (computed here from the blocks),
// survivors keep their values and optimizer state bit for bit, new blocks start at zero with
// zero state, and the layer's kernels see the new topology (a backward after the update
// against the dense oracle). Unsupported combinations are rejected with nothing changed; a
// run is bitwise the same for 1 and 2 threads.
#include "sprig/dst/algorithm.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>

#include "sprig/dst/fan_in.hpp"
#include "sprig/dst/granet.hpp"
#include "sprig/dst/live_count.hpp"
#include "sprig/models/mlp.hpp"
#include "sprig/dst/rigl.hpp"
#include "sprig/dst/set.hpp"
#include "sprig/dst/snfs.hpp"
#include "sprig/dst/static_topology.hpp"
#include "sprig/nn/softmax_cross_entropy.hpp"
#include "sprig/optim/adamw.hpp"
#include "with_threads.hpp"

using namespace sprig;

namespace {

template <class T, class Index>
using Block44 = BlockSparseLinear<T, Index, 4, 4>;
template <class T, class Index>
using Model = Sequential<T, Index, Block44<T, Index>>;

// 13-37-22-3 in 4x4 blocks (edge blocks partly outside every layer), the output dense.
template <class T, class Index>
Model<T, Index> make_model(double sparsity = 0.7) {
  return models::build_block_mlp<T, Index, 4, 4>(
      {.widths = {13, 37, 22, 3}, .sparsity = sparsity, .seed = 5, .growth_reserve = 0.25});
}

// One forward and backward on the data of step t (X stays alive in `x` for the update).
template <class T, class Index>
void forward_backward(Model<T, Index>& model, Matrix<T>& x, std::int64_t t) {
  SoftmaxCrossEntropy<T> loss;
  std::vector<int> y(9);
  x = Matrix<T>(13, 9);
  std::mt19937 gen(static_cast<unsigned>(t));
  std::normal_distribution<double> n(0.0, 1.0);
  for (std::int64_t b = 0; b < 9; ++b) {
    y[b] = static_cast<int>(gen() % 3);
    for (std::int64_t f = 0; f < 13; ++f) x(f, b) = static_cast<T>(n(gen) + (f % 3 == y[b] ? 1.0 : 0.0));
  }
  const auto z = model.forward(x);
  loss.forward_backward(z, y, model.output_grad());
  model.backward();
}

// Steps [from, to) with apply_step (the optimizer creates its state).
template <class T, class Index>
void train(Model<T, Index>& model, AdamW<T>& opt, dst::SparsityAlgorithm<T, Index>& algo, std::int64_t from,
           std::int64_t to) {
  Matrix<T> x;
  for (std::int64_t t = from; t < to; ++t) {
    forward_backward(model, x, t);
    dst::apply_step(algo, opt, model, t);
  }
}

// What a live block holds: its R x C values and the same entries of every state array.
template <class T>
struct BlockImage {
  std::vector<T> values;
  std::vector<std::vector<T>> state;
  bool operator==(const BlockImage&) const = default;
};

template <class T, class Index>
std::map<std::pair<std::int64_t, std::int64_t>, BlockImage<T>> blocks_of(const Block44<T, Index>& layer) {
  std::map<std::pair<std::int64_t, std::int64_t>, BlockImage<T>> out;
  const auto& W = layer.weight.matrix;
  W.for_each_block([&](std::int64_t i, std::int64_t j, std::int64_t s, const T* b) {
    BlockImage<T> img;
    img.values.assign(b, b + 16);
    for (const auto& st : layer.weight.state)
      if (!st.empty()) img.state.emplace_back(st.begin() + s * 16, st.begin() + (s + 1) * 16);
    out[{i, j}] = std::move(img);
  });
  return out;
}

template <class T, class Index>
std::vector<Block44<T, Index>*> block_layers(Model<T, Index>& model) {
  std::vector<Block44<T, Index>*> out;
  for (std::size_t k = 0; k < model.size(); ++k)
    if (auto* l = std::get_if<Block44<T, Index>>(&model.layer(k))) out.push_back(l);
  return out;
}

double frobenius(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x * x;
  return std::sqrt(s);
}

// The k blocks of smallest Frobenius norm (no ties among random values).
template <class T>
std::set<std::pair<std::int64_t, std::int64_t>> smallest_norms(
    const std::map<std::pair<std::int64_t, std::int64_t>, BlockImage<T>>& blocks, std::int64_t k) {
  std::vector<std::pair<double, std::pair<std::int64_t, std::int64_t>>> by_norm;
  for (const auto& [pos, img] : blocks)
    by_norm.push_back({frobenius(std::vector<double>(img.values.begin(), img.values.end())), pos});
  std::sort(by_norm.begin(), by_norm.end());
  std::set<std::pair<std::int64_t, std::int64_t>> out;
  for (std::int64_t q = 0; q < k; ++q) out.insert(by_norm[static_cast<std::size_t>(q)].second);
  return out;
}

// After an update that dropped `dropped` of `before`: every survivor is in `after` bit for
// bit, a block grown where none was is zero (values and state), and a dropped block grown
// again is as it was. Returns how many blocks grew (live after, not kept).
template <class T>
std::int64_t check_survivors_and_grown(const std::map<std::pair<std::int64_t, std::int64_t>, BlockImage<T>>& before,
                                       const std::set<std::pair<std::int64_t, std::int64_t>>& dropped,
                                       const std::map<std::pair<std::int64_t, std::int64_t>, BlockImage<T>>& after) {
  for (const auto& [pos, img] : before)
    if (!dropped.count(pos)) {
      REQUIRE(after.count(pos));
      CHECK(after.at(pos) == img);  // a survivor keeps its values and state bit for bit
    }
  std::int64_t grown = 0;
  for (const auto& [pos, img] : after) {
    if (before.count(pos) && !dropped.count(pos)) continue;
    ++grown;
    if (before.count(pos)) {  // a dropped block chosen again stays as it was
      CHECK(img == before.at(pos));
      continue;
    }
    for (T v : img.values) CHECK(v == T(0));
    for (const auto& st : img.state)
      for (T v : st) CHECK(v == T(0));
  }
  return grown;
}

// The weight as a dense matrix (for the backward oracle).
template <class T, class Index>
Matrix<double> dense(const Block44<T, Index>& layer) {
  const Matrix<T> d = layer.weight.matrix.to_dense();
  Matrix<double> out(d.rows(), d.cols());
  for (std::int64_t i = 0; i < d.rows(); ++i)
    for (std::int64_t j = 0; j < d.cols(); ++j) out(i, j) = d(i, j);
  return out;
}

// After an update: a backward through the layer gives dX = W^T dY with the new topology (a
// stale transposed pattern would not).
template <class T, class Index>
void check_backward_sees_topology(Block44<T, Index>& layer) {
  const std::int64_t in = layer.in_features(), out = layer.out_features(), B = 5;
  Matrix<T> X(in, B), dY(out, B), dX(in, B);
  std::mt19937 gen(3);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  for (std::int64_t i = 0; i < in; ++i)
    for (std::int64_t b = 0; b < B; ++b) X(i, b) = static_cast<T>(u(gen));
  for (std::int64_t i = 0; i < out; ++i)
    for (std::int64_t b = 0; b < B; ++b) dY(i, b) = static_cast<T>(u(gen));
  const auto saved_grad = layer.weight.grad;
  layer.backward(X, dY, dX);
  layer.weight.grad = saved_grad;
  const Matrix<double> W = dense(layer);
  for (std::int64_t c = 0; c < in; ++c)
    for (std::int64_t b = 0; b < B; ++b) {
      double want = 0;
      for (std::int64_t r = 0; r < out; ++r) want += W(r, c) * static_cast<double>(dY(r, b));
      REQUIRE(static_cast<double>(dX(c, b)) == Approx(want).margin(1e-4));
    }
}

// A rule of a user's that does not declare supports_blocks().
template <class T, class Index>
class UnstructuredOnly final : public dst::SparsityAlgorithm<T, Index> {
public:
  using dst::SparsityAlgorithm<T, Index>::SparsityAlgorithm;
  std::string_view name() const override { return "own"; }

protected:
  std::vector<std::int64_t> grow_linear_positions(const typename dst::SparsityAlgorithm<T, Index>::LayerRef&,
                                                  const dst::DropSet&, std::int64_t, CounterRng&) override {
    return {};
  }
};

// The mean |first moment| over a block layer's live in-matrix entries, from its blocks (the
// gradient before AdamW has made state), in double: SNFS's redistribution weight.
template <class T, class Index>
double mean_abs_moment(const Block44<T, Index>& layer) {
  const auto& m = layer.weight.state.empty() ? layer.weight.grad : layer.weight.state[0];
  double sum = 0;
  std::int64_t n = 0;
  layer.weight.matrix.for_each_block([&](std::int64_t i, std::int64_t j, std::int64_t s, const T*) {
    for (std::int64_t r = 0; r < 4; ++r)
      for (std::int64_t c = 0; c < 4; ++c)
        if (i * 4 + r < layer.out_features() && j * 4 + c < layer.in_features()) {
          sum += std::abs(static_cast<double>(m[static_cast<std::size_t>(s * 16 + r * 4 + c)]));
          ++n;
        }
  });
  return n ? sum / static_cast<double>(n) : 0.0;
}

}  // namespace

TEMPLATE_TEST_CASE("SET on block layers drops the smallest block norms and grows zero blocks", "[dst][blocks]",
                   (std::tuple<float, std::int32_t>), (std::tuple<double, std::int16_t>)) {
  using T = std::tuple_element_t<0, TestType>;
  using Index = std::tuple_element_t<1, TestType>;
  Model<T, Index> model = make_model<T, Index>();
  AdamW<T> opt({.lr = 1e-2});
  const dst::UpdateSchedule schedule{.delta_t = 4, .t_begin = 0, .t_end = 40, .alpha = 0.4};
  dst::SET<T, Index> set(schedule, 11);
  train(model, opt, set, 1, 4);  // AdamW state exists, no update yet

  const auto layers = block_layers(model);
  REQUIRE(layers.size() == 2);
  for (std::int64_t t : {4, 8, 12}) {
    const double f = schedule.drop_fraction(t);
    std::vector<std::map<std::pair<std::int64_t, std::int64_t>, BlockImage<T>>> before;
    std::vector<std::set<std::pair<std::int64_t, std::int64_t>>> dropped;
    for (auto* l : layers) {
      before.push_back(blocks_of(*l));
      const auto k = static_cast<std::int64_t>(std::floor(f * static_cast<double>(l->weight.matrix.nnz_blocks())));
      REQUIRE(k > 0);
      dropped.push_back(smallest_norms(before.back(), k));
    }
    const dst::UpdateReport r = set.update(model.sparse_layers(), t);
    REQUIRE(r.layers.size() == 2);
    for (std::size_t l = 0; l < layers.size(); ++l) {
      INFO("step " << t << ", block layer " << l);
      auto& layer = *layers[l];
      layer.weight.matrix.check_invariants();
      layer.weight.check_aligned("test");
      const auto after = blocks_of(layer);
      REQUIRE(std::ssize(after) == std::ssize(before[l]));  // the live block count is preserved
      CHECK(r.layers[l].live_before == std::ssize(before[l]));
      CHECK(r.layers[l].live_after == std::ssize(after));
      CHECK(check_survivors_and_grown(before[l], dropped[l], after) > 0);
      check_backward_sees_topology(layer);
    }
    train(model, opt, set, t + 1, t + 4);  // and training goes on
  }
}

TEST_CASE("RigL on a block layer grows the blocks of largest sum of |dL/dW|", "[dst][blocks]") {
  using T = float;
  using Index = std::int32_t;
  Model<T, Index> model = make_model<T, Index>(0.75);
  AdamW<T> opt({.lr = 1e-2});
  const dst::UpdateSchedule schedule{.delta_t = 5, .t_begin = 0, .t_end = 50, .alpha = 0.3};
  dst::RigL<T, Index> rigl(schedule, 2);
  train(model, opt, rigl, 1, 5);
  Matrix<T> x;
  forward_backward(model, x, 5);
  const auto refs = model.sparse_layers();
  REQUIRE(refs.size() == 2);
  const auto layers = block_layers(model);
  // the oracle's inputs, copied before the update
  std::vector<Matrix<double>> score(2);
  std::vector<std::map<std::pair<std::int64_t, std::int64_t>, BlockImage<T>>> before;
  std::vector<std::set<std::pair<std::int64_t, std::int64_t>>> dropped;
  for (std::size_t l = 0; l < 2; ++l) {
    const auto& ref = refs[l];
    REQUIRE(ref.blocks == layers[l]);
    REQUIRE(ref.out_features() == layers[l]->out_features());
    const std::int64_t out = ref.out_features(), in = ref.in_features();
    const std::int64_t gr = (out + 3) / 4, gc = (in + 3) / 4;
    score[l] = Matrix<double>(gr, gc);
    for (std::int64_t r = 0; r < out; ++r)
      for (std::int64_t c = 0; c < in; ++c) {
        double g = 0;
        for (std::int64_t b = 0; b < ref.input.cols(); ++b)
          g += static_cast<double>(ref.output_grad(r, b)) * static_cast<double>(ref.input(c, b));
        score[l](r / 4, c / 4) += std::abs(g);
      }
    before.push_back(blocks_of(*layers[l]));
    const auto k =
        static_cast<std::int64_t>(std::floor(schedule.drop_fraction(5) * static_cast<double>(before[l].size())));
    dropped.push_back(smallest_norms(before[l], k));
  }
  dst::apply_step(rigl, opt, model, 5);
  for (std::size_t l = 0; l < 2; ++l) {
    INFO("block layer " << l);
    layers[l]->weight.matrix.check_invariants();
    const auto after = blocks_of(*layers[l]);
    REQUIRE(after.size() == before[l].size());
    // grown: live after, not kept; candidates: every grid position not kept
    std::set<std::pair<std::int64_t, std::int64_t>> grown;
    for (const auto& [pos, img] : after)
      if (!before[l].count(pos) || dropped[l].count(pos)) grown.insert(pos);
    REQUIRE(grown.size() == dropped[l].size());
    double lowest_grown = 1e300, highest_left = -1;
    for (std::int64_t i = 0; i < score[l].rows(); ++i)
      for (std::int64_t j = 0; j < score[l].cols(); ++j) {
        const std::pair<std::int64_t, std::int64_t> pos{i, j};
        const bool kept = before[l].count(pos) && !dropped[l].count(pos);
        if (kept) continue;
        if (grown.count(pos))
          lowest_grown = std::min(lowest_grown, score[l](i, j));
        else
          highest_left = std::max(highest_left, score[l](i, j));
      }
    // the float GEMM and the double oracle may order near-ties differently: within 1e-5
    CHECK(lowest_grown >= highest_left - 1e-5 * std::max(1.0, highest_left));
    CHECK(lowest_grown > 0);
    for (const auto& pos : grown)
      if (!before[l].count(pos))
        for (T v : after.at(pos).values) CHECK(v == T(0));
    check_backward_sees_topology(*layers[l]);
  }
}

TEST_CASE("block DST: exclusions keep a block layer's mask, unsupported runs change nothing", "[dst][blocks]") {
  using T = float;
  using Index = std::int32_t;
  const dst::UpdateSchedule schedule{.delta_t = 3, .t_begin = 0, .t_end = 30, .alpha = 0.3};
  SECTION("an excluded block layer keeps its blocks bit for bit, the other updates") {
    Model<T, Index> model = make_model<T, Index>();
    AdamW<T> opt({.lr = 1e-2});
    dst::RigL<T, Index> rigl(schedule, 3);
    rigl.set_excluded_layers({1});
    train(model, opt, rigl, 1, 3);
    const auto layers = block_layers(model);
    const auto kept = layers[1]->weight.matrix.pattern().col_indices();
    const std::vector<Index> cols_before(kept.begin(), kept.end());
    const auto first_before = blocks_of(*layers[0]);
    train(model, opt, rigl, 3, 4);  // step 3 updates
    const auto kept_after = layers[1]->weight.matrix.pattern().col_indices();
    CHECK(std::vector<Index>(kept_after.begin(), kept_after.end()) == cols_before);
    std::set<std::pair<std::int64_t, std::int64_t>> a, b;
    for (const auto& [pos, img] : first_before) a.insert(pos);
    for (const auto& [pos, img] : blocks_of(*layers[0])) b.insert(pos);
    CHECK(a != b);
  }
  SECTION("a rule without supports_blocks(), and constant_fan_in on uneven rows, are refused before anything changes") {
    Model<T, Index> model = make_model<T, Index>();
    AdamW<T> opt({.lr = 1e-2});
    dst::Static<T, Index> stat(schedule, 1);
    train(model, opt, stat, 1, 3);
    Matrix<T> x;
    forward_backward(model, x, 3);
    const auto layers = block_layers(model);
    const auto image = blocks_of(*layers[0]);
    const auto grad = layers[0]->weight.grad;
    UnstructuredOnly<T, Index> own(schedule, 1);
    CHECK_THROWS_AS(dst::apply_step(own, opt, model, 3), ArgumentError);
    CHECK_THROWS_WITH(own.update(model.sparse_layers(), 3),
                      Catch::Contains("block-sparse") && Catch::Contains("own does not update"));
    dst::SET<T, Index> set(schedule, 1);
    set.constant_fan_in = true;
    CHECK_THROWS_WITH(dst::apply_step(set, opt, model, 3), Catch::Contains("to hold the same live count"));
    CHECK_THROWS_AS(dst::redraw_constant_fan_in(model, 1, -1.0), ArgumentError);
    CHECK(blocks_of(*layers[0]) == image);
    CHECK(layers[0]->weight.grad == grad);
    CHECK(opt.step_count() == 2);  // apply_step refused before the optimizer's step
  }
}

TEST_CASE("block RigL, SET, SNFS and GraNet runs are bitwise identical for 1 and 2 threads", "[dst][blocks][threads]") {
  using T = float;
  using Index = std::int32_t;
  const dst::UpdateSchedule schedule{.delta_t = 3, .t_begin = 0, .t_end = 30, .alpha = 0.3};
  auto run = [&](int threads, const std::string& name) {
    std::vector<std::map<std::pair<std::int64_t, std::int64_t>, BlockImage<T>>> out;
    sprig_test::with_threads(threads, [&] {
      Model<T, Index> model = make_model<T, Index>();
      AdamW<T> opt({.lr = 1e-2});
      std::unique_ptr<dst::SparsityAlgorithm<T, Index>> a;
      if (name == "rigl") a = std::make_unique<dst::RigL<T, Index>>(schedule, 9);
      if (name == "set") a = std::make_unique<dst::SET<T, Index>>(schedule, 9);
      if (name == "snfs") a = std::make_unique<dst::SNFS<T, Index>>(schedule, 9);
      if (name == "granet")
        a = std::make_unique<dst::GraNet<T, Index>>(schedule, 9, dst::GraNetOptions{{0.7, 0.7}, {0.85, 0.9}});
      train(model, opt, *a, 1, 14);
      for (auto* l : block_layers(model)) out.push_back(blocks_of(*l));
    });
    return out;
  };
  for (const std::string name : {"rigl", "set", "snfs", "granet"}) {
    INFO(name);
    CHECK(run(1, name) == run(2, name));
  }
}

TEMPLATE_TEST_CASE("GraNet and gmp on block layers prune the block grid along the cubic schedule", "[dst][blocks]",
                   (std::tuple<float, std::int32_t>), (std::tuple<double, std::int16_t>)) {
  using T = std::tuple_element_t<0, TestType>;
  using Index = std::tuple_element_t<1, TestType>;
  const dst::UpdateSchedule schedule{.delta_t = 4, .t_begin = 0, .t_end = 24, .alpha = 0.3};
  for (const bool regrow : {true, false}) {
    INFO((regrow ? "granet" : "gmp"));
    Model<T, Index> model = make_model<T, Index>(0.5);
    AdamW<T> opt({.lr = 1e-2});
    dst::GraNet<T, Index> granet(schedule, 4,
                                 {.initial_sparsity = {0.5, 0.5}, .final_sparsity = {0.8, 0.9}, .regrow = regrow});
    const auto layers = block_layers(model);
    const std::vector<std::int64_t> grid = {10 * 4, 6 * 10};  // 37x13 and 22x37 in 4x4 blocks
    train(model, opt, granet, 1, 4);
    for (std::int64_t t = 4; t <= 24; t += 4) {
      Matrix<T> x;
      forward_backward(model, x, t);
      std::vector<std::map<std::pair<std::int64_t, std::int64_t>, BlockImage<T>>> before;
      std::vector<std::set<std::pair<std::int64_t, std::int64_t>>> dropped;
      std::vector<std::int64_t> target(2), regen(2);
      opt.step(model);  // apply_step's order: GraNet steps the optimizer before the update
      for (std::size_t l = 0; l < 2; ++l) {
        before.push_back(blocks_of(*layers[l]));
        const auto live = std::ssize(before[l]);
        target[l] = dst::live_count(grid[l], granet.target_sparsity(l, t));
        regen[l] = regrow ? static_cast<std::int64_t>(
                                std::floor(schedule.drop_fraction(t) * static_cast<double>(std::min(live, target[l]))))
                          : 0;
        dropped.push_back(smallest_norms(before[l], std::max<std::int64_t>(0, live - target[l]) + regen[l]));
      }
      const dst::UpdateReport r = granet.update(model.sparse_layers(), t);
      for (std::size_t l = 0; l < 2; ++l) {
        INFO("step " << t << ", block layer " << l);
        layers[l]->weight.matrix.check_invariants();
        layers[l]->weight.check_aligned("test");
        const auto after = blocks_of(*layers[l]);
        CHECK(std::ssize(after) == target[l]);
        CHECK(r.layers[l].live_after == target[l]);
        CHECK(check_survivors_and_grown(before[l], dropped[l], after) == regen[l]);
        check_backward_sees_topology(*layers[l]);
      }
    }
    // the schedule's last update (t = 24) left each layer at its final sparsity
    CHECK(layers[0]->weight.matrix.nnz_blocks() == dst::live_count(grid[0], 0.8));
    CHECK(layers[1]->weight.matrix.nnz_blocks() == dst::live_count(grid[1], 0.9));
  }
}

TEST_CASE("SNFS on block layers moves blocks to the layer of larger mean |momentum|", "[dst][blocks]") {
  using T = float;
  using Index = std::int32_t;
  const dst::UpdateSchedule schedule{.delta_t = 4, .t_begin = 0, .t_end = 40, .alpha = 0.4};
  Model<T, Index> model = make_model<T, Index>(0.6);
  AdamW<T> opt({.lr = 1e-2});
  dst::SNFS<T, Index> snfs(schedule, 6);
  const auto layers = block_layers(model);
  const std::vector<std::int64_t> grid = {10 * 4, 6 * 10};
  train(model, opt, snfs, 1, 4);
  bool moved = false;
  for (std::int64_t t = 4; t <= 16; t += 4) {
    Matrix<T> x;
    forward_backward(model, x, t);
    opt.step(model);  // apply_step's order: SNFS steps the optimizer before the update
    std::vector<std::map<std::pair<std::int64_t, std::int64_t>, BlockImage<T>>> before;
    std::vector<std::set<std::pair<std::int64_t, std::int64_t>>> dropped;
    std::vector<std::int64_t> drop(2), room(2);
    std::vector<double> momentum(2);
    for (std::size_t l = 0; l < 2; ++l) {
      before.push_back(blocks_of(*layers[l]));
      const auto live = std::ssize(before[l]);
      drop[l] = static_cast<std::int64_t>(std::floor(schedule.drop_fraction(t) * static_cast<double>(live)));
      room[l] = grid[l] - (live - drop[l]);
      momentum[l] = mean_abs_moment(*layers[l]);
      CHECK(layers[l]->mean_abs_momentum() == Approx(momentum[l]).epsilon(1e-12));
      dropped.push_back(smallest_norms(before[l], drop[l]));
    }
    const std::vector<std::int64_t> grow = dst::SNFS<T, Index>::redistribute(drop, momentum, room);
    moved = moved || grow != drop;
    const dst::UpdateReport r = snfs.update(model.sparse_layers(), t);
    std::int64_t total_before = 0, total_after = 0;
    for (std::size_t l = 0; l < 2; ++l) {
      INFO("step " << t << ", block layer " << l);
      layers[l]->weight.matrix.check_invariants();
      layers[l]->weight.check_aligned("test");
      const auto after = blocks_of(*layers[l]);
      total_before += std::ssize(before[l]);
      total_after += std::ssize(after);
      CHECK(std::ssize(after) == std::ssize(before[l]) - drop[l] + grow[l]);
      CHECK(r.layers[l].live_after == std::ssize(after));
      CHECK(check_survivors_and_grown(before[l], dropped[l], after) == grow[l]);
      check_backward_sees_topology(*layers[l]);
    }
    CHECK(total_after == total_before);  // the model's block count is preserved
  }
  CHECK(moved);  // the momenta differed enough to move blocks between the layers
}

TEST_CASE("SNFS refuses layers of different block shapes before anything changes", "[dst][blocks]") {
  using T = float;
  using Index = std::int32_t;
  // 13 -> 37 in 4x4 blocks, 37 -> 22 unstructured, both sparse
  Model<T, Index> model;
  model.add(Block44<T, Index>(13, 37, {.density = 0.4, .seed = 2, .growth_reserve = 0.25}));
  model.add(ReLU<T>{});
  model.add(SparseLinear<T, Index>(37, 22, {.density = 0.4, .seed = 2, .layer_key = 1, .growth_reserve = 0.25}));
  const dst::UpdateSchedule schedule{.delta_t = 3, .t_begin = 0, .t_end = 30, .alpha = 0.3};
  AdamW<T> opt({.lr = 1e-2});
  Matrix<T> x(13, 6, 0.5f);
  const auto z = model.forward(x);
  for (std::int64_t i = 0; i < z.rows(); ++i)
    for (std::int64_t b = 0; b < z.cols(); ++b) model.output_grad()(i, b) = 0.01f * static_cast<T>(i - b);
  model.backward();
  const auto* first = std::get_if<Block44<T, Index>>(&model.layer(0));
  REQUIRE(first);
  const auto image = blocks_of(*first);
  dst::SNFS<T, Index> snfs(schedule, 1);
  CHECK_THROWS_WITH(dst::apply_step(snfs, opt, model, 3),
                    Catch::Contains("4x4 blocks and sparse layer 1 1x1") && Catch::Contains("set_excluded_layers"));
  CHECK(opt.step_count() == 0);  // refused before the optimizer's step
  CHECK(blocks_of(*first) == image);
  snfs.set_excluded_layers({1});  // the block layer alone updates
  dst::apply_step(snfs, opt, model, 3);
  CHECK(opt.step_count() == 1);
}

TEST_CASE("the block grid stand-in: norms per slot, replay and adoption, errors", "[dst][blocks]") {
  using W = BlockPaddedCSR<double, std::int32_t, 4, 4>;
  W w = W::random(10, 9, 4, 7);  // a 3x3 grid, edge blocks partly outside
  const PaddedCSR<double, std::int32_t> norms = w.block_norms();
  REQUIRE(norms.storage_size() == w.storage_size());
  std::int64_t seen = 0;
  w.for_each_block([&](std::int64_t i, std::int64_t j, std::int64_t s, const double* b) {
    double sum = 0;
    for (int q = 0; q < 16; ++q) sum += b[q] * b[q];
    CHECK(norms.values()[s] == Approx(std::sqrt(sum)).epsilon(1e-15));
    CHECK(norms.find(i, j) == s);  // the stand-in's slots are the pattern's
    ++seen;
  });
  CHECK(seen == 4);
  CHECK_THROWS_AS(w.pattern().with_values(AlignedVector<double>(3)), ShapeError);

  // a change made on the stand-in, replayed: the erased block's values go, the others stay
  PaddedCSR<double, std::int32_t> grid = norms;
  const Matrix<double> before = w.to_dense();
  const std::vector<double> values_before(w.values().begin(), w.values().end());
  std::int64_t bi = -1, bj = -1;
  w.for_each_block([&](std::int64_t i, std::int64_t j, std::int64_t, const double*) {
    if (bi < 0) bi = i, bj = j;
  });
  SlotLog log;
  REQUIRE(grid.erase(bi, bj, &log));
  std::int64_t gi = -1, gj = -1;  // a block position live in neither
  for (std::int64_t i = 0; i < 3 && gi < 0; ++i)
    for (std::int64_t j = 0; j < 3 && gi < 0; ++j)
      if (grid.find(i, j) < 0 && !(i == bi && j == bj)) gi = i, gj = j;
  REQUIRE(gi >= 0);
  grid.insert(gi, gj, 1.0, &log);
  // adopting without the replay is refused when the storage no longer matches, nothing changed
  PaddedCSR<double, std::int32_t> wrong(4, 3);
  CHECK_THROWS_AS(w.adopt_pattern(wrong), ShapeError);
  CHECK(std::vector<double>(w.values().begin(), w.values().end()) == values_before);
  const TopologyKey key = w.topology_key();
  w.apply_slot_moves(log);
  w.adopt_pattern(grid);
  w.check_invariants();
  CHECK(w.nnz_blocks() == 4);
  CHECK(w.pattern().find(bi, bj) < 0);
  CHECK(w.pattern().find(gi, gj) >= 0);
  CHECK(!(w.topology_key() == key));
  const Matrix<double> after = w.to_dense();
  for (std::int64_t r = 0; r < 10; ++r)
    for (std::int64_t c = 0; c < 9; ++c) {
      const bool erased = r / 4 == bi && c / 4 == bj, born = r / 4 == gi && c / 4 == gj;
      CHECK(after(r, c) == (erased || born ? 0.0 : before(r, c)));  // a born block starts at zero
    }
}

TEST_CASE("redraw_constant_fan_in gives every block row of a block layer the same block count", "[dst][blocks]") {
  using T = double;
  using Index = std::int32_t;
  Model<T, Index> model = make_model<T, Index>(0.6);
  AdamW<T> opt({.lr = 1e-2});
  dst::Static<T, Index> stat({.delta_t = 4, .t_begin = 0, .t_end = 40}, 1);
  train(model, opt, stat, 1, 3);  // gradient and state exist, to be discarded
  const auto layers = block_layers(model);
  std::vector<std::int64_t> n;
  std::vector<AlignedVector<T>> biases;
  for (auto* l : layers) {
    const auto& W = l->weight.matrix;
    n.push_back(std::max<std::int64_t>(1, std::llround(double(W.nnz_blocks()) / double(W.block_rows()))));
    biases.push_back(l->bias.value);
  }
  layers[1]->weight.decay = false;
  dst::redraw_constant_fan_in(model, 7, 0.25);
  for (std::size_t l = 0; l < 2; ++l) {
    INFO("block layer " << l);
    const auto& layer = *layers[l];
    const auto& W = layer.weight.matrix;
    W.check_invariants();
    layer.weight.check_aligned("test");
    for (std::int64_t i = 0; i < W.block_rows(); ++i) CHECK(W.pattern().row_nnz(i) == n[l]);
    // Kaiming-uniform with the mean fan-in of the live in-matrix entries; outside entries 0
    std::int64_t live = 0;
    W.for_each_block([&](std::int64_t i, std::int64_t j, std::int64_t, const T*) {
      live += (std::min<std::int64_t>(W.rows(), (i + 1) * 4) - i * 4) *
              (std::min<std::int64_t>(W.cols(), (j + 1) * 4) - j * 4);
    });
    const double bound = std::sqrt(6.0 / (double(live) / double(W.rows())));
    double largest = 0;
    W.for_each_block([&](std::int64_t i, std::int64_t j, std::int64_t, const T* b) {
      for (std::int64_t r = 0; r < 4; ++r)
        for (std::int64_t c = 0; c < 4; ++c) {
          const bool inside = i * 4 + r < W.rows() && j * 4 + c < W.cols();
          if (!inside) CHECK(b[r * 4 + c] == 0.0);
          CHECK(std::abs(b[r * 4 + c]) < bound);
          largest = std::max(largest, std::abs(b[r * 4 + c]));
        }
    });
    CHECK(largest > 0.5 * bound);
    for (T g : layer.weight.grad) CHECK(g == 0.0);
    for (const auto& st : layer.weight.state) CHECK(st.empty());
    CHECK(layer.bias.value == biases[l]);
    CHECK(layer.weight.decay == (l == 0));
    CHECK(W.pattern().storage_size() > W.pattern().nnz());  // the growth reserve
    check_backward_sees_topology(*layers[l]);
  }
  // a function of the seed: a model built alike and redrawn alike holds the same blocks
  Model<T, Index> again = make_model<T, Index>(0.6);
  dst::redraw_constant_fan_in(again, 7, 0.25);
  for (std::size_t l = 0; l < 2; ++l) CHECK(blocks_of(*block_layers(again)[l]).size() == blocks_of(*layers[l]).size());
  for (std::size_t l = 0; l < 2; ++l) {
    auto a = blocks_of(*block_layers(again)[l]), b = blocks_of(*layers[l]);
    for (auto& [pos, img] : a) img.state.clear();
    for (auto& [pos, img] : b) img.state.clear();
    CHECK(a == b);
  }
  CHECK_THROWS_WITH(layers[0]->redraw_per_row(5, 1, 0.0), Catch::Contains("5 blocks per row outside [1, 4"));
}

TEST_CASE("SET and RigL with constant_fan_in keep every block row's count on the block grid", "[dst][blocks]") {
  using T = float;
  using Index = std::int32_t;
  const dst::UpdateSchedule schedule{.delta_t = 4, .t_begin = 0, .t_end = 40, .alpha = 0.5};
  for (const bool rigl : {false, true}) {
    INFO((rigl ? "rigl" : "set"));
    Model<T, Index> model = make_model<T, Index>(0.3);  // 3 and 7 blocks per block row
    dst::redraw_constant_fan_in(model, 3, 0.25);
    AdamW<T> opt({.lr = 1e-2});
    std::unique_ptr<dst::SparsityAlgorithm<T, Index>> algo;
    if (rigl)
      algo = std::make_unique<dst::RigL<T, Index>>(schedule, 5);
    else
      algo = std::make_unique<dst::SET<T, Index>>(schedule, 5);
    algo->constant_fan_in = true;
    train(model, opt, *algo, 1, 4);
    const auto layers = block_layers(model);
    for (std::int64_t t : {4, 8}) {
      Matrix<T> x;
      forward_backward(model, x, t);
      const auto refs = model.sparse_layers();
      std::vector<std::map<std::pair<std::int64_t, std::int64_t>, BlockImage<T>>> before;
      std::vector<std::set<std::pair<std::int64_t, std::int64_t>>> dropped;
      std::vector<std::int64_t> per_row(2), n(2);
      std::vector<Matrix<double>> score(2);
      for (std::size_t l = 0; l < 2; ++l) {
        before.push_back(blocks_of(*layers[l]));
        const auto& W = layers[l]->weight.matrix;
        n[l] = W.pattern().row_nnz(0);
        per_row[l] = static_cast<std::int64_t>(std::floor(schedule.drop_fraction(t) * static_cast<double>(n[l])));
        REQUIRE(per_row[l] > 0);
        std::set<std::pair<std::int64_t, std::int64_t>> drop;
        for (std::int64_t i = 0; i < W.block_rows(); ++i) {  // the per_row smallest norms of each block row
          std::map<std::pair<std::int64_t, std::int64_t>, BlockImage<T>> row;
          for (const auto& [pos, img] : before[l])
            if (pos.first == i) row.insert({pos, img});
          const auto d = smallest_norms(row, per_row[l]);
          drop.insert(d.begin(), d.end());
        }
        dropped.push_back(std::move(drop));
        score[l] = Matrix<double>(W.block_rows(), W.block_cols());  // RigL's block score, in double
        for (std::int64_t r = 0; r < W.rows(); ++r)
          for (std::int64_t c = 0; c < W.cols(); ++c) {
            double g = 0;
            for (std::int64_t b = 0; b < refs[l].input.cols(); ++b)
              g += static_cast<double>(refs[l].output_grad(r, b)) * static_cast<double>(refs[l].input(c, b));
            score[l](r / 4, c / 4) += std::abs(g);
          }
      }
      algo->update(refs, t);
      for (std::size_t l = 0; l < 2; ++l) {
        INFO("step " << t << ", block layer " << l);
        const auto& W = layers[l]->weight.matrix;
        W.check_invariants();
        layers[l]->weight.check_aligned("test");
        for (std::int64_t i = 0; i < W.block_rows(); ++i) CHECK(W.pattern().row_nnz(i) == n[l]);
        const auto after = blocks_of(*layers[l]);
        CHECK(check_survivors_and_grown(before[l], dropped[l], after) == per_row[l] * W.block_rows());
        if (!rigl) continue;
        for (std::int64_t i = 0; i < W.block_rows(); ++i) {  // grown: the row's largest scores not kept
          double lowest_grown = 1e300, highest_left = -1;
          for (std::int64_t j = 0; j < W.block_cols(); ++j) {
            const std::pair<std::int64_t, std::int64_t> pos{i, j};
            if (before[l].count(pos) && !dropped[l].count(pos)) continue;
            if (after.count(pos))
              lowest_grown = std::min(lowest_grown, score[l](i, j));
            else
              highest_left = std::max(highest_left, score[l](i, j));
          }
          CHECK(lowest_grown >= highest_left - 1e-5 * std::max(1.0, highest_left));
        }
      }
      train(model, opt, *algo, t + 1, t + 4);
    }
  }
}
