// sprig/io/padded_csr_file.hpp — save and load one PaddedCSR (file kind 1), and the
// sparse-matrix encoding that training-state files (io/checkpoint.hpp) reuse.
//
// Files use the container of io/binary_format.hpp (magic "SPRIGCKP", version 1, value and
// index type codes in the header, every section CRC-32 checked). Sections and their payloads
// (i64/u64/f64 little-endian; T values and Index columns at their own width):
//
//   PaddedCSR file (kind 1): one section "CSR " = a sparse matrix:
//     rows i64, cols i64, padding_ratio f64, storage_size i64, nnz i64,
//     row_start i64[rows], row_nnz i64[rows], row_capacity i64[rows],
//     col_indices Index[nnz], values T[nnz]
//   The layout is recorded exactly (row regions, capacities, storage size, so dead slots are
//   implied), but only live slots are stored: rows in order, each row's live entries in slot
//   order. Padding and dead slots are -1 / 0 by the PaddedCSR invariant.
//
//   BlockPaddedCSR file (kind 3): one section "BCSR" = a block-sparse matrix:
//     block rows R i64, block cols C i64, rows i64, cols i64, then its block pattern as a
//     sparse matrix above with R * C values per live entry (each block row-major) in place
//     of one. Loading also checks the block shape against the target's, the pattern's shape
//     against ceil(rows / R) x ceil(cols / C) and that entries outside the matrix are 0.
//
// Loading validates everything first: the container and every checksum, the value and
// index types against the target, and the matrix against the PaddedCSR invariants (regions
// inside storage and disjoint, 0 <= nnz <= capacity, columns in range and distinct within a
// row). Every bad input throws sprig::FormatError naming the file, the section and the byte
// offset. No allocation is sized from a field before that field is checked against the
// bytes that remain. Writes are atomic (io/atomic_file.hpp).
#pragma once

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <numeric>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "../core/aligned_allocator.hpp"
#include "../core/concepts.hpp"
#include "../core/error.hpp"
#include "../core/block_padded_csr.hpp"
#include "../core/padded_csr.hpp"
#include "../kernels/transpose.hpp"  // detail::PaddedCSRAccess: a loaded layout is set directly
#include "atomic_file.hpp"
#include "binary_format.hpp"

namespace sprig {

namespace detail::ckpt {

inline constexpr std::uint32_t kCSR = binary::tag("CSR ");
inline constexpr std::uint32_t kBlockCSR = binary::tag("BCSR");

template <class T>
constexpr std::uint8_t value_code() {
  return std::is_same_v<T, float> ? 1 : 2;
}
template <class I>
constexpr std::uint8_t index_code() {
  return sizeof(I) == 2 ? 1 : sizeof(I) == 4 ? 2 : 3;
}
inline std::string value_name(std::uint8_t c) {
  return c == 1 ? "float32" : c == 2 ? "float64" : c == 0 ? "none" : message("unknown value type code ", int(c));
}
inline std::string index_name(std::uint8_t c) {
  return c == 1   ? "int16"
         : c == 2 ? "int32"
         : c == 3 ? "int64"
         : c == 0 ? "none"
                  : message("unknown index type code ", int(c));
}
inline std::string kind_name(binary::FileKind k) {
  return k == binary::FileKind::padded_csr         ? "a PaddedCSR file"
         : k == binary::FileKind::block_padded_csr ? "a BlockPaddedCSR file"
         : k == binary::FileKind::training_state   ? "a training-state file"
                                                   : message("an unknown kind of file (", int(k), ")");
}

// ---- sparse matrices -----------------------------------------------------------------------

template <Value T, ColumnIndex Index>
void put_sparse(binary::Writer& w, const PaddedCSR<T, Index>& m) {
  w.put(m.rows());
  w.put(m.cols());
  w.put(m.padding_ratio());
  w.put(m.storage_size());
  w.put(m.nnz());
  w.put_array(m.row_starts());
  w.put_array(m.row_nnzs());
  w.put_array(m.row_capacities());
  for (std::int64_t i = 0; i < m.rows(); ++i) w.put_array(m.row(i).cols);
  for (std::int64_t i = 0; i < m.rows(); ++i) w.put_array(std::span<const T>(m.row(i).values));
}

// Live entries of m in file order (rows in order, slot order within a row) -> slots.
template <Value T, ColumnIndex Index>
void put_live(binary::Writer& w, const PaddedCSR<T, Index>& m, const AlignedVector<T>& per_slot) {
  for (std::int64_t i = 0; i < m.rows(); ++i)
    w.put_array(std::span<const T>(per_slot.data() + m.row_start(i), static_cast<std::size_t>(m.row_nnz(i))));
}

// A decoded, fully validated sparse matrix (live entries in file order).
template <Value T, ColumnIndex Index>
struct SparseImage {
  std::int64_t rows = 0, cols = 0, storage = 0, nnz = 0;
  double padding_ratio = 0;
  std::vector<std::int64_t> row_start, row_nnz, row_capacity;
  std::vector<Index> col_indices;
  AlignedVector<T> values;
};

// values_per_entry values follow per live entry (a block pattern's R * C).
template <Value T, ColumnIndex Index>
SparseImage<T, Index> get_sparse(binary::Reader& r, std::int64_t values_per_entry = 1) {
  SparseImage<T, Index> s;
  const std::int64_t at_rows = r.offset();
  s.rows = r.get_count("rows", static_cast<std::int64_t>(r.remaining() / 24));  // 3 row arrays of i64
  // cols - 1 must be a valid Index (PaddedCSR's own limit)
  constexpr std::int64_t max_cols = sizeof(Index) < 8 ? static_cast<std::int64_t>(std::numeric_limits<Index>::max()) + 1
                                                      : std::numeric_limits<std::int64_t>::max();
  s.cols = r.get_count("cols", max_cols);
  const std::int64_t at_ratio = r.offset();
  s.padding_ratio = r.get<double>("padding_ratio");
  if (!(s.padding_ratio >= 0.0 && s.padding_ratio <= 64.0))
    r.fail_at(at_ratio, "padding ratio ", s.padding_ratio, " outside [0, 64]");
  s.storage = r.get_count("storage_size");
  const std::int64_t at_nnz = r.offset();
  s.nnz = r.get_count("nnz");
  if (s.rows > 0 && s.cols > 0 && s.nnz / s.rows > s.cols)
    r.fail_at(at_nnz, "nnz ", s.nnz, " exceeds rows x cols = ", s.rows, " x ", s.cols);
  if (s.rows == 0 || s.cols == 0) {
    if (s.nnz != 0) r.fail_at(at_nnz, "nnz ", s.nnz, " in a ", s.rows, "x", s.cols, " matrix");
  }
  const std::int64_t at_start = r.offset();
  r.get_array<std::int64_t>(s.rows, s.row_start, "row_start");
  const std::int64_t at_nnzs = r.offset();
  r.get_array<std::int64_t>(s.rows, s.row_nnz, "row_nnz");
  const std::int64_t at_caps = r.offset();
  r.get_array<std::int64_t>(s.rows, s.row_capacity, "row_capacity");
  std::int64_t live = 0;
  for (std::int64_t i = 0; i < s.rows; ++i) {
    const std::int64_t st = s.row_start[i], n = s.row_nnz[i], cap = s.row_capacity[i];
    if (cap < 1) r.fail_at(at_caps + 8 * i, "row ", i, " has capacity ", cap, " < 1");
    if (n < 0 || n > cap || n > s.cols)
      r.fail_at(at_nnzs + 8 * i, "row ", i, " has nnz ", n, " outside [0, min(capacity ", cap, ", cols ", s.cols, ")]");
    if (st < 0 || st > s.storage || cap > s.storage - st)
      r.fail_at(at_start + 8 * i, "row ", i, " region [", st, ", ", st, " + ", cap, ") exceeds the storage of ",
                s.storage, " slots");
    if (n > s.nnz - live) r.fail_at(at_nnzs + 8 * i, "row nnz add up to more than nnz = ", s.nnz);
    live += n;
  }
  if (live != s.nnz) r.fail_at(at_nnz, "nnz is ", s.nnz, " but the rows hold ", live);
  {
    std::vector<std::int64_t> order(static_cast<std::size_t>(s.rows));
    std::iota(order.begin(), order.end(), std::int64_t{0});
    std::sort(order.begin(), order.end(),
              [&](std::int64_t a, std::int64_t b) { return s.row_start[a] < s.row_start[b]; });
    for (std::size_t q = 1; q < order.size(); ++q) {
      const std::int64_t a = order[q - 1], b = order[q];
      if (s.row_start[a] + s.row_capacity[a] > s.row_start[b])
        r.fail_at(at_start + 8 * b, "the regions of rows ", a, " and ", b, " overlap");
    }
  }
  (void)at_rows;
  const std::int64_t at_cols = r.offset();
  r.get_array<Index>(s.nnz, s.col_indices, "col_indices");
  // Duplicates: a per-column marker (O(nnz + cols)) when cols is small against the data
  // read, else a sorted copy of each row (O(nnz log)), so a huge declared width costs nothing.
  const bool marker = s.cols <= std::max<std::int64_t>(std::int64_t{1} << 16, 4 * s.nnz);
  std::vector<std::int64_t> seen(marker ? static_cast<std::size_t>(s.cols) : 0, -1);
  std::vector<Index> row;
  std::int64_t q = 0;
  for (std::int64_t i = 0; i < s.rows; ++i) {
    const std::int64_t n = s.row_nnz[i];
    for (std::int64_t e = 0; e < n; ++e) {
      const auto c = static_cast<std::int64_t>(s.col_indices[static_cast<std::size_t>(q + e)]);
      const std::int64_t at = at_cols + static_cast<std::int64_t>(sizeof(Index)) * (q + e);
      if (c < 0 || c >= s.cols) r.fail_at(at, "row ", i, " has column ", c, " outside [0, ", s.cols, ")");
      if (marker) {
        if (seen[static_cast<std::size_t>(c)] == i) r.fail_at(at, "row ", i, " holds column ", c, " twice");
        seen[static_cast<std::size_t>(c)] = i;
      }
    }
    if (!marker) {
      row.assign(s.col_indices.begin() + q, s.col_indices.begin() + q + n);
      std::sort(row.begin(), row.end());
      const auto dup = std::adjacent_find(row.begin(), row.end());
      if (dup != row.end())
        r.fail_at(at_cols + static_cast<std::int64_t>(sizeof(Index)) * q, "row ", i, " holds column ",
                  static_cast<std::int64_t>(*dup), " twice");
    }
    q += n;
  }
  r.get_array<T>(s.nnz * values_per_entry, s.values, "values");
  return s;
}

// ---- block-sparse matrices -------------------------------------------------------------------

template <Value T, ColumnIndex Index, int R, int C>
void put_block_sparse(binary::Writer& w, const BlockPaddedCSR<T, Index, R, C>& m) {
  w.put(std::int64_t{R});
  w.put(std::int64_t{C});
  w.put(m.rows());
  w.put(m.cols());
  put_sparse(w, m.pattern());  // structure-only: no values here
  const auto& P = m.pattern();
  for (std::int64_t i = 0; i < P.rows(); ++i)
    w.put_array(std::span<const T>(m.block(P.row_start(i)), static_cast<std::size_t>(P.row_nnz(i) * R * C)));
}

// Per-slot state of R * C entries per slot, live slots in file order.
template <Value T, ColumnIndex Index>
void put_block_live(binary::Writer& w, const PaddedCSR<T, Index>& pattern, const AlignedVector<T>& per_entry,
                    std::int64_t block_size) {
  for (std::int64_t i = 0; i < pattern.rows(); ++i)
    w.put_array(std::span<const T>(per_entry.data() + pattern.row_start(i) * block_size,
                                   static_cast<std::size_t>(pattern.row_nnz(i) * block_size)));
}

// A decoded, validated block-sparse matrix: its shape and pattern image (R * C values per entry).
template <Value T, ColumnIndex Index>
struct BlockImage {
  std::int64_t rows = 0, cols = 0;
  SparseImage<T, Index> pattern;
};

template <Value T, ColumnIndex Index, int R, int C>
BlockImage<T, Index> get_block_sparse(binary::Reader& r) {
  BlockImage<T, Index> b;
  const std::int64_t at = r.offset();
  const auto br = r.get<std::int64_t>("block rows");
  const auto bc = r.get<std::int64_t>("block cols");
  if (br != R || bc != C)
    r.fail_at(at, "block shape mismatch: the file holds ", br, "x", bc, " blocks, the target ", R, "x", C);
  const std::int64_t at_shape = r.offset();
  b.rows = r.get_count("rows");
  b.cols = r.get_count("cols");
  b.pattern = get_sparse<T, Index>(r, std::int64_t{R} * C);
  if (b.pattern.rows != blocks_covering(b.rows, R) || b.pattern.cols != blocks_covering(b.cols, C))
    r.fail_at(at_shape, "a ", b.pattern.rows, "x", b.pattern.cols, " block pattern for a ", b.rows, "x", b.cols,
              " matrix in ", R, "x", C, " blocks");
  // entries of edge blocks outside the matrix must be 0
  std::int64_t q = 0;
  for (std::int64_t i = 0; i < b.pattern.rows; ++i)
    for (std::int64_t e = 0; e < b.pattern.row_nnz[i]; ++e, ++q) {
      const auto j = static_cast<std::int64_t>(b.pattern.col_indices[static_cast<std::size_t>(q)]);
      for (std::int64_t rr = 0; rr < R; ++rr)
        for (std::int64_t cc = 0; cc < C; ++cc)
          if ((i * R + rr >= b.rows || j * C + cc >= b.cols) &&
              b.pattern.values[static_cast<std::size_t>(q * R * C + rr * C + cc)] != T(0))
            r.fail("block (", i, ", ", j, ") holds a nonzero at (", rr, ", ", cc, "), outside the ", b.rows, "x",
                   b.cols, " matrix");
    }
  return b;
}

// Live-packed per-entry values (R * C per live slot, file order) scattered over a pattern's slots.
template <Value T, ColumnIndex Index>
AlignedVector<T> scatter_block_live(const PaddedCSR<T, Index>& pattern, const AlignedVector<T>& packed,
                                    std::int64_t block_size) {
  AlignedVector<T> out(static_cast<std::size_t>(pattern.storage_size() * block_size), T(0));
  std::int64_t q = 0;
  for (std::int64_t i = 0; i < pattern.rows(); ++i)
    for (std::int64_t s = pattern.row_start(i), e = s + pattern.row_nnz(i); s < e; ++s, ++q)
      std::copy_n(packed.begin() + q * block_size, block_size, out.begin() + s * block_size);
  return out;
}

// The PaddedCSR of a validated image: tight row-order layout, each row's live entries in
// their saved order (the saved layout itself when that was tight). Allocates at most
// capacity_for(nnz_i, ratio <= 64) per row, all backed by file bytes.
template <Value T, ColumnIndex Index>
PaddedCSR<T, Index> build(const SparseImage<T, Index>& s) {
  PaddedCSR<T, Index> m;
  PaddedCSRAccess::layout(m, "sprig::load (PaddedCSR)", s.rows, s.cols, s.padding_ratio, s.row_nnz);
  auto& values = PaddedCSRAccess::values(m);
  auto& cols = PaddedCSRAccess::col_indices(m);
  std::int64_t q = 0;
  for (std::int64_t i = 0; i < s.rows; ++i) {
    const std::int64_t st = m.row_start(i);
    for (std::int64_t e = 0; e < s.row_nnz[i]; ++e, ++q) {
      cols[static_cast<std::size_t>(st + e)] = s.col_indices[static_cast<std::size_t>(q)];
      values[static_cast<std::size_t>(st + e)] = s.values[static_cast<std::size_t>(q)];
    }
  }
  return m;
}

// The BlockPaddedCSR of a validated image: the pattern in a tight row-order layout (as
// build), each block row's blocks in their saved order.
template <Value T, ColumnIndex Index, int R, int C>
BlockPaddedCSR<T, Index, R, C> build_block(const BlockImage<T, Index>& b) {
  const SparseImage<T, Index>& s = b.pattern;
  PaddedCSR<T, Index> pattern;
  PaddedCSRAccess::layout(pattern, "sprig::load (BlockPaddedCSR)", s.rows, s.cols, s.padding_ratio, s.row_nnz,
                          /*with_values=*/false);
  auto& cols = PaddedCSRAccess::col_indices(pattern);
  std::int64_t q = 0;
  for (std::int64_t i = 0; i < s.rows; ++i)
    for (std::int64_t e = 0; e < s.row_nnz[i]; ++e, ++q)
      cols[static_cast<std::size_t>(pattern.row_start(i) + e)] = s.col_indices[static_cast<std::size_t>(q)];
  AlignedVector<T> values = scatter_block_live(pattern, s.values, std::int64_t{R} * C);
  return BlockPaddedCSR<T, Index, R, C>::from_parts(b.rows, b.cols, std::move(pattern), std::move(values));
}

// Per-slot vector of m (storage_size entries, zero off the live slots) from live-packed values.
template <Value T, ColumnIndex Index>
AlignedVector<T> scatter_live(const PaddedCSR<T, Index>& m, const AlignedVector<T>& packed) {
  AlignedVector<T> out(static_cast<std::size_t>(m.storage_size()), T(0));
  std::int64_t q = 0;
  for (std::int64_t i = 0; i < m.rows(); ++i)
    for (std::int64_t s = m.row_start(i), e = s + m.row_nnz(i); s < e; ++s)
      out[static_cast<std::size_t>(s)] = packed[q++];
  return out;
}

inline void check_types(const binary::Container& c, binary::FileKind kind, std::uint8_t value, std::uint8_t index,
                        const char* target) {
  binary::Reader r({}, c.source, "file header", 0);
  if (c.kind != kind) r.fail_at(12, "this is ", kind_name(c.kind), ", expected ", kind_name(kind));
  if (c.value_type != value)
    r.fail_at(14, "type mismatch: the file holds ", value_name(c.value_type), " values but the ", target, " uses ",
              value_name(value));
  if (c.index_type != index)
    r.fail_at(15, "type mismatch: the file holds ", index_name(c.index_type), " column indices but the ", target,
              " uses ", index_name(index));
}

// Section k must exist and carry tag t.
inline binary::Reader section(const binary::Container& c, std::size_t k, std::uint32_t t, const char* what) {
  if (k >= c.sections.size())
    throw FormatError(message(c.source, ": the file ends after ", c.sections.size(), " sections; expected section ", k,
                              " ", binary::tag_name(t), " (", what, ")"));
  if (c.sections[k].tag != t) {
    binary::Reader r = c.reader(k);
    r.fail_at(c.sections[k].payload_offset - 24, "expected section ", binary::tag_name(t), " (", what, ") here");
  }
  return c.reader(k);
}

}  // namespace detail::ckpt

// ---- PaddedCSR ------------------------------------------------------------------------------

// The bytes of a PaddedCSR file holding W (format at the top). O(storage); the same matrix
// gives the same bytes; throws only std::bad_alloc.
template <Value T, ColumnIndex Index>
std::vector<std::byte> encode_padded_csr(const PaddedCSR<T, Index>& W) {
  namespace ck = detail::ckpt;
  binary::Writer w;
  w.header(binary::FileKind::padded_csr, ck::value_code<T>(), ck::index_code<Index>());
  w.begin_section(ck::kCSR);
  ck::put_sparse(w, W);
  w.end_section();
  return w.finish();
}

// Decodes a PaddedCSR file from memory; `source` names it in error messages. Throws
// FormatError for any input that is not a valid PaddedCSR<T, Index> file.
template <Value T, ColumnIndex Index>
PaddedCSR<T, Index> decode_padded_csr(std::span<const std::byte> bytes, std::string source = "<memory>") {
  namespace ck = detail::ckpt;
  const binary::Container c = binary::parse_container(bytes, std::move(source));
  ck::check_types(c, binary::FileKind::padded_csr, ck::value_code<T>(), ck::index_code<Index>(), "target PaddedCSR");
  binary::Reader r = ck::section(c, 0, ck::kCSR, "the matrix");
  const auto image = ck::get_sparse<T, Index>(r);
  r.expect_end();
  if (c.sections.size() != 1)
    throw FormatError(detail::message(c.source, ": ", c.sections.size(), " sections, a PaddedCSR file has exactly 1"));
  return ck::build(image);
}

// Writes encode_padded_csr(W) to `path` atomically; throws sprig::Error naming the call and
// errno's text when the file cannot be written (`path` is then unchanged).
template <Value T, ColumnIndex Index>
void save_padded_csr(const std::filesystem::path& path, const PaddedCSR<T, Index>& W) {
  const auto bytes = encode_padded_csr(W);
  detail::ckpt::write_file_atomically(path, bytes, "sprig::save_padded_csr");
}

// Reads and decodes a PaddedCSR file (decode_padded_csr); throws FormatError naming the
// file for a missing, unreadable or invalid one.
template <Value T, ColumnIndex Index>
PaddedCSR<T, Index> load_padded_csr(const std::filesystem::path& path) {
  const auto bytes = detail::ckpt::read_file(path);
  return decode_padded_csr<T, Index>(bytes, path.string());
}

// ---- BlockPaddedCSR -------------------------------------------------------------------------

// The bytes of a BlockPaddedCSR file holding W (kind 3, format at the top). O(storage x R x
// C); the same matrix gives the same bytes; throws only std::bad_alloc.
template <Value T, ColumnIndex Index, int R, int C>
std::vector<std::byte> encode_block_padded_csr(const BlockPaddedCSR<T, Index, R, C>& W) {
  namespace ck = detail::ckpt;
  binary::Writer w;
  w.header(binary::FileKind::block_padded_csr, ck::value_code<T>(), ck::index_code<Index>());
  w.begin_section(ck::kBlockCSR);
  ck::put_block_sparse(w, W);
  w.end_section();
  return w.finish();
}

// Decodes a BlockPaddedCSR file into the target type (its block shape must be the file's);
// throws FormatError for any input that is not a valid BlockPaddedCSR<T, Index, R, C> file.
template <Value T, ColumnIndex Index, int R, int C>
BlockPaddedCSR<T, Index, R, C> decode_block_padded_csr(std::span<const std::byte> bytes,
                                                       std::string source = "<memory>") {
  namespace ck = detail::ckpt;
  const binary::Container c = binary::parse_container(bytes, std::move(source));
  ck::check_types(c, binary::FileKind::block_padded_csr, ck::value_code<T>(), ck::index_code<Index>(),
                  "target BlockPaddedCSR");
  binary::Reader r = ck::section(c, 0, ck::kBlockCSR, "the block matrix");
  const auto image = ck::get_block_sparse<T, Index, R, C>(r);
  r.expect_end();
  if (c.sections.size() != 1)
    throw FormatError(
        detail::message(c.source, ": ", c.sections.size(), " sections, a BlockPaddedCSR file has exactly 1"));
  return ck::build_block<T, Index, R, C>(image);
}

// Writes encode_block_padded_csr(W) to `path` atomically; throws as save_padded_csr.
template <Value T, ColumnIndex Index, int R, int C>
void save_block_padded_csr(const std::filesystem::path& path, const BlockPaddedCSR<T, Index, R, C>& W) {
  const auto bytes = encode_block_padded_csr(W);
  detail::ckpt::write_file_atomically(path, bytes, "sprig::save_block_padded_csr");
}

// Reads and decodes a BlockPaddedCSR file of the target type; throws FormatError naming the
// file for a missing, unreadable or invalid one.
template <class M>
  requires requires { M::kBlockRows; }
M load_block_padded_csr(const std::filesystem::path& path) {
  const auto bytes = detail::ckpt::read_file(path);
  return decode_block_padded_csr<typename M::value_type, typename M::index_type, M::kBlockRows, M::kBlockCols>(
      bytes, path.string());
}

}  // namespace sprig
