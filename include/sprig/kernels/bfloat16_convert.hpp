// sprig/kernels/bfloat16_convert.hpp — float <-> bfloat16 for whole arrays, and one SIMD
// register's worth for kernels that keep bf16 operands and compute in float.
//
//   to_bfloat16(in, out)   out[i] = bfloat16(in[i]): round to nearest even, NaN kept a NaN
//   to_float(in, out)      out[i] = float(in[i]): exact
//   load_bfloat16<A>(p)    Batch<float, A>::size bf16 values at p, widened (a kernel's load)
//   store_bfloat16<A>(p, v) v rounded to bf16 and stored at p (a kernel's store)
//
// Bit for bit what core/bfloat16.hpp's scalar conversions give, on every path: the rounding is
// integer arithmetic on the float's bits in xsimd integer batches (the same on AVX2, AVX-512,
// NEON, SSE), written once; only moving 16-bit lanes to and from 32-bit lanes differs per
// instruction set (a zero-extending load, a narrowing store), and the scalar path and the tail
// of an array use the scalar conversion. No alignment needed; in and out must not overlap.
// Throws ShapeError (the array forms) when in and out differ in length; O(n), one thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <type_traits>

#include "../core/bfloat16.hpp"
#include "../core/error.hpp"
#include "simd.hpp"

#if SPRIG_KERNEL_SIMD && (defined(__x86_64__) || defined(_M_X64) || defined(__i386__))
#  include <immintrin.h>
#endif
#if SPRIG_KERNEL_SIMD && (defined(__aarch64__) || defined(_M_ARM64))
#  include <arm_neon.h>
#endif

namespace sprig {
namespace detail {

#if SPRIG_KERNEL_SIMD

// Batch<float, A>::size 16-bit values at p, zero-extended into 32-bit lanes. (xsimd's
// architectures are exclusive here: avx512f does not derive from avx2.)
template <class A>
SPRIG_ALWAYS_INLINE xsimd::batch<std::uint32_t, A> load_widened_u16(const std::uint16_t* p) noexcept {
  using U = xsimd::batch<std::uint32_t, A>;
#  if defined(__AVX512F__)
  if constexpr (std::is_base_of_v<xsimd::avx512f, A>) {
    return U(_mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))));
  }
#  endif
#  if defined(__AVX2__)
  if constexpr (std::is_base_of_v<xsimd::avx2, A>) {
    return U(_mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
  }
#  endif
#  if defined(__SSE2__)
  if constexpr (std::is_base_of_v<xsimd::sse2, A> && !std::is_base_of_v<xsimd::avx, A>) {
    return U(_mm_unpacklo_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)), _mm_setzero_si128()));
  }
#  endif
#  if defined(__aarch64__) || defined(_M_ARM64)
  if constexpr (std::is_base_of_v<xsimd::neon64, A>) {
    return U(vmovl_u16(vld1_u16(p)));
  }
#  endif
  alignas(64) std::uint32_t wide[U::size];
  for (std::size_t k = 0; k < U::size; ++k) wide[k] = p[k];
  return U::load_aligned(wide);
}

// The top 16 bits of each 32-bit lane of v, stored as Batch<float, A>::size values at p.
template <class A>
SPRIG_ALWAYS_INLINE void store_high_u16(std::uint16_t* p, const xsimd::batch<std::int32_t, A>& v) noexcept {
  using I = xsimd::batch<std::int32_t, A>;
#  if defined(__AVX512F__)
  if constexpr (std::is_base_of_v<xsimd::avx512f, A>) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_cvtepi32_epi16(_mm512_srli_epi32(v, 16)));
    return;
  }
#  endif
#  if defined(__AVX2__)
  if constexpr (std::is_base_of_v<xsimd::avx2, A>) {
    // srai keeps each lane in int16's range, so the signed saturating pack is exact; it packs
    // per 128-bit half, and the permute puts the two halves' results together.
    const __m256i packed = _mm256_packs_epi32(_mm256_srai_epi32(v, 16), _mm256_setzero_si256());
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_castsi256_si128(_mm256_permute4x64_epi64(packed, 0b1000)));
    return;
  }
#  endif
#  if defined(__SSE2__)
  if constexpr (std::is_base_of_v<xsimd::sse2, A> && !std::is_base_of_v<xsimd::avx, A>) {
    _mm_storel_epi64(reinterpret_cast<__m128i*>(p), _mm_packs_epi32(_mm_srai_epi32(v, 16), _mm_setzero_si128()));
    return;
  }
#  endif
#  if defined(__aarch64__) || defined(_M_ARM64)
  if constexpr (std::is_base_of_v<xsimd::neon64, A>) {
    vst1_u16(p, vshrn_n_u32(vreinterpretq_u32_s32(v), 16));
    return;
  }
#  endif
  alignas(64) std::int32_t lanes[I::size];
  v.store_aligned(lanes);
  for (std::size_t k = 0; k < I::size; ++k)
    p[k] = static_cast<std::uint16_t>(static_cast<std::uint32_t>(lanes[k]) >> 16);
}

// Batch<float, A>::size bfloat16 values at p, widened to float (exact).
template <class A = KernelArch>
SPRIG_ALWAYS_INLINE xsimd::batch<float, A> load_bfloat16(const bfloat16* p) noexcept {
  const auto wide = load_widened_u16<A>(reinterpret_cast<const std::uint16_t*>(p));
  return xsimd::bitwise_cast<xsimd::batch<float, A>>(wide << 16);
}

// Every lane of v rounded to bfloat16 (nearest even, NaN quieted: detail::bfloat16_bits_of
// lane by lane), the bf16's bits in the high half of each 32-bit lane.
template <class A = KernelArch>
SPRIG_ALWAYS_INLINE xsimd::batch<std::uint32_t, A> bfloat16_high_bits(const xsimd::batch<float, A>& v) noexcept {
  using F = xsimd::batch<float, A>;
  using U = xsimd::batch<std::uint32_t, A>;
  const U u = xsimd::bitwise_cast<U>(v);
  const U rounded = u + U(0x7FFFu) + ((u >> 16) & U(1u));  // wraps for NaNs only, replaced below
  // The choice is made on floats (isnan: an unordered compare, which xsimd's != is not on
  // AVX), where every ISA has a blend: xsimd 8.1's 32-bit integer select on AVX-512BW does not
  // compile without optimisation.
  return xsimd::bitwise_cast<U>(
      xsimd::select(xsimd::isnan(v), xsimd::bitwise_cast<F>(u | U(0x0040'0000u)), xsimd::bitwise_cast<F>(rounded)));
}

// v rounded to bfloat16 (bfloat16_high_bits), stored at p.
template <class A = KernelArch>
SPRIG_ALWAYS_INLINE void store_bfloat16(bfloat16* p, const xsimd::batch<float, A>& v) noexcept {
  store_high_u16<A>(reinterpret_cast<std::uint16_t*>(p),
                    xsimd::bitwise_cast<xsimd::batch<std::int32_t, A>>(bfloat16_high_bits<A>(v)));
}

#endif  // SPRIG_KERNEL_SIMD

}  // namespace detail

namespace detail {
// out[i] = In -> Out conversion of in[i]: whole registers where A has registers of float, the
// scalar conversion for the rest. Throws ShapeError naming fn unless the lengths agree.
template <class A, class In, class Out>
void convert_array(const char* fn, std::span<const In> in, std::span<Out> out) {
  if (in.size() != out.size())
    throw ShapeError(message(fn, ": ", in.size(), " values in, room for ", out.size(), " out"));
  std::size_t i = 0;
#if SPRIG_KERNEL_SIMD
  if constexpr (kSimdFor<float, A>) {
    constexpr std::size_t N = xsimd::batch<float, A>::size;
    for (; i + N <= in.size(); i += N) {
      if constexpr (std::is_same_v<In, float>)
        store_bfloat16<A>(out.data() + i, xsimd::batch<float, A>::load_unaligned(in.data() + i));
      else
        load_bfloat16<A>(in.data() + i).store_unaligned(out.data() + i);
    }
  }
#endif
  for (; i < in.size(); ++i) out[i] = static_cast<Out>(in[i]);
}
}  // namespace detail

// out[i] = bfloat16(in[i]) for every i. Throws ShapeError unless the lengths agree.
template <class A = detail::KernelArch>
void to_bfloat16(std::span<const float> in, std::span<bfloat16> out) {
  detail::convert_array<A>("to_bfloat16", in, out);
}

// out[i] = float(in[i]) for every i (exact). Throws ShapeError unless the lengths agree.
template <class A = detail::KernelArch>
void to_float(std::span<const bfloat16> in, std::span<float> out) {
  detail::convert_array<A>("to_float", in, out);
}

}  // namespace sprig
