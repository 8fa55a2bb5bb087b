// sprig/nn/rows.hpp — runs a per-row function over a [features x batch] activation, split
// over OpenMP threads when the activation is large enough to pay for a parallel region.
// Each row is handled by one thread, so results never depend on the thread count.
#pragma once

#include <cstdint>

#include "../core/config.hpp"

namespace sprig::detail {

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
