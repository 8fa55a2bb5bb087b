// sprig/kernels/intrinsics.hpp — the x86 intrinsic headers (<immintrin.h>), included with GCC's
// -Wuninitialized and -Wmaybe-uninitialized off; nothing on other architectures.
//
// GCC 12 reports `__Y` in _mm512_undefined_ps (used by xsimd's AVX-512 haddp) as uninitialised
// once inlined: a false positive (GCC bug 105593, fixed in GCC 13). The state of a diagnostic
// follows the source location, so it is silenced only when the intrinsic headers are first
// included here: every sprig header that includes them, directly or through xsimd, includes
// this one before.
#pragma once

#if defined(__x86_64__) || defined(_M_X64) || defined(__i386__) || defined(_M_IX86)
#  if defined(__GNUC__) && !defined(__clang__)
#    pragma GCC diagnostic push
#    pragma GCC diagnostic ignored "-Wuninitialized"
#    pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#  endif
#  include <immintrin.h>
#  if defined(__GNUC__) && !defined(__clang__)
#    pragma GCC diagnostic pop
#  endif
#endif
