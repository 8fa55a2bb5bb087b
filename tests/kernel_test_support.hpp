// tests/kernel_test_support.hpp — shared generators and checks for the kernel tests
// (test_spmm, test_sddmm, test_transpose, test_reference).
//
// - AllTypes: every (T, Index) pair sprig is instantiated with.
// - random_matrix: PaddedCSR with empty, full and random rows; scramble(): the same kind of
//   matrix after the structural operations of training (erase moves a row's last slot into
//   the hole, inserts fill padding, a full row relocates to the end and leaves dead slots),
//   so storage is no longer in row order; scrambled_matrix(): both, with that layout required.
// - Operand: a dense view placed inside a larger buffer whose other elements hold a guard
//   value: a row stride larger than cols, optionally an unaligned first element. Outputs
//   check that nothing outside the view was written; inputs put NaN there so that a kernel
//   that folds anything outside the view into a result is caught.
// - Error bounds. A sum of n products computed in T in any order (any association, with or
//   without FMA) differs from the exact sum by at most gamma_n * S, where S = sum |terms|,
//   gamma_n = n u / (1 - n u) and u = epsilon / 2 is the unit roundoff (Higham, Accuracy
//   and Stability of Numerical Algorithms, 2nd ed., eq. 3.5). Two such computations differ
//   by at most 2 gamma_n S ~= n * epsilon * S; the tests allow twice that, 2 n epsilon S
//   (the factor covers 1 / (1 - n u) and keeps the bound honest without being loose by
//   orders of magnitude). A computation against the exact (long double) value gets n eps S.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <sstream>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include <catch2/catch.hpp>

#include "sprig/core/matrix.hpp"
#include "sprig/core/padded_csr.hpp"
#include "sprig/core/rng.hpp"
#include "sprig/kernels/spmm.hpp"
#include "sprig/kernels/update_mode.hpp"
#include "sprig/kernels/workspace.hpp"

namespace sprig::test {

template <class ValueT, class IndexT>
struct Types {
  using T = ValueT;
  using Index = IndexT;
};
using AllTypes = std::tuple<Types<float, std::int16_t>, Types<float, std::int32_t>, Types<float, std::int64_t>,
                            Types<double, std::int16_t>, Types<double, std::int32_t>, Types<double, std::int64_t>>;

template <class T>
constexpr T eps = std::numeric_limits<T>::epsilon();

template <class T>
T quiet_nan() {
  return std::numeric_limits<T>::quiet_NaN();
}

template <class T>
bool same_bits(T a, T b) {
  return std::memcmp(&a, &b, sizeof(T)) == 0;
}

// ---- sparse matrices --------------------------------------------------------------------

// A random M x K matrix, values uniform in [-1, 1). Row kinds: empty with probability
// p_empty, full (all K columns) with probability p_full, otherwise each column independently
// with probability `density`. Built from COO triplets (a path independent of the kernels).
template <Value T, ColumnIndex Index>
PaddedCSR<T, Index> random_matrix(std::int64_t M, std::int64_t K, double density, std::uint64_t seed,
                                  double p_empty = 0.15, double p_full = 0.1,
                                  double padding_ratio = kDefaultPaddingRatio) {
  CounterRng rng(seed, 0xC0FFEE);
  std::vector<std::int64_t> ri, ci;
  std::vector<T> vals;
  for (std::int64_t i = 0; i < M; ++i) {
    const double u = rng.uniform01();
    if (u < p_empty) continue;
    const bool full = u < p_empty + p_full;
    for (std::int64_t c = 0; c < K; ++c)
      if (full || rng.uniform01() < density) {
        ri.push_back(i);
        ci.push_back(c);
        vals.push_back(static_cast<T>(rng.uniform(-1.0, 1.0)));
      }
  }
  return PaddedCSR<T, Index>::from_coo(M, K, std::span<const std::int64_t>(ri), std::span<const std::int64_t>(ci),
                                       std::span<const T>(vals), padding_ratio);
}

// A column of row r that is not live, or -1 if the row is full.
template <Value T, ColumnIndex Index>
std::int64_t absent_column(const PaddedCSR<T, Index>& W, std::int64_t r, CounterRng& rng) {
  if (W.row_nnz(r) >= W.cols()) return -1;
  for (int attempt = 0; attempt < 8; ++attempt) {
    const auto c = static_cast<std::int64_t>(rng.uniform_below(static_cast<std::uint64_t>(W.cols())));
    if (W.find(r, c) < 0) return c;
  }
  for (std::int64_t c = 0; c < W.cols(); ++c)
    if (W.find(r, c) < 0) return c;
  return -1;
}

// Applies about 4 * rows random structural changes: erase of a random live slot, insert of
// an absent column, and "overflow" (insert until the row outgrows its capacity, which
// relocates it to the end of storage and leaves its old region dead). Rows are picked at
// random, so relocated rows end up in storage out of row order. Returns the number of
// relocations (0 is possible only when no row can outgrow its capacity, e.g. K = 1).
template <Value T, ColumnIndex Index>
std::int64_t scramble(PaddedCSR<T, Index>& W, std::uint64_t seed) {
  if (W.rows() == 0 || W.cols() == 0) return 0;
  CounterRng rng(seed, 0x5C4A4B1E);
  std::int64_t relocations = 0;
  auto insert_one = [&](std::int64_t r) {
    const std::int64_t c = absent_column(W, r, rng);
    if (c < 0) return false;
    const std::int64_t start = W.row_start(r);
    W.insert(r, c, static_cast<T>(rng.uniform(-1.0, 1.0)));
    if (W.row_start(r) != start) ++relocations;
    return true;
  };
  const std::int64_t ops = 4 * W.rows();
  for (std::int64_t k = 0; k < ops; ++k) {
    const auto r = static_cast<std::int64_t>(rng.uniform_below(static_cast<std::uint64_t>(W.rows())));
    switch (rng.uniform_below(4)) {
      case 0:
      case 1:
        if (W.row_nnz(r) > 0)
          W.erase_slot(r, W.row_start(r) +
                              static_cast<std::int64_t>(rng.uniform_below(static_cast<std::uint64_t>(W.row_nnz(r)))));
        break;
      case 2: insert_one(r); break;
      default: {
        const std::int64_t cap = W.row_capacity(r);
        while (W.row_nnz(r) <= cap && insert_one(r)) {
        }
        break;
      }
    }
  }
  return relocations;
}

// Whether some row's storage region lies before that of a row with a smaller index.
template <Value T, ColumnIndex Index>
bool rows_out_of_storage_order(const PaddedCSR<T, Index>& W) {
  for (std::int64_t i = 1; i < W.rows(); ++i)
    if (W.row_start(i) < W.row_start(i - 1)) return true;
  return false;
}

// Fills m with values uniform in [-1, 1), row by row.
template <class T>
void fill_uniform(Matrix<T>& m, CounterRng& rng) {
  for (std::int64_t i = 0; i < m.rows(); ++i)
    for (std::int64_t j = 0; j < m.cols(); ++j) m(i, j) = static_cast<T>(rng.uniform(-1.0, 1.0));
}

// random_matrix(rows, cols, density, seed) scrambled, with the layout a scrambled-matrix test
// is about required to be really there: rows relocated out of row order, dead slots, and
// the invariants holding.
template <Value T, ColumnIndex Index>
PaddedCSR<T, Index> scrambled_matrix(std::int64_t rows, std::int64_t cols, double density, std::uint64_t seed) {
  auto W = random_matrix<T, Index>(rows, cols, density, seed);
  const std::int64_t relocations = scramble(W, seed);
  CAPTURE(seed, relocations);
  REQUIRE(relocations > 0);
  REQUIRE(W.dead_slots() > 0);
  REQUIRE(rows_out_of_storage_order(W));
  REQUIRE_NOTHROW(W.check_invariants());
  return W;
}

// For every slot, the row that holds it live, or -1 (padding or dead).
template <Value T, ColumnIndex Index>
std::vector<std::int64_t> slot_rows(const PaddedCSR<T, Index>& W) {
  std::vector<std::int64_t> owner(static_cast<std::size_t>(W.storage_size()), -1);
  W.for_each_live([&](std::int64_t i, std::int64_t, T, std::int64_t s) { owner[static_cast<std::size_t>(s)] = i; });
  return owner;
}

// Sets every non-live slot's value (padding and dead slots) to NaN. This breaks the
// PaddedCSR invariant on purpose: kernels must read live slots only, so their results must
// not change.
template <Value T, ColumnIndex Index>
std::int64_t poison_non_live_values(PaddedCSR<T, Index>& W) {
  const auto owner = slot_rows(W);
  auto vals = W.values();
  std::int64_t n = 0;
  for (std::size_t s = 0; s < owner.size(); ++s)
    if (owner[s] < 0) {
      vals[s] = quiet_nan<T>();
      ++n;
    }
  return n;
}

// ---- dense operands ---------------------------------------------------------------------

enum class Placement {
  tight,      // stride == cols, first element 64-byte aligned, nothing around it
  strided,    // stride > cols, every row 64-byte aligned, guard columns to the right
  unaligned,  // starts at (1, 1) of the buffer (off alignment), stride == cols + 5
};
inline const char* name(Update m) { return m == Update::overwrite ? "overwrite" : "accumulate"; }

inline const char* name(Placement p) {
  switch (p) {
    case Placement::tight: return "tight";
    case Placement::strided: return "strided";
    default: return "unaligned";
  }
}

// A rows x cols view inside a larger buffer whose other elements hold `guard`.
template <Value T>
class Operand {
public:
  Operand(std::int64_t rows, std::int64_t cols, Placement p, T guard) : rows_(rows), cols_(cols), guard_(guard) {
    std::int64_t buf_rows = rows, stride = cols;
    switch (p) {
      case Placement::tight: break;
      case Placement::strided: {
        constexpr std::int64_t line = 64 / sizeof(T);
        stride = (cols + line - 1) / line * line + line;
        buf_rows = rows + 1;
        break;
      }
      case Placement::unaligned:
        r0_ = 1;
        c0_ = 1;
        stride = cols + 5;
        buf_rows = rows + 2;
        break;
    }
    buf_.resize(buf_rows, stride, stride, guard);
  }

  MatrixView<T> view() { return buf_.view().block(r0_, c0_, rows_, cols_); }
  ConstMatrixView<T> cview() const { return buf_.view().block(r0_, c0_, rows_, cols_); }
  T& operator()(std::int64_t i, std::int64_t j) { return buf_(r0_ + i, c0_ + j); }
  T operator()(std::int64_t i, std::int64_t j) const { return buf_(r0_ + i, c0_ + j); }

  void fill_random(CounterRng& rng) {
    for (std::int64_t i = 0; i < rows_; ++i)
      for (std::int64_t j = 0; j < cols_; ++j) (*this)(i, j) = static_cast<T>(rng.uniform(-1.0, 1.0));
  }
  void fill(T v) {
    for (std::int64_t i = 0; i < rows_; ++i)
      for (std::int64_t j = 0; j < cols_; ++j) (*this)(i, j) = v;
  }
  // A tight copy of the view's contents.
  Matrix<T> copy() const {
    Matrix<T> out(rows_, cols_);
    for (std::int64_t i = 0; i < rows_; ++i)
      for (std::int64_t j = 0; j < cols_; ++j) out(i, j) = (*this)(i, j);
    return out;
  }
  // Elements outside the view whose bits differ from the guard.
  std::int64_t guard_violations() const {
    std::int64_t bad = 0;
    for (std::int64_t i = 0; i < buf_.rows(); ++i)
      for (std::int64_t j = 0; j < buf_.stride(); ++j) {
        const bool inside = i >= r0_ && i < r0_ + rows_ && j >= c0_ && j < c0_ + cols_;
        if (!inside && !same_bits(buf_.data()[i * buf_.stride() + j], guard_)) ++bad;
      }
    return bad;
  }
  std::int64_t rows() const { return rows_; }
  std::int64_t cols() const { return cols_; }

private:
  Matrix<T> buf_;
  std::int64_t r0_ = 0, c0_ = 0, rows_, cols_;
  T guard_;
};

// ---- comparisons ------------------------------------------------------------------------

struct Mismatches {
  std::int64_t count = 0;
  std::string first;  // description of the first mismatch
  template <class... Parts>
  void add(Parts&&... parts) {
    if (count++ == 0) {
      std::ostringstream out;
      out.precision(17);
      (out << ... << parts);
      first = out.str();
    }
  }
};

// Within `factor * n * epsilon * S` (see the header comment); NaN never is. Evaluated in
// double: its own rounding (relative 2^-53) is far inside the bound for float and double
// alike, and long double is software quad precision on aarch64 (too slow under qemu).
template <Value T>
bool within(T got, T want, double n, double S, double factor) {
  const double diff = std::fabs(static_cast<double>(got) - static_cast<double>(want));
  return diff <= factor * n * static_cast<double>(eps<T>) * S;
}

// Checks Y (spmm output, mode applied over Y0) against `want` element by element: each
// element is a sum of row_nnz(i) products (plus Y0 for accumulate), so the bound uses that
// n and S = sum |w * x| (+ |Y0|).
template <Value T, ColumnIndex Index>
Mismatches compare_spmm(const PaddedCSR<T, Index>& W, std::type_identity_t<ConstMatrixView<T>> X, const Matrix<T>& Y0,
                        Update mode, std::type_identity_t<ConstMatrixView<T>> got,
                        std::type_identity_t<ConstMatrixView<T>> want, double factor) {
  Mismatches m;
  for (std::int64_t i = 0; i < W.rows(); ++i) {
    const auto r = W.row(i);
    for (std::int64_t b = 0; b < X.cols(); ++b) {
      double S = 0;
      for (std::size_t q = 0; q < r.cols.size(); ++q)
        S += std::fabs(static_cast<double>(r.values[q]) * static_cast<double>(X(r.cols[q], b)));
      double n = static_cast<double>(r.cols.size());
      if (mode == Update::accumulate) {
        S += std::fabs(static_cast<double>(Y0(i, b)));
        n += 1;
      }
      if (!within<T>(got(i, b), want(i, b), std::max(n, 1.0), S, factor))
        m.add("Y(", i, ", ", b, ") = ", got(i, b), ", expected ", want(i, b), " (row nnz ", r.cols.size(),
              ", sum|terms| ", S, ")");
    }
  }
  return m;
}

// Checks a weight gradient against `want`: live slots are dot products of length B (plus
// the old value for accumulate); non-live slots must be exactly 0 (overwrite) or keep their
// old bits (accumulate).
template <Value T, ColumnIndex Index>
Mismatches compare_sddmm(const PaddedCSR<T, Index>& W, std::type_identity_t<ConstMatrixView<T>> dY,
                         std::type_identity_t<ConstMatrixView<T>> X, std::type_identity_t<std::span<const T>> g0,
                         Update mode, std::type_identity_t<std::span<const T>> got,
                         std::type_identity_t<std::span<const T>> want, double factor) {
  Mismatches m;
  const auto owner = slot_rows(W);
  const auto cols = W.col_indices();
  for (std::size_t s = 0; s < owner.size(); ++s) {
    if (owner[s] < 0) {
      const bool ok = mode == Update::overwrite ? got[s] == T(0) : same_bits(got[s], g0[s]);
      if (!ok) m.add("non-live slot ", s, " holds ", got[s], ", expected ", mode == Update::overwrite ? T(0) : g0[s]);
      continue;
    }
    const std::int64_t i = owner[s], c = cols[s];
    double S = 0;
    for (std::int64_t b = 0; b < X.cols(); ++b)
      S += std::fabs(static_cast<double>(dY(i, b)) * static_cast<double>(X(c, b)));
    double n = static_cast<double>(X.cols());
    if (mode == Update::accumulate) {
      S += std::fabs(static_cast<double>(g0[s]));
      n += 1;
    }
    if (!within<T>(got[s], want[s], std::max(n, 1.0), S, factor))
      m.add("grad[", s, "] (row ", i, ", col ", c, ") = ", got[s], ", expected ", want[s], " (B ", X.cols(),
            ", sum|terms| ", S, ")");
  }
  return m;
}

template <class T>
std::int64_t bitwise_differences(ConstMatrixView<T> a, ConstMatrixView<T> b) {
  std::int64_t n = 0;
  for (std::int64_t i = 0; i < a.rows(); ++i)
    for (std::int64_t j = 0; j < a.cols(); ++j) n += !same_bits(a(i, j), b(i, j));
  return n;
}
template <class T>
std::int64_t bitwise_differences(std::span<const T> a, std::span<const T> b) {
  std::int64_t n = 0;
  for (std::size_t s = 0; s < a.size(); ++s) n += !same_bits(a[s], b[s]);
  return n;
}

// ---- random shapes ----------------------------------------------------------------------

// One randomised kernel case. The list below covers what the fast kernels special-case:
// batch widths 1..65 (every SIMD tail for float and double up to AVX-512 x 4 registers) and
// some wide ones, 0-row / 0-column / 0-batch shapes, one-row and one-column matrices, empty
// and dense matrices, long rows, the int16 column limit, every operand placement, and
// matrices whose storage went through insert/erase/relocation, a long X with a wide batch.
struct Case {
  std::int64_t M, K, B;
  double density;
  Placement px, py;  // placement of the input (X or dY) and of the output (Y) / other input
  bool scrambled;
  std::uint64_t seed;
};
inline std::ostream& operator<<(std::ostream& out, const Case& c) {
  return out << "M=" << c.M << " K=" << c.K << " B=" << c.B << " density=" << c.density << " in=" << name(c.px)
             << " out=" << name(c.py) << " scrambled=" << c.scrambled << " seed=" << c.seed;
}

// max_cols bounds K for the Index type under test (int16 cannot index 32769 columns).
inline std::vector<Case> kernel_cases(std::int64_t max_cols) {
  std::vector<Case> cases;
  CounterRng rng(2024, 0xCA5E5);
  const Placement places[] = {Placement::tight, Placement::strided, Placement::unaligned};
  std::uint64_t seed = 1;
  auto pick = [&](std::int64_t lo, std::int64_t hi) {
    return lo + static_cast<std::int64_t>(rng.uniform_below(static_cast<std::uint64_t>(hi - lo + 1)));
  };
  for (std::int64_t B = 1; B <= 65; ++B)
    cases.push_back({pick(1, 24), pick(1, 24), B, 0.05 + 0.5 * rng.uniform01(), places[B % 3], places[(B / 3) % 3],
                     B % 2 == 0, seed++});
  for (std::int64_t B : {96, 128, 200, 513})
    cases.push_back({pick(20, 50), pick(20, 60), B, 0.15, places[B % 3], places[(B + 1) % 3], B % 2 == 1, seed++});
  // Edge shapes: zero extents, single rows and columns, empty and dense matrices.
  const std::int64_t edge[][3] = {{0, 5, 7},  {5, 0, 7}, {0, 0, 3},   {6, 5, 0},   {0, 0, 0},
                                  {1, 17, 9}, {1, 1, 1}, {13, 1, 33}, {1, 40, 64}, {1, 1, 67}};
  for (const auto& e : edge)
    for (Placement p : places) cases.push_back({e[0], e[1], e[2], 0.5, p, p, false, seed++});
  cases.push_back({9, 11, 19, 0.0, Placement::strided, Placement::unaligned, false, seed++});       // all empty
  cases.push_back({9, 11, 19, 1.0, Placement::unaligned, Placement::strided, false, seed++});       // dense
  cases.push_back({7, 12, 23, 1.0, Placement::tight, Placement::tight, true, seed++});              // dense, scrambled
  cases.push_back({3, 700, 37, 0.9, Placement::strided, Placement::tight, false, seed++});          // long rows
  cases.push_back({4, max_cols, 5, 0.002, Placement::tight, Placement::unaligned, false, seed++});  // Index limit
  // Many X rows and a batch wider than one register: an L2-sized panel then holds only a few
  // registers, so the batch is cut into many panels.
  cases.push_back(
      {3, std::min<std::int64_t>(max_cols, 6000), 40, 0.01, Placement::strided, Placement::tight, false, seed++});
  for (int k = 0; k < 8; ++k)
    cases.push_back(
        {pick(1, 60), pick(1, 60), pick(1, 80), rng.uniform01(), places[k % 3], places[(k + 2) % 3], true, seed++});
  return cases;
}

template <ColumnIndex Index>
std::int64_t max_cols_for() {
  constexpr auto top = static_cast<std::int64_t>(std::numeric_limits<Index>::max());
  return top < 40000 ? top + 1 : 40000;
}

// Builds the W of a case: random rows (some empty, some full) and, if asked, scrambled.
template <Value T, ColumnIndex Index>
PaddedCSR<T, Index> case_matrix(const Case& c) {
  auto W =
      random_matrix<T, Index>(c.M, c.K, c.density, c.seed, c.density >= 1.0 ? 0.0 : 0.15, c.density <= 0.0 ? 0.0 : 0.1);
  // Make sure the largest column the Index type can hold is used when the case reaches it.
  if (c.K > 30000 && c.M > 0 && W.find(0, c.K - 1) < 0) W.insert(0, c.K - 1, T(0.5));
  if (c.scrambled) scramble(W, c.seed);
  return W;
}

// Column blocks (kernels/panels.hpp: ColumnBlocks) forced onto the small case shapes by small
// block budgets (64 B, 1 KiB, 8 KiB): for every case a budget cuts into several blocks, calls
// fn(case, budget, blocks, W, workspace with that budget) twice, with W's rows grouped by
// block and as built (scrambled cases have rows that are not, which the kernels do whole).
// Returns how many (case, budget) pairs were blocked (none with the scalar kernels).
template <Value T, ColumnIndex Index, class Fn>
std::int64_t for_each_blocked_case(Fn&& fn) {
  std::int64_t blocked = 0;
  for (const std::int64_t budget : {64, 1024, 8192}) {
    KernelWorkspace<T> ws;
    ws.column_block_bytes = budget;
    for (const Case& c : kernel_cases(max_cols_for<Index>())) {
      const auto blocks = detail::spmm_column_blocks<T>(c.K, c.B, budget);
      if (blocks.count == 1) continue;
      ++blocked;
      auto grouped = case_matrix<T, Index>(c);
      const auto as_built = grouped;
      grouped.group_columns(blocks.shift);
      fn(c, budget, blocks, static_cast<const PaddedCSR<T, Index>&>(grouped), ws);
      fn(c, budget, blocks, as_built, ws);
    }
  }
  return blocked;
}

}  // namespace sprig::test
