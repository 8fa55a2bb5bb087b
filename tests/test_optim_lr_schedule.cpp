#include "sprig/optim/lr_schedule.hpp"

#include <cmath>

#include <catch2/catch.hpp>

using namespace sprig;

TEST_CASE("ConstantLR and StepLR", "[optim][schedule]") {
  CHECK(ConstantLR{0.3}(0) == 0.3);
  CHECK(ConstantLR{0.3}(100000) == 0.3);
  StepLR s(1.0, 10, 0.5);
  CHECK(s(0) == 1.0);
  CHECK(s(9) == 1.0);
  CHECK(s(10) == 0.5);
  CHECK(s(29) == 0.25);
  CHECK(s(30) == 0.125);
  CHECK_THROWS_AS(StepLR(1.0, 0, 0.5), ArgumentError);
}

TEST_CASE("CosineWarmupLR", "[optim][schedule]") {
  CosineWarmupLR c(0.1, 10, 110, 0.001);
  CHECK(c(0) == Approx(0.01));   // (0 + 1) / 10 of the peak
  CHECK(c(4) == Approx(0.05));
  CHECK(c(9) == Approx(0.1));
  CHECK(c(10) == Approx(0.1));   // start of the cosine: the peak
  CHECK(c(60) == Approx(0.001 + 0.099 * 0.5));  // half way: cos(pi/2) = 0
  CHECK(c(35) == Approx(0.001 + 0.099 * 0.5 * (1 + std::cos(3.14159265358979 / 4))));
  CHECK(c(110) == Approx(0.001));
  CHECK(c(500) == Approx(0.001));  // clamped after the end
  for (int t = 10; t < 110; ++t) CHECK(c(t + 1) <= c(t));  // non-increasing after warmup
  CosineWarmupLR no_warmup(1.0, 0, 4);
  CHECK(no_warmup(0) == 1.0);
  CHECK(no_warmup(2) == Approx(0.5));
  CHECK_THROWS_AS(CosineWarmupLR(1.0, 5, 5), ArgumentError);
  CHECK_THROWS_AS(CosineWarmupLR(1.0, -1, 5), ArgumentError);
}
