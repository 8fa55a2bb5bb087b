#include <sprig/dst/algorithm.hpp>

#include <catch2/catch.hpp>
#include <map>
#include <memory>
#include <set>

#include <sprig/dst/rigl.hpp>
#include <sprig/dst/set.hpp>
#include <sprig/dst/snfs.hpp>
#include <sprig/dst/static_topology.hpp>
#include <sprig/nn/softmax_cross_entropy.hpp>
#include <sprig/optim/sgd.hpp>

#include "drop_grow_test_support.hpp"
#if defined(_OPENMP)
#  include <omp.h>
#endif

using namespace sprig;
using namespace sprig::dst;
using namespace sprig::dst::testing;

namespace {

using Model = Sequential<double, std::int32_t>;

Model small_mlp(std::uint64_t seed) {
  Model m;
  // no padding: growth relocates
  m.add(SparseLinear<double, std::int32_t>(12, 40, {.density = 0.2, .seed = seed, .padding_ratio = 0.0}));
  m.add(ReLU<double>{});
  m.add(SparseLinear<double, std::int32_t>(40, 30,
                                           {.density = 0.15, .seed = seed, .layer_key = 1, .padding_ratio = 0.0}));
  m.add(ReLU<double>{});
  m.add(Linear<double>(30, 3, seed, 2));
  return m;
}

// A 3-class problem: the class is the argmax of three fixed projections of the input.
struct Data {
  Matrix<double> X;
  std::vector<int> y;
};
Data make_data(std::int64_t n, std::uint64_t seed) {
  Data d{Matrix<double>(12, n), std::vector<int>(static_cast<std::size_t>(n))};
  CounterRng rng(seed);
  for (std::int64_t b = 0; b < n; ++b) {
    double s[3] = {0, 0, 0};
    for (std::int64_t f = 0; f < 12; ++f) {
      d.X(f, b) = rng.uniform(-1, 1);
      s[f % 3] += d.X(f, b);
    }
    d.y[b] = static_cast<int>(std::max_element(s, s + 3) - s);
  }
  return d;
}

struct Topology {
  std::vector<std::set<std::int64_t>> positions;
  bool operator==(const Topology&) const = default;
};
Topology topology_of(Model& m) {
  Topology t;
  for (auto& ref : m.sparse_layers()) {
    std::set<std::int64_t> p;
    const auto& W = ref.layer->weight.matrix;
    W.for_each_live([&](std::int64_t i, std::int64_t c, double, std::int64_t) { p.insert(i * W.cols() + c); });
    t.positions.push_back(std::move(p));
  }
  return t;
}

// Trains `steps` steps with the algorithm; checks invariants and state alignment after every
// topology update; returns the final topology.
template <class Algo>
Topology train(Algo& algo, std::uint64_t seed, std::int64_t steps, std::int64_t* updates_seen = nullptr) {
  Model model = small_mlp(seed);
  SGD<double> opt({.lr = 0.1, .momentum = 0.9});
  SoftmaxCrossEntropy<double> loss;
  const Data data = make_data(64, 99);
  std::vector<std::int64_t> live0;
  for (auto& ref : model.sparse_layers()) live0.push_back(ref.layer->weight.matrix.nnz());
  const std::int64_t total0 = std::accumulate(live0.begin(), live0.end(), std::int64_t{0});
  for (std::int64_t t = 0; t < steps; ++t) {
    const auto Z = model.forward(data.X.view());
    loss.forward_backward(Z, data.y, model.output_grad());
    model.backward();
    UpdateReport report;
    apply_step(algo, opt, model, t, &report);
    if (report.step == t) {
      if (updates_seen) ++*updates_seen;
      std::int64_t total = 0;
      std::size_t l = 0;
      for (auto& ref : model.sparse_layers()) {
        auto& p = ref.layer->weight;
        p.matrix.check_invariants();
        p.check_aligned("test");
        // padding and dead slots carry zero state
        if (!p.state.empty())  // RigL at step 0 updates before the optimizer ever ran
          for (std::int64_t s = 0; s < p.matrix.storage_size(); ++s)
            if (p.matrix.col_indices()[s] < 0) REQUIRE(p.state.at(0)[s] == 0.0);
        if (algo.name() != "snfs") REQUIRE(p.matrix.nnz() == live0[l]);
        total += p.matrix.nnz();
        ++l;
      }
      REQUIRE(total == total0);
    }
  }
  return topology_of(model);
}

}  // namespace

TEST_CASE("Static never changes the topology", "[dst][static]") {
  Static<double, std::int32_t> algo;
  Model ref = small_mlp(5);
  const Topology before = topology_of(ref);
  std::int64_t updates = 0;
  CHECK(train(algo, 5, 60, &updates) == before);
  CHECK(updates == 0);
}

TEST_CASE("SET, RigL and SNFS keep invariants, counts and state aligned through training", "[dst][train]") {
  const auto schedule = [] {
    UpdateSchedule s;
    s.delta_t = 7;
    s.t_begin = 3;
    s.t_end = 150;
    s.alpha = 0.5;
    return s;
  }();
  SECTION("SET") {
    SET<double, std::int32_t> algo(schedule, 1);
    std::int64_t updates = 0;
    const Topology t = train(algo, 5, 160, &updates);
    CHECK(updates == 22);
    CHECK(algo.updates() == 22);
    CHECK_FALSE(t == topology_of(*std::make_unique<Model>(small_mlp(5))));
  }
  SECTION("RigL") {
    RigL<double, std::int32_t> algo(schedule, 1);
    std::int64_t updates = 0;
    const Topology t = train(algo, 5, 160, &updates);
    CHECK(updates == 22);
    CHECK_FALSE(t == topology_of(*std::make_unique<Model>(small_mlp(5))));
  }
  SECTION("SNFS") {
    SNFS<double, std::int32_t> algo(schedule, 1);
    train(algo, 5, 160);
  }
}

TEST_CASE("topology updates are deterministic for a seed and any thread count", "[dst][determinism]") {
  UpdateSchedule s;
  s.delta_t = 5;
  s.t_end = 60;
  SET<double, std::int32_t> a(s, 42), b(s, 42), c(s, 43);
  const Topology ta = train(a, 5, 70);
#if defined(_OPENMP)
  const int threads = omp_get_max_threads();
  omp_set_num_threads(threads == 1 ? 2 : 1);
#endif
  const Topology tb = train(b, 5, 70);
#if defined(_OPENMP)
  omp_set_num_threads(threads);
#endif
  CHECK(ta == tb);
  CHECK_FALSE(ta == train(c, 5, 70));
  RigL<double, std::int32_t> r1(s, 7), r2(s, 7);
  CHECK(train(r1, 5, 70) == train(r2, 5, 70));
}

TEST_CASE("RigL grows exactly at planted large-gradient positions", "[dst][rigl]") {
  // One layer 6 x 8; input X = I (8 x 8) so dL/dW = dY X^T = dY: plant large values in dY.
  SparseLinear<double, std::int32_t> layer(8, 6, {.density = 0.25, .seed = 3, .layer_key = 0, .padding_ratio = 0.0});
  auto& W = layer.weight.matrix;
  const std::int64_t live = W.nnz();
  Matrix<double> X(8, 8), dY(6, 8);
  for (int i = 0; i < 8; ++i) X(i, i) = 1.0;
  CounterRng rng(5);
  for (std::int64_t i = 0; i < 6; ++i)
    for (std::int64_t c = 0; c < 8; ++c) dY(i, c) = rng.uniform(-0.01, 0.01);
  // drop fraction 0.5 -> k = floor(live / 2); plant k large gradients at empty positions
  const std::int64_t k = live / 2;
  std::set<std::int64_t> planted;
  for (std::int64_t p = 0; p < 48 && std::ssize(planted) < k; p += 5)
    if (W.find(p / 8, p % 8) < 0) {
      planted.insert(p);
      dY(p / 8, p % 8) = 10.0 + static_cast<double>(p);
    }
  REQUIRE(std::ssize(planted) == k);
  // the k smallest magnitudes will be dropped; remember the survivors and their state
  layer.weight.state.assign(1, AlignedVector<double>(static_cast<std::size_t>(W.storage_size()), 0.0));
  std::map<std::int64_t, double> survivors_state;
  const auto drop = smallest_magnitude_slots(W, k);
  const std::set<std::int64_t> drop_set(drop.begin(), drop.end());
  W.for_each_live([&](std::int64_t i, std::int64_t c, double, std::int64_t s) {
    layer.weight.state[0][s] = 1.0 + double(i * 8 + c);
    if (!drop_set.count(s)) survivors_state[i * 8 + c] = layer.weight.state[0][s];
  });
  UpdateSchedule sched;
  sched.delta_t = 1;
  sched.t_end = 100;
  sched.alpha = 1.0;  // f(0) = alpha = 1.0 ... use t = 50: f = 0.5
  RigL<double, std::int32_t> rigl(sched, 0);
  REQUIRE(sched.drop_fraction(50) == Approx(0.5));
  const std::vector<SparseLayerRef<double, std::int32_t>> refs{{0, 0, &layer, X.view(), dY.view()}};
  const auto report = rigl.update(refs, 50);
  W.check_invariants();
  CHECK(W.nnz() == live);
  CHECK(report.layers[0].stats.grown == k);
  for (std::int64_t p : planted) {
    const std::int64_t s = W.find(p / 8, p % 8);
    REQUIRE(s >= 0);
    CHECK(W.values()[s] == 0.0);             // grown weight starts at zero
    CHECK(layer.weight.state[0][s] == 0.0);  // and so does its optimizer state
  }
  for (auto [p, st] : survivors_state) {
    const std::int64_t s = W.find(p / 8, p % 8);
    REQUIRE(s >= 0);
    CHECK(layer.weight.state[0][s] == st);  // survivors keep their state
  }
}

TEST_CASE("SNFS redistribution", "[dst][snfs]") {
  using S = SNFS<double, std::int32_t>;
  // proportional to the weights, total preserved
  CHECK(S::redistribute({10, 10}, {1.0, 3.0}, {100, 100}) == std::vector<std::int64_t>{5, 15});
  // capped layer: excess goes to the other
  CHECK(S::redistribute({10, 10}, {1.0, 9.0}, {100, 12}) == std::vector<std::int64_t>{8, 12});
  // all-zero weights fall back to the drop counts
  CHECK(S::redistribute({3, 4}, {0.0, 0.0}, {10, 10}) == std::vector<std::int64_t>{3, 4});
  // remainders by largest fraction
  const auto r = S::redistribute({1, 1, 1}, {1.0, 1.0, 1.0}, {5, 5, 5});
  CHECK(std::accumulate(r.begin(), r.end(), std::int64_t{0}) == 3);
}

TEST_CASE("apply_step with a gradient-based algorithm before forward/backward says what is missing", "[dst][errors]") {
  UpdateSchedule s;
  s.delta_t = 10;
  s.t_end = 100;
  auto check = [](auto& algo, const std::string& name) {
    Model model = small_mlp(5);
    const Topology before = topology_of(model);
    SGD<double> opt({.lr = 0.1, .momentum = 0.9});
    try {
      apply_step(algo, opt, model, 0);  // step 0 updates; no forward or backward happened
      FAIL("no error");
    } catch (const ArgumentError& e) {
      const std::string what = e.what();
      INFO(what);
      CHECK(what.find("dst::apply_step: " + name + " needs the input and output gradient of sparse layer 0") !=
            std::string::npos);
      CHECK(what.find("none was recorded") != std::string::npos);
    }
    CHECK(topology_of(model) == before);  // nothing changed
    CHECK(algo.updates() == 0);
  };
  SECTION("RigL") {
    RigL<double, std::int32_t> algo(s, 1);
    check(algo, "rigl");
  }
  SECTION("SNFS") {
    SNFS<double, std::int32_t> algo(s, 1);
    check(algo, "snfs");
  }
  SECTION("SET and Static need no gradient") {
    Model model = small_mlp(5);
    SGD<double> opt({.lr = 0.1});
    SET<double, std::int32_t> set(s, 1);
    CHECK_NOTHROW(apply_step(set, opt, model, 0));
    Static<double, std::int32_t> fixed;
    CHECK_NOTHROW(apply_step(fixed, opt, model, 0));
  }
  SECTION("SparsityAlgorithm::update names itself") {
    Model model = small_mlp(5);
    RigL<double, std::int32_t> algo(s, 1);
    CHECK_THROWS_WITH(algo.update(model.sparse_layers(), 0),
                      Catch::Matchers::StartsWith(
                          "SparsityAlgorithm::update: rigl needs the input and output gradient"));
  }
}

namespace {

// What a user's grow rule can get wrong; none = a valid rule (a random free position list).
enum class Fault { none, out_of_range, negative, repeated, descending, kept, too_few, too_many, regrow_dropped };

// A user subclass whose grow rule returns a valid random list (SET's) with one planted fault.
class Rogue final : public SparsityAlgorithm<double, std::int32_t> {
public:
  Rogue(UpdateSchedule s, Fault f) : SparsityAlgorithm<double, std::int32_t>(s, 1), fault(f) {}
  std::string_view name() const override { return "rogue"; }
  Fault fault;
  std::int64_t bad = 0;     // the offending position returned
  std::int64_t asked = -1;  // the k it was asked for

protected:
  std::vector<std::int64_t> grow_linear_positions(const LayerRef& layer, const DropSet& dropped, std::int64_t k,
                                                  CounterRng& rng) override {
    const auto& W = layer.layer->weight.matrix;
    const std::int64_t total = W.rows() * W.cols();
    asked = k;
    if (fault == Fault::regrow_dropped) return dropped.positions;
    std::vector<std::int64_t> v = random_free_linear_positions(W, dropped, fault == Fault::too_many ? k + 1 : k, rng);
    REQUIRE(v.size() >= 3);
    switch (fault) {
      case Fault::out_of_range: bad = v.back() = total; break;
      case Fault::negative: bad = v.front() = -1; break;
      case Fault::repeated: bad = v[2] = v[1]; break;
      case Fault::descending:
        std::swap(v[1], v[2]);
        bad = v[2];
        break;
      case Fault::kept: {
        // a live position that was not dropped, in place of one of the free ones
        const std::set<std::int64_t> drop(dropped.positions.begin(), dropped.positions.end());
        W.for_each_live([&](std::int64_t i, std::int64_t c, double, std::int64_t) {
          if (!drop.count(i * W.cols() + c)) bad = i * W.cols() + c;
        });
        REQUIRE(W.find(bad / W.cols(), bad % W.cols()) >= 0);
        v.erase(v.begin());
        v.insert(std::lower_bound(v.begin(), v.end(), bad), bad);
        break;
      }
      case Fault::too_few: v.pop_back(); break;
      default: break;
    }
    return v;
  }
};

// Everything of a layer that a topology update could change.
struct LayerSnapshot {
  std::vector<double> values, grad, bias;
  std::vector<std::vector<double>> state;
  std::vector<std::int32_t> col_indices;
  std::vector<std::int64_t> row_start, row_nnz;
  std::int64_t nnz;
  bool operator==(const LayerSnapshot&) const = default;
};
LayerSnapshot snapshot(const SparseLinear<double, std::int32_t>& layer) {
  const auto& p = layer.weight;
  LayerSnapshot s;
  s.values.assign(p.matrix.values().begin(), p.matrix.values().end());
  s.col_indices.assign(p.matrix.col_indices().begin(), p.matrix.col_indices().end());
  s.grad.assign(p.grad.begin(), p.grad.end());
  for (const auto& st : p.state) s.state.emplace_back(st.begin(), st.end());
  for (std::int64_t i = 0; i < p.matrix.rows(); ++i) {
    s.row_start.push_back(p.matrix.row_start(i));
    s.row_nnz.push_back(p.matrix.row_nnz(i));
  }
  s.bias.assign(layer.bias.value.data(), layer.bias.value.data() + layer.bias.value.size());
  s.nnz = p.matrix.nnz();
  return s;
}

}  // namespace

TEST_CASE("a grow rule's positions are validated in every build type before the layer changes", "[dst][errors]") {
  // 10 x 20 at density 0.3: 60 live, f = alpha = 0.5 at t = 0 -> k = 30 of 170 free positions
  UpdateSchedule s;
  s.delta_t = 1;
  s.t_end = 100;
  s.alpha = 0.5;
  auto make_layer = [] {
    SparseLinear<double, std::int32_t> layer(20, 10, {.density = 0.3, .seed = 4, .padding_ratio = 0.0});
    auto& p = layer.weight;
    CounterRng rng(8);
    for (auto& g : p.grad) g = rng.uniform(-1, 1);
    p.state.assign(2, AlignedVector<double>(p.grad.size()));
    for (auto& st : p.state)
      for (auto& v : st) v = rng.uniform(0, 1);
    return layer;
  };
  const std::int64_t cols = 20;
  auto expect_rejected = [&](Fault fault, const std::string& why, bool names_position) {
    auto layer = make_layer();
    const LayerSnapshot before = snapshot(layer);
    Rogue algo(s, fault);
    const std::vector<SparseLayerRef<double, std::int32_t>> refs{{0, 0, &layer, {}, {}}};
    std::string what;
    try {
      algo.update(refs, 0);
    } catch (const ArgumentError& e) {
      what = e.what();
    }
    INFO(what);
    REQUIRE_FALSE(what.empty());
    CHECK(algo.asked == 30);
    CHECK(what.find("SparsityAlgorithm::update: rogue's grow_linear_positions for sparse layer 0 (10x20)") == 0);
    CHECK(what.find(why) != std::string::npos);
    if (names_position) {
      const std::int64_t row = algo.bad >= 0 ? algo.bad / cols : -1;  // floor division
      const std::string at = "position " + std::to_string(algo.bad) + " = (" + std::to_string(row) + ", " +
                             std::to_string(algo.bad - row * cols) + ")";
      CHECK(what.find(at) != std::string::npos);
    }
    CHECK(snapshot(layer) == before);  // weights, topology, gradient, state untouched
    CHECK(algo.updates() == 0);
  };
  SECTION("out of range") { expect_rejected(Fault::out_of_range, "outside [0, rows * cols = 200)", true); }
  SECTION("negative") { expect_rejected(Fault::negative, "outside [0, rows * cols = 200)", true); }
  SECTION("repeated") { expect_rejected(Fault::repeated, "strictly ascending (a repeated position)", true); }
  SECTION("descending") { expect_rejected(Fault::descending, "strictly ascending (descending)", true); }
  SECTION("already live and kept") { expect_rejected(Fault::kept, "which is live and not dropped (kept)", true); }
  SECTION("too few") { expect_rejected(Fault::too_few, "returned 29 positions, expected exactly 30", false); }
  SECTION("too many") { expect_rejected(Fault::too_many, "returned 31 positions, expected exactly 30", false); }
  SECTION("a just-dropped position may be returned: it is regrown") {
    auto layer = make_layer();
    const LayerSnapshot before = snapshot(layer);
    Rogue algo(s, Fault::regrow_dropped);
    const std::vector<SparseLayerRef<double, std::int32_t>> refs{{0, 0, &layer, {}, {}}};
    const UpdateReport r = algo.update(refs, 0);
    CHECK(r.layers[0].stats.regrown == 30);
    CHECK(r.layers[0].stats.dropped == 0);
    CHECK(r.layers[0].stats.grown == 0);
    CHECK(snapshot(layer) == before);  // every dropped weight regrown: nothing moved
  }
  SECTION("a valid rule passes and changes the layer") {
    auto layer = make_layer();
    const LayerSnapshot before = snapshot(layer);
    Rogue algo(s, Fault::none);
    const std::vector<SparseLayerRef<double, std::int32_t>> refs{{0, 0, &layer, {}, {}}};
    const UpdateReport r = algo.update(refs, 0);
    CHECK(r.layers[0].stats.dropped + r.layers[0].stats.regrown == 30);
    CHECK(layer.weight.matrix.nnz() == 60);
    CHECK_FALSE(snapshot(layer) == before);
  }
}

TEST_CASE("malformed grow counts are rejected before any layer changes", "[dst][errors]") {
  struct BadCounts final : SparsityAlgorithm<double, std::int32_t> {
    using SparsityAlgorithm<double, std::int32_t>::SparsityAlgorithm;
    std::vector<std::int64_t> counts;
    std::string_view name() const override { return "badcounts"; }
    std::vector<std::int64_t> grow_counts(std::span<const LayerRef>, const std::vector<std::int64_t>&) override {
      return counts;
    }
    std::vector<std::int64_t> grow_linear_positions(const LayerRef& layer, const DropSet& dropped, std::int64_t k,
                                                    CounterRng& rng) override {
      return random_free_linear_positions(layer.layer->weight.matrix, dropped, k, rng);
    }
  };
  UpdateSchedule s;
  s.delta_t = 1;
  s.t_end = 100;
  Model model = small_mlp(5);
  const Topology before = topology_of(model);
  BadCounts algo(s, 1);
  algo.counts = {5};
  CHECK_THROWS_WITH(algo.update(model.sparse_layers(), 0),
                    "SparsityAlgorithm::update: badcounts's grow_counts returned 1 counts for 2 sparse layers");
  algo.counts = {5, -1};
  CHECK_THROWS_WITH(algo.update(model.sparse_layers(), 0),
                    "SparsityAlgorithm::update: badcounts's grow_counts returned -1 for sparse layer 1 (must be >= 0)");
  CHECK(topology_of(model) == before);
}
