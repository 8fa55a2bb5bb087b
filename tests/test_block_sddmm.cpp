// tests/test_block_sddmm.cpp — sprig::block_sddmm (the weight gradient of a block-sparse
// layer) against the scalar oracle reference::block_sddmm, for block shapes 1x4, 4x1, 4x4,
// 8x1, 8x8 and 16x1 on every (T, Index) pair: random shapes (M, K not multiples of the block,
// empty and full block rows, batch widths 1..65 and wider ones, several batch panels),
// strided and unaligned operands with NaN around them, matrices after inserts and erases
// (padding, dead slots, rows out of storage order); overwrite writes 0 to every non-live and
// out-of-matrix entry, accumulate leaves them alone; bitwise identical results for 1, 2 and 3
// threads; shape and overlap errors.
#include "sprig/kernels/block_sddmm.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <tuple>
#include <vector>

#include "kernel_test_support.hpp"
#include "sprig/kernels/block_reference.hpp"
#include "with_threads.hpp"

using namespace sprig;
namespace st = sprig::test;

namespace {

template <class ValueT, class IndexT, int BR, int BC>
struct BlockTypes {
  using T = ValueT;
  using Index = IndexT;
  static constexpr int R = BR, C = BC;
};

#define SPRIG_BLOCK_SHAPES(T, I)                                                                  \
  BlockTypes<T, I, 1, 4>, BlockTypes<T, I, 4, 1>, BlockTypes<T, I, 4, 4>, BlockTypes<T, I, 8, 1>, \
      BlockTypes<T, I, 8, 8>, BlockTypes<T, I, 16, 1>
// Every block shape at (float, int32), every other (T, Index) pair at 4x4, and double at 8x1
// and 1x4 (the index type only changes how a column is loaded; the full cross product is 36
// instantiations, minutes of compile time on every CI leg).
using AllBlockTypes = std::tuple<SPRIG_BLOCK_SHAPES(float, std::int32_t), BlockTypes<float, std::int16_t, 4, 4>,
                                 BlockTypes<float, std::int64_t, 4, 4>, BlockTypes<double, std::int16_t, 4, 4>,
                                 BlockTypes<double, std::int32_t, 4, 4>, BlockTypes<double, std::int64_t, 4, 4>,
                                 BlockTypes<double, std::int16_t, 8, 1>, BlockTypes<double, std::int32_t, 1, 4>>;
// One index type per value type, every block shape: for the error tests.
using SomeBlockTypes = std::tuple<SPRIG_BLOCK_SHAPES(float, std::int32_t), BlockTypes<double, std::int16_t, 4, 4>,
                                  BlockTypes<double, std::int16_t, 8, 1>>;
#undef SPRIG_BLOCK_SHAPES

template <int R, int C, Value T, ColumnIndex Index>
using BlockMatrix = BlockPaddedCSR<T, Index, R, C>;

// One randomised case: element shape M x K, batch B, block rows empty with probability
// p_empty, full with p_full, otherwise each block live with probability `density`;
// operand placements; scrambled: inserts and erases after construction.
struct Case {
  std::int64_t M, K, B;
  double density, p_empty, p_full;
  st::Placement pd, px;
  bool scrambled;
  std::uint64_t seed;
};
std::ostream& operator<<(std::ostream& out, const Case& c) {
  return out << "M=" << c.M << " K=" << c.K << " B=" << c.B << " density=" << c.density << " dY=" << st::name(c.pd)
             << " X=" << st::name(c.px) << " scrambled=" << c.scrambled << " seed=" << c.seed;
}

std::vector<Case> block_cases() {
  std::vector<Case> cases;
  CounterRng rng(2025, 0xB10C);
  const st::Placement places[] = {st::Placement::tight, st::Placement::strided, st::Placement::unaligned};
  std::uint64_t seed = 1;
  auto pick = [&](std::int64_t lo, std::int64_t hi) {
    return lo + static_cast<std::int64_t>(rng.uniform_below(static_cast<std::uint64_t>(hi - lo + 1)));
  };
  // Every batch width 1..65 (every SIMD tail up to AVX-512 x 4 registers), M and K mostly not
  // multiples of the block shapes.
  for (std::int64_t B = 1; B <= 65; ++B)
    cases.push_back({pick(1, 70), pick(1, 70), B, 0.05 + 0.6 * rng.uniform01(), 0.15, 0.15, places[B % 3],
                     places[(B / 3) % 3], B % 2 == 0, seed++});
  // Multiples of every block shape (whole blocks: operands may be read in place).
  for (std::int64_t B : {16, 32, 64, 128})
    cases.push_back({64, 48, B, 0.3, 0.1, 0.1, st::Placement::tight, st::Placement::tight, B == 64, seed++});
  cases.push_back({32, 64, 128, 0.3, 0.1, 0.1, st::Placement::strided, st::Placement::strided, false, seed++});
  // Wide batches.
  for (std::int64_t B : {96, 200, 513})
    cases.push_back(
        {pick(20, 60), pick(20, 60), B, 0.2, 0.1, 0.1, places[B % 3], places[(B + 1) % 3], B != 200, seed++});
  // Many X rows and a wide batch: several panels.
  cases.push_back({19, 4101, 150, 0.01, 0.1, 0.1, st::Placement::unaligned, st::Placement::strided, false, seed++});
  cases.push_back({24, 4096, 144, 0.01, 0.0, 0.0, st::Placement::tight, st::Placement::tight, false, seed++});
  // Edge shapes: zero extents, zero batch, matrices smaller than one block.
  const std::int64_t edge[][3] = {{0, 5, 7},  {5, 0, 7},  {0, 0, 3}, {6, 5, 0},   {1, 1, 1},
                                  {1, 3, 17}, {3, 1, 33}, {7, 7, 9}, {15, 2, 40}, {2, 15, 40}};
  for (const auto& e : edge)
    cases.push_back({e[0], e[1], e[2], 1.0, 0.0, 0.0, places[seed % 3], places[(seed + 1) % 3], false, seed++});
  using P = st::Placement;
  cases.push_back({30, 33, 19, 0.0, 0.0, 0.0, P::strided, P::unaligned, false, seed++});  // empty
  cases.push_back({30, 33, 21, 1.0, 0.0, 0.0, P::unaligned, P::strided, false, seed++});  // full
  cases.push_back({29, 35, 23, 1.0, 0.0, 0.0, P::tight, P::tight, true, seed++});         // full, scrambled
  for (int k = 0; k < 12; ++k)
    cases.push_back({pick(1, 90), pick(1, 90), pick(1, 80), rng.uniform01(), 0.2, 0.2, places[k % 3],
                     places[(k + 2) % 3], true, seed++});
  return cases;
}

// The R * C values of a block at (bi, bj): uniform, non-zero, zero outside the matrix.
template <int R, int C, Value T>
std::vector<T> block_values(std::int64_t M, std::int64_t K, std::int64_t bi, std::int64_t bj, CounterRng& rng) {
  std::vector<T> v(static_cast<std::size_t>(R * C), T(0));
  for (std::int64_t r = 0; r < R; ++r)
    for (std::int64_t c = 0; c < C; ++c)
      if (bi * R + r < M && bj * C + c < K) v[r * C + c] = static_cast<T>(0.25 + 0.75 * rng.uniform01());
  return v;
}

// Random inserts and erases (about 4 per block row) and rows grown past their capacity,
// which relocates them to the end of storage and leaves dead slots. Returns relocations.
template <int R, int C, Value T, ColumnIndex Index>
std::int64_t scramble(BlockMatrix<R, C, T, Index>& W, std::uint64_t seed) {
  const auto& P = W.pattern();
  if (P.rows() == 0 || P.cols() == 0) return 0;
  CounterRng rng(seed, 0x5C4A);
  std::int64_t relocations = 0;
  auto insert_one = [&](std::int64_t bi) {
    if (P.row_nnz(bi) >= P.cols()) return false;
    std::int64_t bj = static_cast<std::int64_t>(rng.uniform_below(static_cast<std::uint64_t>(P.cols())));
    while (W.find_block(bi, bj) >= 0) bj = (bj + 1) % P.cols();
    const std::int64_t start = P.row_start(bi);
    const auto v = block_values<R, C, T>(W.rows(), W.cols(), bi, bj, rng);
    W.insert_block(bi, bj, std::span<const T>(v));
    relocations += P.row_start(bi) != start;
    return true;
  };
  for (std::int64_t k = 0; k < 4 * P.rows(); ++k) {
    const auto bi = static_cast<std::int64_t>(rng.uniform_below(static_cast<std::uint64_t>(P.rows())));
    switch (rng.uniform_below(4)) {
      case 0:
      case 1:
        if (P.row_nnz(bi) > 0) {
          const auto q = static_cast<std::int64_t>(rng.uniform_below(static_cast<std::uint64_t>(P.row_nnz(bi))));
          REQUIRE(W.erase_block(bi, P.col_indices()[P.row_start(bi) + q]));
        }
        break;
      case 2: insert_one(bi); break;
      default: {
        const std::int64_t cap = P.row_capacity(bi);
        while (P.row_nnz(bi) <= cap && insert_one(bi)) {
        }
      }
    }
  }
  return relocations;
}

// The matrix of a case, built from a dense matrix whose live blocks hold non-zeros.
template <int R, int C, Value T, ColumnIndex Index>
BlockMatrix<R, C, T, Index> case_matrix(const Case& c) {
  CounterRng rng(c.seed, 0xC0DE);
  Matrix<T> dense(c.M, c.K, T(0));
  const std::int64_t br = (c.M + R - 1) / R, bc = (c.K + C - 1) / C;
  for (std::int64_t bi = 0; bi < br; ++bi) {
    const double u = rng.uniform01();
    if (u < c.p_empty) continue;
    const bool full = u < c.p_empty + c.p_full;
    for (std::int64_t bj = 0; bj < bc; ++bj)
      if (full || rng.uniform01() < c.density) {
        const auto v = block_values<R, C, T>(c.M, c.K, bi, bj, rng);
        for (std::int64_t r = 0; r < R && bi * R + r < c.M; ++r)
          for (std::int64_t col = 0; col < C && bj * C + col < c.K; ++col)
            dense(bi * R + r, bj * C + col) = v[r * C + col];
      }
  }
  auto W = BlockMatrix<R, C, T, Index>::from_dense(dense.view());
  if (c.scrambled) scramble(W, c.seed);
  return W;
}

// Tolerance for a dot of n terms with sum |terms| S: relative 1e-5 (float) / 1e-12 (double)
// of S, or the bound of kernel_test_support.hpp (2 n epsilon S) where that is larger.
template <Value T>
bool close(T got, T want, double n, double S) {
  const double rel = std::is_same_v<T, float> ? 1e-5 : 1e-12;
  const double tol = std::max(rel, 2.0 * n * static_cast<double>(st::eps<T>)) * S;
  return std::fabs(static_cast<double>(got) - static_cast<double>(want)) <= tol;
}

// Checks got against want (the oracle's, from g0 with `mode`): the in-matrix entries of live
// blocks within tolerance; every other entry exactly 0 (overwrite) or g0's bits (accumulate).
template <int R, int C, Value T, ColumnIndex Index>
st::Mismatches compare(const BlockMatrix<R, C, T, Index>& W, std::type_identity_t<ConstMatrixView<T>> dY,
                       std::type_identity_t<ConstMatrixView<T>> X, const std::vector<T>& g0, Update mode,
                       const std::vector<T>& got, const std::vector<T>& want) {
  st::Mismatches m;
  constexpr std::int64_t RC = std::int64_t{R} * C;
  std::vector<std::int64_t> entry(got.size(), -1);  // live in-matrix entries: element row * K + col
  W.for_each_block([&](std::int64_t bi, std::int64_t bj, std::int64_t s, const T*) {
    for (std::int64_t r = 0; r < R; ++r)
      for (std::int64_t c = 0; c < C; ++c)
        if (bi * R + r < W.rows() && bj * C + c < W.cols())
          entry[static_cast<std::size_t>(s * RC + r * C + c)] = (bi * R + r) * W.cols() + bj * C + c;
  });
  for (std::size_t e = 0; e < got.size(); ++e) {
    if (entry[e] < 0) {
      const bool ok = mode == Update::overwrite ? got[e] == T(0) : st::same_bits(got[e], g0[e]);
      if (!ok)
        m.add("non-live or out-of-matrix entry ", e, " (slot ", e / RC, ") holds ", got[e], ", expected ",
              mode == Update::overwrite ? T(0) : g0[e]);
      continue;
    }
    const std::int64_t i = entry[e] / W.cols(), k = entry[e] % W.cols();
    double S = 0;
    for (std::int64_t b = 0; b < X.cols(); ++b)
      S += std::fabs(static_cast<double>(dY(i, b)) * static_cast<double>(X(k, b)));
    double n = static_cast<double>(X.cols());
    if (mode == Update::accumulate) {
      S += std::fabs(static_cast<double>(g0[e]));
      n += 1;
    }
    if (!close<T>(got[e], want[e], std::max(n, 1.0), S))
      m.add("grad[", e, "] (W(", i, ", ", k, ")) = ", got[e], ", expected ", want[e], " (B ", X.cols(), ", sum|terms| ",
            S, ")");
  }
  return m;
}

// A grad to start from: NaN (overwrite: must never be read) or a random sentinel per entry
// (accumulate: non-live entries must keep it).
template <Value T>
std::vector<T> start_grad(std::int64_t n, Update mode, CounterRng& rng) {
  std::vector<T> g(static_cast<std::size_t>(n), st::quiet_nan<T>());
  if (mode == Update::accumulate)
    for (T& v : g) v = static_cast<T>(rng.uniform(-4.0, 4.0));
  return g;
}

struct Coverage {
  std::int64_t edge_blocks = 0, dead = 0, out_of_order = 0, padding = 0, empty_rows = 0, full_rows = 0;
};

template <int R, int C, Value T, ColumnIndex Index>
void check_case(const Case& c, Update mode, KernelWorkspace<T>* ws, Coverage& cov) {
  const auto W = case_matrix<R, C, T, Index>(c);
  REQUIRE_NOTHROW(W.check_invariants());
  const auto& P = W.pattern();
  cov.dead += W.dead_slots() > 0;
  cov.padding += W.storage_size() > W.nnz_blocks();
  for (std::int64_t bi = 0; bi < P.rows(); ++bi) {
    cov.empty_rows += P.row_nnz(bi) == 0;
    cov.full_rows += P.cols() > 0 && P.row_nnz(bi) == P.cols();
    if (bi > 0 && P.row_start(bi) < P.row_start(bi - 1)) ++cov.out_of_order;
  }
  W.for_each_block([&](std::int64_t bi, std::int64_t bj, std::int64_t, const T*) {
    cov.edge_blocks += (bi + 1) * R > W.rows() || (bj + 1) * C > W.cols();
  });
  CounterRng rng(c.seed, 0x5DD);
  st::Operand<T> dY(c.M, c.B, c.pd, st::quiet_nan<T>());
  st::Operand<T> X(c.K, c.B, c.px, st::quiet_nan<T>());
  dY.fill_random(rng);
  X.fill_random(rng);
  const std::vector<T> g0 = start_grad<T>(W.storage_size() * R * C, mode, rng);
  std::vector<T> want = g0, got = g0;
  reference::block_sddmm(W, dY.cview(), X.cview(), std::span<T>(want), mode);
  if (ws)
    block_sddmm(W, dY.cview(), X.cview(), std::span<T>(got), *ws, mode);
  else
    block_sddmm(W, dY.cview(), X.cview(), std::span<T>(got), mode);
  const auto m = compare(W, dY.cview(), X.cview(), g0, mode, got, want);
  INFO(m.first);
  CHECK(m.count == 0);
}

}  // namespace

TEMPLATE_LIST_TEST_CASE("block_sddmm matches the oracle on random shapes, placements and layouts", "[block_sddmm]",
                        AllBlockTypes) {
  using T = typename TestType::T;
  using Index = typename TestType::Index;
  constexpr int R = TestType::R, C = TestType::C;
  CAPTURE(R, C);
  Coverage cov;
  KernelWorkspace<T> ws;  // reused across every shape and matrix: must rebuild what it keeps
  for (const Case& c : block_cases())
    for (Update mode : {Update::overwrite, Update::accumulate}) {
      CAPTURE(c, st::name(mode));
      check_case<R, C, T, Index>(c, mode, (c.seed % 2) ? &ws : nullptr, cov);
    }
  // The cases reach what they are meant to.
  CHECK(cov.edge_blocks > 0);
  CHECK(cov.dead > 0);
  CHECK(cov.out_of_order > 0);
  CHECK(cov.padding > 0);
  CHECK(cov.empty_rows > 0);
  CHECK(cov.full_rows > 0);
}

TEMPLATE_LIST_TEST_CASE("block_sddmm never reads W's values", "[block_sddmm]", SomeBlockTypes) {
  using T = typename TestType::T;
  using Index = typename TestType::Index;
  constexpr int R = TestType::R, C = TestType::C;
  const Case c{37, 41, 29, 0.4, 0.1, 0.1, st::Placement::strided, st::Placement::unaligned, true, 77};
  auto W = case_matrix<R, C, T, Index>(c);
  const auto clean = W;
  std::fill(W.values().begin(), W.values().end(), st::quiet_nan<T>());  // breaks the invariants on purpose
  CounterRng rng(77, 1);
  Matrix<T> dY(c.M, c.B), X(c.K, c.B);
  st::fill_uniform(dY, rng);
  st::fill_uniform(X, rng);
  std::vector<T> got(static_cast<std::size_t>(W.storage_size() * R * C)), want(got.size());
  reference::block_sddmm(clean, dY.view(), X.view(), std::span<T>(want));
  block_sddmm(W, dY.view(), X.view(), std::span<T>(got));
  const auto m = compare(clean, dY.view(), X.view(), std::vector<T>(got.size()), Update::overwrite, got, want);
  INFO(m.first);
  CHECK(m.count == 0);
}

// An edge block's out-of-matrix entries are 0 (overwrite) or untouched (accumulate) by
// contract, not because their dots happen to vanish: with Inf in every row of dY and X, a
// kernel that stored a dot there (zero padding times Inf) would leave NaN.
TEMPLATE_LIST_TEST_CASE("block_sddmm sets out-of-matrix entries, it does not compute them", "[block_sddmm]",
                        SomeBlockTypes) {
  using T = typename TestType::T;
  using Index = typename TestType::Index;
  constexpr int R = TestType::R, C = TestType::C;
  constexpr std::int64_t RC = std::int64_t{R} * C;
  const Case c{16 * 2 + 5, 8 * 3 + 3, 0, 1.0, 0.0, 0.0, st::Placement::tight, st::Placement::tight, true, 31};
  const auto W = case_matrix<R, C, T, Index>(c);
  for (std::int64_t B : {7, 32}) {
    CAPTURE(R, C, B);
    CounterRng rng(31, static_cast<std::uint64_t>(B));
    Matrix<T> dY(c.M, B), X(c.K, B);
    st::fill_uniform(dY, rng);
    st::fill_uniform(X, rng);
    for (std::int64_t i = 0; i < c.M; ++i) dY(i, 3) = std::numeric_limits<T>::infinity();
    for (std::int64_t k = 0; k < c.K; ++k) X(k, 3) = std::numeric_limits<T>::infinity();
    for (Update mode : {Update::overwrite, Update::accumulate}) {
      CAPTURE(st::name(mode));
      const std::vector<T> g0 = start_grad<T>(W.storage_size() * RC, mode, rng);
      std::vector<T> got = g0;
      block_sddmm(W, dY.view(), X.view(), std::span<T>(got), mode);
      std::int64_t edge = 0, wrong = 0;
      W.for_each_block([&](std::int64_t bi, std::int64_t bj, std::int64_t s, const T*) {
        for (std::int64_t r = 0; r < R; ++r)
          for (std::int64_t col = 0; col < C; ++col) {
            if (bi * R + r < c.M && bj * C + col < c.K) continue;
            const auto e = static_cast<std::size_t>(s * RC + r * C + col);
            ++edge;
            wrong += mode == Update::overwrite ? !(got[e] == T(0)) : !st::same_bits(got[e], g0[e]);
          }
      });
      CHECK(edge > 0);
      CHECK(wrong == 0);
    }
  }
}

TEMPLATE_LIST_TEST_CASE("block_sddmm is bitwise identical for 1, 2 and 3 threads", "[block_sddmm][threads]",
                        AllBlockTypes) {
  using T = typename TestType::T;
  using Index = typename TestType::Index;
  constexpr int R = TestType::R, C = TestType::C;
  // Enough work for several threads (above kParallelMinWork), edge blocks on both sides,
  // dead slots and rows out of storage order.
  const Case c{16 * 40 + 3, 8 * 30 + 5, 0, 0.08, 0.1, 0.05, st::Placement::strided, st::Placement::unaligned,
               true,        606};
  const auto W = case_matrix<R, C, T, Index>(c);
  REQUIRE(W.dead_slots() > 0);
  for (std::int64_t B : {13, 64, 200}) {
    CAPTURE(R, C, B);
    CounterRng rng(606, static_cast<std::uint64_t>(B));
    st::Operand<T> dY(W.rows(), B, st::Placement::strided, st::quiet_nan<T>());
    st::Operand<T> X(W.cols(), B, st::Placement::unaligned, st::quiet_nan<T>());
    dY.fill_random(rng);
    X.fill_random(rng);
    REQUIRE(W.nnz_blocks() * R * C * B >= detail::kParallelMinWork);
    for (Update mode : {Update::overwrite, Update::accumulate}) {
      CAPTURE(st::name(mode));
      const std::vector<T> g0 = start_grad<T>(W.storage_size() * R * C, mode, rng);
      std::vector<std::vector<T>> results;
      KernelWorkspace<T> ws;
      for (int threads : {1, 2, 3})
        sprig_test::with_threads(threads, [&] {
          std::vector<T> g = g0;
          block_sddmm(W, dY.cview(), X.cview(), std::span<T>(g), ws, mode);
          results.push_back(std::move(g));
        });
      CHECK(st::bitwise_differences<T>(std::span<const T>(results[0]), std::span<const T>(results[1])) == 0);
      CHECK(st::bitwise_differences<T>(std::span<const T>(results[0]), std::span<const T>(results[2])) == 0);
      // and right, not just reproducible
      std::vector<T> want = g0;
      reference::block_sddmm(W, dY.cview(), X.cview(), std::span<T>(want), mode);
      const auto m = compare(W, dY.cview(), X.cview(), g0, mode, results[2], want);
      INFO(m.first);
      CHECK(m.count == 0);
    }
  }
}

TEMPLATE_LIST_TEST_CASE("block_sddmm rejects mismatched shapes with ShapeError and leaves grad alone", "[block_sddmm]",
                        SomeBlockTypes) {
  using T = typename TestType::T;
  using Index = typename TestType::Index;
  constexpr int R = TestType::R, C = TestType::C;
  const auto W = BlockMatrix<R, C, T, Index>::random(19, 13, 3, 5);  // 19 x 13
  const std::int64_t S = W.storage_size() * R * C;
  Matrix<T> dY(19, 5, T(1)), X(13, 5, T(1));
  Matrix<T> dY_rows(20, 5, T(1)), X_rows(12, 5, T(1)), X_cols(13, 6, T(1)), dY_cols(19, 4, T(1));
  std::vector<T> grad(static_cast<std::size_t>(S), T(7)), short_grad(grad.size() - 1, T(7)),
      long_grad(grad.size() + 1, T(7)), slot_grad(static_cast<std::size_t>(W.storage_size()), T(7));
  using Catch::Matchers::Contains;
  for (Update mode : {Update::overwrite, Update::accumulate}) {
    CAPTURE(st::name(mode));
    CHECK_THROWS_AS(block_sddmm(W, dY_rows.view(), X.view(), std::span<T>(grad), mode), ShapeError);
    CHECK_THROWS_AS(block_sddmm(W, dY.view(), X_rows.view(), std::span<T>(grad), mode), ShapeError);
    CHECK_THROWS_AS(block_sddmm(W, dY.view(), X_cols.view(), std::span<T>(grad), mode), ShapeError);
    CHECK_THROWS_AS(block_sddmm(W, dY_cols.view(), X.view(), std::span<T>(grad), mode), ShapeError);
    CHECK_THROWS_AS(block_sddmm(W, dY.view(), X.view(), std::span<T>(short_grad), mode), ShapeError);
    CHECK_THROWS_AS(block_sddmm(W, dY.view(), X.view(), std::span<T>(long_grad), mode), ShapeError);
    // one entry per slot instead of R * C: named in the message
    CHECK_THROWS_WITH(block_sddmm(W, dY.view(), X.view(), std::span<T>(slot_grad), mode),
                      Contains("grad has " + std::to_string(W.storage_size()) + " entries") &&
                          Contains("grad " + std::to_string(S)));
  }
  bool untouched = true;
  for (const auto* g : {&grad, &short_grad, &long_grad, &slot_grad})
    for (T v : *g) untouched = untouched && v == T(7);
  CHECK(untouched);
}

TEMPLATE_LIST_TEST_CASE("block_sddmm rejects a grad that overlaps an input, and leaves it alone",
                        "[block_sddmm][overlap]", SomeBlockTypes) {
  using T = typename TestType::T;
  using Index = typename TestType::Index;
  constexpr int R = TestType::R, C = TestType::C;
  using Catch::Matchers::Contains;
  auto W = BlockMatrix<R, C, T, Index>::random(16, 16, 4, 9);
  const auto S = static_cast<std::size_t>(W.storage_size() * R * C);
  const std::int64_t B = 8;
  std::vector<T> buf(S + 16 * B, T(0));
  CounterRng rng(3, 2);
  for (T& v : buf) v = static_cast<T>(rng.uniform01() - 0.5);
  const std::vector<T> before = buf;
  const ConstMatrixView<T> X(buf.data(), 16, B);  // grad starts inside X
  Matrix<T> dY(16, B, T(1));
  const std::span<T> grad(buf.data() + 8, S);
  CHECK_THROWS_AS(block_sddmm(W, dY.view(), X, grad), ArgumentError);
  CHECK_THROWS_WITH(block_sddmm(W, dY.view(), X, grad, Update::accumulate),
                    Contains("sprig::block_sddmm: grad overlaps X"));
  CHECK_THROWS_WITH(block_sddmm(W, X, dY.view(), grad), Contains("sprig::block_sddmm: grad overlaps dY"));
  CHECK(buf == before);
  const std::vector<T> values_before(W.values().begin(), W.values().end());
  CHECK_THROWS_WITH(block_sddmm(W, dY.view(), dY.view(), W.values()),
                    Contains("sprig::block_sddmm: grad overlaps W's values"));
  CHECK(std::equal(values_before.begin(), values_before.end(), W.values().begin()));
  // grad right after X in the same buffer is fine.
  const ConstMatrixView<T> X_first(buf.data() + S, 16, B);
  Matrix<T> Xc(16, B);
  for (std::int64_t i = 0; i < 16; ++i)
    for (std::int64_t b = 0; b < B; ++b) Xc(i, b) = X_first(i, b);
  const std::span<T> g(buf.data(), S);
  block_sddmm(W, dY.view(), X_first, g);
  std::vector<T> want(S), got(g.begin(), g.end());
  reference::block_sddmm(W, dY.view(), Xc.view(), std::span<T>(want));
  const auto m = compare(W, dY.view(), Xc.view(), std::vector<T>(S), Update::overwrite, got, want);
  INFO(m.first);
  CHECK(m.count == 0);
}
