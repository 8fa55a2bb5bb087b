#include "sprig/optim/adamw.hpp"

#include <cmath>
#include <cstdint>

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
