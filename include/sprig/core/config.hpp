// sprig/core/config.hpp — build-wide switches, the internal assertion macro, and the tuning
// knobs (tuning.hpp).
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
#    define SPRIG_ASSERT(cond, msg)                                                                                   \
      ((cond) ? (void)0                                                                                               \
              : (std::fprintf(stderr, "sprig: assertion failed: %s (%s) at %s:%d\n", #cond, msg, __FILE__, __LINE__), \
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

// The tuning knobs (SPRIG_PARALLEL_MIN_WORK, the panel budgets, the prefetch distances).
#include "tuning.hpp"

namespace sprig::detail {
// Work below which a threaded loop runs on the calling thread (tuning.hpp).
inline constexpr std::int64_t kParallelMinWork = SPRIG_PARALLEL_MIN_WORK;
}  // namespace sprig::detail
