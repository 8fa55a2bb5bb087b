// sprig/core/config.hpp — build-wide switches and the internal assertion macro.
#pragma once

#include <cstdio>
#include <cstdlib>

#include "abi_guard.hpp"

// SPRIG_ASSERT(cond, msg) guards internal invariants (never user input, which is
// validated with sprig::Error at the public boundary). On in debug builds, off
// under NDEBUG; a consumer may define SPRIG_ASSERT before including sprig.
#ifndef SPRIG_ASSERT
#  ifdef NDEBUG
#    define SPRIG_ASSERT(cond, msg) ((void)0)
#  else
#    define SPRIG_ASSERT(cond, msg)                                                      \
       ((cond) ? (void)0                                                                 \
               : (std::fprintf(stderr, "sprig: assertion failed: %s (%s) at %s:%d\n", #cond, \
                               msg, __FILE__, __LINE__),                                 \
                  std::abort()))
#  endif
#endif

// SPRIG_NO_SIMD selects the scalar path in every kernel (CMake: -DSPRIG_SIMD=OFF).
#if defined(SPRIG_NO_SIMD)
#  define SPRIG_HAS_SIMD 0
#else
#  define SPRIG_HAS_SIMD 1
#endif

#if defined(_OPENMP)
#  define SPRIG_HAS_OPENMP 1
#else
#  define SPRIG_HAS_OPENMP 0
#endif

#include <cstdint>

// Work (elements of a pass, or multiply-adds of a kernel) below which a loop runs on the
// calling thread: an OpenMP parallel region costs a few microseconds, about that much work
// (docs/performance.md, "Threads"). One value for every threaded loop in the library; define
// it (every translation unit alike) to move the threshold.
#ifndef SPRIG_PARALLEL_MIN_WORK
#  define SPRIG_PARALLEL_MIN_WORK (std::int64_t{1} << 16)
#endif

namespace sprig::detail {
inline constexpr std::int64_t kParallelMinWork = SPRIG_PARALLEL_MIN_WORK;
}  // namespace sprig::detail
