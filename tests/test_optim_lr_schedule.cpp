#include "sprig/optim/lr_schedule.hpp"

#include <cmath>
#include <cstdint>

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
  CHECK(c(0) == Approx(0.01));  // (0 + 1) / 10 of the peak
  CHECK(c(4) == Approx(0.05));
  CHECK(c(9) == Approx(0.1));
  CHECK(c(10) == Approx(0.1));                  // start of the cosine: the peak
  CHECK(c(60) == Approx(0.001 + 0.099 * 0.5));  // half way: cos(pi/2) = 0
  CHECK(c(35) == Approx(0.001 + 0.099 * 0.5 * (1 + std::cos(3.14159265358979 / 4))));
  CHECK(c(110) == Approx(0.001));
  CHECK(c(500) == Approx(0.001));                          // clamped after the end
  for (int t = 10; t < 110; ++t) CHECK(c(t + 1) <= c(t));  // non-increasing after warmup
  CosineWarmupLR no_warmup(1.0, 0, 4);
  CHECK(no_warmup(0) == 1.0);
  CHECK(no_warmup(2) == Approx(0.5));
  CHECK_THROWS_AS(CosineWarmupLR(1.0, 5, 5), ArgumentError);
  CHECK_THROWS_AS(CosineWarmupLR(1.0, -1, 5), ArgumentError);
}

namespace {
// Whether a schedule's parameters can be overwritten past its constructor's checks.
template <class S>
constexpr bool step_size_writable = requires(S s) {
  s.step_size = std::int64_t{0};
};
template <class S>
constexpr bool warmup_writable = requires(S s) {
  s.warmup = std::int64_t{0};
};
template <class S>
constexpr bool total_writable = requires(S s) {
  s.total = std::int64_t{0};
};
}  // namespace

TEST_CASE("schedules keep the parameters their constructor checked", "[optim][schedule]") {
  // StepLR::operator() divides by step_size: 0 set after construction was a division by zero
  CHECK_FALSE(step_size_writable<StepLR>);
  CHECK_FALSE(warmup_writable<CosineWarmupLR>);  // total == warmup: 0 / 0
  CHECK_FALSE(total_writable<CosineWarmupLR>);
  const StepLR s(0.5, 3, 0.1);
  CHECK(s.lr() == 0.5);
  CHECK(s.step_size() == 3);
  CHECK(s.gamma() == 0.1);
  const CosineWarmupLR c(0.1, 2, 7, 0.01);
  CHECK(c.lr() == 0.1);
  CHECK(c.warmup() == 2);
  CHECK(c.total() == 7);
  CHECK(c.min_lr() == 0.01);
  CHECK(ConstantLR(0.2).lr() == 0.2);
  CHECK_THROWS_WITH(StepLR(1.0, 0, 0.5), Catch::Contains("StepLR: step_size 0"));
  CHECK_THROWS_AS(StepLR(-1.0, 2, 0.5), ArgumentError);
  CHECK_THROWS_AS(StepLR(1.0, 2, -0.5), ArgumentError);
  CHECK_THROWS_AS(StepLR(1.0, 2, std::nan("")), ArgumentError);
  CHECK_THROWS_AS(CosineWarmupLR(-0.1, 0, 5), ArgumentError);
  CHECK_THROWS_AS(CosineWarmupLR(0.1, 0, 5, -1.0), ArgumentError);
  CHECK_THROWS_AS(ConstantLR(-1.0), ArgumentError);
  CHECK(c(-5) == c(0));  // a negative step index is taken as 0
  CHECK(s(-5) == s(0));
}
