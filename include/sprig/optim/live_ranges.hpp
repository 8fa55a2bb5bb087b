// sprig/optim/live_ranges.hpp — the slot ranges an optimizer may update, and its state setup.
//
// A sparse parameter is updated on its live slots only ([row_start, row_start + row_nnz) of
// every row), so padding and dead slots of the weight stay exactly 0 whatever the gradient
// or state arrays hold there. A dense parameter is one range [0, size).
#pragma once

#include <algorithm>
#include <cstdint>

#include "../core/concepts.hpp"
#include "../core/config.hpp"
#include "../core/error.hpp"
#include "../nn/parameter.hpp"

#if SPRIG_HAS_OPENMP
#  include <omp.h>
#endif

namespace sprig::detail {

// Calls fn(begin, end) for every maximal run of live slots (one per non-empty row), on
// OpenMP threads for large parameters: fn is called concurrently on disjoint ranges and must
// only touch its own slots. Each slot is updated by one call, so the result does not depend
// on the thread count. With Parallel = false: on the calling thread, in slot order.
template <bool Parallel = true, Value T, ColumnIndex Index, class Fn>
void for_each_live_range(const SparseParameter<T, Index>& p, Fn&& fn) {
  const auto& w = p.matrix;
  const std::int64_t rows = w.rows();
#if SPRIG_HAS_OPENMP
#  pragma omp parallel for schedule(static) if (Parallel && w.storage_size() >= kParallelMinWork)
#endif
  for (std::int64_t i = 0; i < rows; ++i) {
    const std::int64_t n = w.row_nnz(i);
    if (n > 0) fn(w.row_start(i), w.row_start(i) + n);
  }
}
// A block-sparse weight: the entries of each block row's live blocks, one range per non-empty
// block row (R * C entries per slot).
template <bool Parallel = true, Value T, ColumnIndex Index, int R, int C, class Fn>
void for_each_live_range(const BlockSparseParameter<T, Index, R, C>& p, Fn&& fn) {
  const auto& w = p.matrix.pattern();
  const std::int64_t rows = w.rows(), size = std::int64_t{R} * C;
#if SPRIG_HAS_OPENMP
#  pragma omp parallel for schedule(static) if (Parallel && w.storage_size() * size >= kParallelMinWork)
#endif
  for (std::int64_t i = 0; i < rows; ++i) {
    const std::int64_t n = w.row_nnz(i);
    if (n > 0) fn(w.row_start(i) * size, (w.row_start(i) + n) * size);
  }
}
// A dense parameter: [0, size) in one range, or one contiguous chunk per thread (large
// parameters, concurrently as above; an element's update does not depend on the chunk).
template <bool Parallel = true, Value T, class Fn>
void for_each_live_range(const DenseParameter<T>& p, Fn&& fn) {
  const std::int64_t n = p.size();
  if (n <= 0) return;
#if SPRIG_HAS_OPENMP
  if (Parallel && n >= kParallelMinWork) {
#  pragma omp parallel
    {
      const std::int64_t t = omp_get_thread_num(), k = omp_get_num_threads();
      const std::int64_t b = n * t / k, e = n * (t + 1) / k;
      if (b < e) fn(b, e);
    }
    return;
  }
#endif
  fn(std::int64_t{0}, n);
}

// Entries of grad and state a parameter has: a sparse weight's storage_size(), a dense one's size.
template <class P>
std::int64_t slot_count(const P& p) {
  if constexpr (requires { p.entry_count(); })
    return p.entry_count();
  else if constexpr (requires { p.matrix.storage_size(); })
    return p.matrix.storage_size();
  else
    return p.size();
}

// Makes sure p.state holds `count` vectors aligned with the parameter's slots, creating
// zero state on first use with the gradient's capacity (a sparse parameter's growth reserve,
// see SparseParameter::reserve_growth). Throws ShapeError, naming fn, if the parameter's arrays
// are misaligned. O(slots) when it creates state, O(count) otherwise.
template <class P>
void ensure_state(const char* fn, P& p, std::size_t count) {
  p.check_aligned(fn);
  if (p.state.size() < count) p.state.resize(count);
  const auto n = static_cast<std::size_t>(slot_count(p));
  for (std::size_t k = 0; k < count; ++k)
    if (p.state[k].empty() && n > 0) {
      p.state[k].reserve(std::max(n, p.grad.capacity()));
      p.state[k].assign(n, typename P::value_type(0));
    }
}

}  // namespace sprig::detail
