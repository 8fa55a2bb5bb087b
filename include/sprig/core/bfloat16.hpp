// sprig/core/bfloat16.hpp — sprig::bfloat16, a 16-bit storage type for weights and
// activations: the top half of an IEEE binary32 (1 sign, 8 exponent, 7 mantissa bits), the
// range of float at about 3 significant decimal digits.
//
// A storage type, not an arithmetic one: it converts to and from float and nothing else.
// Kernels widen to float, compute and accumulate in float, and narrow once on the store
// (kernels/bfloat16_convert.hpp converts whole arrays with SIMD, bit for bit as here).
//   - widening (float(b)) is exact: the 16 bits become the float's top half;
//   - narrowing (bfloat16(f)) rounds to nearest, ties to even, on the full float: subnormals
//     round like normal numbers (no flush to zero), a finite value at or beyond
//     0x1.FF8p127 (FLT_MAX's half-way point) becomes an infinity of its sign, infinities stay;
//   - a NaN stays a NaN of the same sign: its top mantissa bit is set (quiet), the rest of
//     its payload's top 7 bits kept, so a signalling NaN never narrows to an infinity.
// Comparison (==) is IEEE's on the widened values: NaN differs from everything, +0 == -0;
// `bits` compares representations.
#pragma once

#include <bit>
#include <cstdint>
#include <type_traits>

namespace sprig {

namespace detail {
// The bfloat16 nearest f (ties to even); a NaN quieted, sign kept. Pure integer arithmetic:
// the same bits for any compiler flags, and what the SIMD conversions compute lane by lane.
constexpr std::uint16_t bfloat16_bits_of(float f) noexcept {
  const auto u = std::bit_cast<std::uint32_t>(f);
  if ((u & 0x7FFF'FFFFu) > 0x7F80'0000u) return static_cast<std::uint16_t>((u | 0x0040'0000u) >> 16);
  return static_cast<std::uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}
}  // namespace detail

struct bfloat16 {
  std::uint16_t bits = 0;  // +0

  constexpr bfloat16() noexcept = default;
  // Rounds to nearest even (top of this file).
  constexpr explicit bfloat16(float f) noexcept : bits(detail::bfloat16_bits_of(f)) {}

  static constexpr bfloat16 from_bits(std::uint16_t b) noexcept {
    bfloat16 x;
    x.bits = b;
    return x;
  }

  // Exact.
  constexpr explicit operator float() const noexcept {
    return std::bit_cast<float>(static_cast<std::uint32_t>(bits) << 16);
  }

  friend constexpr bool operator==(bfloat16 a, bfloat16 b) noexcept {
    return static_cast<float>(a) == static_cast<float>(b);
  }
};

static_assert(sizeof(bfloat16) == 2 && alignof(bfloat16) == 2);
static_assert(std::is_trivially_copyable_v<bfloat16> && std::is_standard_layout_v<bfloat16>);

}  // namespace sprig
