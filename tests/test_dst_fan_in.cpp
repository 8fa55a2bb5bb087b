// Constant fan-in (SparsityAlgorithm::constant_fan_in, dst/fan_in.hpp): every row keeps its
// count through every update, the per-row drop and grow against naive oracles, determinism
// across thread counts and a bitwise checkpoint resume.
#include <sprig/dst/fan_in.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include <sprig/dst/rigl.hpp>
#include <sprig/dst/set.hpp>
#include <sprig/dst/snfs.hpp>
#include <sprig/dst/static_topology.hpp>
#include <sprig/io/checkpoint.hpp>
#include <sprig/nn/softmax_cross_entropy.hpp>
#include <sprig/optim/sgd.hpp>

#include "with_threads.hpp"

using namespace sprig;
using namespace sprig::dst;

namespace {

using Model = Sequential<double, std::int32_t>;
using Layer = SparseLinear<double, std::int32_t>;
using Ref = SparseLayerRef<double, std::int32_t>;

// An out x in weight with exactly n live columns per row (no padding), values in [-1, 1).
PaddedCSR<double, std::int32_t> constant_fan_in_weight_for_test(std::int64_t in, std::int64_t out, std::int64_t n,
                                                                std::uint64_t seed) {
  return PaddedCSR<double, std::int32_t>::random_per_row(out, in, n, seed, 0.0);
}

std::vector<std::int64_t> row_counts(const PaddedCSR<double, std::int32_t>& W) {
  std::vector<std::int64_t> c;
  for (std::int64_t i = 0; i < W.rows(); ++i) c.push_back(W.row_nnz(i));
  return c;
}

// A sparse layer shape and its fan-in: in -> out with n = llround(density * in) per row.
struct Shape {
  std::int64_t in, out;
  double density;
};

// Sparse layers of the given shapes with constant fan-in (no padding: growth relocates), ReLU
// between them, a dense 3-way output.
Model fan_in_mlp(const std::vector<Shape>& shapes, std::uint64_t seed) {
  Model m;
  for (std::size_t l = 0; l < shapes.size(); ++l) {
    m.add(constant_fan_in_linear<double, std::int32_t>(
        shapes[l].in, shapes[l].out,
        {.density = shapes[l].density, .seed = seed, .layer_key = l, .padding_ratio = 0.0}));
    m.add(ReLU<double>{});
  }
  m.add(Linear<double>(shapes.back().out, 3, seed, 99));
  return m;
}

struct Data {
  Matrix<double> X;
  std::vector<int> y;
};
Data make_data(std::int64_t features, std::int64_t n, std::uint64_t seed) {
  Data d{Matrix<double>(features, n), std::vector<int>(static_cast<std::size_t>(n))};
  CounterRng rng(seed);
  for (std::int64_t b = 0; b < n; ++b) {
    double s[3] = {0, 0, 0};
    for (std::int64_t f = 0; f < features; ++f) {
      d.X(f, b) = rng.uniform(-1, 1);
      s[f % 3] += d.X(f, b);
    }
    d.y[b] = static_cast<int>(std::max_element(s, s + 3) - s);
  }
  return d;
}

// Every sparse layer's rows in slot order as (column, value bits): what training depends on.
using Entries = std::vector<std::vector<std::vector<std::pair<std::int64_t, std::uint64_t>>>>;
Entries entries_of(Model& m) {
  Entries e;
  for (const Ref& ref : m.sparse_layers()) {
    const auto& W = ref.layer->weight.matrix;
    auto& rows = e.emplace_back();
    for (std::int64_t i = 0; i < W.rows(); ++i) {
      auto& r = rows.emplace_back();
      for (std::int64_t s = W.row_start(i); s < W.row_start(i) + W.row_nnz(i); ++s)
        r.emplace_back(W.col_indices()[s], std::bit_cast<std::uint64_t>(W.values()[s]));
    }
  }
  return e;
}

// Trains steps [from, to) full-batch with SGD momentum; after every topology update checks
// that every row holds its initial count n, that the report matches rows * floor(f * n), and
// the storage invariants and state alignment. Returns the number of updates seen.
template <class Algo>
std::int64_t train(Algo& algo, Model& model, SGD<double>& opt, const Data& data, std::int64_t from, std::int64_t to,
                   const std::vector<std::int64_t>& fan_in) {
  SoftmaxCrossEntropy<double> loss;
  std::int64_t updates = 0;
  for (std::int64_t t = from; t < to; ++t) {
    const auto Z = model.forward(data.X.view());
    loss.forward_backward(Z, data.y, model.output_grad());
    model.backward();
    UpdateReport report;
    apply_step(algo, opt, model, t, &report);
    if (report.step != t) continue;
    ++updates;
    std::size_t l = 0;
    for (const Ref& ref : model.sparse_layers()) {
      auto& p = ref.layer->weight;
      p.matrix.check_invariants();
      p.check_aligned("test");
      INFO("step " << t << " layer " << l);
      REQUIRE(row_counts(p.matrix) == std::vector<std::int64_t>(static_cast<std::size_t>(p.matrix.rows()), fan_in[l]));
      const auto per_row = static_cast<std::int64_t>(std::floor(report.drop_fraction * static_cast<double>(fan_in[l])));
      const auto& st = report.layers[l].stats;
      CHECK(st.dropped + st.regrown == per_row * p.matrix.rows());
      CHECK(st.grown + st.regrown == per_row * p.matrix.rows());
      CHECK(report.layers[l].live_after == report.layers[l].live_before);
      ++l;
    }
  }
  return updates;
}

UpdateSchedule schedule(double alpha, std::int64_t delta_t = 3, std::int64_t t_end = 60) {
  UpdateSchedule s;
  s.delta_t = delta_t;
  s.t_end = t_end;
  s.alpha = alpha;
  return s;
}

struct Config {
  const char* name;
  std::vector<Shape> shapes;
  double alpha;
};
const std::vector<Config>& configs() {
  static const std::vector<Config> c = {
      {"general", {{12, 40, 0.25}, {40, 30, 0.15}}, 0.5},
      {"one live per row", {{12, 16, 1.0 / 12}, {16, 9, 1.0 / 16}}, 1.0},  // f from 1 down: drop 1 or 0 per row
      {"full rows", {{12, 8, 1.0}, {8, 5, 1.0}}, 0.5},                     // free columns = the dropped ones
      {"wide and short", {{64, 3, 0.3}, {3, 20, 2.0 / 3}}, 0.3},
  };
  return c;
}

std::vector<std::int64_t> fan_ins(const Config& c) {
  std::vector<std::int64_t> n;
  for (const Shape& s : c.shapes) n.push_back(std::llround(s.density * static_cast<double>(s.in)));
  return n;
}

}  // namespace

TEST_CASE("constant_fan_in_linear draws exactly n per row, deterministically", "[dst][fan_in]") {
  const Layer a = constant_fan_in_linear<double, std::int32_t>(50, 7, {.density = 0.1, .seed = 3, .layer_key = 1});
  const auto& W = a.weight.matrix;
  W.check_invariants();
  CHECK(row_counts(W) == std::vector<std::int64_t>(7, 5));
  // Kaiming-uniform for fan-in 5 (init.hpp), the bound SparseLinear uses for its mean fan-in
  const double kb = kaiming_uniform_bound(5.0);
  double largest = 0.0;
  W.for_each_live(
      [&](std::int64_t, std::int64_t, double v, std::int64_t) { largest = std::max(largest, std::abs(v)); });
  CHECK(largest <= kb);
  CHECK(largest > 0.5 * kb);
  const Layer b = constant_fan_in_linear<double, std::int32_t>(50, 7, {.density = 0.1, .seed = 3, .layer_key = 1});
  const Layer c = constant_fan_in_linear<double, std::int32_t>(50, 7, {.density = 0.1, .seed = 4, .layer_key = 1});
  auto positions = [](const Layer& l) {
    std::set<std::int64_t> p;
    l.weight.matrix.for_each_live(
        [&](std::int64_t i, std::int64_t col, double, std::int64_t) { p.insert(i * 50 + col); });
    return p;
  };
  CHECK(positions(a) == positions(b));
  CHECK_FALSE(positions(a) == positions(c));
  CHECK_THROWS_AS((constant_fan_in_linear<double, std::int32_t>(50, 7, {.density = 0.005})), ArgumentError);
  CHECK_THROWS_AS((constant_fan_in_linear<double, std::int32_t>(0, 7, {.density = 0.5})), ShapeError);
  CHECK_THROWS_AS((constant_fan_in_linear<double, std::int32_t>(5, 7, {.density = 1.5})), ArgumentError);
}

TEST_CASE("redraw_constant_fan_in equalizes every sparse layer of a model", "[dst][fan_in]") {
  Model m;
  m.add(Layer(30, 20, {.density = 0.2, .seed = 1, .padding_ratio = 0.25}));
  m.add(ReLU<double>{});
  m.add(Layer(20, 10, {.density = 0.3, .seed = 1, .layer_key = 1}));
  m.sparse_layers()[1].layer->weight.decay = false;
  const auto before = m.sparse_layers();
  const std::int64_t nnz0 = before[0].layer->weight.matrix.nnz(), nnz1 = before[1].layer->weight.matrix.nnz();
  REQUIRE(row_counts(before[0].layer->weight.matrix) != std::vector<std::int64_t>(20, nnz0 / 20));  // uneven rows
  redraw_constant_fan_in(m, 5);
  const auto after = m.sparse_layers();
  CHECK(row_counts(after[0].layer->weight.matrix) == std::vector<std::int64_t>(20, std::llround(nnz0 / 20.0)));
  CHECK(row_counts(after[1].layer->weight.matrix) == std::vector<std::int64_t>(10, std::llround(nnz1 / 10.0)));
  CHECK(after[0].layer->weight.matrix.padding_ratio() == 0.25);
  CHECK(after[1].layer->weight.decay == false);
  after[0].layer->weight.check_aligned("test");
  CHECK_THROWS_AS(redraw_constant_fan_in(m, 5, -1.0), ArgumentError);
}

TEST_CASE("constant fan-in keeps every row's count at every update", "[dst][fan_in]") {
  for (const Config& c : configs()) {
    INFO(c.name);
    const Data data = make_data(c.shapes.front().in, 48, 17);
    const auto n = fan_ins(c);
    SECTION(std::string("SET, ") + c.name) {
      Model model = fan_in_mlp(c.shapes, 5);
      SGD<double> opt({.lr = 0.1, .momentum = 0.9});
      SET<double, std::int32_t> algo(schedule(c.alpha), 1);
      algo.constant_fan_in = true;
      CHECK(train(algo, model, opt, data, 0, 70, n) == 21);
    }
    SECTION(std::string("RigL, ") + c.name) {
      Model model = fan_in_mlp(c.shapes, 5);
      const Entries start = entries_of(model);
      SGD<double> opt({.lr = 0.1, .momentum = 0.9});
      RigL<double, std::int32_t> algo(schedule(c.alpha), 1);
      algo.constant_fan_in = true;
      CHECK(train(algo, model, opt, data, 0, 70, n) == 21);
      if (std::string(c.name) == "general") CHECK_FALSE(entries_of(model) == start);
    }
    SECTION(std::string("Static, ") + c.name) {
      Model model = fan_in_mlp(c.shapes, 5);
      SGD<double> opt({.lr = 0.1, .momentum = 0.9});
      Static<double, std::int32_t> algo;
      algo.constant_fan_in = true;
      CHECK(train(algo, model, opt, data, 0, 20, n) == 0);
    }
  }
}

TEST_CASE("full rows stay full and one-live rows move their weight", "[dst][fan_in]") {
  // full rows: the free columns of a row are exactly its dropped ones, so both rules regrow them
  for (int rule = 0; rule < 2; ++rule) {
    const std::vector<Shape> shapes{{12, 8, 1.0}};
    Model model = fan_in_mlp(shapes, 2);
    const Data data = make_data(12, 16, 3);
    SGD<double> opt({.lr = 0.1});
    SET<double, std::int32_t> set(schedule(0.5), 1);
    RigL<double, std::int32_t> rigl(schedule(0.5), 1);
    set.constant_fan_in = rigl.constant_fan_in = true;
    if (rule == 0)
      train(set, model, opt, data, 0, 10, {12});
    else
      train(rigl, model, opt, data, 0, 10, {12});
    CHECK(model.sparse_layers()[0].layer->weight.matrix.nnz() == 96);
  }
  // one live weight per row, f = 1 at t = 0: every row drops its weight and grows one
  const std::vector<Shape> shapes{{40, 30, 1.0 / 40}};
  Model model = fan_in_mlp(shapes, 2);
  const Entries before = entries_of(model);
  const Data data = make_data(40, 16, 3);
  SGD<double> opt({.lr = 0.1});
  SET<double, std::int32_t> set(schedule(1.0), 1);
  set.constant_fan_in = true;
  train(set, model, opt, data, 0, 1, {1});
  const Entries after = entries_of(model);
  int moved = 0;
  for (std::size_t i = 0; i < 30; ++i) moved += after[0][i][0].first != before[0][i][0].first;
  CHECK(moved >= 25);  // a new column with probability 39/40 per row
}

TEST_CASE("RigL with constant fan-in drops and grows the per-row oracle's positions", "[dst][fan_in][rigl]") {
  // dense gradient computed naively, then per row: drop the per_row smallest |w| (ties:
  // smaller column), grow the per_row largest |g| among the columns not kept
  for (std::uint64_t seed = 0; seed < 12; ++seed) {
    INFO("seed " << seed);
    CounterRng rng(100 + seed);
    const std::int64_t in = 10 + static_cast<std::int64_t>(rng.uniform_below(30));
    const std::int64_t out = 1 + static_cast<std::int64_t>(rng.uniform_below(12));
    const std::int64_t n = 1 + static_cast<std::int64_t>(rng.uniform_below(static_cast<std::uint64_t>(in)));
    const std::int64_t batch = 1 + static_cast<std::int64_t>(rng.uniform_below(6));
    Layer layer(constant_fan_in_weight_for_test(in, out, n, seed));
    auto& W = layer.weight.matrix;
    W.for_each_live([&](std::int64_t, std::int64_t, double, std::int64_t s) {
      // a few exact magnitude ties among the weights, to exercise the column tie-break
      W.values()[s] = rng.uniform_below(4) == 0 ? 0.5 : rng.uniform(-1, 1);
    });
    layer.weight.state.assign(1, AlignedVector<double>(static_cast<std::size_t>(W.storage_size()), 0.0));
    W.for_each_live([&](std::int64_t i, std::int64_t c, double, std::int64_t s) {
      layer.weight.state[0][s] = 1.0 + double(i * in + c);
    });
    Matrix<double> X(in, batch), dY(out, batch);
    for (std::int64_t c = 0; c < in; ++c)
      for (std::int64_t b = 0; b < batch; ++b) X(c, b) = rng.uniform(-1, 1);
    for (std::int64_t i = 0; i < out; ++i)
      for (std::int64_t b = 0; b < batch; ++b) dY(i, b) = rng.uniform(-1, 1);
    // naive dense gradient
    std::vector<std::vector<double>> G(static_cast<std::size_t>(out),
                                       std::vector<double>(static_cast<std::size_t>(in)));
    for (std::int64_t i = 0; i < out; ++i)
      for (std::int64_t c = 0; c < in; ++c)
        for (std::int64_t b = 0; b < batch; ++b) G[i][c] += dY(i, b) * X(c, b);
    // f = 0.5 at t = 50 of [0, 100] with alpha = 1
    const std::int64_t per_row = n / 2;
    std::vector<std::map<std::int64_t, std::pair<double, double>>> expect(
        static_cast<std::size_t>(out));  // col -> value, state
    for (std::int64_t i = 0; i < out; ++i) {
      std::vector<std::tuple<double, std::int64_t, double, double>> live;  // |w|, col, w, state
      W.for_each_live([&](std::int64_t r, std::int64_t c, double v, std::int64_t s) {
        if (r == i) live.emplace_back(std::abs(v), c, v, layer.weight.state[0][s]);
      });
      std::sort(live.begin(), live.end());
      std::map<std::int64_t, std::pair<double, double>> dropped;
      for (std::int64_t q = 0; q < std::ssize(live); ++q) {
        auto [m, c, v, st] = live[static_cast<std::size_t>(q)];
        (q < per_row ? dropped : expect[i])[c] = {v, st};
      }
      std::vector<std::pair<double, std::int64_t>> free;  // -|g|, col: ascending = largest first, smaller col
      for (std::int64_t c = 0; c < in; ++c)
        if (!expect[i].count(c)) free.emplace_back(-std::abs(G[i][c]), c);
      std::sort(free.begin(), free.end());
      for (std::int64_t q = 0; q < per_row; ++q) {
        const std::int64_t c = free[static_cast<std::size_t>(q)].second;
        expect[i][c] = dropped.count(c) ? dropped[c] : std::pair<double, double>{0.0, 0.0};
      }
    }
    RigL<double, std::int32_t> rigl(schedule(1.0, 1, 100), 0);
    rigl.constant_fan_in = true;
    const std::vector<Ref> refs{{0, 0, &layer, X.view(), dY.view()}};
    rigl.update(refs, 50);
    W.check_invariants();
    layer.weight.check_aligned("test");
    for (std::int64_t i = 0; i < out; ++i) {
      std::map<std::int64_t, std::pair<double, double>> got;
      W.for_each_live([&](std::int64_t r, std::int64_t c, double v, std::int64_t s) {
        if (r == i) got[c] = {v, layer.weight.state[0][s]};
      });
      INFO("row " << i << " of " << out << ", in " << in << ", n " << n);
      CHECK(got == expect[i]);
    }
  }
}

TEST_CASE("the per-row gradient top-k streams blocks like the whole-layer one", "[dst][fan_in][rigl]") {
  // block_rows from 1 to all rows give the same positions, equal to a naive per-row sort;
  // rows of very different scales (a row's cut far below or above the previous row's) too
  const Layer layer(constant_fan_in_weight_for_test(17, 9, 5, 4));
  const auto& W = layer.weight.matrix;
  const DropSet drop = select_drop_per_row(W, 2);
  CounterRng rng(6);
  std::vector<double> G(9 * 17);
  const bool scaled = GENERATE(false, true);
  INFO("scaled rows " << scaled);
  for (std::size_t q = 0; q < G.size(); ++q)
    G[q] = rng.uniform(-1, 1) * (scaled ? std::pow(10.0, (q / 17) % 2 == 0 ? 4.0 - double(q / 17) : -3.0) : 1.0);
  G[3 * 17 + 4] = std::numeric_limits<double>::quiet_NaN();  // never chosen
  std::vector<std::int64_t> expect;
  for (std::int64_t i = 0; i < 9; ++i) {
    std::set<std::int64_t> kept;
    W.for_each_live([&](std::int64_t r, std::int64_t c, double, std::int64_t) {
      if (r == i && !std::binary_search(drop.positions.begin(), drop.positions.end(), r * 17 + c)) kept.insert(c);
    });
    std::vector<std::pair<double, std::int64_t>> free;
    for (std::int64_t c = 0; c < 17; ++c)
      if (!kept.count(c) && !std::isnan(G[i * 17 + c])) free.emplace_back(-std::abs(G[i * 17 + c]), c);
    std::sort(free.begin(), free.end());
    std::vector<std::int64_t> row;
    for (int q = 0; q < 2; ++q) row.push_back(i * 17 + free[q].second);
    std::sort(row.begin(), row.end());
    expect.insert(expect.end(), row.begin(), row.end());
  }
  for (std::int64_t block_rows : {1, 2, 4, 9, 100}) {
    Matrix<double> block;
    const auto got = top_gradient_linear_positions_per_row(
        W, drop, 2, block_rows,
        [&](std::int64_t r0, std::int64_t rows, MatrixView<double> out) {
          for (std::int64_t i = 0; i < rows; ++i)
            for (std::int64_t c = 0; c < 17; ++c) out(i, c) = G[(r0 + i) * 17 + c];
        },
        block);
    CHECK(got == expect);
  }
}

TEST_CASE("the per-row drop takes each row's smallest magnitudes", "[dst][fan_in]") {
  for (std::uint64_t seed = 0; seed < 10; ++seed) {
    const Layer layer(constant_fan_in_weight_for_test(23, 11, 9, seed));
    auto W = layer.weight.matrix;
    CounterRng rng(seed);
    W.for_each_live([&](std::int64_t, std::int64_t, double, std::int64_t s) {
      W.values()[s] = rng.uniform_below(3) == 0 ? -0.25 : rng.uniform(-1, 1);  // ties at 0.25
    });
    const std::int64_t per_row = static_cast<std::int64_t>(rng.uniform_below(10));
    const DropSet d = select_drop_per_row(W, per_row);
    std::vector<std::int64_t> expect;
    for (std::int64_t i = 0; i < 11; ++i) {
      std::vector<std::pair<double, std::int64_t>> row;
      W.for_each_live([&](std::int64_t r, std::int64_t c, double v, std::int64_t) {
        if (r == i) row.emplace_back(std::abs(v), c);
      });
      std::sort(row.begin(), row.end());
      std::vector<std::int64_t> cols;
      for (std::int64_t q = 0; q < per_row; ++q) cols.push_back(i * 23 + row[q].second);
      std::sort(cols.begin(), cols.end());
      expect.insert(expect.end(), cols.begin(), cols.end());
    }
    CHECK(d.positions == expect);
    std::int64_t flags = 0;
    for (auto f : d.slot_flag) flags += f;
    CHECK(flags == per_row * 11);
  }
  const Layer layer(constant_fan_in_weight_for_test(23, 11, 9, 0));
  CHECK_THROWS_WITH(select_drop_per_row(layer.weight.matrix, 10),
                    Catch::Matchers::Contains("row 0 holds 9 live weights, fewer than the 10"));
}

TEST_CASE("SET with constant fan-in draws uniformly among a row's free columns", "[dst][fan_in][set]") {
  // one row of 20 columns; both the rejection path (few kept) and the enumeration path
  struct Case {
    std::int64_t n, per_row;
  };
  for (const Case cs : {Case{5, 2}, Case{15, 3}}) {
    INFO("n " << cs.n << " per_row " << cs.per_row);
    const Layer layer(constant_fan_in_weight_for_test(20, 1, cs.n, 9));
    const auto& W = layer.weight.matrix;
    const DropSet drop = select_drop_per_row(W, cs.per_row);
    std::set<std::int64_t> kept;
    W.for_each_live([&](std::int64_t, std::int64_t c, double, std::int64_t) {
      if (!std::binary_search(drop.positions.begin(), drop.positions.end(), c)) kept.insert(c);
    });
    const std::int64_t free = 20 - std::ssize(kept);
    const int draws = 4000;
    std::vector<int> hits(20, 0);
    for (int t = 0; t < draws; ++t) {
      CounterRng rng(1, 0, static_cast<std::uint64_t>(t));
      const auto pos = random_free_linear_positions_per_row(W, drop, cs.per_row, rng);
      REQUIRE(std::ssize(pos) == cs.per_row);
      REQUIRE(std::is_sorted(pos.begin(), pos.end()));
      REQUIRE(std::adjacent_find(pos.begin(), pos.end()) == pos.end());
      for (std::int64_t p : pos) ++hits[p];
    }
    const double p = static_cast<double>(cs.per_row) / static_cast<double>(free);
    const double mean = draws * p, sigma = std::sqrt(draws * p * (1 - p));
    for (std::int64_t c = 0; c < 20; ++c) {
      INFO("column " << c);
      if (kept.count(c))
        CHECK(hits[c] == 0);
      else
        CHECK(std::abs(hits[c] - mean) < 5 * sigma);
    }
  }
}

TEST_CASE("constant fan-in topologies are bitwise the same for 1 and 2 threads", "[dst][fan_in][determinism]") {
  const std::vector<Shape> shapes{{12, 40, 0.25}, {40, 30, 0.15}};
  const Data data = make_data(12, 48, 17);
  auto run = [&](auto& algo, int threads) {
    Model model = fan_in_mlp(shapes, 5);
    SGD<double> opt({.lr = 0.1, .momentum = 0.9});
    algo.constant_fan_in = true;
    sprig_test::with_threads(threads, [&] { train(algo, model, opt, data, 0, 40, {3, 6}); });
    return entries_of(model);
  };
  SET<double, std::int32_t> s1(schedule(0.5), 42), s2(schedule(0.5), 42), s3(schedule(0.5), 43);
  const Entries e1 = run(s1, 1);
  CHECK(e1 == run(s2, 2));
  CHECK_FALSE(e1 == run(s3, 1));
  RigL<double, std::int32_t> r1(schedule(0.5), 7), r2(schedule(0.5), 7);
  CHECK(run(r1, 1) == run(r2, 2));
}

TEST_CASE("constant fan-in errors: uneven rows, SNFS, rules without per-row support, wrong rows",
          "[dst][fan_in][errors]") {
  Model uneven;
  uneven.add(Layer(12, 40, {.density = 0.2, .seed = 5}));
  const Data data = make_data(12, 16, 3);
  auto topology = [](Model& m) { return entries_of(m); };
  SECTION("rows of different counts") {
    const Entries before = topology(uneven);
    SET<double, std::int32_t> set(schedule(0.5), 1);
    set.constant_fan_in = true;
    SGD<double> opt({.lr = 0.1});
    try {
      apply_step(set, opt, uneven, 0);
      FAIL("no error");
    } catch (const ArgumentError& e) {
      const std::string what = e.what();
      INFO(what);
      CHECK(what.find("dst::apply_step: set with constant_fan_in needs every row of sparse layer 0 (40x12) to hold the "
                      "same live count") == 0);
      CHECK(what.find("dst::constant_fan_in_linear") != std::string::npos);
    }
    CHECK(topology(uneven) == before);  // checked before the optimizer step too
    CHECK(set.updates() == 0);
  }
  SECTION("SNFS rejects it before any layer changes") {
    Model model = fan_in_mlp({{12, 40, 0.25}}, 5);
    const Entries before = topology(model);
    const auto Z = model.forward(data.X.view());
    SoftmaxCrossEntropy<double> loss;
    loss.forward_backward(Z, data.y, model.output_grad());
    model.backward();
    SNFS<double, std::int32_t> snfs(schedule(0.5), 1);
    snfs.constant_fan_in = true;
    CHECK_FALSE(snfs.supports_constant_fan_in());
    CHECK_THROWS_WITH(snfs.update(model.sparse_layers(), 0),
                      "SparsityAlgorithm::update: snfs does not support constant_fan_in (it redistributes weights "
                      "between layers, which changes row counts)");
    CHECK(topology(model) == before);
  }
  // A user's rule: SET's per-row draw, optionally with one position moved to another row.
  struct UserRule final : SparsityAlgorithm<double, std::int32_t> {
    using SparsityAlgorithm<double, std::int32_t>::SparsityAlgorithm;
    bool supports = false, misplace = false;
    std::string_view name() const override { return "user"; }
    bool supports_constant_fan_in() const override { return supports; }
    std::vector<std::int64_t> grow_linear_positions(const LayerRef& layer, const DropSet& dropped, std::int64_t k,
                                                    CounterRng& rng) override {
      return random_free_linear_positions(layer.layer->weight.matrix, dropped, k, rng);
    }
    std::vector<std::int64_t> grow_linear_positions_per_row(const LayerRef& layer, const DropSet& dropped,
                                                            std::int64_t per_row, CounterRng& rng) override {
      const auto& W = layer.layer->weight.matrix;
      auto v = random_free_linear_positions_per_row(W, dropped, per_row, rng);
      if (misplace) {
        // row 0's first position goes to a free column of row 1 that row 1 did not draw
        const auto row1 = random_free_linear_positions_per_row(W, dropped, W.cols() - (W.row_nnz(1) - per_row), rng);
        for (std::int64_t p : row1)
          if (p >= W.cols() && p < 2 * W.cols() && !std::binary_search(v.begin(), v.end(), p)) {
            v.erase(v.begin());
            v.insert(std::lower_bound(v.begin(), v.end(), p), p);
            break;
          }
      }
      return v;
    }
  };
  SECTION("a rule that does not support it") {
    Model model = fan_in_mlp({{12, 40, 0.25}}, 5);
    UserRule rule(schedule(0.5), 1);
    rule.constant_fan_in = true;
    CHECK_THROWS_WITH(rule.update(model.sparse_layers(), 0),
                      "SparsityAlgorithm::update: user does not support constant_fan_in");
  }
  SECTION("a rule that puts a position in the wrong row") {
    Model model = fan_in_mlp({{12, 40, 0.5}}, 5);  // 6 of 12 per row, 3 dropped at f = 0.5
    const Entries before = topology(model);
    UserRule rule(schedule(0.5), 1);
    rule.constant_fan_in = rule.supports = rule.misplace = true;
    CHECK_THROWS_WITH(rule.update(model.sparse_layers(), 0),
                      "SparsityAlgorithm::update: user's grow_linear_positions_per_row for sparse layer 0 (40x12) "
                      "returned 2 positions in row 0, expected exactly 3 in every row");
    CHECK(topology(model) == before);
    rule.misplace = false;
    CHECK_NOTHROW(rule.update(model.sparse_layers(), 0));
    CHECK(row_counts(model.sparse_layers()[0].layer->weight.matrix) == std::vector<std::int64_t>(40, 6));
  }
}

TEST_CASE("a constant fan-in run resumes bitwise from a checkpoint", "[dst][fan_in][checkpoint]") {
  namespace fs = std::filesystem;
  std::string tmpl = (fs::temp_directory_path() / "sprig_fan_in_XXXXXX").string();
  REQUIRE(::mkdtemp(tmpl.data()) != nullptr);
  const fs::path dir = tmpl;
  const std::vector<Shape> shapes{{12, 40, 0.25}, {40, 30, 0.15}};
  const Data data = make_data(12, 48, 17);
  for (int which = 0; which < 2; ++which) {
    INFO((which == 0 ? "RigL" : "SET"));
    auto make = [&]() -> std::unique_ptr<SparsityAlgorithm<double, std::int32_t>> {
      std::unique_ptr<SparsityAlgorithm<double, std::int32_t>> a;
      if (which == 0)
        a = std::make_unique<RigL<double, std::int32_t>>(schedule(0.5), 3);
      else
        a = std::make_unique<SET<double, std::int32_t>>(schedule(0.5), 3);
      a->constant_fan_in = true;
      return a;
    };
    // uninterrupted
    Model m0 = fan_in_mlp(shapes, 5);
    SGD<double> o0({.lr = 0.1, .momentum = 0.9});
    auto a0 = make();
    train(*a0, m0, o0, data, 0, 30, {3, 6});
    // interrupted after 14 steps (4 updates), saved, loaded into a model drawn from another seed
    Model m1 = fan_in_mlp(shapes, 5);
    SGD<double> o1({.lr = 0.1, .momentum = 0.9});
    auto a1 = make();
    train(*a1, m1, o1, data, 0, 14, {3, 6});
    save_training_state(dir / "state.sprig", m1, o1, {.step = 14}, a1.get());
    Model m2 = fan_in_mlp(shapes, 77);
    SGD<double> o2({.lr = 0.1, .momentum = 0.9});
    auto a2 = make();
    const TrainingProgress p = load_training_state(dir / "state.sprig", m2, o2, a2.get());
    REQUIRE(p.step == 14);
    REQUIRE(entries_of(m2) == entries_of(m1));
    train(*a2, m2, o2, data, 14, 30, {3, 6});
    CHECK(entries_of(m2) == entries_of(m0));
    CHECK(a2->updates() == a0->updates());
  }
  std::error_code ec;
  fs::remove_all(dir, ec);
}
