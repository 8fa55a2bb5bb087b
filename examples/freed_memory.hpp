// examples/freed_memory.hpp — return_freed_arrays(): have glibc give every freed large array
// back to the OS, so a long run's resident memory does not creep.
//
// glibc serves an allocation of at least its mmap threshold (128 KiB) by mmap and unmaps it
// on free, but raises the threshold to the size of each such block freed (up to 32 MiB); from
// then on arrays of that size come from the heap, whose freed middle stays resident. A
// topology update reallocates per-slot arrays (compaction), so char_gpt's mini40m bf16 RigL
// run in 8x8 blocks grew from 420 to 443 MB of peak RSS over 10 updates while its own arrays
// stayed the same size; with the threshold fixed, 405-408 MB (docs/transformers.md, "Tight
// rows"). Setting the threshold turns the raising off. A no-op off glibc. O(1).
#pragma once

#include <cstdlib>  // defines __GLIBC__ on glibc

#if defined(__GLIBC__)
#  include <malloc.h>
#endif

namespace examples {

inline void return_freed_arrays() noexcept {
#if defined(__GLIBC__)
  mallopt(M_MMAP_THRESHOLD, 128 * 1024);
#endif
}

}  // namespace examples
