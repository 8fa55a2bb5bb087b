// sprig/kernels/transpose.hpp — W^T as a PaddedCSR plus the slot permutation back into W,
// built in O(nnz + M + K) by counting sort; and TransposeCache, which keeps W^T in step with W.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <memory>
#include <span>
#include <vector>

#include "../core/aligned_allocator.hpp"
#include "../core/config.hpp"
#include "../core/padded_csr.hpp"
#include "../core/tuning.hpp"
#include "parallel.hpp"
#include "simd.hpp"

#if SPRIG_HAS_OPENMP
#  include <omp.h>
#endif

namespace sprig {

namespace detail {
struct PaddedCSRAccess {
  template <class M>
  static auto& values(M& m) {
    return m.values_;
  }
  template <class M>
  static auto& col_indices(M& m) {
    return m.col_indices_;
  }
  template <class M>
  static auto& row_nnz(M& m) {
    return m.row_nnz_;
  }
  // A structure-only matrix given values again (values(m) assigned one per slot by the caller).
  template <class M>
  static void mark_valued(M& m) noexcept {
    m.structure_only_ = false;
  }
  template <class M>
  static void layout(M& m, const char* fn, std::int64_t rows, std::int64_t cols, double ratio,
                     const std::vector<std::int64_t>& counts, bool with_values = true, bool fill = true) {
    ++m.topology_version_;  // the caller writes a new topology into m's arrays next
    m.init_shape(fn, rows, cols, ratio);
    m.layout_from_counts(counts, with_values, fill);
    m.nnz_ = 0;
    for (std::int64_t c : counts) m.nnz_ += c;
  }
};
}  // namespace detail

// W^T and, for each of its slots, the slot of W it came from (-1 for padding), so that a
// value-only change of W is carried over with one gather: T.values[s] = W.values[source[s]].
// 32-bit slots: the permutation is the largest array of the cache, and a layer with 2^31
// slots (16 GiB of float weights and indices) is far beyond what a CPU step can train.
using SourceSlot = std::int32_t;
inline constexpr std::int64_t kMaxTransposeSlots = std::numeric_limits<SourceSlot>::max();

namespace detail {
// out[s] = values[source[s]] for the slots s in [s0, s1), T{} for a padding slot (source[s] <
// 0): W's values in W^T's slot order, one thread's share of it. Asks for the source values
// SPRIG_REFRESH_PREFETCH slots ahead (they are scattered over W's storage). O(s1 - s0).
template <class T>
void gather_slots(const SourceSlot* source, const T* values, T* out, std::int64_t s0, std::int64_t s1) noexcept {
  constexpr std::int64_t ahead = SPRIG_REFRESH_PREFETCH;
  for (std::int64_t s = s0; s < s1; ++s) {
    if (s + ahead < s1) prefetch(values + std::max<std::int64_t>(source[s + ahead], 0));
    out[s] = source[s] >= 0 ? values[source[s]] : T{};
  }
}
}  // namespace detail

template <Value T, ColumnIndex Index>
struct Transposed {
  PaddedCSR<T, Index> matrix;
  std::vector<SourceSlot> source_slot;
};

// Lays `out` out as W^T (K x M; rows sorted by column of W, entries of each row in ascending
// row of W), reusing its arrays where they are large enough (a topology update keeps nnz, so
// a rebuild then allocates nothing but O(K) counters) and releasing the others before they
// are refilled. With with_values = false, out.matrix keeps no values (structure-only: kernels
// that gather W's values through source_slot need none).
// Throws ArgumentError if W has more than kMaxTransposeSlots slots or M rows of W cannot be
// indexed as columns by Index, for a bad padding_ratio (as PaddedCSR's constructor), or for
// with_values = true on a structure-only W (a block pattern: it has no values to carry).
// O(nnz + M + K) time, O(K) scratch; one thread (its scattered writes gain nothing from a
// second).
template <Value T, ColumnIndex Index>
void transpose_into(const PaddedCSR<T, Index>& W, Transposed<T, Index>& out, double padding_ratio = 0.0,
                    bool with_values = true) {
  using Access = detail::PaddedCSRAccess;
  const std::int64_t M = W.rows(), K = W.cols();
  if (with_values && W.structure_only())
    throw ArgumentError("sprig::transpose: W is structure-only (no values); transpose its structure only");
  if (W.storage_size() > kMaxTransposeSlots)
    throw ArgumentError(detail::message("sprig::transpose: W has ", W.storage_size(), " slots; the transpose indexes ",
                                        "them with 32 bits (at most ", kMaxTransposeSlots, ")"));
  std::vector<std::int64_t> counts(static_cast<std::size_t>(K), 0);
  const auto cols = W.col_indices();
  for (std::int64_t i = 0; i < M; ++i)
    for (std::int64_t s = W.row_start(i), e = s + W.row_nnz(i); s < e; ++s) ++counts[cols[s]];
  // every slot is written below (live or padding), so the arrays are not filled first
  Access::layout(out.matrix, "sprig::transpose", K, M, padding_ratio, counts, with_values, false);
  detail::resize_for_overwrite(out.source_slot, static_cast<std::size_t>(out.matrix.storage_size()));
  T* tvals = with_values ? Access::values(out.matrix).data() : nullptr;
  Index* tcols = Access::col_indices(out.matrix).data();
  SourceSlot* source = out.source_slot.data();
  const T* vals = with_values ? W.values().data() : nullptr;
  std::vector<std::int64_t> next(out.matrix.row_starts().begin(), out.matrix.row_starts().end());
  for (std::int64_t i = 0; i < M; ++i)  // rows of W in order: each row of W^T comes out sorted
    for (std::int64_t s = W.row_start(i), e = s + W.row_nnz(i); s < e; ++s) {
      const std::int64_t t = next[cols[s]]++;
      tcols[t] = static_cast<Index>(i);
      if (tvals) tvals[t] = vals[s];
      source[t] = static_cast<SourceSlot>(s);
    }
  for (std::int64_t c = 0; c < K; ++c)  // W^T's padding: the rest of each row
    for (std::int64_t t = next[c], e = out.matrix.row_start(c) + out.matrix.row_capacity(c); t < e; ++t) {
      tcols[t] = PaddedCSR<T, Index>::kPadding;
      if (tvals) tvals[t] = T(0);
      source[t] = -1;
    }
}

// W^T as a new value (see transpose_into; throws the same).
template <Value T, ColumnIndex Index>
Transposed<T, Index> transpose(const PaddedCSR<T, Index>& W, double padding_ratio = 0.0) {
  Transposed<T, Index> out;
  transpose_into(W, out, padding_ratio);
  return out;
}

// Owns W^T for one W and keeps it current. It is keyed by W.topology_key(), which names one
// topology of one PaddedCSR object for the whole process (core/topology_key.hpp): get(W)
// rebuilds when the key (or W's shape) differs from the one it was built for, and otherwise
// refreshes only the values (one gather pass). Handing it another matrix is therefore safe
// but rebuilds every time the matrix changes: keep one cache per weight matrix.
// Memory: rebuilds reuse the cache's arrays (a DST update keeps nnz, so W^T keeps its size),
// and while only sync_topology() is used (spmm_transposed's fused path, which reads W's values
// through the permutation) the cache holds no values array at all: 4 bytes per weight less.
// Not thread-safe: one cache must not serve concurrent calls. Throws as transpose_into.
template <Value T, ColumnIndex Index>
class TransposeCache {
public:
  // W^T with W's current values: a rebuild (O(nnz + M + K)) after a topology change, else a
  // value refresh (O(storage)). The reference stays valid until the next call on the cache.
  const PaddedCSR<T, Index>& get(const PaddedCSR<T, Index>& W) {
    if (stale(W))
      rebuild(W);
    else
      refresh_values(W);
    return cached_.matrix;
  }

  // Rebuilds W^T with its values.
  void rebuild(const PaddedCSR<T, Index>& W) { rebuild(W, true); }

  // One gather pass, split over OpenMP threads when the matrix is large (each slot is copied
  // by one thread, so the result is the same for any thread count). Precondition: the cache
  // is current for W's topology (get() or sync_topology() ran since W's last change).
  void refresh_values(const PaddedCSR<T, Index>& W) {
    if (W.structure_only())
      throw ArgumentError("sprig::TransposeCache: W is structure-only (no values); use sync_topology");
    auto& values = detail::PaddedCSRAccess::values(cached_.matrix);
    if (std::ssize(values) != cached_.matrix.storage_size()) {  // structure-only so far
      values.assign(static_cast<std::size_t>(cached_.matrix.storage_size()), T(0));
      detail::PaddedCSRAccess::mark_valued(cached_.matrix);
    }
    T* tvals = values.data();
    const T* vals = W.values().data();
    const SourceSlot* src = cached_.source_slot.data();
    const auto n = std::ssize(cached_.source_slot);
    detail::run_even_split(n, n, [&](std::int64_t s0, std::int64_t s1) { detail::gather_slots(src, vals, tvals, s0, s1); });
    ++refreshes_;
  }

  // Brings only the structure up to date: rebuilds when W's topology changed, otherwise
  // leaves the values as they are, possibly stale or absent (after a structure-only rebuild
  // transposed().matrix.values() is empty until the next get()). For kernels that read W's
  // values through transposed().source_slot themselves (spmm_transposed).
  const Transposed<T, Index>& sync_topology(const PaddedCSR<T, Index>& W) {
    if (stale(W)) rebuild(W, !W.structure_only() && !detail::PaddedCSRAccess::values(cached_.matrix).empty());
    return cached_;
  }

  // Forces a rebuild on the next get() or sync_topology().
  void invalidate() noexcept { valid_ = false; }
  // How many rebuilds and value refreshes the cache has done (tests, benchmarks).
  std::int64_t rebuilds() const noexcept { return rebuilds_; }
  std::int64_t refreshes() const noexcept { return refreshes_; }
  const Transposed<T, Index>& transposed() const noexcept { return cached_; }
  // Bytes owned: the cached W^T and its permutation.
  std::int64_t memory_bytes() const noexcept {
    return cached_.matrix.memory_bytes() +
           static_cast<std::int64_t>(cached_.source_slot.capacity() * sizeof(SourceSlot));
  }

private:
  bool stale(const PaddedCSR<T, Index>& W) const noexcept {
    return !valid_ || key_ != W.topology_key() || cached_.matrix.rows() != W.cols() ||
           cached_.matrix.cols() != W.rows();
  }
  // with_values = false: structure and permutation only (see sync_topology).
  void rebuild(const PaddedCSR<T, Index>& W, bool with_values) {
    valid_ = false;
    transpose_into(W, cached_, 0.0, with_values);
    key_ = W.topology_key();
    valid_ = true;
    ++rebuilds_;
  }

  Transposed<T, Index> cached_;
  TopologyKey key_;
  bool valid_ = false;
  std::int64_t rebuilds_ = 0;
  std::int64_t refreshes_ = 0;
};

// One cache shared by several weight matrices (a model's layers: nn/model_scratch.hpp). It
// rebuilds whenever it is handed another matrix than the last, so W^T costs the memory of the
// largest matrix's alone, for one rebuild per call instead of one per topology change.
template <Value T, ColumnIndex Index>
using SharedTranspose = std::shared_ptr<TransposeCache<T, Index>>;

}  // namespace sprig
