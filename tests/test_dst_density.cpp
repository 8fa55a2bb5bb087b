#include <sprig/models/density.hpp>
#include <sprig/dst/live_count.hpp>

#include <catch2/catch.hpp>

using namespace sprig::models;
using sprig::dst::live_count;

TEST_CASE("ERK matches RigL's oracle on LeNet-300-100", "[dst][erk]") {
  // 784-300-100-10: weights are out x in
  const std::vector<LayerShape> lenet{{300, 784}, {100, 300}, {10, 100}};
  SECTION("S = 0.9") {
    const auto s = erk_sparsities(lenet, 0.9);
    REQUIRE(s.size() == 3);
    CHECK(s[0] == Approx(0.9204).margin(5e-5));
    CHECK(s[1] == Approx(0.7698).margin(5e-5));
    CHECK(s[2] == 0.0);
  }
  SECTION("S = 0.98") {
    const auto s = erk_sparsities(lenet, 0.98);
    CHECK(s[0] == Approx(0.9846).margin(5e-5));
    CHECK(s[1] == Approx(0.9555).margin(5e-5));
    CHECK(s[2] == Approx(0.6326).margin(5e-5));
  }
}

TEST_CASE("ERK keeps the global live count", "[dst][erk]") {
  const std::vector<LayerShape> layers{{1024, 784}, {1024, 1024}, {10, 1024}, {37, 5}};
  for (double S : {0.5, 0.8, 0.9, 0.95, 0.98}) {
    const auto s = erk_sparsities(layers, S);
    double live = 0, total = 0;
    for (std::size_t l = 0; l < layers.size(); ++l) {
      CHECK(s[l] >= 0.0);
      CHECK(s[l] < 1.0);
      live += (1.0 - s[l]) * static_cast<double>(layers[l].size());
      total += static_cast<double>(layers[l].size());
    }
    CHECK(live == Approx((1.0 - S) * total).epsilon(1e-9));
  }
}

TEST_CASE("uniform sparsities and live counts", "[dst][density]") {
  const std::vector<LayerShape> layers{{3, 4}, {5, 6}};
  CHECK(uniform_sparsities(layers, 0.75) == std::vector<double>{0.75, 0.75});
  CHECK(live_count(100, 0.9) == 10);
  CHECK(live_count(12, 0.75) == 3);
  CHECK(live_count(10, 0.99) == 1);  // never zero live weights
  CHECK(live_count(0, 0.5) == 0);
}

TEST_CASE("density helpers reject bad input", "[dst][density]") {
  const std::vector<LayerShape> layers{{3, 4}};
  CHECK_THROWS_AS(erk_sparsities(layers, 1.0), sprig::ArgumentError);
  CHECK_THROWS_AS(erk_sparsities(layers, -0.1), sprig::ArgumentError);
  CHECK_THROWS_AS(uniform_sparsities(layers, std::nan("")), sprig::ArgumentError);
  CHECK_THROWS_AS(erk_sparsities({{0, 4}}, 0.5), sprig::ShapeError);
}
