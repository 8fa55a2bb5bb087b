// sprig/core/block_padded_csr.hpp — BlockPaddedCSR<T, Index, R, C>: a Padded-CSR of dense
// R x C blocks, so that one column index and one row load serve R (or C) multiply-adds.
//
// Layout: a structure-only PaddedCSR over the block grid (pattern(): ceil(M / R) block rows,
// ceil(K / C) block columns; its slots, padding, relocation and compaction are exactly
// PaddedCSR's) and one value array of R * C values per slot, slot s's block at
// values()[s * R * C ...) in row-major order: element (r, c) is W(bi * R + r, bj * C + c).
// Padding and dead slots hold zero blocks, and the entries of an edge block that fall outside
// the M x K matrix are zero (shapes need not be multiples of R or C).
//
// Every structural operation takes an optional SlotLog* and records there how slots moved;
// per-slot state of R * C values per block follows with log.apply(state, R * C).
#pragma once

#include <type_traits>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <utility>
#include <vector>

#include "aligned_allocator.hpp"
#include "concepts.hpp"
#include "error.hpp"
#include "matrix.hpp"
#include "padded_csr.hpp"
#include "rng.hpp"
#include "slot_log.hpp"
#include "topology_key.hpp"

namespace sprig {

// Block shapes sprig instantiates: at least 1 x 1, at most 256 values per block.
template <int R, int C>
concept BlockShape = R >= 1 && C >= 1 && R* C <= 256;

// How many blocks of `block` rows (or columns) cover n of them: ceil(n / block), the last
// possibly partial; the grid extent of an n-row (n-column) matrix. Precondition block >= 1;
// a negative n is returned unchanged, for the caller's shape check to report.
constexpr std::int64_t blocks_covering(std::int64_t n, std::int64_t block) noexcept {
  return n < 0 ? n : (n + block - 1) / block;
}

template <Value T, ColumnIndex Index, int R, int C>
  requires BlockShape<R, C>
class BlockPaddedCSR {
public:
  using value_type = T;
  using index_type = Index;
  static constexpr int kBlockRows = R;
  static constexpr int kBlockCols = C;
  static constexpr std::int64_t kBlockSize = std::int64_t{R} * C;

  BlockPaddedCSR() { pattern_.drop_values(); }

  // An all-empty rows x cols matrix (each block row gets capacity 1, as in PaddedCSR).
  // Throws ShapeError for a negative shape, ArgumentError if Index cannot number the block
  // columns or for a padding ratio outside [0, 64].
  BlockPaddedCSR(std::int64_t rows, std::int64_t cols, double padding_ratio = kDefaultPaddingRatio) {
    set_shape("BlockPaddedCSR", rows, cols);
    pattern_ = PaddedCSR<T, Index>(blocks_covering(rows, R), blocks_covering(cols, C), padding_ratio);
    pattern_.drop_values();
    values_.assign(static_cast<std::size_t>(pattern_.storage_size() * kBlockSize), T(0));
  }

  // The blocks of `dense` that hold any nonzero (NaN counts as nonzero), tight layout with
  // the given padding. O(M * K).
  static BlockPaddedCSR from_dense(std::type_identity_t<ConstMatrixView<T>> dense,
                                   double padding_ratio = kDefaultPaddingRatio) {
    std::vector<std::int64_t> bi, bj;
    for (std::int64_t i = 0; i < blocks_covering(dense.rows(), R); ++i)
      for (std::int64_t j = 0; j < blocks_covering(dense.cols(), C); ++j) {
        bool live = false;
        for (std::int64_t r = i * R; r < std::min(dense.rows(), (i + 1) * R) && !live; ++r)
          for (std::int64_t c = j * C; c < std::min(dense.cols(), (j + 1) * C) && !live; ++c)
            live = dense(r, c) != T(0) || dense(r, c) != dense(r, c);
        if (live) {
          bi.push_back(i);
          bj.push_back(j);
        }
      }
    BlockPaddedCSR m = from_positions("BlockPaddedCSR::from_dense", dense.rows(), dense.cols(), bi, bj, padding_ratio);
    m.for_each_block([&](std::int64_t i, std::int64_t j, std::int64_t s, const T*) {
      T* b = m.block(s);
      for (std::int64_t r = 0; r < R && i * R + r < dense.rows(); ++r)
        for (std::int64_t c = 0; c < C && j * C + c < dense.cols(); ++c) b[r * C + c] = dense(i * R + r, j * C + c);
    });
    return m;
  }

  // The blocks that hold any live entry of W (live zeros included), so that to_padded_csr()
  // gives back a superset of W's entries with the same values. O(nnz(W) + blocks).
  static BlockPaddedCSR from_padded_csr(const PaddedCSR<T, Index>& W, double padding_ratio = kDefaultPaddingRatio) {
    if (W.structure_only()) throw ArgumentError("BlockPaddedCSR::from_padded_csr: W is structure-only (no values)");
    const std::int64_t bc = blocks_covering(W.cols(), C);
    std::vector<std::int64_t> bi, bj, mark(static_cast<std::size_t>(bc), -1);
    for (std::int64_t i = 0; i < blocks_covering(W.rows(), R); ++i) {
      for (std::int64_t r = i * R; r < std::min(W.rows(), (i + 1) * R); ++r)
        for (Index c : W.row(r).cols) {
          const std::int64_t j = static_cast<std::int64_t>(c) / C;
          if (mark[j] == i) continue;
          mark[j] = i;
          bi.push_back(i);
          bj.push_back(j);
        }
    }
    BlockPaddedCSR m = from_positions("BlockPaddedCSR::from_padded_csr", W.rows(), W.cols(), bi, bj, padding_ratio);
    W.for_each_live([&](std::int64_t r, std::int64_t c, T v, std::int64_t) {
      m.block(m.pattern_.find(r / R, c / C))[(r % R) * C + c % C] = v;
    });
    return m;
  }

  // Exactly nnz_blocks live blocks, a uniformly random subset of the block grid (the pattern
  // of PaddedCSR::random_total over the grid, same seed), values uniform in [-1, 1) from the
  // counter-based stream (seed, slot order), out-of-matrix entries zero. Throws ArgumentError
  // if nnz_blocks is outside [0, block_rows * block_cols].
  static BlockPaddedCSR random(std::int64_t rows, std::int64_t cols, std::int64_t nnz_blocks, std::uint64_t seed,
                               double padding_ratio = kDefaultPaddingRatio) {
    BlockPaddedCSR m;
    m.set_shape("BlockPaddedCSR::random", rows, cols);
    m.pattern_ = PaddedCSR<T, Index>::random_total(blocks_covering(rows, R), blocks_covering(cols, C), nnz_blocks, seed,
                                                   padding_ratio);
    m.fill_random_values(seed);
    return m;
  }
  // Exactly blocks_per_row live blocks in every block row (the pattern of
  // PaddedCSR::random_per_row over the grid, same seed), values as random()'s. Throws
  // ArgumentError if blocks_per_row is outside [0, block_cols].
  static BlockPaddedCSR random_per_row(std::int64_t rows, std::int64_t cols, std::int64_t blocks_per_row,
                                       std::uint64_t seed, double padding_ratio = kDefaultPaddingRatio) {
    BlockPaddedCSR m;
    m.set_shape("BlockPaddedCSR::random_per_row", rows, cols);
    m.pattern_ = PaddedCSR<T, Index>::random_per_row(blocks_covering(rows, R), blocks_covering(cols, C), blocks_per_row,
                                                     seed, padding_ratio);
    m.fill_random_values(seed);
    return m;
  }
  // random() at round(density * block_rows * block_cols) blocks; density in [0, 1].
  static BlockPaddedCSR random_density(std::int64_t rows, std::int64_t cols, double density, std::uint64_t seed,
                                       double padding_ratio = kDefaultPaddingRatio) {
    if (!(density >= 0.0 && density <= 1.0))
      throw ArgumentError(detail::message("BlockPaddedCSR::random_density: density ", density, " outside [0, 1]"));
    const double blocks = static_cast<double>(std::max<std::int64_t>(blocks_covering(rows, R), 0)) *
                          static_cast<double>(std::max<std::int64_t>(blocks_covering(cols, C), 0));
    return random(rows, cols, std::llround(density * blocks), seed, padding_ratio);
  }

  // A matrix from its parts, as a loader restores one: the block pattern (ceil(rows / R) x
  // ceil(cols / C); its values, if any, are dropped) and storage_size() * R * C block values.
  // Throws ShapeError for a pattern or value count that does not fit the shape, and
  // sprig::Error for parts that break an invariant (check_invariants), nothing kept then.
  static BlockPaddedCSR from_parts(std::int64_t rows, std::int64_t cols, PaddedCSR<T, Index> pattern,
                                   AlignedVector<T> values) {
    const char* fn = "BlockPaddedCSR::from_parts";
    BlockPaddedCSR m;
    m.set_shape(fn, rows, cols);
    if (pattern.rows() != blocks_covering(rows, R) || pattern.cols() != blocks_covering(cols, C))
      throw ShapeError(detail::message(fn, ": a ", pattern.rows(), "x", pattern.cols(), " block pattern for a ", rows,
                                       "x", cols, " matrix in ", R, "x", C, " blocks (needs ", blocks_covering(rows, R),
                                       "x", blocks_covering(cols, C), ")"));
    if (std::ssize(values) != pattern.storage_size() * kBlockSize)
      throw ShapeError(
          detail::message(fn, ": ", values.size(), " values for ", pattern.storage_size(), " slots of ", kBlockSize));
    pattern.drop_values();
    m.pattern_ = std::move(pattern);
    m.values_ = std::move(values);
    m.check_invariants();
    return m;
  }

  // ---- shape and accessors ------------------------------------------------------------

  std::int64_t rows() const noexcept { return rows_; }
  std::int64_t cols() const noexcept { return cols_; }
  std::int64_t block_rows() const noexcept { return pattern_.rows(); }
  std::int64_t block_cols() const noexcept { return pattern_.cols(); }
  std::int64_t nnz_blocks() const noexcept { return pattern_.nnz(); }
  // Live blocks over all blocks of the grid.
  double block_density() const noexcept { return pattern_.density(); }
  double padding_ratio() const noexcept { return pattern_.padding_ratio(); }
  std::int64_t storage_size() const noexcept { return pattern_.storage_size(); }
  std::int64_t dead_slots() const noexcept { return pattern_.dead_slots(); }
  std::uint64_t topology_version() const noexcept { return pattern_.topology_version(); }
  TopologyKey topology_key() const noexcept { return pattern_.topology_key(); }

  // The block pattern (structure-only: its values() is empty): row_start, row_nnz,
  // col_indices (block columns) per block row, as any PaddedCSR.
  const PaddedCSR<T, Index>& pattern() const noexcept { return pattern_; }

  // storage_size() * R * C values; may be changed freely (not a topology change), except that
  // the entries outside the matrix must stay zero (check_invariants).
  std::span<T> values() noexcept { return values_; }
  std::span<const T> values() const noexcept { return values_; }
  T* block(std::int64_t slot) noexcept { return values_.data() + slot * kBlockSize; }
  const T* block(std::int64_t slot) const noexcept { return values_.data() + slot * kBlockSize; }

  // Calls fn(block_row, block_col, slot, const T* block) for every live block, rows in order.
  template <class Fn>
  void for_each_block(Fn&& fn) const {
    const auto cols = pattern_.col_indices();
    for (std::int64_t i = 0; i < block_rows(); ++i)
      for (std::int64_t s = pattern_.row_start(i), e = s + pattern_.row_nnz(i); s < e; ++s)
        fn(i, static_cast<std::int64_t>(cols[s]), s, block(s));
  }

  // The slot of block (bi, bj), or -1 if not live. O(row_nnz(bi)).
  std::int64_t find_block(std::int64_t bi, std::int64_t bj) const {
    check_block("BlockPaddedCSR::find_block", bi, bj);
    return pattern_.find(bi, bj);
  }

  // ---- export -------------------------------------------------------------------------

  void to_dense(std::type_identity_t<MatrixView<T>> out) const {
    if (out.rows() != rows_ || out.cols() != cols_)
      throw ShapeError(detail::message("BlockPaddedCSR::to_dense: output is ", out.rows(), "x", out.cols(),
                                       ", matrix is ", rows_, "x", cols_));
    out.fill(T(0));
    for_each_block([&](std::int64_t i, std::int64_t j, std::int64_t, const T* b) {
      for (std::int64_t r = 0; r < R && i * R + r < rows_; ++r)
        for (std::int64_t c = 0; c < C && j * C + c < cols_; ++c) out(i * R + r, j * C + c) = b[r * C + c];
    });
  }
  Matrix<T> to_dense() const {
    Matrix<T> out(rows_, cols_);
    to_dense(out.view());
    return out;
  }

  // Every in-matrix entry of every live block as a live element entry (zeros included).
  PaddedCSR<T, Index> to_padded_csr(double padding_ratio = kDefaultPaddingRatio) const {
    std::vector<std::int64_t> ri, ci;
    std::vector<T> v;
    for_each_block([&](std::int64_t i, std::int64_t j, std::int64_t, const T* b) {
      for (std::int64_t r = 0; r < R && i * R + r < rows_; ++r)
        for (std::int64_t c = 0; c < C && j * C + c < cols_; ++c) {
          ri.push_back(i * R + r);
          ci.push_back(j * C + c);
          v.push_back(b[r * C + c]);
        }
    });
    return PaddedCSR<T, Index>::from_coo(rows_, cols_, std::span<const std::int64_t>(ri),
                                         std::span<const std::int64_t>(ci), std::span<const T>(v), padding_ratio);
  }

  // ---- structural changes (each bumps topology_version) ---------------------------------

  // Inserts block (bi, bj) with the given R * C row-major values; throws ArgumentError if it
  // is out of range or already live, or if an entry outside the matrix is nonzero, and
  // ShapeError for a wrong value count (nothing changes then). O(1) amortised plus the
  // duplicate check (O(row_nnz)). Returns the new slot.
  std::int64_t insert_block(std::int64_t bi, std::int64_t bj, std::span<const T> values, SlotLog* log = nullptr) {
    const char* fn = "BlockPaddedCSR::insert_block";
    check_block(fn, bi, bj);
    if (std::ssize(values) != kBlockSize)
      throw ShapeError(detail::message(fn, ": ", values.size(), " values for a ", R, "x", C, " block"));
    for (std::int64_t r = 0; r < R; ++r)
      for (std::int64_t c = 0; c < C; ++c)
        if ((bi * R + r >= rows_ || bj * C + c >= cols_) && values[r * C + c] != T(0))
          throw ArgumentError(detail::message(fn, ": block (", bi, ", ", bj, ") entry (", r, ", ", c,
                                              ") lies outside the ", rows_, "x", cols_, " matrix but is ",
                                              values[r * C + c], " (must be 0)"));
    if (pattern_.find(bi, bj) >= 0)
      throw ArgumentError(detail::message(fn, ": block (", bi, ", ", bj, ") is already live"));
    const std::int64_t s = logged(log, [&](SlotLog* l) { return pattern_.insert_new(bi, bj, T(0), l); });
    std::copy(values.begin(), values.end(), block(s));
    return s;
  }

  // Removes block (bi, bj) if live (the row's last block moves into the hole); returns
  // whether it was. Throws ArgumentError for a position outside the grid.
  bool erase_block(std::int64_t bi, std::int64_t bj, SlotLog* log = nullptr) {
    check_block("BlockPaddedCSR::erase_block", bi, bj);
    return logged(log, [&](SlotLog* l) { return pattern_.erase(bi, bj, l); });
  }

  // Removes many live blocks by slot at once (as PaddedCSR::erase_slots).
  void erase_slots(std::span<const std::int64_t> slots, SlotLog* log = nullptr) {
    logged(log, [&](SlotLog* l) {
      pattern_.erase_slots(slots, l);
      return 0;
    });
  }

  // As PaddedCSR: room for `slots` slots (values reserved alike), a row's capacity, several
  // rows' capacities at once, and a tight rebuild.
  void reserve_storage(std::int64_t slots) {
    pattern_.reserve_storage(slots);
    values_.reserve(static_cast<std::size_t>(std::max<std::int64_t>(slots, 0) * kBlockSize));
  }
  void reserve_row(std::int64_t bi, std::int64_t capacity, SlotLog* log = nullptr) {
    logged(log, [&](SlotLog* l) {
      pattern_.reserve_row(bi, capacity, l);
      return 0;
    });
  }
  void reserve_rows(std::span<const std::pair<std::int64_t, std::int64_t>> row_capacity, SlotLog* log = nullptr) {
    logged(log, [&](SlotLog* l) {
      pattern_.reserve_rows(row_capacity, l);
      return 0;
    });
  }
  void compact(double padding_ratio, SlotLog* log = nullptr) {
    logged(log, [&](SlotLog* l) {
      pattern_.compact(padding_ratio, l);
      return 0;
    });
  }
  void compact(SlotLog* log = nullptr) { compact(pattern_.padding_ratio(), log); }

  // ---- topology changes made on a stand-in (dynamic sparse training) --------------------
  // A DST update ranks and changes a PaddedCSR over the block grid (block_norms()), then
  // replays what it recorded here: apply_slot_moves for every chunk of the stand-in's SlotLog,
  // then adopt_pattern once. Between the two the matrix is not consistent.

  // The block pattern with slot s holding the Frobenius norm of block s (0 for padding and
  // dead slots; NaN for a block holding one): what drop-by-magnitude ranks. O(storage x R x C).
  PaddedCSR<T, Index> block_norms() const {
    AlignedVector<T> norms(static_cast<std::size_t>(storage_size()), T(0));
    for_each_block([&](std::int64_t, std::int64_t, std::int64_t s, const T* b) {
      T sum = T(0);
      for (std::int64_t q = 0; q < kBlockSize; ++q) sum += b[q] * b[q];
      norms[static_cast<std::size_t>(s)] = std::sqrt(sum);
    });
    return pattern_.with_values(std::move(norms));
  }
  // Replays slot changes recorded on the stand-in on the blocks, R x C values per slot: a
  // moved block keeps its values, a freed or born one is zero.
  void apply_slot_moves(const SlotLog& log) { log.apply(values_, kBlockSize); }
  // Takes the stand-in's pattern after the replayed changes (its values are not kept) and a
  // new topology_key(). Throws ShapeError, nothing changed, unless its grid is this one's and
  // its storage matches the values replayed. O(storage).
  void adopt_pattern(const PaddedCSR<T, Index>& changed) {
    if (changed.rows() != block_rows() || changed.cols() != block_cols() ||
        changed.storage_size() * kBlockSize != std::ssize(values_))
      throw ShapeError(detail::message("BlockPaddedCSR::adopt_pattern: a ", changed.rows(), "x", changed.cols(),
                                       " pattern of ", changed.storage_size(), " slots for a ", block_rows(), "x",
                                       block_cols(), " block grid holding ", values_.size() / kBlockSize,
                                       " slots of values (replay every change with apply_slot_moves first)"));
    pattern_ = changed;
    pattern_.drop_values();
  }

  // ---- checks and accounting ----------------------------------------------------------

  // Throws sprig::Error naming the first violated invariant: the pattern's, the value array's
  // size, zero blocks in padding and dead slots, zero entries outside the matrix.
  void check_invariants() const {
    auto fail = [](auto&&... parts) { throw Error(detail::message("BlockPaddedCSR invariant violated: ", parts...)); };
    pattern_.check_invariants();
    if (!pattern_.structure_only()) fail("the pattern holds values");
    if (pattern_.rows() != blocks_covering(rows_, R) || pattern_.cols() != blocks_covering(cols_, C))
      fail("pattern is ", pattern_.rows(), "x", pattern_.cols(), " blocks for a ", rows_, "x", cols_, " matrix");
    if (std::ssize(values_) != storage_size() * kBlockSize)
      fail("values has ", values_.size(), " entries for ", storage_size(), " slots of ", kBlockSize);
    std::vector<std::uint8_t> live(static_cast<std::size_t>(storage_size()), 0);
    for_each_block([&](std::int64_t i, std::int64_t j, std::int64_t s, const T* b) {
      live[static_cast<std::size_t>(s)] = 1;
      for (std::int64_t r = 0; r < R; ++r)
        for (std::int64_t c = 0; c < C; ++c)
          if ((i * R + r >= rows_ || j * C + c >= cols_) && b[r * C + c] != T(0))
            fail("block (", i, ", ", j, ") entry (", r, ", ", c, ") outside the matrix holds ", b[r * C + c]);
    });
    for (std::int64_t s = 0; s < storage_size(); ++s)
      if (!live[static_cast<std::size_t>(s)])
        for (std::int64_t q = 0; q < kBlockSize; ++q)
          if (block(s)[q] != T(0)) fail("non-live slot ", s, " holds value ", block(s)[q], " at ", q);
  }

  // Bytes held (capacities): values R * C per slot, one index per slot, the row arrays.
  PaddedCSRMemory memory() const noexcept {
    PaddedCSRMemory m = pattern_.memory();
    m.values = static_cast<std::int64_t>(values_.capacity() * sizeof(T));
    m.object = sizeof(*this);
    return m;
  }
  std::int64_t memory_bytes() const noexcept { return memory().total(); }

private:
  static constexpr std::uint64_t kValueStream = 0xB10C'5EEDULL;
  // Values for pattern_'s live blocks, uniform in [-1, 1) from (seed, kValueStream) in slot
  // order, out-of-matrix entries and padding zero.
  void fill_random_values(std::uint64_t seed) {
    pattern_.drop_values();
    values_.assign(static_cast<std::size_t>(pattern_.storage_size() * kBlockSize), T(0));
    CounterRng rng(seed, kValueStream);
    for_each_block([&](std::int64_t i, std::int64_t j, std::int64_t s, const T*) {
      T* b = block(s);
      for (std::int64_t r = 0; r < R; ++r)
        for (std::int64_t c = 0; c < C; ++c) {
          const T v = static_cast<T>(rng.uniform(-1.0, 1.0));
          if (i * R + r < rows_ && j * C + c < cols_) b[r * C + c] = v;
        }
    });
  }

  void set_shape(const char* fn, std::int64_t rows, std::int64_t cols) {
    if (rows < 0 || cols < 0) throw ShapeError(detail::message(fn, ": negative shape ", rows, "x", cols));
    constexpr auto max_index = static_cast<std::int64_t>(std::numeric_limits<Index>::max());
    if (blocks_covering(cols, C) - 1 > max_index)
      throw ArgumentError(detail::message(fn, ": ", blocks_covering(cols, C), " block columns (", cols, " columns / ",
                                          C, ") cannot be indexed by a ", sizeof(Index) * 8, "-bit index"));
    rows_ = rows;
    cols_ = cols;
  }

  void check_block(const char* fn, std::int64_t bi, std::int64_t bj) const {
    if (bi < 0 || bi >= block_rows() || bj < 0 || bj >= block_cols())
      throw ArgumentError(detail::message(fn, ": block (", bi, ", ", bj, ") outside the ", block_rows(), "x",
                                          block_cols(), " block grid"));
  }

  static BlockPaddedCSR from_positions(const char* fn, std::int64_t rows, std::int64_t cols,
                                       const std::vector<std::int64_t>& bi, const std::vector<std::int64_t>& bj,
                                       double padding_ratio) {
    BlockPaddedCSR m;
    m.set_shape(fn, rows, cols);
    const std::vector<T> zeros(bi.size(), T(0));
    m.pattern_ = PaddedCSR<T, Index>::from_coo(blocks_covering(rows, R), blocks_covering(cols, C),
                                               std::span<const std::int64_t>(bi), std::span<const std::int64_t>(bj),
                                               std::span<const T>(zeros), padding_ratio);
    m.pattern_.drop_values();
    m.values_.assign(static_cast<std::size_t>(m.pattern_.storage_size() * kBlockSize), T(0));
    return m;
  }

  // Runs a pattern operation with a scratch log, replays it on the blocks, then hands its
  // events on to the caller's log. The scratch log is kept (a step allocates nothing).
  template <class Op>
  auto logged(SlotLog* log, Op&& op) {
    scratch_.reset();
    auto result = op(&scratch_);
    scratch_.apply(values_, kBlockSize);
    if (log) log->append(scratch_);
    return result;
  }

  std::int64_t rows_ = 0;
  std::int64_t cols_ = 0;
  PaddedCSR<T, Index> pattern_;
  AlignedVector<T> values_;
  SlotLog scratch_;
};

}  // namespace sprig
