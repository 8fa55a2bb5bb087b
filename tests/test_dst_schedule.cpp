#include <sprig/dst/schedule.hpp>

#include <catch2/catch.hpp>
#include <cmath>
#include <numbers>

using namespace sprig::dst;

TEST_CASE("update steps follow delta_t inside [t_begin, t_end]", "[dst][schedule]") {
  UpdateSchedule s;
  s.delta_t = 100;
  s.t_begin = 200;
  s.t_end = 750;
  s.validate();
  CHECK_FALSE(s.is_update_step(0));
  CHECK_FALSE(s.is_update_step(100));
  CHECK(s.is_update_step(200));
  CHECK_FALSE(s.is_update_step(250));
  CHECK(s.is_update_step(300));
  CHECK(s.is_update_step(700));
  CHECK_FALSE(s.is_update_step(800));
}

TEST_CASE("cosine drop fraction", "[dst][schedule]") {
  const auto s = UpdateSchedule::for_run(1000, 100, 0.3);
  CHECK(s.t_end == 750);
  CHECK(s.drop_fraction(0) == Approx(0.3));
  CHECK(s.drop_fraction(375) == Approx(0.15));
  CHECK(s.drop_fraction(750) == Approx(0.0).margin(1e-15));
  // f(t) = alpha / 2 * (1 + cos(pi t / t_end)) at a few points, computed independently
  for (int t : {100, 200, 500, 700})
    CHECK(s.drop_fraction(t) == Approx(0.15 * (1.0 + std::cos(std::numbers::pi * t / 750.0))));
}

TEST_CASE("schedule validation", "[dst][schedule]") {
  UpdateSchedule s;
  s.delta_t = 0;
  CHECK_THROWS_AS(s.validate(), sprig::ArgumentError);
  s.delta_t = 10;
  s.t_begin = 5;
  s.t_end = 4;
  CHECK_THROWS_AS(s.validate(), sprig::ArgumentError);
  s.t_end = 50;
  s.alpha = 1.5;
  CHECK_THROWS_AS(s.validate(), sprig::ArgumentError);
}
