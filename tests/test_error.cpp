// The error hierarchy and the message builder.
#include <sprig/core/error.hpp>

#include <catch2/catch.hpp>

#include <stdexcept>
#include <string>
#include <type_traits>

TEST_CASE("sprig errors: one base class catches every kind", "[error]") {
  static_assert(std::is_base_of_v<std::runtime_error, sprig::Error>);
  static_assert(std::is_base_of_v<sprig::Error, sprig::ShapeError>);
  static_assert(std::is_base_of_v<sprig::Error, sprig::ArgumentError>);
  static_assert(std::is_base_of_v<sprig::Error, sprig::FormatError>);
  static_assert(!std::is_base_of_v<sprig::ShapeError, sprig::ArgumentError>);
  REQUIRE_THROWS_AS(throw sprig::ShapeError("s"), sprig::Error);
  REQUIRE_THROWS_AS(throw sprig::ArgumentError("a"), sprig::Error);
  REQUIRE_THROWS_AS(throw sprig::FormatError("f"), std::runtime_error);
  REQUIRE_THROWS_WITH(throw sprig::ArgumentError("bad thing 42"), "bad thing 42");
}

TEST_CASE("detail::message concatenates any streamable parts", "[error]") {
  REQUIRE(sprig::detail::message("spmm: W is ", 3, "x", 4L, ", ratio ", 0.5) == "spmm: W is 3x4, ratio 0.5");
  REQUIRE(sprig::detail::message(std::string("a"), 'b', -7) == "ab-7");
  REQUIRE(sprig::detail::message("only") == "only");
}
