// sprig/core/abi_guard.hpp — a program whose translation units compiled sprig for different
// instruction sets fails to link, instead of running whichever copy the linker kept.
//
// Every sprig function is inline, and its body depends on the compiler's instruction-set
// flags (-march, -mavx2 ...: the kernels' xsimd architecture) and on SPRIG_NO_SIMD. Two
// translation units that disagree define the same functions differently, and the linker keeps
// one copy of each without a word (an ODR violation): the AVX-512 copy may then run on a CPU
// without AVX-512, or the SSE2 copy everywhere.
//
// How: each translation unit defines one variable per switch below (the highest extension
// first, which is the one a linker names), named after the switch
// (sprig::detail::abi::avx2, ...), thread_local where the switch is on and plain where it is
// off, and keeps it referenced. The ELF linkers (GNU ld, gold, lld, and GCC's LTO) refuse a
// thread-local definition of a name beside a plain one ("TLS definition in a.o mismatches
// non-TLS reference in b.o"), so translation units that disagree on any switch fail to link,
// and the symbol in the message names the switch. Cost: one byte of thread-local storage per
// switch that is on, and one unused function per translation unit.
//
// Switches: SPRIG_NO_SIMD, SPRIG_DISPATCH (kernels/dispatch.hpp), and each x86 extension
// xsimd chooses its architecture from (SSE3 ... AVX-512BW, FMA, FMA4) or NEON on ARM. Not
// switches: OpenMP, SPRIG_PARALLEL_MIN_WORK and the prefetch distances change speed, never
// results (every kernel gives the same bits for any thread count), so mixing them is
// allowed. Not checked: shared libraries (each is linked on its own; build them with
// -fvisibility=hidden so their copies stay theirs), and non-ELF targets (Mach-O, PE), where
// the guard is off. The translation units of a dispatching build's targets
// (kernels/dispatch_target.hpp) turn it off: their flags differ on purpose.
//
// SPRIG_NO_ABI_GUARD (defined alike in every translation unit) turns the guard off for a
// program that mixes instruction sets on purpose and keeps the copies apart itself.
#pragma once

#if defined(__ELF__) && (defined(__GNUC__) || defined(__clang__)) && !defined(SPRIG_NO_ABI_GUARD)

#  define SPRIG_DETAIL_ABI_ON(name) inline thread_local char name = 0;
#  define SPRIG_DETAIL_ABI_OFF(name) inline char name = 0;

namespace sprig::detail::abi {

#  if defined(SPRIG_NO_SIMD)
SPRIG_DETAIL_ABI_ON(no_simd)
#  else
SPRIG_DETAIL_ABI_OFF(no_simd)
#  endif
#  if defined(SPRIG_DISPATCH)
SPRIG_DETAIL_ABI_ON(dispatch)
#  else
SPRIG_DETAIL_ABI_OFF(dispatch)
#  endif
#  if defined(__AVX512BW__)
SPRIG_DETAIL_ABI_ON(avx512bw)
#  else
SPRIG_DETAIL_ABI_OFF(avx512bw)
#  endif
#  if defined(__AVX512DQ__)
SPRIG_DETAIL_ABI_ON(avx512dq)
#  else
SPRIG_DETAIL_ABI_OFF(avx512dq)
#  endif
#  if defined(__AVX512CD__)
SPRIG_DETAIL_ABI_ON(avx512cd)
#  else
SPRIG_DETAIL_ABI_OFF(avx512cd)
#  endif
#  if defined(__AVX512F__)
SPRIG_DETAIL_ABI_ON(avx512f)
#  else
SPRIG_DETAIL_ABI_OFF(avx512f)
#  endif
#  if defined(__AVX2__)
SPRIG_DETAIL_ABI_ON(avx2)
#  else
SPRIG_DETAIL_ABI_OFF(avx2)
#  endif
#  if defined(__FMA__)
SPRIG_DETAIL_ABI_ON(fma)
#  else
SPRIG_DETAIL_ABI_OFF(fma)
#  endif
#  if defined(__FMA4__)
SPRIG_DETAIL_ABI_ON(fma4)
#  else
SPRIG_DETAIL_ABI_OFF(fma4)
#  endif
#  if defined(__AVX__)
SPRIG_DETAIL_ABI_ON(avx)
#  else
SPRIG_DETAIL_ABI_OFF(avx)
#  endif
#  if defined(__SSE4_2__)
SPRIG_DETAIL_ABI_ON(sse4_2)
#  else
SPRIG_DETAIL_ABI_OFF(sse4_2)
#  endif
#  if defined(__SSE4_1__)
SPRIG_DETAIL_ABI_ON(sse4_1)
#  else
SPRIG_DETAIL_ABI_OFF(sse4_1)
#  endif
#  if defined(__SSSE3__)
SPRIG_DETAIL_ABI_ON(ssse3)
#  else
SPRIG_DETAIL_ABI_OFF(ssse3)
#  endif
#  if defined(__SSE3__)
SPRIG_DETAIL_ABI_ON(sse3)
#  else
SPRIG_DETAIL_ABI_OFF(sse3)
#  endif
#  if defined(__ARM_NEON) || defined(__ARM_NEON__)
SPRIG_DETAIL_ABI_ON(neon)
#  else
SPRIG_DETAIL_ABI_OFF(neon)
#  endif

// References every switch, so each translation unit emits them all; never called.
[[gnu::used]] static int touch_switches() noexcept {
  return no_simd + dispatch + avx512bw + avx512dq + avx512cd + avx512f + avx2 + fma + fma4 + avx + sse4_2 + sse4_1 +
         ssse3 + sse3 + neon;
}

}  // namespace sprig::detail::abi

#  undef SPRIG_DETAIL_ABI_ON
#  undef SPRIG_DETAIL_ABI_OFF

#endif
