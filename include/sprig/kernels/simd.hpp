// sprig/kernels/simd.hpp — the one place that knows about xsimd: which architecture the
// kernels are compiled for (sprig::kernel_arch(), and kernel_arch_warning() when that is
// below the CPU's AVX2 + FMA), the batch type, and the xsimd-version differences.
//
// SPRIG_KERNEL_SIMD is 1 when the kernels use xsimd::batch<T, default_arch> for T, and 0 when
// they take the scalar path: SPRIG_NO_SIMD defined (CMake -DSPRIG_SIMD=OFF), or xsimd finds
// no SIMD architecture for the compiler flags (XSIMD_NO_SUPPORTED_ARCHITECTURE).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <type_traits>

#include "../core/config.hpp"
#include "../core/error.hpp"

#include "intrinsics.hpp"  // first: xsimd includes the intrinsic headers
#if SPRIG_HAS_SIMD
#  include <xsimd/xsimd.hpp>
#  if defined(XSIMD_NO_SUPPORTED_ARCHITECTURE)
#    define SPRIG_KERNEL_SIMD 0
#  else
#    define SPRIG_KERNEL_SIMD 1
#  endif
#else
#  define SPRIG_KERNEL_SIMD 0
#endif

#if defined(__GNUC__) || defined(__clang__)
#  define SPRIG_ALWAYS_INLINE inline __attribute__((always_inline))
#else
#  define SPRIG_ALWAYS_INLINE inline
#endif
// After a lambda's parameter list: the lambda is inlined at every -O level (a tile's step
// that takes its accumulators by pointer must be, or they leave the registers).
#if defined(__GNUC__) || defined(__clang__)
#  define SPRIG_ALWAYS_INLINE_LAMBDA __attribute__((always_inline))
#else
#  define SPRIG_ALWAYS_INLINE_LAMBDA
#endif
#if defined(__GNUC__) || defined(__clang__)
#  define SPRIG_NOINLINE __attribute__((noinline))
#elif defined(_MSC_VER)
#  define SPRIG_NOINLINE __declspec(noinline)
#else
#  define SPRIG_NOINLINE
#endif
// Before a loop over the registers of a tile (a compile-time trip count): unrolled completely
// at every -O level, so the tile's accumulators stay in registers. GCC does that by itself at
// -O3 only, and at -O2 (CMake's RelWithDebInfo) the kernels lost much of their speed without
// it (docs/design.md, "Measurements behind the code").
#if defined(__GNUC__) || defined(__clang__)
#  define SPRIG_UNROLL _Pragma("GCC unroll 64")
#else
#  define SPRIG_UNROLL
#endif
// x86-64 with GCC or Clang: functions compiled for an instruction set beyond the translation
// unit's flags through a target attribute.
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#  define SPRIG_DETAIL_X86_GNU 1
#  define SPRIG_DETAIL_AVX512F_TARGET __attribute__((target("avx512f")))
#else
#  define SPRIG_DETAIL_X86_GNU 0
#endif

namespace sprig::detail {

// A read prefetch into all cache levels. Prefetching an address outside any mapping is
// harmless (it never faults), so callers may prefetch speculative addresses.
SPRIG_ALWAYS_INLINE void prefetch(const void* p) noexcept {
#if defined(__GNUC__) || defined(__clang__)
  __builtin_prefetch(p, 0, 3);
#else
  (void)p;
#endif
}

#if SPRIG_DETAIL_X86_GNU
// The 16 x 16 32-bit words of v transposed in place: word j of v[i] goes to word i of v[j], in
// 64 register shuffles. Compiled for AVX-512F whatever the translation unit's flags, so the
// bf16 kernels' target functions and transpose_square (in an AVX-512 build) both inline it.
SPRIG_DETAIL_AVX512F_TARGET SPRIG_ALWAYS_INLINE void transpose_words_16x16(__m512i (&v)[16]) noexcept {
  __m512i a[16], b[16];
  SPRIG_UNROLL for (int i = 0; i < 16; i += 2) {  // 2 x 2 blocks of words
    a[i] = _mm512_unpacklo_epi32(v[i], v[i + 1]);
    a[i + 1] = _mm512_unpackhi_epi32(v[i], v[i + 1]);
  }
  SPRIG_UNROLL for (int i = 0; i < 16; i += 4) {  // 4 x 4 blocks: pairs of words
    SPRIG_UNROLL for (int j = 0; j < 2; ++j) {
      b[i + j] = _mm512_unpacklo_epi64(a[i + j], a[i + j + 2]);
      b[i + j + 2] = _mm512_unpackhi_epi64(a[i + j], a[i + j + 2]);
    }
  }
  SPRIG_UNROLL for (int i = 0; i < 16; i += 8) {  // 8 x 8 blocks: 128-bit lanes
    SPRIG_UNROLL for (int j = 0; j < 4; ++j) {
      a[i + j] = _mm512_shuffle_i32x4(b[i + j], b[i + j + 4], 0x88);
      a[i + j + 4] = _mm512_shuffle_i32x4(b[i + j], b[i + j + 4], 0xDD);
    }
  }
  SPRIG_UNROLL for (int j = 0; j < 8; ++j) {  // 16 x 16: the halves
    b[j] = _mm512_shuffle_i32x4(a[j], a[j + 8], 0x88);
    b[j + 8] = _mm512_shuffle_i32x4(a[j], a[j + 8], 0xDD);
  }
  // b holds the rows in the order the lane shuffles left them
  static constexpr int kOrder[16] = {0, 2, 1, 3, 4, 6, 5, 7, 8, 10, 9, 11, 12, 14, 13, 15};
  SPRIG_UNROLL for (int i = 0; i < 16; ++i) v[i] = b[kOrder[i]];
}
#endif

#if SPRIG_KERNEL_SIMD
// The architecture the kernels of this translation unit are built for: xsimd's best for the
// compiler flags. Every SIMD kernel takes its architecture as a template parameter A that
// defaults to it; a dispatching build (dispatch.hpp) instantiates them for other ones in
// translation units compiled with those flags.
using KernelArch = xsimd::default_arch;

// True when xsimd has a register for T on architecture A (armv7 NEON has none for double):
// the kernels then take the scalar path for that T only.
template <class T, class A = KernelArch>
inline constexpr bool kSimdFor = xsimd::types::has_simd_register<T, A>::value;

template <class T, class A = KernelArch>
using Batch = xsimd::batch<T, A>;

// Vector registers of architecture A: 32 with AVX-512 and on AArch64, 16 on SSE, AVX and
// armv7 NEON. Register tiles size themselves from it.
template <class A = KernelArch>
inline constexpr int kVectorRegistersOf =
#  if defined(__aarch64__) || defined(_M_ARM64)
    32;
#  else
    sizeof(xsimd::batch<float, A>) == 64 ? 32 : 16;
#  endif
inline constexpr int kVectorRegisters = kVectorRegistersOf<>;

// v, held in a register from here on: an empty asm statement the compiler cannot see
// through. For a load that several FMAs share, which GCC 12 otherwise folds into each of
// them as a memory operand (one load per FMA, and the loads then bound the loop).
template <class T, class A>
SPRIG_ALWAYS_INLINE xsimd::batch<T, A> in_register(xsimd::batch<T, A> v) noexcept {
  auto raw = v.data;
#  if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
  asm("" : "+v"(raw));
#  elif defined(__GNUC__) && defined(__aarch64__)
  asm("" : "+w"(raw));
#  endif
  return xsimd::batch<T, A>(raw);
}

// Horizontal sum of one batch: xsimd 8 calls it hadd, xsimd 9+ reduce_add.
template <class T, class A>
SPRIG_ALWAYS_INLINE T reduce_add(const xsimd::batch<T, A>& v) noexcept {
#  if XSIMD_VERSION_MAJOR >= 9
  return xsimd::reduce_add(v);
#  else
  return xsimd::hadd(v);
#  endif
}

// out[k] = sum of the lanes of rows[k], for k < N: N horizontal sums at the cost of about
// log2(N) shuffle-and-add steps over all rows at once.
// xsimd 8.1's AVX-512 float haddp returns its lanes in the order
// 0 1 4 5 2 3 6 7 8 9 12 13 10 11 14 15 (an involution), so the rows are fed in that order.
template <class T, class A>
SPRIG_ALWAYS_INLINE xsimd::batch<T, A> batched_hsum(const xsimd::batch<T, A>* rows) noexcept {
#  if XSIMD_VERSION_MAJOR == 8
  if constexpr (std::is_same_v<T, float> && std::is_base_of_v<xsimd::avx512f, A>) {
    constexpr int order[16] = {0, 1, 4, 5, 2, 3, 6, 7, 8, 9, 12, 13, 10, 11, 14, 15};
    xsimd::batch<T, A> fed[16];
    SPRIG_UNROLL for (int k = 0; k < 16; ++k) fed[k] = rows[order[k]];
    return xsimd::haddp(fed);
  }
#  endif
  return xsimd::haddp(rows);
}

// The w x w matrix held in v (w = the batch's size, one row per register) transposed in
// place: lane j of v[i] goes to lane i of v[j]. float on AVX-512 and AVX in register shuffles
// (w log2 w of them); elsewhere through a buffer on the stack. Exact (moves only).
template <class T, class A, std::size_t N>
SPRIG_ALWAYS_INLINE void transpose_square(xsimd::batch<T, A> (&v)[N]) noexcept {
  using V = xsimd::batch<T, A>;
  static_assert(N == V::size, "one register per row of a square");
  constexpr int w = static_cast<int>(V::size);
#  if defined(__AVX512F__)
  if constexpr (std::is_same_v<T, float> && std::is_base_of_v<xsimd::avx512f, A>) {
    static_assert(w == 16);
    __m512i words[16];
    SPRIG_UNROLL for (int i = 0; i < 16; ++i) words[i] = _mm512_castps_si512(v[i]);
    transpose_words_16x16(words);
    SPRIG_UNROLL for (int i = 0; i < 16; ++i) v[i] = V(_mm512_castsi512_ps(words[i]));
    return;
  }
#  endif
#  if defined(__AVX__)
  if constexpr (std::is_same_v<T, float> && std::is_base_of_v<xsimd::avx, A>) {
    static_assert(w == 8);
    __m256 t[8], u[8];
    SPRIG_UNROLL for (int i = 0; i < 8; i += 2) {
      t[i] = _mm256_unpacklo_ps(v[i], v[i + 1]);
      t[i + 1] = _mm256_unpackhi_ps(v[i], v[i + 1]);
    }
    SPRIG_UNROLL for (int i = 0; i < 8; i += 4) {  // u[i + e], lane L: rows i..i+3 at column 4 L + e
      u[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
      u[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xEE);
      u[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
      u[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
    }
    SPRIG_UNROLL for (int e = 0; e < 4; ++e) {
      v[e] = V(_mm256_permute2f128_ps(u[e], u[4 + e], 0x20));
      v[4 + e] = V(_mm256_permute2f128_ps(u[e], u[4 + e], 0x31));
    }
    return;
  }
#  endif
  alignas(64) T rows[w * w], cols[w * w];
  for (int i = 0; i < w; ++i) v[i].store_aligned(rows + i * w);
  for (int i = 0; i < w; ++i)
    for (int j = 0; j < w; ++j) cols[j * w + i] = rows[i * w + j];
  for (int i = 0; i < w; ++i) v[i] = V::load_aligned(cols + i * w);
}
#else
// The scalar path's stand-in for an xsimd architecture.
struct ScalarArch {
  static constexpr const char* name() noexcept { return "scalar"; }
};
using KernelArch = ScalarArch;
template <class T, class A = KernelArch>
inline constexpr bool kSimdFor = false;
#endif

// Elements of T per SIMD register on architecture A (1 on the scalar path).
template <class T, class A = KernelArch>
constexpr std::size_t simd_width() noexcept {
#if SPRIG_KERNEL_SIMD
  if constexpr (kSimdFor<T, A>) return Batch<T, A>::size;
#endif
  return 1;
}

// kernel_arch_warning's sentence for kernels compiled for `compiled` (with or without AVX2
// and FMA) on a CPU that has them or not: empty unless vector kernels could run on AVX2 + FMA
// and were built for less.
inline std::string arch_warning(std::string_view compiled, bool compiled_avx2_fma, bool cpu_avx2_fma) {
  if (compiled_avx2_fma || !cpu_avx2_fma || compiled == "scalar") return {};
  return message("sprig's kernels are compiled for ", compiled,
                 " but this CPU runs AVX2 and FMA: build with -march=native (or -mavx2 -mfma) for their full speed");
}

}  // namespace sprig::detail

// A dispatching build (SPRIG_DISPATCH) defines kernel_arch() and kernel_arch_warning() in
// dispatch.hpp: there the architecture is chosen at run time.
#if !defined(SPRIG_DISPATCH)
namespace sprig {

// The SIMD architecture the kernels of this translation unit are compiled for, in xsimd's
// words ("avx512bw", "fma3+avx2", "sse2", "arm64+neon", ...), or "scalar" on the scalar path
// (SPRIG_NO_SIMD, or no SIMD architecture for the compiler flags). Fixed at compile time by
// the flags (-march, -mavx2 ...), not by the CPU the program runs on.
constexpr const char* kernel_arch() noexcept { return detail::KernelArch::name(); }

// Empty when the kernels use what matters of the CPU; otherwise one sentence saying that
// they were compiled for less than the AVX2 + FMA this x86-64 CPU runs (a build without
// -march gets SSE2, at a fraction of the speed) and how to build. Scalar builds (a choice)
// and other CPUs: empty. Reads the CPU's features (GCC and Clang on x86 only).
inline std::string kernel_arch_warning() {
#  if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#    if SPRIG_KERNEL_SIMD && defined(__AVX2__) && defined(__FMA__)
  constexpr bool compiled_avx2_fma = true;
#    else
  constexpr bool compiled_avx2_fma = false;
#    endif
  if constexpr (compiled_avx2_fma) return {};
  __builtin_cpu_init();
  const bool cpu = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return detail::arch_warning(kernel_arch(), compiled_avx2_fma, cpu);
#  else
  return {};
#  endif
}

}  // namespace sprig
#endif
