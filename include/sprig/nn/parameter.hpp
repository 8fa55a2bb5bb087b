// sprig/nn/parameter.hpp — trainable parameters: a value, its gradient, and the optimizer's
// per-element state, kept aligned with each other.
//
// SparseParameter<T, Index>: the weight is a PaddedCSR; `grad`, every `state` vector and
// `step_counts` are indexed like weight.values() (one entry per slot, storage_size() entries,
// padding and dead slots included). A structural change of the weight is made with a SlotLog and then replayed
// here with apply(), so per-slot arrays follow their weights:
//
//     SlotLog log;
//     param.matrix.insert_new(r, c, T(0), &log);
//     param.matrix.erase(r2, c2, &log);
//     param.apply(log);          // grad and state moved / cleared / resized like the slots
//
// BlockSparseParameter<T, Index, R, C>: the weight is a BlockPaddedCSR; grad and state hold
// R * C entries per slot (storage_size() * R * C), block s at [s * R * C, (s + 1) * R * C),
// and follow the blocks through apply(log) as above.
//
// DenseParameter<T>: the same for a dense rows x cols tensor (no topology).
//
// Contract for optimizers: the entries of grad/state at non-live slots carry no meaning and
// are never read into a weight; an optimizer updates live slots only, so padding and dead
// slots of the weight stay exactly 0 (the PaddedCSR invariant).
//
// Both are plain aggregates of their arrays: no locking, one writer at a time; every member
// function below runs on the calling thread and is deterministic.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "../core/aligned_allocator.hpp"
#include "../core/block_padded_csr.hpp"
#include "../core/concepts.hpp"
#include "../core/error.hpp"
#include "../core/matrix.hpp"
#include "../core/padded_csr.hpp"
#include "../core/slot_log.hpp"

namespace sprig {

template <Value T, ColumnIndex Index>
struct SparseParameter {
  using value_type = T;
  using index_type = Index;

  PaddedCSR<T, Index> matrix;
  AlignedVector<T> grad;                // size matrix.storage_size()
  std::vector<AlignedVector<T>> state;  // each empty or size matrix.storage_size()
  // Per-slot step counts of an optimizer that keeps them (AdamW's per-slot bias correction,
  // where its counts fit 16 bits): empty or size matrix.storage_size(). Half the bytes of a
  // state vector; it follows the slots as state does.
  AlignedVector<std::uint16_t> step_counts;
  bool decay = true;  // whether optimizers apply weight decay

  SparseParameter() = default;
  // Takes the weight; grad zero at every slot, no state yet (an optimizer creates it).
  explicit SparseParameter(PaddedCSR<T, Index> w)
      : matrix(std::move(w)), grad(static_cast<std::size_t>(matrix.storage_size()), T(0)) {}

  // The growth room dynamic sparse training asks for (see reserve_growth).
  static constexpr double kGrowthReserve = 0.125;

  // Room for topology growth: reserves `fraction` of storage beyond storage_size() in the
  // weight's arrays, grad and every state array (state an optimizer creates later takes
  // grad's capacity). Rows that a topology update relocates then append in place instead of
  // reallocating four arrays, which would hold old and new at once (1/8 lowers the peak
  // resident memory of a DST step; docs/design.md, "Growth reserve").
  // Untouched, the reserve is address space only, but weight_bytes() and state_bytes() count
  // it (they count capacities). Call once the model is built (it reallocates: O(storage));
  // never shrinks. Throws ArgumentError unless 0 <= fraction <= 64.
  void reserve_growth(double fraction = kGrowthReserve) {
    if (!(fraction >= 0.0 && fraction <= 64.0))
      throw ArgumentError(detail::message("SparseParameter::reserve_growth: fraction ", fraction, " outside [0, 64]"));
    const std::int64_t n = matrix.storage_size();
    const auto slots = static_cast<std::size_t>(n + static_cast<std::int64_t>(static_cast<double>(n) * fraction));
    matrix.reserve_storage(static_cast<std::int64_t>(slots));
    grad.reserve(slots);
    for (auto& s : state)
      if (!s.empty()) s.reserve(slots);
    if (!step_counts.empty()) step_counts.reserve(slots);
  }

  // Replays the slot moves of a structural change of `weight` on grad and every state
  // vector: moved weights keep their entries, freed and newborn slots read 0. Precondition:
  // the log holds exactly the changes made to `weight` since grad and state were last aligned
  // with it, in order (replaying one twice, or skipping one, misaligns them: check_aligned
  // catches a size mismatch, not a wrong order). O(events + slots resized or remapped) per array.
  void apply(const SlotLog& log) {
    log.apply(grad);
    // An empty state vector (not yet created) stays empty; the optimizer creates it at
    // the current storage size on first use.
    for (auto& s : state)
      if (!s.empty()) log.apply(s);
    if (!step_counts.empty()) log.apply(step_counts);
    SPRIG_ASSERT(std::ssize(grad) == matrix.storage_size(), "SparseParameter::apply left grad misaligned");
  }

  // Throws ShapeError, naming fn, if grad or a non-empty state vector has not one entry per
  // slot of the weight (a structural change was made without replaying its SlotLog). O(state
  // arrays).
  void check_aligned(const char* fn) const {
    const std::int64_t n = matrix.storage_size();
    if (std::ssize(grad) != n)
      throw ShapeError(detail::message(fn, ": gradient has ", grad.size(), " entries but the weight has ", n,
                                       " slots (was a structural change made without SparseParameter::apply?)"));
    for (std::size_t k = 0; k < state.size(); ++k)
      if (!state[k].empty() && std::ssize(state[k]) != n)
        throw ShapeError(detail::message(fn, ": optimizer state ", k, " has ", state[k].size(),
                                         " entries but the weight has ", n, " slots"));
    if (!step_counts.empty() && std::ssize(step_counts) != n)
      throw ShapeError(
          detail::message(fn, ": step counts have ", step_counts.size(), " entries but the weight has ", n, " slots"));
  }

  // Orders each row of the weight by column block (PaddedCSR::group_columns), grad and every
  // state vector permuted with their weights. With a log, also appends the permutation to it
  // as one SlotLog::remap over all storage_size() slots (8 bytes a slot, only when something
  // moved), for per-slot arrays kept outside this parameter: replay it on those only, grad
  // and state have moved already. Returns whether anything moved. O(nnz + rows x blocks).
  // Throws ShapeError if grad or state is misaligned, ArgumentError for a shift outside [0, 62].
  bool group_columns(int shift, SlotLog* log = nullptr) {
    check_aligned("SparseParameter::group_columns");
    AlignedVector<T> scratch;
    AlignedVector<std::uint16_t> count_scratch;
    std::vector<std::int64_t> sources;  // with a log: new slot s takes old slot sources[s]
    const bool moved = matrix.group_columns(shift, [&](std::int64_t start, std::span<const std::int64_t> order) {
      detail::permute_range(grad, start, order, scratch);
      for (auto& st : state)
        if (!st.empty()) detail::permute_range(st, start, order, scratch);
      if (!step_counts.empty()) detail::permute_range(step_counts, start, order, count_scratch);
      if (log) {
        if (sources.empty()) {
          sources.resize(static_cast<std::size_t>(matrix.storage_size()));
          for (std::size_t k = 0; k < sources.size(); ++k) sources[k] = static_cast<std::int64_t>(k);
        }
        for (std::size_t j = 0; j < order.size(); ++j) sources[static_cast<std::size_t>(start) + j] = start + order[j];
      }
    });
    if (log && moved) log->remap(std::move(sources));
    return moved;
  }

  // grad = 0 at every slot, O(storage).
  void zero_grad() { std::fill(grad.begin(), grad.end(), T(0)); }
  // Live weights (weight.nnz()), O(1).
  std::int64_t live_count() const noexcept { return matrix.nnz(); }
  // Bytes owned by the weight (all PaddedCSR arrays), not counting grad and state.
  std::int64_t weight_bytes() const noexcept { return matrix.memory_bytes(); }
  // Bytes of grad and optimizer state.
  std::int64_t state_bytes() const noexcept {
    std::int64_t b = static_cast<std::int64_t>(grad.capacity() * sizeof(T));
    for (const auto& s : state) b += static_cast<std::int64_t>(s.capacity() * sizeof(T));
    return b + static_cast<std::int64_t>(step_counts.capacity() * sizeof(std::uint16_t));
  }
};

template <Value T, ColumnIndex Index, int R, int C>
struct BlockSparseParameter {
  using value_type = T;
  using index_type = Index;
  static constexpr std::int64_t kBlockSize = std::int64_t{R} * C;

  BlockPaddedCSR<T, Index, R, C> matrix;
  AlignedVector<T> grad;                     // size matrix.storage_size() * R * C
  std::vector<AlignedVector<T>> state;       // each empty or the size of grad
  AlignedVector<std::uint16_t> step_counts;  // as SparseParameter's: empty or the size of grad
  bool decay = true;

  BlockSparseParameter() = default;
  explicit BlockSparseParameter(BlockPaddedCSR<T, Index, R, C> w)
      : matrix(std::move(w)), grad(static_cast<std::size_t>(matrix.storage_size() * kBlockSize), T(0)) {}

  // Entries of grad and of each state array: R * C per slot.
  std::int64_t entry_count() const noexcept { return matrix.storage_size() * kBlockSize; }

  // As SparseParameter::reserve_growth, in slots (each of R * C entries).
  void reserve_growth(double fraction = SparseParameter<T, Index>::kGrowthReserve) {
    if (!(fraction >= 0.0 && fraction <= 64.0))
      throw ArgumentError(
          detail::message("BlockSparseParameter::reserve_growth: fraction ", fraction, " outside [0, 64]"));
    const std::int64_t n = matrix.storage_size();
    const std::int64_t slots = n + static_cast<std::int64_t>(static_cast<double>(n) * fraction);
    matrix.reserve_storage(slots);
    const auto entries = static_cast<std::size_t>(slots * kBlockSize);
    grad.reserve(entries);
    for (auto& s : state)
      if (!s.empty()) s.reserve(entries);
    if (!step_counts.empty()) step_counts.reserve(entries);
  }

  // Replays a structural change of `weight` (its SlotLog) on grad and every state array, R * C
  // entries per slot; preconditions as SparseParameter::apply.
  void apply(const SlotLog& log) {
    log.apply(grad, kBlockSize);
    for (auto& s : state)
      if (!s.empty()) log.apply(s, kBlockSize);
    if (!step_counts.empty()) log.apply(step_counts, kBlockSize);
    SPRIG_ASSERT(std::ssize(grad) == entry_count(), "BlockSparseParameter::apply left grad misaligned");
  }

  // Throws ShapeError, naming fn, unless grad and each non-empty state array hold
  // entry_count() entries.
  void check_aligned(const char* fn) const {
    const std::int64_t n = entry_count();
    if (std::ssize(grad) != n)
      throw ShapeError(detail::message(fn, ": gradient has ", grad.size(), " entries but the weight has ",
                                       matrix.storage_size(), " slots of ", kBlockSize, " (was a structural change ",
                                       "made without BlockSparseParameter::apply?)"));
    for (std::size_t k = 0; k < state.size(); ++k)
      if (!state[k].empty() && std::ssize(state[k]) != n)
        throw ShapeError(
            detail::message(fn, ": optimizer state ", k, " has ", state[k].size(), " entries, expected ", n));
    if (!step_counts.empty() && std::ssize(step_counts) != n)
      throw ShapeError(detail::message(fn, ": step counts have ", step_counts.size(), " entries, expected ", n));
  }

  void zero_grad() { std::fill(grad.begin(), grad.end(), T(0)); }
  // Stored weights: live blocks x R x C (an edge block's out-of-matrix entries included).
  std::int64_t live_count() const noexcept { return matrix.nnz_blocks() * kBlockSize; }
  std::int64_t weight_bytes() const noexcept { return matrix.memory_bytes(); }
  std::int64_t state_bytes() const noexcept {
    std::int64_t b = static_cast<std::int64_t>(grad.capacity() * sizeof(T));
    for (const auto& s : state) b += static_cast<std::int64_t>(s.capacity() * sizeof(T));
    return b + static_cast<std::int64_t>(step_counts.capacity() * sizeof(std::uint16_t));
  }
};

// A dense rows x cols parameter stored contiguously (row-major, stride == cols).
template <Value T>
struct DenseParameter {
  using value_type = T;

  AlignedVector<T> value;
  AlignedVector<T> grad;
  std::vector<AlignedVector<T>> state;  // each empty or size rows * cols
  std::int64_t rows = 0;
  std::int64_t cols = 0;
  bool decay = true;  // whether optimizers apply weight decay (biases: false)

  DenseParameter() = default;
  // r x c values set to init, gradient 0, no state. Throws ShapeError for a negative shape.
  DenseParameter(std::int64_t r, std::int64_t c, T init = T(0)) : rows(r), cols(c) {
    if (r < 0 || c < 0) throw ShapeError(detail::message("DenseParameter: negative shape ", r, "x", c));
    value.assign(static_cast<std::size_t>(r * c), init);
    grad.assign(static_cast<std::size_t>(r * c), T(0));
  }

  // rows * cols, and the values and gradient as row-major views (O(1)).
  std::int64_t size() const noexcept { return rows * cols; }
  MatrixView<T> view() noexcept { return {value.data(), rows, cols}; }
  ConstMatrixView<T> view() const noexcept { return {value.data(), rows, cols}; }
  MatrixView<T> grad_view() noexcept { return {grad.data(), rows, cols}; }
  ConstMatrixView<T> grad_view() const noexcept { return {grad.data(), rows, cols}; }

  // Throws ShapeError, naming fn, unless value, grad and every non-empty state vector hold
  // rows * cols entries.
  void check_aligned(const char* fn) const {
    if (std::ssize(value) != size() || std::ssize(grad) != size())
      throw ShapeError(detail::message(fn, ": parameter ", rows, "x", cols, " has ", value.size(), " values and ",
                                       grad.size(), " gradient entries"));
    for (std::size_t k = 0; k < state.size(); ++k)
      if (!state[k].empty() && std::ssize(state[k]) != size())
        throw ShapeError(
            detail::message(fn, ": optimizer state ", k, " has ", state[k].size(), " entries, expected ", size()));
  }

  void zero_grad() { std::fill(grad.begin(), grad.end(), T(0)); }
  // Bytes of the values (capacity), and of grad and state.
  std::int64_t weight_bytes() const noexcept { return static_cast<std::int64_t>(value.capacity() * sizeof(T)); }
  std::int64_t state_bytes() const noexcept {
    std::int64_t b = static_cast<std::int64_t>(grad.capacity() * sizeof(T));
    for (const auto& s : state) b += static_cast<std::int64_t>(s.capacity() * sizeof(T));
    return b;
  }
};

}  // namespace sprig
