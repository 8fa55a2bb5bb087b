// sprig/kernels/parallel.hpp — how the sparse kernels share out rows among OpenMP threads.
//
// One parallel region per kernel call. The sparse kernels (run_partitioned): every thread
// first runs a setup step over its share of a flat range (packing X, zeroing dead slots),
// then, after a barrier, the rows of its nnz-balanced range (RowPartition). The narrow dense
// kernels (run_even_split): an even split of a uniform range. Each row belongs to exactly one thread and its
// arithmetic does not depend on which, so the results are the same bits for any thread count.
// A call made inside a parallel region runs on its calling thread alone.
#pragma once

#include <cstdint>

#include "../core/config.hpp"
#include "row_partition.hpp"

#if SPRIG_HAS_OPENMP
#  include <omp.h>
#endif

namespace sprig::detail {

// Runs pre(t, n) on every thread t of n, then, once all have finished it, body(row_begin,
// row_end) on thread t's range of `part` (RowPartition::begin). Runs both once on the caller
// (pre(0, 1), then body over all rows) when OpenMP is off, the work (multiply-adds) is below
// kParallelMinWork, there is one thread, or the call is already inside a parallel region.
// pre and body must not throw.
template <class Pre, class Body>
void run_partitioned(const RowPartition& part, std::int64_t work, Pre&& pre, Body&& body) {
#if SPRIG_HAS_OPENMP
  if (work >= kParallelMinWork && omp_get_max_threads() > 1 && !omp_in_parallel()) {
#  pragma omp parallel
    {
      const int n = omp_get_num_threads(), t = omp_get_thread_num();
      pre(t, n);
#  pragma omp barrier
      body(part.begin(t, n), part.begin(t + 1, n));
    }
    return;
  }
#else
  (void)work;
#endif
  pre(0, 1);
  body(std::int64_t{0}, part.rows());
}

// Runs run(begin, end) on thread t's share [n t / threads, n (t + 1) / threads) of [0, n),
// or run(0, n) once on the caller under the same conditions as run_partitioned. For work that
// is uniform over its range (the narrow dense kernels' batch registers or rows of X).
template <class Fn>
void run_even_split(std::int64_t work, std::int64_t n, Fn&& run) {
#if SPRIG_HAS_OPENMP
  if (work >= kParallelMinWork && !omp_in_parallel() && omp_get_max_threads() > 1) {
#  pragma omp parallel
    {
      const std::int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();
      run(n * t / nt, n * (t + 1) / nt);
    }
    return;
  }
#else
  (void)work;
#endif
  run(0, n);
}

}  // namespace sprig::detail
