// Optimizer state of sparse parameters: follows delete / insert / relocate / compact
// through SparseParameter::apply, padding stays exactly 0, sparse == dense on live entries.
#include "sprig/optim/adamw.hpp"
#include "sprig/optim/sgd.hpp"

#include <cmath>
#include <cstdint>
#include <map>
#include <tuple>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>

using namespace sprig;

namespace {

// A scalar oracle: the optimizer's math for one weight, written independently of the library.
struct Scalar {
  double w = 0, a = 0, b = 0;  // weight, first state (buf or m), second state (v)
  std::int64_t n = 0;          // AdamW: updates this weight has had
};
struct SgdMath {
  double lr = 0.05, mu = 0.9, wd = 0.01;
  void step(Scalar& s, double g, std::int64_t) const {
    g += wd * s.w;
    s.a = mu * s.a + g;
    s.w -= lr * (g + mu * s.a);  // Nesterov
  }
  SGD<double> make() const { return SGD<double>({.lr = lr, .momentum = mu, .weight_decay = wd, .nesterov = true}); }
};
// AdamW; per_slot: a weight's bias corrections count its updates since its moments were
// both zero (a newborn one starts at 1), global: they use the optimizer's step t.
template <AdamWBiasCorrection Policy>
struct AdamMath {
  double lr = 0.01, b1 = 0.9, b2 = 0.99, eps = 1e-8, wd = 0.05;
  void step(Scalar& s, double g, std::int64_t t) const {
    if (s.a == 0 && s.b == 0) s.n = 0;  // per_slot: zero moments start a fresh count
    const double n = Policy == AdamWBiasCorrection::per_slot ? double(++s.n) : double(t);
    s.w *= 1 - lr * wd;
    s.a = b1 * s.a + (1 - b1) * g;
    s.b = b2 * s.b + (1 - b2) * g * g;
    s.w -= lr * (s.a / (1 - std::pow(b1, n))) / (std::sqrt(s.b / (1 - std::pow(b2, n))) + eps);
  }
  AdamW<double> make() const {
    return AdamW<double>(
        {.lr = lr, .beta1 = b1, .beta2 = b2, .eps = eps, .weight_decay = wd, .bias_correction = Policy});
  }
};
using AdamPerSlot = AdamMath<AdamWBiasCorrection::per_slot>;
using AdamGlobal = AdamMath<AdamWBiasCorrection::global>;
// beta2 so near 1 that the corrections are not 1 by n = 65535: the counts stay in state[2]
struct AdamPerSlotWide : AdamPerSlot {
  AdamPerSlotWide() { b2 = 0.99999; }
};

double grad_of(std::int64_t r, std::int64_t c, std::int64_t t) { return std::sin(0.7 * r + 1.3 * c + 0.4 * t); }

using Cases = std::tuple<std::pair<SgdMath, std::int16_t>, std::pair<SgdMath, std::int64_t>,
                         std::pair<AdamPerSlot, std::int16_t>, std::pair<AdamPerSlot, std::int32_t>,
                         std::pair<AdamGlobal, std::int16_t>, std::pair<AdamPerSlotWide, std::int32_t>>;

}  // namespace

TEMPLATE_LIST_TEST_CASE("optimizer state follows slot moves; padding stays 0", "[optim][state]", Cases) {
  using Math = typename TestType::first_type;
  using Index = typename TestType::second_type;
  const Math math;
  auto opt = math.make();
  SparseParameter<double, Index> p(PaddedCSR<double, Index>::random_per_row(5, 12, 4, 9));
  std::map<std::pair<std::int64_t, std::int64_t>, Scalar> oracle;
  p.matrix.for_each_live([&](std::int64_t r, std::int64_t c, double v, std::int64_t) {
    oracle[{r, c}] = {v, 0, 0, 0};
  });

  auto poison_non_live = [&] {  // garbage where nothing is live must never reach a weight
    for (std::int64_t s = 0; s < p.matrix.storage_size(); ++s)
      if (p.matrix.col_indices()[s] < 0) {
        p.grad[s] = 123.0;
        for (auto& st : p.state)
          if (!st.empty()) st[s] = -77.0;
        if (!p.step_counts.empty()) p.step_counts[s] = 60000;
      }
  };
  auto train_step = [&] {
    opt.begin_step();
    const std::int64_t t = opt.step_count();
    p.matrix.for_each_live(
        [&](std::int64_t r, std::int64_t c, double, std::int64_t s) { p.grad[s] = grad_of(r, c, t); });
    poison_non_live();
    opt.update(p);
    for (auto& [rc, sc] : oracle) math.step(sc, grad_of(rc.first, rc.second, t), t);
  };
  auto compare = [&] {
    p.matrix.check_invariants();  // includes: padding and dead slots hold exactly 0
    REQUIRE(p.matrix.nnz() == std::ssize(oracle));
    p.matrix.for_each_live([&](std::int64_t r, std::int64_t c, double v, std::int64_t s) {
      const Scalar& sc = oracle.at({r, c});
      INFO("(" << r << ", " << c << ") step " << opt.step_count());
      REQUIRE(v == Approx(sc.w).margin(1e-12));
      REQUIRE(p.state[0][s] == Approx(sc.a).margin(1e-12));
      if (p.state.size() > 1) REQUIRE(p.state[1][s] == Approx(sc.b).margin(1e-12));
      if (p.state.size() > 2) REQUIRE(p.state[2][s] == double(sc.n));  // AdamW per_slot counts, wide
      if (!p.step_counts.empty()) REQUIRE(p.step_counts[s] == sc.n);   // or narrow
    });
  };

  for (int k = 0; k < 3; ++k) train_step();
  compare();

  SlotLog log;
  poison_non_live();  // a newborn weight must start from zero state even over garbage
  // delete two weights of row 0 (the row's last slot moves into each hole)
  for (int k = 0; k < 2; ++k) {
    const auto r0 = p.matrix.row(0);
    oracle.erase({0, r0.cols[0]});
    p.matrix.erase_slot(0, r0.start, &log);
  }
  // fill row 1 completely: it outgrows its capacity and relocates to the end of storage
  for (std::int64_t c = 0; c < 12; ++c)
    if (p.matrix.find(1, c) < 0) {
      p.matrix.insert_new(1, c, 0.0, &log);
      oracle[{1, c}] = {0.0, 0, 0, 0};
    }
  // insert into row 0's padding (a slot just freed)
  for (std::int64_t c = 0; c < 12; ++c)
    if (p.matrix.find(0, c) < 0 && !oracle.count({0, c})) {
      p.matrix.insert_new(0, c, 0.25, &log);
      oracle[{0, c}] = {0.25, 0, 0, 0};
      break;
    }
  p.apply(log);
  log.reset();
  REQUIRE(p.matrix.dead_slots() > 0);
  for (int k = 0; k < 3; ++k) train_step();
  compare();

  p.matrix.compact(&log);
  p.apply(log);
  log.reset();
  for (int k = 0; k < 2; ++k) train_step();
  compare();
}

TEST_CASE("a fully dense SparseParameter trains exactly like a DenseParameter", "[optim][state]") {
  const std::int64_t R = 4, C = 6;
  Matrix<double> init(R, C);
  for (std::int64_t i = 0; i < R; ++i)
    for (std::int64_t j = 0; j < C; ++j) init(i, j) = 0.1 * double(i - j) + 0.05;
  SparseParameter<double, std::int32_t> sp(PaddedCSR<double, std::int32_t>::from_dense(init.view()));
  DenseParameter<double> dp(R, C);
  for (std::int64_t i = 0; i < R; ++i)
    for (std::int64_t j = 0; j < C; ++j) dp.value[i * C + j] = init(i, j);
  AdamW<double> a1, a2;
  for (std::int64_t t = 1; t <= 4; ++t) {
    sp.matrix.for_each_live(
        [&](std::int64_t r, std::int64_t c, double, std::int64_t s) { sp.grad[s] = grad_of(r, c, t); });
    for (std::int64_t i = 0; i < R; ++i)
      for (std::int64_t j = 0; j < C; ++j) dp.grad[i * C + j] = grad_of(i, j, t);
    a1.begin_step();
    a1.update(sp);
    a2.begin_step();
    a2.update(dp);
  }
  const Matrix<double> back = sp.matrix.to_dense();
  for (std::int64_t i = 0; i < R; ++i)
    for (std::int64_t j = 0; j < C; ++j)  // same math; FMA contraction may differ by an ulp
      REQUIRE(back(i, j) == Approx(dp.value[i * C + j]).epsilon(1e-14));
}

TEST_CASE("SparseParameter::reserve_growth: relocations within the reserve reallocate nothing", "[optim][state]") {
  SparseParameter<float, std::int32_t> p(PaddedCSR<float, std::int32_t>::random_per_row(40, 64, 6, 3));
  const std::int64_t n = p.matrix.storage_size();
  CHECK(p.matrix.storage_capacity() == n);  // no reserve unless asked for
  CHECK_THROWS_AS(p.reserve_growth(-0.5), ArgumentError);
  CHECK_THROWS_AS(p.reserve_growth(std::nan("")), ArgumentError);
  p.reserve_growth();
  const auto reserve =
      static_cast<std::int64_t>(static_cast<double>(n) * SparseParameter<float, std::int32_t>::kGrowthReserve);
  REQUIRE(reserve > 0);
  CHECK(p.matrix.storage_capacity() == n + reserve);
  CHECK(std::ssize(p.grad) == n);
  CHECK(std::ssize(p.grad) <= std::int64_t(p.grad.capacity()));
  CHECK(std::int64_t(p.grad.capacity()) == p.matrix.storage_capacity());
  CHECK(p.matrix.memory().values == p.matrix.storage_capacity() * std::int64_t(sizeof(float)));  // counted
  auto opt = SGD<float>({.lr = 0.1f, .momentum = 0.9f});
  opt.begin_step();
  opt.update(p);  // creates the momentum with the same reserve
  REQUIRE(p.state.size() == 1);
  CHECK(p.state[0].capacity() == p.grad.capacity());
  p.state[0][static_cast<std::size_t>(p.matrix.row_start(5))] = 2.5f;  // a live slot of row 5 with state
  const float w5 = p.matrix.values()[static_cast<std::size_t>(p.matrix.row_start(5))];
  const std::int32_t c5 = p.matrix.col_indices()[static_cast<std::size_t>(p.matrix.row_start(5))];
  const float* values = p.matrix.values().data();
  const std::int32_t* cols = p.matrix.col_indices().data();
  const float* grad = p.grad.data();
  const float* momentum = p.state[0].data();
  // rows 5 and 9 outgrow their capacity (relocated to the tail) within the reserve
  SlotLog log;
  const std::vector<std::pair<std::int64_t, std::int64_t>> rows = {{5, p.matrix.row_capacity(5) + 3},
                                                                   {9, p.matrix.row_capacity(9) + 2}};
  p.matrix.reserve_rows(rows, &log);
  p.apply(log);
  REQUIRE(p.matrix.storage_size() > n);
  REQUIRE(p.matrix.storage_size() <= n + reserve);
  CHECK(p.matrix.values().data() == values);
  CHECK(p.matrix.col_indices().data() == cols);
  CHECK(p.grad.data() == grad);
  CHECK(p.state[0].data() == momentum);
  REQUIRE_NOTHROW(p.check_aligned("test"));
  REQUIRE_NOTHROW(p.matrix.check_invariants());
  const std::int64_t s = p.matrix.find(5, c5);  // the weight moved with its state
  REQUIRE(s >= n);
  CHECK(p.matrix.values()[static_cast<std::size_t>(s)] == w5);
  CHECK(p.state[0][static_cast<std::size_t>(s)] == 2.5f);
  CHECK_THROWS_AS(p.matrix.reserve_storage(-1), ArgumentError);
  p.matrix.reserve_storage(1);  // never shrinks
  CHECK(p.matrix.storage_capacity() == n + reserve);
}

TEMPLATE_TEST_CASE("AdamW per_slot counts in either form match the oracle on a large parameter", "[optim][state]",
                   AdamPerSlot, AdamPerSlotWide) {
  // thousands of slots in several rows (the narrow counts run in chunks, on threads where the
  // build has them); a third of each row regrown at step 4 and the matrix compacted at step 7
  const TestType math;
  auto opt = math.make();
  CHECK(opt.narrow_counts() == (math.b2 < 0.9999));
  SparseParameter<double, std::int32_t> p(PaddedCSR<double, std::int32_t>::random_per_row(48, 300, 90, 17));
  std::map<std::pair<std::int64_t, std::int64_t>, Scalar> oracle;
  p.matrix.for_each_live([&](std::int64_t r, std::int64_t c, double v, std::int64_t) {
    oracle[{r, c}] = {v, 0, 0, 0};
  });
  for (std::int64_t t = 1; t <= 9; ++t) {
    if (t == 4 || t == 7) {
      SlotLog log;
      if (t == 4)
        for (std::int64_t r = 0; r < p.matrix.rows(); ++r) {
          std::vector<std::int64_t> cols;
          for (const std::int32_t c : std::as_const(p.matrix).row(r).cols) cols.push_back(c);
          for (std::size_t k = 0; k < cols.size(); k += 3) {
            p.matrix.erase(r, cols[k], &log);
            oracle.erase({r, cols[k]});
          }
          for (std::int64_t c = 0, grown = 0; c < p.matrix.cols() && grown < 35; ++c)
            if (!oracle.contains({r, c})) {
              p.matrix.insert_new(r, c, 0.0, &log);
              oracle[{r, c}] = {0, 0, 0, 0};
              ++grown;
            }
        }
      else
        p.matrix.compact(0.0, &log);
      p.apply(log);
    }
    opt.begin_step();
    p.matrix.for_each_live(
        [&](std::int64_t r, std::int64_t c, double, std::int64_t s) { p.grad[s] = grad_of(r, c, t); });
    opt.update(p);
    for (auto& [rc, sc] : oracle) math.step(sc, grad_of(rc.first, rc.second, t), t);
    CHECK(p.step_counts.empty() == (t < 4 || !opt.narrow_counts()));
    CHECK(p.state.size() == (t >= 4 && !opt.narrow_counts() ? 3u : 2u));
    REQUIRE(p.matrix.nnz() == std::ssize(oracle));
    std::int64_t mismatches = 0;
    p.matrix.for_each_live([&](std::int64_t r, std::int64_t c, double v, std::int64_t s) {
      const Scalar& sc = oracle.at({r, c});
      const double n = p.state.size() > 2 ? p.state[2][s] : p.step_counts.empty() ? double(t) : p.step_counts[s];
      mismatches += !(v == Approx(sc.w).margin(1e-12)) || !(p.state[0][s] == Approx(sc.a).margin(1e-12)) ||
                    !(p.state[1][s] == Approx(sc.b).margin(1e-12)) || n != double(sc.n);
    });
    INFO("step " << t);
    REQUIRE(mismatches == 0);
  }
}
