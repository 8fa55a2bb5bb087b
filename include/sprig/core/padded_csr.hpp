// sprig/core/padded_csr.hpp — PaddedCSR<T, Index>: CSR with per-row slack so that the
// sparsity pattern can change in O(1).
//
// Layout (six arrays):
//   values[cap], col_indices[cap]   slot storage; padding slots hold value 0 and column -1
//   row_start[M], row_nnz[M], row_capacity[M]
//   topology_version                bumped by every structural change
// Invariant: row i owns slots [row_start[i], row_start[i] + row_capacity[i]); its live
// slots are the first row_nnz[i] of them, in no particular column order; padding follows.
// Row regions never overlap, but need not be in row order (a row that outgrows its capacity
// is relocated to the end of storage), so a row's length is never derived from its
// neighbour's start. Slots owned by no row ("dead", left behind by relocation) also hold
// 0 / -1; compact() reclaims them.
//
// Every structural operation takes an optional SlotLog* and records there how slots moved,
// so per-slot state (gradients, optimizer moments) can follow its weight.
#pragma once

#include <type_traits>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <span>
#include <utility>
#include <vector>

#include "aligned_allocator.hpp"
#include "block_order.hpp"
#include "concepts.hpp"
#include "config.hpp"
#include "error.hpp"
#include "matrix.hpp"
#include "rng.hpp"
#include "sampling.hpp"
#include "slot_log.hpp"
#include "topology_key.hpp"

namespace sprig {

inline constexpr double kDefaultPaddingRatio = 0.2;

namespace detail {
// Grants kernels that build a PaddedCSR in linear time (transpose) access to the arrays.
struct PaddedCSRAccess;
}  // namespace detail

// A tight CSR export: row_ptr has rows + 1 entries, columns sorted within each row.
template <Value T, ColumnIndex Index>
struct CSRArrays {
  std::int64_t rows = 0;
  std::int64_t cols = 0;
  std::vector<std::int64_t> row_ptr;
  std::vector<Index> col_indices;
  std::vector<T> values;
};

// Bytes owned by a PaddedCSR, by array (allocated capacity, so what the process really holds).
struct PaddedCSRMemory {
  std::int64_t values = 0;
  std::int64_t col_indices = 0;
  std::int64_t row_arrays = 0;  // row_start + row_nnz + row_capacity
  std::int64_t object = 0;      // the PaddedCSR object itself
  std::int64_t total() const noexcept { return values + col_indices + row_arrays + object; }
};

// The contract of every member below, unless its own comment says otherwise:
// - Errors: factories and structural changes validate their arguments at entry and throw
//   ShapeError (a dimension or array length that does not match) or ArgumentError (a row or
//   column out of range, a duplicate, a bad ratio or count), naming the call and the values,
//   before anything changes. The plain accessors (row_start, row_nnz, ...) are noexcept and
//   do not check their index.
// - Complexity: accessors O(1); insert into padding and erase O(1) plus the O(row_nnz)
//   duplicate or column search where a column is named; a row that outgrows its capacity is
//   relocated to the end of storage (amortised doubling); factories and compact() O(nnz +
//   rows) (from_dense O(rows x cols)). Nothing ever materialises a rows x cols matrix except
//   from_dense and to_dense.
// - Threads: const members may run concurrently; a structural change must not run alongside
//   any other call on the same matrix. Results never depend on the OpenMP thread count.
// - Slots: every structural change bumps topology_version and takes an optional SlotLog*
//   that records how slots moved, were freed or were born (slot_log.hpp); group_columns
//   reports its moves through a callback instead.
template <Value T, ColumnIndex Index>
class PaddedCSR {
public:
  using value_type = T;
  using index_type = Index;
  static constexpr Index kPadding = Index(-1);

  // ---- construction -------------------------------------------------------------------

  PaddedCSR() = default;

  // An all-empty rows x cols matrix; each row gets capacity max(1, 0) = 1 slot.
  PaddedCSR(std::int64_t rows, std::int64_t cols, double padding_ratio = kDefaultPaddingRatio) {
    init_shape("PaddedCSR", rows, cols, padding_ratio);
    std::vector<std::int64_t> counts(static_cast<std::size_t>(rows), 0);
    layout_from_counts(counts);
  }

  // Keeps every entry with |x| > threshold (NaN is kept: it is not <= threshold).
  static PaddedCSR from_dense(std::type_identity_t<ConstMatrixView<T>> dense, T threshold = T(0),
                              double padding_ratio = kDefaultPaddingRatio);

  // From CSR arrays: row_ptr (rows + 1, non-decreasing, starting at 0), columns and values
  // (row_ptr[rows] each). Columns may be unsorted within a row (they are sorted);
  // out-of-range or duplicate columns are rejected.
  template <std::integral I>
  static PaddedCSR from_csr(std::int64_t rows, std::int64_t cols, std::span<const std::int64_t> row_ptr,
                            std::span<const I> col_indices, std::span<const T> values,
                            double padding_ratio = kDefaultPaddingRatio);

  // From COO triplets in any order; out-of-range or duplicate (row, col) pairs are rejected.
  template <std::integral I, std::integral J>
  static PaddedCSR from_coo(std::int64_t rows, std::int64_t cols, std::span<const I> row_indices,
                            std::span<const J> col_indices, std::span<const T> values,
                            double padding_ratio = kDefaultPaddingRatio);

  // Exactly nnz_per_row live entries in every row, columns uniform without replacement,
  // values uniform in [-1, 1). Row i uses the counter-based stream (seed, i): the result
  // depends on the seed only. Memory O(nnz + cols), never rows x cols.
  static PaddedCSR random_per_row(std::int64_t rows, std::int64_t cols, std::int64_t nnz_per_row, std::uint64_t seed,
                                  double padding_ratio = kDefaultPaddingRatio);

  // Exactly nnz_total live entries, a uniformly random subset of the rows x cols positions,
  // values uniform in [-1, 1). Memory O(nnz), never rows x cols.
  static PaddedCSR random_total(std::int64_t rows, std::int64_t cols, std::int64_t nnz_total, std::uint64_t seed,
                                double padding_ratio = kDefaultPaddingRatio);

  // random_total with nnz_total = round(density * rows * cols).
  static PaddedCSR random_density(std::int64_t rows, std::int64_t cols, double density, std::uint64_t seed,
                                  double padding_ratio = kDefaultPaddingRatio);

  // ---- shape and accessors ------------------------------------------------------------

  std::int64_t rows() const noexcept { return rows_; }
  std::int64_t cols() const noexcept { return cols_; }
  std::int64_t nnz() const noexcept { return nnz_; }
  double density() const noexcept {
    return rows_ * cols_ == 0 ? 0.0
                              : static_cast<double>(nnz_) / (static_cast<double>(rows_) * static_cast<double>(cols_));
  }
  double padding_ratio() const noexcept { return padding_ratio_; }
  std::uint64_t topology_version() const noexcept { return topology_version_; }
  // This object's current topology, unique in the process (see TopologyKey).
  TopologyKey topology_key() const noexcept { return {instance_.value(), topology_version_}; }
  // Total slots in storage (live + padding + dead): the length of col_indices() and of
  // values() (empty in a structure-only matrix).
  std::int64_t storage_size() const noexcept { return std::ssize(col_indices_); }
  // Slots owned by no row (left behind by relocations); compact() reclaims them.
  std::int64_t dead_slots() const noexcept { return dead_slots_; }

  std::int64_t row_start(std::int64_t i) const noexcept { return row_start_[i]; }
  std::int64_t row_nnz(std::int64_t i) const noexcept { return row_nnz_[i]; }
  std::int64_t row_capacity(std::int64_t i) const noexcept { return row_capacity_[i]; }
  std::span<const std::int64_t> row_starts() const noexcept { return row_start_; }
  std::span<const std::int64_t> row_nnzs() const noexcept { return row_nnz_; }
  std::span<const std::int64_t> row_capacities() const noexcept { return row_capacity_; }

  // Structure only: drops the values for good (values() is empty from now on, and every
  // structural operation keeps it so); the pattern and its SlotLog records are unchanged. For
  // a pattern whose values live elsewhere (BlockPaddedCSR's blocks) or are not needed (a
  // transpose's structure). to_dense() and to_csr() then throw ArgumentError; row(i).values
  // and for_each_live's values read as 0.
  void drop_values() noexcept {
    AlignedVector<T>().swap(values_);
    structure_only_ = true;
  }
  bool structure_only() const noexcept { return structure_only_; }
  // A copy of this pattern holding values[s] at slot s: a stand-in that ranks a pattern by
  // values kept elsewhere (DST drops a BlockPaddedCSR's blocks by the norms put here). The
  // copy's slots are this matrix's, so a SlotLog recorded on it replays on arrays aligned
  // with this one. Throws ShapeError unless values holds storage_size() entries. O(storage).
  PaddedCSR with_values(AlignedVector<T> values) const {
    if (std::ssize(values) != storage_size())
      throw ShapeError(
          detail::message("PaddedCSR::with_values: ", values.size(), " values for ", storage_size(), " slots"));
    PaddedCSR m(*this);
    m.values_ = std::move(values);
    m.structure_only_ = false;
    return m;
  }

  // Values may be changed freely (that is not a topology change); columns may not.
  std::span<T> values() noexcept { return values_; }
  std::span<const T> values() const noexcept { return values_; }
  std::span<const Index> col_indices() const noexcept { return col_indices_; }

  // The live entries of row i: parallel spans of columns and values (unordered columns).
  struct RowRef {
    std::int64_t start;
    std::span<const Index> cols;
    std::span<T> values;
  };
  struct ConstRowRef {
    std::int64_t start;
    std::span<const Index> cols;
    std::span<const T> values;
  };
  RowRef row(std::int64_t i) noexcept {
    const auto s = static_cast<std::size_t>(row_start_[i]), n = static_cast<std::size_t>(row_nnz_[i]);
    return {row_start_[i], std::span<const Index>(col_indices_).subspan(s, n),
            structure_only_ ? std::span<T>() : std::span<T>(values_).subspan(s, n)};
  }
  ConstRowRef row(std::int64_t i) const noexcept {
    const auto s = static_cast<std::size_t>(row_start_[i]), n = static_cast<std::size_t>(row_nnz_[i]);
    return {row_start_[i], std::span<const Index>(col_indices_).subspan(s, n),
            structure_only_ ? std::span<const T>() : std::span<const T>(values_).subspan(s, n)};
  }

  // Calls fn(row, col, value, slot) for every live entry, rows in order.
  template <class Fn>
  void for_each_live(Fn&& fn) const {
    for (std::int64_t i = 0; i < rows_; ++i)
      for (std::int64_t s = row_start_[i], e = s + row_nnz_[i]; s < e; ++s)
        fn(i, static_cast<std::int64_t>(col_indices_[s]), value_at(s), s);
  }

  // The slot holding (row, col), or -1 if not live. O(row_nnz(row)).
  std::int64_t find(std::int64_t row, std::int64_t col) const {
    check_position("PaddedCSR::find", row, col);
    return find_unchecked(row, col);
  }

  // ---- export -------------------------------------------------------------------------

  void to_dense(std::type_identity_t<MatrixView<T>> out) const {
    check_has_values("PaddedCSR::to_dense");
    if (out.rows() != rows_ || out.cols() != cols_)
      throw ShapeError(detail::message("PaddedCSR::to_dense: output is ", out.rows(), "x", out.cols(), ", matrix is ",
                                       rows_, "x", cols_));
    out.fill(T(0));
    for_each_live([&](std::int64_t i, std::int64_t c, T v, std::int64_t) { out(i, c) = v; });
  }
  Matrix<T> to_dense() const {
    Matrix<T> out(rows_, cols_);
    to_dense(out.view());
    return out;
  }

  // Tight CSR with columns sorted within each row.
  CSRArrays<T, Index> to_csr() const;

  // ---- structural changes (each bumps topology_version) ---------------------------------

  // Inserts (row, col) with value; throws if it is already live or out of range.
  // O(row_nnz) for the duplicate check, then as insert_new. Returns the new slot.
  std::int64_t insert(std::int64_t row, std::int64_t col, T value, SlotLog* log = nullptr) {
    check_position("PaddedCSR::insert", row, col);
    if (find_unchecked(row, col) >= 0)
      throw ArgumentError(detail::message("PaddedCSR::insert: (", row, ", ", col, ") is already live"));
    return insert_new(row, col, value, log);
  }

  // Inserts (row, col) that the caller knows is not live (checked only by SPRIG_ASSERT).
  // O(1) into padding; a full row is first relocated to the end of storage with doubled
  // capacity (amortised O(1) per insert). Returns the new slot.
  std::int64_t insert_new(std::int64_t row, std::int64_t col, T value, SlotLog* log = nullptr) {
    SPRIG_ASSERT(row >= 0 && row < rows_ && col >= 0 && col < cols_, "insert_new position");
    SPRIG_ASSERT(find_unchecked(row, col) < 0, "insert_new of a live position");
    if (row_nnz_[row] == row_capacity_[row]) relocate_row(row, std::max<std::int64_t>(1, 2 * row_capacity_[row]), log);
    const std::int64_t s = row_start_[row] + row_nnz_[row]++;
    put(s, static_cast<Index>(col), value);
    ++nnz_;
    ++topology_version_;
    if (log) log->clear(s);
    return s;
  }

  // Removes the live entry at `slot` of `row` in O(1): the row's last live slot moves into
  // the hole. Returns the slot that was freed (the old last slot).
  std::int64_t erase_slot(std::int64_t row, std::int64_t slot, SlotLog* log = nullptr) {
    if (row < 0 || row >= rows_)
      throw ArgumentError(detail::message("PaddedCSR::erase_slot: row ", row, " outside [0, ", rows_, ")"));
    if (slot < row_start_[row] || slot >= row_start_[row] + row_nnz_[row])
      throw ArgumentError(detail::message("PaddedCSR::erase_slot: slot ", slot, " is not live in row ", row, " (live [",
                                          row_start_[row], ", ", row_start_[row] + row_nnz_[row], "))"));
    return erase_slot_unchecked(row, slot, log);
  }

  // Removes (row, col) if live; returns whether it was.
  bool erase(std::int64_t row, std::int64_t col, SlotLog* log = nullptr) {
    check_position("PaddedCSR::erase", row, col);
    const std::int64_t s = find_unchecked(row, col);
    if (s < 0) return false;
    erase_slot_unchecked(row, s, log);
    return true;
  }

  // Removes many live slots at once (any order, each live, no repeats). Deleting in
  // descending slot order keeps every not-yet-deleted slot where it is.
  void erase_slots(std::span<const std::int64_t> slots, SlotLog* log = nullptr) {
    std::vector<std::int64_t> sorted(slots.begin(), slots.end());
    std::sort(sorted.begin(), sorted.end(), std::greater<>());
    if (auto dup = std::adjacent_find(sorted.begin(), sorted.end()); dup != sorted.end())
      throw ArgumentError(detail::message("PaddedCSR::erase_slots: slot ", *dup, " is listed twice"));
    const std::vector<std::int64_t> owner = slot_owners(sorted);
    for (std::size_t q = 0; q < sorted.size(); ++q) erase_slot_unchecked(owner[q], sorted[q], log);
  }

  // Replaces row `row` by the given entries (columns in range, distinct, any order). The
  // row's previous slots are cleared in the log: state of this row starts from zero.
  template <std::integral I>
  void rewrite_row(std::int64_t row, std::span<const I> cols, std::span<const T> values, SlotLog* log = nullptr) {
    const char* fn = "PaddedCSR::rewrite_row";
    if (row < 0 || row >= rows_) throw ArgumentError(detail::message(fn, ": row ", row, " outside [0, ", rows_, ")"));
    if (cols.size() != values.size())
      throw ShapeError(detail::message(fn, ": ", cols.size(), " columns but ", values.size(), " values"));
    std::vector<std::pair<std::int64_t, T>> entries;
    entries.reserve(cols.size());
    for (std::size_t p = 0; p < cols.size(); ++p) entries.emplace_back(static_cast<std::int64_t>(cols[p]), values[p]);
    validate_row(fn, row, entries);  // before any change: a bad call leaves the matrix intact
    const auto n = std::ssize(entries);
    for (std::int64_t s = row_start_[row], e = s + row_nnz_[row]; s < e; ++s) {
      put(s, kPadding, T(0));
      if (log) log->clear(s);
    }
    nnz_ -= row_nnz_[row];
    row_nnz_[row] = 0;
    if (n > row_capacity_[row]) relocate_row(row, std::max(n, 2 * row_capacity_[row]), log);
    for (std::int64_t q = 0; q < n; ++q)
      put(row_start_[row] + q, static_cast<Index>(entries[q].first), entries[q].second);
    row_nnz_[row] = n;
    nnz_ += n;
    ++topology_version_;
  }

  // Reserves room for `slots` storage slots, like std::vector::reserve: rows relocated later
  // (reserve_row(s), an insert into a full row) are appended there without reallocating, so a
  // topology update does not hold old and new arrays at once. The reserved tail is address
  // space until rows are written into it (the OS backs pages on first touch), but memory()
  // counts it, as it counts every capacity. Never shrinks; throws ArgumentError if slots < 0.
  void reserve_storage(std::int64_t slots) {
    if (slots < 0) throw ArgumentError(detail::message("PaddedCSR::reserve_storage: slots ", slots, " < 0"));
    if (!structure_only_) values_.reserve(static_cast<std::size_t>(slots));
    col_indices_.reserve(static_cast<std::size_t>(slots));
  }
  // Slots storage can hold without reallocating (>= storage_size()).
  std::int64_t storage_capacity() const noexcept {
    return static_cast<std::int64_t>(structure_only_ ? col_indices_.capacity()
                                                     : std::min(values_.capacity(), col_indices_.capacity()));
  }

  // Ensures row `row` can hold `capacity` entries without relocating (relocates now if not).
  void reserve_row(std::int64_t row, std::int64_t capacity, SlotLog* log = nullptr) {
    if (row < 0 || row >= rows_)
      throw ArgumentError(detail::message("PaddedCSR::reserve_row: row ", row, " outside [0, ", rows_, ")"));
    capacity = wanted_capacity(row, capacity);
    if (capacity > row_capacity_[row]) {
      relocate_row(row, capacity, log);
      ++topology_version_;
    }
  }

  // Gives each listed row (distinct, valid) room for at least its requested capacity (at most
  // cols), moving the rows that lack it to the end of storage in one go: storage grows once,
  // by exactly their new capacities, and the log holds one resize, so every state array also
  // grows once. (Relocating them one by one, reserve_row, grows by steps of >= 1/8 with slack.)
  // Throws ArgumentError for a row out of range or listed twice, before changing anything.
  void reserve_rows(std::span<const std::pair<std::int64_t, std::int64_t>> row_capacity, SlotLog* log = nullptr);

  // Rebuilds a tight layout in row order with capacity max(1, ceil(row_nnz * (1 + ratio)))
  // per row, dropping dead slots. Live entries keep their order within each row.
  void compact(double padding_ratio, SlotLog* log = nullptr);
  void compact(SlotLog* log = nullptr) { compact(padding_ratio_, log); }

  // Orders each row's live entries by column block, block b = columns [b << shift,
  // (b + 1) << shift), keeping their order within a block (a stable counting sort), in place:
  // the kernels can then work through X one L2-sized block of rows at a time
  // (kernels/panels.hpp: ColumnBlocks). Rows already in block order are left alone. For each
  // row it reorders it calls follow(start, order) with order[j] = the old offset (from start)
  // of the entry now at offset j, so per-slot arrays can be permuted alike
  // (SparseParameter::group_columns). A callback rather than a SlotLog: as moves a cycle
  // would need a spare slot, and as one remap the log would hold 8 bytes per slot. Returns
  // whether anything moved; a structural change (bumps topology_version) only then. O(nnz +
  // rows x blocks), about a tenth of a full sort by column. Throws ArgumentError for a shift
  // outside [0, 62].
  template <class Follow>
  bool group_columns(int shift, Follow&& follow);
  bool group_columns(int shift) {
    return group_columns(shift, [](std::int64_t, std::span<const std::int64_t>) {});
  }

  // ---- checks and accounting ----------------------------------------------------------

  // Throws sprig::Error naming the first violated invariant; returns normally if all hold.
  void check_invariants() const;

  PaddedCSRMemory memory() const noexcept {
    PaddedCSRMemory m;
    m.values = static_cast<std::int64_t>(values_.capacity() * sizeof(T));
    m.col_indices = static_cast<std::int64_t>(col_indices_.capacity() * sizeof(Index));
    m.row_arrays = static_cast<std::int64_t>((row_start_.capacity() + row_nnz_.capacity() + row_capacity_.capacity()) *
                                             sizeof(std::int64_t));
    m.object = sizeof(*this);
    return m;
  }
  std::int64_t memory_bytes() const noexcept { return memory().total(); }

  // Capacity a row of n live entries gets at the given padding ratio.
  static std::int64_t capacity_for(std::int64_t n, double padding_ratio) noexcept {
    return std::max<std::int64_t>(1,
                                  static_cast<std::int64_t>(std::ceil(static_cast<double>(n) * (1.0 + padding_ratio))));
  }

private:
  friend struct detail::PaddedCSRAccess;
  static constexpr std::uint64_t kInitStream = 0x5EED'1417ULL;

  void init_shape(const char* fn, std::int64_t rows, std::int64_t cols, double padding_ratio) {
    if (rows < 0 || cols < 0) throw ShapeError(detail::message(fn, ": negative shape ", rows, "x", cols));
    constexpr auto max_index = static_cast<std::int64_t>(std::numeric_limits<Index>::max());
    if (cols - 1 > max_index)
      throw ArgumentError(detail::message(fn, ": ", cols, " columns cannot be indexed by a ", sizeof(Index) * 8,
                                          "-bit index (at most ", max_index, " + 1)"));
    check_ratio(fn, padding_ratio);
    rows_ = rows;
    cols_ = cols;
    padding_ratio_ = padding_ratio;
  }

  static void check_ratio(const char* fn, double r) {
    if (!(r >= 0.0 && r <= 64.0)) throw ArgumentError(detail::message(fn, ": padding ratio ", r, " outside [0, 64]"));
  }

  void check_position(const char* fn, std::int64_t row, std::int64_t col) const {
    if (row < 0 || row >= rows_ || col < 0 || col >= cols_)
      throw ArgumentError(detail::message(fn, ": (", row, ", ", col, ") outside ", rows_, "x", cols_));
  }

  // Tight padded layout for the given per-row counts; all slots padding. Arrays whose
  // capacity is too small are released before they are refilled (never old and new at once);
  // with_values = false leaves values_ empty: the structure-only state (drop_values()).
  // fill = false: the slots' contents are left to the caller, who writes every one of them.
  void layout_from_counts(const std::vector<std::int64_t>& counts, bool with_values = true, bool fill = true) {
    row_start_.resize(static_cast<std::size_t>(rows_));
    row_nnz_.assign(counts.begin(), counts.end());
    row_capacity_.resize(static_cast<std::size_t>(rows_));
    std::int64_t total = 0;
    for (std::int64_t i = 0; i < rows_; ++i) {
      row_start_[i] = total;
      row_capacity_[i] = capacity_for(counts[i], padding_ratio_);
      total += row_capacity_[i];
    }
    const auto n = static_cast<std::size_t>(total);
    structure_only_ = !with_values;
    if (!with_values)
      AlignedVector<T>().swap(values_);
    else if (fill)
      detail::refill(values_, n, T(0));
    else
      detail::resize_for_overwrite(values_, n);
    if (fill)
      detail::refill(col_indices_, n, kPadding);
    else
      detail::resize_for_overwrite(col_indices_, n);
    dead_slots_ = 0;
  }

  void put(std::int64_t slot, Index col, T value) noexcept {
    col_indices_[slot] = col;
    if (!structure_only_) values_[slot] = value;
  }
  T value_at(std::int64_t slot) const noexcept { return structure_only_ ? T(0) : values_[slot]; }
  void check_has_values(const char* fn) const {
    if (structure_only_) throw ArgumentError(detail::message(fn, ": the matrix is structure-only (no values)"));
  }

  static void validate_row(const char* fn, std::int64_t row, std::vector<std::pair<std::int64_t, T>>& entries,
                           std::int64_t cols) {
    for (const auto& [c, v] : entries)
      if (c < 0 || c >= cols)
        throw ArgumentError(detail::message(fn, ": row ", row, " has column ", c, " outside [0, ", cols, ")"));
    std::sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    for (std::size_t q = 1; q < entries.size(); ++q)
      if (entries[q].first == entries[q - 1].first)
        throw ArgumentError(detail::message(fn, ": row ", row, " has column ", entries[q].first, " twice"));
  }
  void validate_row(const char* fn, std::int64_t row, std::vector<std::pair<std::int64_t, T>>& entries) const {
    validate_row(fn, row, entries, cols_);
  }

  // Validates and sorts a row's entries and writes them into its (already laid out) slots.
  void fill_row_checked(const char* fn, std::int64_t row, std::vector<std::pair<std::int64_t, T>>& entries) {
    validate_row(fn, row, entries);
    std::int64_t s = row_start_[row];
    for (const auto& [c, v] : entries) put(s++, static_cast<Index>(c), v);
  }

  // Floyd's algorithm: k distinct values of [0, n) in O(k) with a reusable marker array;
  // `picked` comes back sorted and `taken` back to all zeros.
  static void sample_distinct(CounterRng& rng, std::int64_t n, std::int64_t k, std::vector<std::uint8_t>& taken,
                              std::vector<std::int64_t>& picked);

  std::int64_t find_unchecked(std::int64_t row, std::int64_t col) const noexcept {
    for (std::int64_t s = row_start_[row], e = s + row_nnz_[row]; s < e; ++s)
      if (col_indices_[s] == col) return s;
    return -1;
  }

  std::int64_t erase_slot_unchecked(std::int64_t row, std::int64_t slot, SlotLog* log) noexcept {
    const std::int64_t last = row_start_[row] + --row_nnz_[row];
    if (slot != last) {
      put(slot, col_indices_[last], value_at(last));
      if (log) log->move(last, slot);
    }
    put(last, kPadding, T(0));
    if (log) log->clear(last);
    --nnz_;
    ++topology_version_;
    return last;
  }

  // For each slot (sorted descending), the row that owns it; throws if one is not live.
  std::vector<std::int64_t> slot_owners(const std::vector<std::int64_t>& sorted_desc) const {
    std::vector<std::int64_t> order(static_cast<std::size_t>(rows_));
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(),
              [&](std::int64_t a, std::int64_t b) { return row_start_[a] < row_start_[b]; });
    std::vector<std::int64_t> owner(sorted_desc.size());
    for (std::size_t q = 0; q < sorted_desc.size(); ++q) {
      const std::int64_t s = sorted_desc[q];
      auto it = std::upper_bound(order.begin(), order.end(), s,
                                 [&](std::int64_t v, std::int64_t r) { return v < row_start_[r]; });
      if (it == order.begin()) throw ArgumentError(detail::message("PaddedCSR::erase_slots: slot ", s, " is not live"));
      const std::int64_t r = *(it - 1);
      if (s >= row_start_[r] + row_nnz_[r])
        throw ArgumentError(detail::message("PaddedCSR::erase_slots: slot ", s, " is not live"));
      owner[q] = r;
    }
    return owner;
  }

  // The capacity a reserve for `row` asks for, capped at cols (a row never needs more slots),
  // though never below what the row already has; relocation happens only if it exceeds that.
  std::int64_t wanted_capacity(std::int64_t row, std::int64_t capacity) const noexcept {
    return std::min<std::int64_t>(capacity, std::max<std::int64_t>(cols_, row_capacity_[row]));
  }

  // Moves row `row` to the end of storage with the given capacity (>= its nnz). Storage
  // grows geometrically by at least 1/8, so relocation costs amortised O(row capacity) and
  // the arrays hold at most 1/8 unused capacity.
  void relocate_row(std::int64_t row, std::int64_t capacity, SlotLog* log, bool log_resize = true) {
    SPRIG_ASSERT(capacity >= row_nnz_[row], "relocate_row capacity");
    const std::int64_t old_start = row_start_[row], old_cap = row_capacity_[row];
    const std::int64_t new_start = std::ssize(col_indices_);
    if (static_cast<std::size_t>(new_start + capacity) > col_indices_.capacity()) {  // grow by >= 1/8, not 2x
      const std::size_t grown = std::max(static_cast<std::size_t>(new_start + capacity),
                                         col_indices_.capacity() + col_indices_.capacity() / 8);
      if (!structure_only_) values_.reserve(grown);
      col_indices_.reserve(grown);
    }
    if (!structure_only_) values_.resize(static_cast<std::size_t>(new_start + capacity), T(0));
    col_indices_.resize(static_cast<std::size_t>(new_start + capacity), kPadding);
    if (log && log_resize) log->resize(new_start + capacity);
    for (std::int64_t q = 0; q < row_nnz_[row]; ++q) {
      put(new_start + q, col_indices_[old_start + q], value_at(old_start + q));
      put(old_start + q, kPadding, T(0));
      if (log) {
        log->move(old_start + q, new_start + q);
        log->clear(old_start + q);
      }
    }
    row_start_[row] = new_start;
    row_capacity_[row] = capacity;
    dead_slots_ += old_cap;
  }

  std::int64_t rows_ = 0;
  std::int64_t cols_ = 0;
  std::int64_t nnz_ = 0;
  std::int64_t dead_slots_ = 0;
  double padding_ratio_ = kDefaultPaddingRatio;
  std::uint64_t topology_version_ = 0;
  bool structure_only_ = false;
  detail::InstanceId instance_;
  AlignedVector<T> values_;
  AlignedVector<Index> col_indices_;
  std::vector<std::int64_t> row_start_;
  std::vector<std::int64_t> row_nnz_;
  std::vector<std::int64_t> row_capacity_;
};

}  // namespace sprig

// Out-of-line members, one concern per file.
#include "padded_csr/convert.hpp"
#include "padded_csr/invariants.hpp"
#include "padded_csr/random.hpp"
#include "padded_csr/relayout.hpp"
