#include "sprig/optim/sgd.hpp"

#include <cstdint>
#include <map>
#include <tuple>
#include <utility>

#include <catch2/catch.hpp>

using namespace sprig;

namespace {
// Runs three steps on a single weight w = 1 with gradients 0.5, -0.2, 0.3 (lr 0.1, decay 0.01).
std::vector<double> three_steps(SGDOptions o) {
  SGD<double> opt(o);
  DenseParameter<double> p(1, 1, 1.0);
  std::vector<double> out;
  for (double g : {0.5, -0.2, 0.3}) {
    p.grad[0] = g;
    opt.begin_step();
    opt.update(p);
    out.push_back(p.value[0]);
  }
  CHECK(opt.step_count() == 3);
  return out;
}
}  // namespace

TEST_CASE("SGD steps against hand-computed values", "[optim][sgd]") {
  // g_t' = g_t + 0.01 w;  plain: w -= 0.1 g'
  //   w1 = 1 - 0.1 * 0.51 = 0.949;  w2 = 0.949 - 0.1 * (-0.2 + 0.00949) = 0.968051
  //   w3 = 0.968051 - 0.1 * (0.3 + 0.00968051) = 0.937082949
  auto plain = three_steps({.lr = 0.1, .momentum = 0.0, .weight_decay = 0.01});
  CHECK(plain[0] == Approx(0.949).epsilon(1e-14));
  CHECK(plain[1] == Approx(0.968051).epsilon(1e-14));
  CHECK(plain[2] == Approx(0.937082949).epsilon(1e-14));
  // momentum 0.9: buf1 = 0.51, w1 = 0.949; buf2 = 0.459 - 0.19051 = 0.26849, w2 = 0.922151;
  // buf3 = 0.241641 + 0.30922151 = 0.55086251, w3 = 0.867064749
  auto heavy = three_steps({.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01});
  CHECK(heavy[0] == Approx(0.949).epsilon(1e-14));
  CHECK(heavy[1] == Approx(0.922151).epsilon(1e-14));
  CHECK(heavy[2] == Approx(0.867064749).epsilon(1e-14));
  // Nesterov: d = g' + 0.9 buf. w1 = 1 - 0.1 * 0.969 = 0.9031;
  // g2' = -0.190969, buf2 = 0.268031, d2 = 0.0502589, w2 = 0.89807411;
  // g3' = 0.3089807411, buf3 = 0.5502086411, d3 = 0.80416851809, w3 = 0.817657258191
  auto nesterov = three_steps({.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01, .nesterov = true});
  CHECK(nesterov[0] == Approx(0.9031).epsilon(1e-14));
  CHECK(nesterov[1] == Approx(0.89807411).epsilon(1e-14));
  CHECK(nesterov[2] == Approx(0.817657258191).epsilon(1e-13));
}

TEST_CASE("SGD validates options and skips decay where the parameter says so", "[optim][sgd]") {
  CHECK_THROWS_AS(SGD<float>({.lr = -1.0}), ArgumentError);
  CHECK_THROWS_AS(SGD<float>({.momentum = 1.0}), ArgumentError);
  CHECK_THROWS_AS(SGD<float>({.weight_decay = -0.1}), ArgumentError);
  CHECK_THROWS_AS(SGD<float>({.momentum = 0.0, .nesterov = true}), ArgumentError);
  SGD<double> opt({.lr = 0.5, .weight_decay = 0.3});
  DenseParameter<double> bias(2, 1, 2.0);
  bias.decay = false;
  bias.grad = {1.0, 0.0};
  opt.begin_step();
  opt.update(bias);
  CHECK(bias.value[0] == 1.5);
  CHECK(bias.value[1] == 2.0);
  CHECK_THROWS_AS(opt.set_step_count(-1), ArgumentError);
  opt.set_step_count(41);
  opt.begin_step();
  CHECK(opt.step_count() == 42);
}
