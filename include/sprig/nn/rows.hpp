// sprig/nn/rows.hpp — runs a per-row function over a [features x batch] activation, split
// over OpenMP threads when the activation is large enough to pay for a parallel region.
// Each row is handled by one thread, so results never depend on the thread count.
// kParallelMinWork (core/config.hpp) elements is the size below which a parallel region costs
// more than it saves.
#pragma once

#include <cstdint>

#include "../core/config.hpp"

namespace sprig::detail {

// Calls fn(i) once for every i in [0, rows), concurrently on disjoint rows for a large
// activation (rows x cols >= kParallelMinWork): fn must touch only row i's data.
template <class Fn>
void for_rows(std::int64_t rows, std::int64_t cols, Fn&& fn) {
#if SPRIG_HAS_OPENMP
#  pragma omp parallel for schedule(static) if (rows * cols >= kParallelMinWork)
#else
  (void)cols;
#endif
  for (std::int64_t i = 0; i < rows; ++i) fn(i);
}

}  // namespace sprig::detail
