// with_threads(n, fn): runs fn with the OpenMP thread count set to n, then restores it; without
// OpenMP runs fn as it is (on the one thread there is), so a bitwise 1-vs-n comparison holds.
#pragma once

#include "sprig/core/config.hpp"
#if SPRIG_HAS_OPENMP
#  include <omp.h>
#endif

namespace sprig_test {

template <class Fn>
void with_threads(int threads, Fn&& fn) {
#if SPRIG_HAS_OPENMP
  const int saved = omp_get_max_threads();
  omp_set_num_threads(threads);
  fn();
  omp_set_num_threads(saved);
#else
  (void)threads;
  fn();
#endif
}

}  // namespace sprig_test
