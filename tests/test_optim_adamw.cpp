#include "sprig/optim/adamw.hpp"

#include <cmath>
#include <cstdint>
#include <cstring>

#include "sprig/core/matrix.hpp"
#include "sprig/core/padded_csr.hpp"
#include "sprig/core/slot_log.hpp"
#include "sprig/nn/parameter.hpp"

#include <catch2/catch.hpp>

using namespace sprig;

TEST_CASE("AdamW steps against hand-computed values (bias correction, decoupled decay)", "[optim][adamw]") {
  // lr 0.1, betas (0.9, 0.999), eps 1e-8, decay 0.1; w = 1, gradients 0.5, -0.2, 0.3.
  // t=1: w = 0.99; m = 0.05, v = 0.00025; m^ = 0.5, v^ = 0.25 -> w = 0.99 - 0.1 * 0.5 / (0.5 + 1e-8)
  //      = 0.890000002
  // t=2: w = 0.88110000198; m = 0.025, v = 0.00028975; m^ = 0.025 / 0.19, v^ = 0.00028975 / 0.001999
  //      -> w = 0.8465394180965...
  // t=3: -> 0.7836299894801...
  AdamW<double> opt({.lr = 0.1, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.1});
  DenseParameter<double> p(1, 1, 1.0);
  const double expected[] = {0.890000002, 0.8465394180965108, 0.7836299894801902};
  int t = 0;
  for (double g : {0.5, -0.2, 0.3}) {
    p.grad[0] = g;
    opt.begin_step();
    opt.update(p);
    CHECK(p.value[0] == Approx(expected[t]).epsilon(1e-13));
    ++t;
  }
  CHECK(opt.step_count() == 3);
  REQUIRE(p.state.size() == 2);
  CHECK(p.state[0][0] == Approx(0.9 * 0.025 + 0.1 * 0.3).epsilon(1e-14));
}

TEST_CASE("AdamW: no decay on parameters that opt out; first step size is lr", "[optim][adamw]") {
  AdamW<float> opt({.lr = 0.01, .weight_decay = 0.5});
  DenseParameter<float> bias(3, 1, 1.0f);
  bias.decay = false;
  bias.grad = {2.0f, -3.0f, 0.0f};
  opt.begin_step();
  opt.update(bias);
  // At t = 1, m^ = g and v^ = g^2, so the step is lr * sign(g) (up to eps).
  CHECK(bias.value[0] == Approx(0.99f).epsilon(1e-6));
  CHECK(bias.value[1] == Approx(1.01f).epsilon(1e-6));
  CHECK(bias.value[2] == 1.0f);
}

TEST_CASE("AdamW validates options and needs a step counter >= 1", "[optim][adamw]") {
  CHECK_THROWS_AS(AdamW<float>({.beta1 = 1.0}), ArgumentError);
  CHECK_THROWS_AS(AdamW<float>({.beta2 = -0.1}), ArgumentError);
  CHECK_THROWS_AS(AdamW<float>({.eps = 0.0}), ArgumentError);
  CHECK_THROWS_AS(AdamW<float>({.weight_decay = -1.0}), ArgumentError);
  AdamW<float> opt;
  DenseParameter<float> p(2, 2);
  CHECK_THROWS_AS(opt.update(p), ArgumentError);
  opt.set_step_count(10);  // restored from a checkpoint
  CHECK_NOTHROW(opt.update(p));
  CHECK(opt.step_count() == 10);
}

namespace {

// A sparse float parameter with every third position of a rows x cols matrix live, values
// 0.1 * (r - c) + 0.05, and gradients that vary by position and step.
SparseParameter<float, std::int16_t> lattice(std::int64_t rows, std::int64_t cols) {
  Matrix<float> d(rows, cols);
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; ++c) d(r, c) = (r * cols + c) % 3 == 0 ? 0.1f * float(r - c) + 0.05f : 0.0f;
  return SparseParameter<float, std::int16_t>(PaddedCSR<float, std::int16_t>::from_dense(d.view()));
}
float lattice_grad(std::int64_t r, std::int64_t c, std::int64_t t) {
  return std::sin(0.7f * float(r) + 1.3f * float(c) + 0.4f * float(t));
}
void set_lattice_grad(SparseParameter<float, std::int16_t>& p, std::int64_t t) {
  p.matrix.for_each_live(
      [&](std::int64_t r, std::int64_t c, float, std::int64_t s) { p.grad[s] = lattice_grad(r, c, t); });
}
void step_one(AdamW<float>& opt, SparseParameter<float, std::int16_t>& p) {
  opt.begin_step();
  opt.update(p);
}
bool same_values(const SparseParameter<float, std::int16_t>& a, const SparseParameter<float, std::int16_t>& b) {
  return a.matrix.values().size() == b.matrix.values().size() &&
         std::memcmp(a.matrix.values().data(), b.matrix.values().data(), a.matrix.values().size() * sizeof(float)) == 0;
}

}  // namespace

TEST_CASE("AdamW per_slot: a grown slot's first update equals a fresh parameter's first update", "[optim][adamw]") {
  const AdamWOptions o{.lr = 0.01, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.1};
  for (const auto policy : {AdamWBiasCorrection::per_slot, AdamWBiasCorrection::global}) {
    AdamWOptions op = o;
    op.bias_correction = policy;
    AdamW<float> opt(op);
    auto p = lattice(5, 7);
    for (std::int64_t t = 1; t <= 30; ++t) {
      set_lattice_grad(p, t);
      opt.begin_step();
      opt.update(p);
    }
    // grow (2, 5) at step 31, which was not live
    REQUIRE(p.matrix.find(2, 5) < 0);
    SlotLog log;
    p.matrix.insert_new(2, 5, 0.0f, &log);
    p.apply(log);
    set_lattice_grad(p, 31);
    const float g = p.grad[p.matrix.find(2, 5)];
    opt.begin_step();
    opt.update(p);
    const float grown = p.matrix.values()[p.matrix.find(2, 5)];

    AdamW<float> fresh_opt(op);  // a fresh parameter, value 0, same gradient, its first step
    DenseParameter<float> fresh(1, 1, 0.0f);
    fresh.grad[0] = g;
    fresh_opt.begin_step();
    fresh_opt.update(fresh);
    INFO("g " << g << " grown " << grown << " fresh " << fresh.value[0]);
    if (policy == AdamWBiasCorrection::per_slot) {
      CHECK(std::memcmp(&grown, &fresh.value[0], sizeof(float)) == 0);  // bitwise
      REQUIRE(opt.narrow_counts());                                     // betas (0.9, 0.999): the counts fit 16 bits
      CHECK(p.state.size() == 2);
      CHECK(p.step_counts[p.matrix.find(2, 5)] == 1);
      CHECK(p.step_counts[p.matrix.find(0, 0)] == 31);       // live since step 1
      CHECK(std::abs(grown) == Approx(0.01).epsilon(1e-4));  // about lr
    } else {
      // corrected with t = 31: lr * (1 - b1) c1(31) g / (sqrt((1 - b2) c2(31)) |g|), 3.2 lr here
      const double c1 = 1 / (1 - std::pow(0.9, 31.0)), c2 = 1 / (1 - std::pow(0.999, 31.0));
      const double expected = 0.01 * 0.1 * c1 / std::sqrt(0.001 * c2);
      CHECK(std::abs(grown) == Approx(expected).epsilon(1e-4));
      CHECK(p.state.size() == 2);  // no counts with `global`
      CHECK(p.step_counts.empty());
    }
  }
}

TEST_CASE("AdamW per_slot and global train old slots bitwise alike, past saturation", "[optim][adamw]") {
  // betas 0.5 and 0.6: both corrections round to 1 in float after ~50 steps, so 60 steps
  // cover the clamp of the counts at the table's end. A slot grown at step 10 makes per_slot
  // create its counts; every other slot must still train exactly as with `global`.
  for (const double b1 : {0.5, 0.7}) {
    AdamW<float> a({.lr = 0.01, .beta1 = b1, .beta2 = 0.6, .bias_correction = AdamWBiasCorrection::per_slot});
    AdamW<float> b({.lr = 0.01, .beta1 = b1, .beta2 = 0.6, .bias_correction = AdamWBiasCorrection::global});
    auto pa = lattice(6, 9), pb = lattice(6, 9);
    for (std::int64_t t = 1; t <= 60; ++t) {
      if (t == 10)
        for (auto* p : {&pa, &pb}) {
          SlotLog log;
          p->matrix.insert_new(2, 5, 0.0f, &log);
          p->apply(log);
        }
      set_lattice_grad(pa, t);
      set_lattice_grad(pb, t);
      step_one(a, pa);
      step_one(b, pb);
      INFO("b1 " << b1 << " step " << t);
      REQUIRE(pa.state.size() == 2);
      REQUIRE(pa.step_counts.empty() == (t < 10));  // counts only once a slot is fresh
      const std::int64_t grown = pa.matrix.find(2, 5);
      pa.matrix.for_each_live([&](std::int64_t r, std::int64_t c, float v, std::int64_t slot) {
        if (slot == grown) return;
        const float w = pb.matrix.values()[pb.matrix.find(r, c)];
        REQUIRE(std::memcmp(&v, &w, sizeof(float)) == 0);
      });
    }
    CHECK(pa.step_counts[pa.matrix.find(0, 0)] < 60);  // clamped where the corrections became 1
    CHECK(pa.step_counts[pa.matrix.find(2, 5)] < 51);
  }
}

TEST_CASE("AdamW per_slot takes over moments without counts as if it had counted all along", "[optim][adamw]") {
  // 5 steps with `global`, then a per_slot optimizer restored at step 5 (what loading an
  // older checkpoint does): bitwise the run that stayed `global` (no slot was born)
  AdamW<float> g1({.lr = 0.01, .bias_correction = AdamWBiasCorrection::global});
  AdamW<float> g2({.lr = 0.01, .bias_correction = AdamWBiasCorrection::global});
  auto pa = lattice(4, 5), pb = lattice(4, 5);
  for (std::int64_t t = 1; t <= 5; ++t) {
    set_lattice_grad(pa, t);
    set_lattice_grad(pb, t);
    step_one(g1, pa);
    step_one(g2, pb);
  }
  AdamW<float> per_slot({.lr = 0.01});
  per_slot.set_step_count(5);
  REQUIRE(pa.state.size() == 2);
  for (std::int64_t t = 6; t <= 12; ++t) {
    set_lattice_grad(pa, t);
    set_lattice_grad(pb, t);
    step_one(per_slot, pa);
    step_one(g2, pb);
    REQUIRE(same_values(pa, pb));
  }
  CHECK(pa.state.size() == 2);  // no slot was fresh: no counts needed
  CHECK(pa.step_counts.empty());
}

TEST_CASE("AdamW per_slot takes counts in the other form over bitwise", "[optim][adamw]") {
  // A checkpoint keeps the counts as state[2] (in T): a narrow optimizer takes them back into
  // step_counts, a wide one (beta2 0.99999: corrections not 1 by 65535) the other way round;
  // either continues bitwise as the run that kept its own form.
  for (const double b2 : {0.999, 0.99999}) {
    INFO("beta2 " << b2);
    AdamW<float> a({.lr = 0.01, .beta2 = b2}), b({.lr = 0.01, .beta2 = b2});
    CHECK(a.narrow_counts() == (b2 < 0.9999));
    auto pa = lattice(6, 9);
    for (std::int64_t t = 1; t <= 8; ++t) {
      if (t == 4) {
        SlotLog log;
        pa.matrix.insert_new(2, 5, 0.0f, &log);
        pa.apply(log);
      }
      set_lattice_grad(pa, t);
      step_one(a, pa);
    }
    auto pb = pa;  // the other form, as a checkpoint would hand it back (state[2]) or an
                   // optimizer with the other betas would have left it (step_counts)
    if (a.narrow_counts()) {
      REQUIRE(!pb.step_counts.empty());
      pb.state.emplace_back(pb.step_counts.begin(), pb.step_counts.end());
      AlignedVector<std::uint16_t>().swap(pb.step_counts);
    } else {
      REQUIRE(pb.state.size() == 3);
      pb.step_counts.assign(pb.state[2].begin(), pb.state[2].end());
      pb.state.resize(2);
    }
    b.set_step_count(8);
    for (std::int64_t t = 9; t <= 14; ++t) {
      set_lattice_grad(pa, t);
      set_lattice_grad(pb, t);
      step_one(a, pa);
      step_one(b, pb);
      REQUIRE(same_values(pa, pb));
      REQUIRE(pa.state == pb.state);
      REQUIRE(pa.step_counts == pb.step_counts);
    }
  }
}

TEST_CASE("AdamW rejects a bias_correction outside the enumeration", "[optim][adamw]") {
  CHECK_THROWS_AS(AdamW<float>({.bias_correction = static_cast<AdamWBiasCorrection>(7)}), ArgumentError);
}
