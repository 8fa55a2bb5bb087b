// sprig::bfloat16 and the array conversions, against an oracle that rounds with double
// arithmetic (the two bfloat16 neighbours of x, the nearer one, ties to the even mantissa):
// exhaustively over every bfloat16 and every float tie, and on random and special values.
#include <sprig/kernels/bfloat16_convert.hpp>

#include <catch2/catch.hpp>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include <sprig/core/rng.hpp>

using sprig::bfloat16;

namespace {

std::uint32_t bits_of(float f) { return std::bit_cast<std::uint32_t>(f); }
float float_of(std::uint32_t u) { return std::bit_cast<float>(u); }
bool is_nan_bits(std::uint16_t b) { return (b & 0x7FFF) > 0x7F80; }

// The oracle: the bfloat16 nearest x by value, ties to even, computed in double from the two
// candidates around x (its truncation toward zero and the next bfloat16 away from zero, which
// past the largest finite one is 2^128: rounding there gives the infinity). NaN: not handled.
std::uint16_t nearest_bfloat16(float x) {
  const std::uint32_t u = bits_of(x);
  const auto toward_zero = static_cast<std::uint16_t>(u >> 16);
  if ((u & 0xFFFF) == 0) return toward_zero;  // exactly representable (zeros, infinities too)
  const auto away = static_cast<std::uint16_t>(toward_zero + 1);
  const double value = std::fabs(static_cast<double>(x));
  const double low = std::fabs(static_cast<double>(float_of(std::uint32_t{toward_zero} << 16)));
  const double high = (away & 0x7FFF) == 0x7F80 ? std::ldexp(1.0, 128)
                                                : std::fabs(static_cast<double>(float_of(std::uint32_t{away} << 16)));
  const double below = value - low, above = high - value;
  if (below < above) return toward_zero;
  if (above < below) return away;
  return (toward_zero & 1) == 0 ? toward_zero : away;
}

// Floats that test rounding hardest: the ties, one ulp either side, the truncations.
std::vector<float> hard_floats() {
  std::vector<float> out;
  for (std::uint32_t b = 0; b < 0x10000; ++b) {
    const std::uint32_t top = b << 16;
    if (((top >> 23) & 0xFF) == 0xFF) continue;  // infinities and NaNs: tested apart
    for (std::uint32_t low : {0x0000u, 0x0001u, 0x7FFFu, 0x8000u, 0x8001u, 0xFFFFu}) out.push_back(float_of(top | low));
  }
  return out;
}

}  // namespace

TEST_CASE("bfloat16 widens every value exactly", "[bfloat16]") {
  for (std::uint32_t b = 0; b < 0x10000; ++b) {
    const auto x = bfloat16::from_bits(static_cast<std::uint16_t>(b));
    REQUIRE(bits_of(static_cast<float>(x)) == b << 16);
  }
}

TEST_CASE("bfloat16 narrows every bfloat16 back to itself and keeps NaN a NaN", "[bfloat16]") {
  for (std::uint32_t b = 0; b < 0x10000; ++b) {
    const auto x = bfloat16::from_bits(static_cast<std::uint16_t>(b));
    const bfloat16 back(static_cast<float>(x));
    if (is_nan_bits(x.bits)) {
      REQUIRE(is_nan_bits(back.bits));
      REQUIRE((back.bits & 0x8000) == (x.bits & 0x8000));  // the sign
      REQUIRE((back.bits & 0x0040) != 0);                  // quiet
    } else {
      REQUIRE(back.bits == x.bits);
    }
  }
}

TEST_CASE("bfloat16 rounds to nearest, ties to even, at every tie and its neighbours", "[bfloat16]") {
  std::size_t checked = 0;
  for (float f : hard_floats()) {
    const std::uint16_t want = nearest_bfloat16(f);
    if (bfloat16(f).bits != want)
      FAIL("float bits " << std::hex << bits_of(f) << ": got " << bfloat16(f).bits << ", want " << want);
    ++checked;
  }
  CHECK(checked == 6 * 0xFF00);  // every finite bfloat16 (65536 less 256 NaN and infinity patterns)
}

TEST_CASE("bfloat16 rounds the special cases as IEEE does", "[bfloat16]") {
  const float inf = std::numeric_limits<float>::infinity(), big = std::numeric_limits<float>::max();
  CHECK(bfloat16(0.0f).bits == 0x0000);
  CHECK(bfloat16(-0.0f).bits == 0x8000);
  CHECK(bfloat16(1.0f).bits == 0x3F80);
  CHECK(bfloat16(inf).bits == 0x7F80);
  CHECK(bfloat16(-inf).bits == 0xFF80);
  CHECK(bfloat16(big).bits == 0x7F80);  // FLT_MAX is past the last finite bfloat16's half-way point
  CHECK(bfloat16(-big).bits == 0xFF80);
  CHECK(bfloat16(float_of(0x7F7F7FFF)).bits == 0x7F7F);  // just below half-way: stays finite
  CHECK(bfloat16(float_of(0x7F7F8000)).bits == 0x7F80);  // the tie: to even, the infinity
  // 1 + 2^-8 is half-way between 1 and 1 + 2^-7: to even (1); 1 + 3 * 2^-8 to even (1 + 2^-6)
  CHECK(bfloat16(1.0f + 0x1p-8f).bits == 0x3F80);
  CHECK(bfloat16(1.0f + 3 * 0x1p-8f).bits == 0x3F82);
  // subnormals round like normal numbers; the largest subnormal rounds up to the smallest normal
  CHECK(bfloat16(float_of(0x00000001)).bits == 0x0000);
  CHECK(bfloat16(float_of(0x00008000)).bits == 0x0000);  // a tie, to even
  CHECK(bfloat16(float_of(0x00018000)).bits == 0x0002);  // a tie, to even
  CHECK(bfloat16(float_of(0x007FFFFF)).bits == 0x0080);
  CHECK(bfloat16(float_of(0x80010000)).bits == 0x8001);
  // NaNs: a signalling NaN whose payload is all in the low 16 bits does not become infinity
  for (std::uint32_t nan : {0x7F800001u, 0x7FC00000u, 0xFF800001u, 0x7FFFFFFFu, 0xFFFFFFFFu}) {
    const bfloat16 b(float_of(nan));
    CHECK(is_nan_bits(b.bits));
    CHECK((b.bits & 0x8000) == ((nan >> 16) & 0x8000));
    CHECK(std::isnan(static_cast<float>(b)));
  }
  CHECK(bfloat16(1.0f) == bfloat16(1.0f));
  CHECK(bfloat16(0.0f) == bfloat16(-0.0f));
  CHECK_FALSE(bfloat16(float_of(0x7FC00000)) == bfloat16(float_of(0x7FC00000)));
}

TEST_CASE("bfloat16 matches the oracle on random floats of every magnitude", "[bfloat16]") {
  sprig::CounterRng rng(20261204);
  for (int k = 0; k < 1'000'000; ++k) {
    const auto u = static_cast<std::uint32_t>(rng());
    if (((u >> 23) & 0xFF) == 0xFF) continue;
    const float f = float_of(u);
    REQUIRE(bfloat16(f).bits == nearest_bfloat16(f));
  }
}

TEST_CASE("to_bfloat16 and to_float give the scalar conversions' bits at every length", "[bfloat16][kernel]") {
  // Specials mixed into ties and random values, at lengths around the register width and at
  // unaligned starts.
  sprig::CounterRng rng(7);
  const std::vector<float> hard = hard_floats();
  const std::vector<std::uint32_t> specials = {0x7F800000u, 0xFF800000u, 0x7F800001u, 0xFFC00000u, 0x7FFFFFFFu,
                                               0x00000001u, 0x80008000u, 0x007FFFFFu, 0x7F7FFFFFu, 0x7F7F8000u};
  for (std::size_t n : {0, 1, 3, 7, 8, 15, 16, 17, 31, 32, 33, 63, 64, 65, 100, 1000}) {
    for (std::size_t offset : {0, 1, 3}) {
      std::vector<float> in(n + offset);
      for (std::size_t i = 0; i < in.size(); ++i) {
        const auto pick = rng();
        in[i] = pick % 5 == 0   ? float_of(specials[pick / 5 % specials.size()])
                : pick % 5 == 1 ? hard[pick / 5 % hard.size()]
                                : float_of(static_cast<std::uint32_t>(rng()));
      }
      std::vector<bfloat16> narrow(n + offset), want(n + offset);
      sprig::to_bfloat16(std::span<const float>(in).subspan(offset), std::span<bfloat16>(narrow).subspan(offset));
      for (std::size_t i = offset; i < in.size(); ++i) {
        want[i] = bfloat16(in[i]);
        INFO("n " << n << ", offset " << offset << ", i " << i << ", float bits " << std::hex << bits_of(in[i]));
        REQUIRE(narrow[i].bits == want[i].bits);
      }
      std::vector<float> wide(n + offset);
      sprig::to_float(std::span<const bfloat16>(narrow).subspan(offset), std::span<float>(wide).subspan(offset));
      for (std::size_t i = offset; i < in.size(); ++i) REQUIRE(bits_of(wide[i]) == std::uint32_t{narrow[i].bits} << 16);
    }
  }
  std::vector<float> three(3);
  std::vector<bfloat16> two(2);
  CHECK_THROWS_AS(sprig::to_bfloat16(std::span<const float>(three), std::span<bfloat16>(two)), sprig::ShapeError);
  CHECK_THROWS_AS(sprig::to_float(std::span<const bfloat16>(two), std::span<float>(three)), sprig::ShapeError);
}
