// tests/test_spmm.cpp — sprig::spmm (Y = W X) against the scalar reference, on every
// (T, Index) pair and the shapes of kernel_test_support.hpp; BLAS beta semantics; reads of
// live slots only; bitwise identical results for any OpenMP thread count; shape checks.
#include "sprig/kernels/spmm.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <span>
#include <utility>
#include <vector>

#ifdef _OPENMP
#  include <omp.h>
#endif

#include "kernel_test_support.hpp"
#include "sprig/kernels/reference.hpp"

using namespace sprig;
namespace st = sprig::test;

namespace {

// Runs W on one case's operands: X random with NaN around its view, Y NaN (overwrite: must be
// ignored) or random (accumulate), with a finite guard around its view that must stay
// untouched. With `ws`, through the overload that takes a caller-owned workspace.
template <Value T, ColumnIndex Index>
void check_matrix(const PaddedCSR<T, Index>& W, const st::Case& c, Update mode, KernelWorkspace<T>* ws,
                  std::uint64_t salt) {
  REQUIRE_NOTHROW(W.check_invariants());
  CounterRng rng(c.seed, salt);
  st::Operand<T> X(c.K, c.B, c.px, st::quiet_nan<T>());
  X.fill_random(rng);
  st::Operand<T> Y(c.M, c.B, c.py, T(-12345.5));
  if (mode == Update::overwrite)
    Y.fill(st::quiet_nan<T>());
  else
    Y.fill_random(rng);
  const Matrix<T> Y0 = Y.copy();
  Matrix<T> want = Y0;
  reference::spmm(W, X.cview(), want.view(), mode);

  if (ws)
    spmm(W, X.cview(), Y.view(), *ws, mode);
  else
    spmm(W, X.cview(), Y.view(), mode);

  const auto m = st::compare_spmm(W, X.cview(), Y0, mode, Y.cview(), want.view(), 2.0);
  INFO(m.first);
  CHECK(m.count == 0);
  CHECK(Y.guard_violations() == 0);
}

// The same on the case's own matrix.
template <Value T, ColumnIndex Index>
void check_case(const st::Case& c, Update mode, KernelWorkspace<T>* ws = nullptr) {
  check_matrix(st::case_matrix<T, Index>(c), c, mode, ws, 0x5833);
}

}  // namespace

TEMPLATE_LIST_TEST_CASE("spmm matches the reference on random shapes, placements and layouts", "[spmm]", st::AllTypes) {
  using T = typename TestType::T;
  using Index = typename TestType::Index;
  for (const st::Case& c : st::kernel_cases(st::max_cols_for<Index>()))
    for (Update mode : {Update::overwrite, Update::accumulate}) {
      CAPTURE(c, st::name(mode));
      check_case<T, Index>(c, mode);
    }
}

TEMPLATE_LIST_TEST_CASE("spmm with one workspace reused across all shapes and matrices", "[spmm][workspace]",
                        st::AllTypes) {
  using T = typename TestType::T;
  using Index = typename TestType::Index;
  // A workspace caches the row partition and the packing buffer: whatever it holds from the
  // previous (different) call must not leak into the next one.
  KernelWorkspace<T> ws;
  for (const st::Case& c : st::kernel_cases(st::max_cols_for<Index>()))
    for (Update mode : {Update::overwrite, Update::accumulate}) {
      CAPTURE(c, st::name(mode));
      check_case<T, Index>(c, mode, &ws);
    }
}

TEMPLATE_LIST_TEST_CASE("spmm on a scrambled matrix: storage out of row order, dead slots", "[spmm]", st::AllTypes) {
  using T = typename TestType::T;
  using Index = typename TestType::Index;
  for (std::uint64_t seed = 1; seed <= 4; ++seed) {
    const auto W = st::scrambled_matrix<T, Index>(40, 30, 0.2, seed);
    CAPTURE(seed);
    for (std::int64_t B : {1, 7, 16, 33}) {
      CounterRng rng(seed, static_cast<std::uint64_t>(B));
      st::Operand<T> X(W.cols(), B, st::Placement::unaligned, st::quiet_nan<T>());
      X.fill_random(rng);
      Matrix<T> want(W.rows(), B), got(W.rows(), B, st::quiet_nan<T>());
      reference::spmm(W, X.cview(), want.view());
      spmm(W, X.cview(), got.view());
      const auto m = st::compare_spmm(W, X.cview(), want, Update::overwrite, got.view(), want.view(), 2.0);
      CAPTURE(B);
      INFO(m.first);
      CHECK(m.count == 0);
    }
  }
}

TEMPLATE_LIST_TEST_CASE("spmm reads live slots only: NaN in padding and dead slots does not leak", "[spmm]",
                        st::AllTypes) {
  using T = typename TestType::T;
  using Index = typename TestType::Index;
  auto W = st::random_matrix<T, Index>(33, 21, 0.3, 99);
  st::scramble(W, 99);
  const auto clean = W;
  REQUIRE(st::poison_non_live_values(W) > 0);
  for (std::int64_t B : {1, 5, 8, 31, 64, 65}) {
    CAPTURE(B);
    CounterRng rng(99, static_cast<std::uint64_t>(B));
    // X has a NaN row above its view, where a padding slot's column -1 would point.
    st::Operand<T> X(W.cols(), B, st::Placement::unaligned, st::quiet_nan<T>());
    X.fill_random(rng);
    Matrix<T> want(W.rows(), B), got(W.rows(), B);
    reference::spmm(clean, X.cview(), want.view());
    spmm(W, X.cview(), got.view());
    const auto m = st::compare_spmm(clean, X.cview(), want, Update::overwrite, got.view(), want.view(), 2.0);
    INFO(m.first);
    CHECK(m.count == 0);
  }
}

TEMPLATE_LIST_TEST_CASE("spmm overwrite replaces Y, accumulate adds to it", "[spmm]", st::AllTypes) {
  using T = typename TestType::T;
  using Index = typename TestType::Index;
  // A property that does not go through the reference: accumulate onto Z equals Z plus the
  // overwrite result, up to the rounding of one extra addend per element.
  const auto W = st::random_matrix<T, Index>(25, 19, 0.4, 7);
  for (std::int64_t B : {1, 3, 16, 17, 40}) {
    CAPTURE(B);
    CounterRng rng(7, static_cast<std::uint64_t>(B));
    Matrix<T> X(W.cols(), B), Z(W.rows(), B);
    st::fill_uniform(X, rng);
    st::fill_uniform(Z, rng);
    Matrix<T> over(W.rows(), B, std::numeric_limits<T>::infinity());
    spmm(W, X.view(), over.view(), Update::overwrite);
    Matrix<T> acc = Z;
    spmm(W, X.view(), acc.view(), Update::accumulate);
    Matrix<T> sum(W.rows(), B);
    for (std::int64_t i = 0; i < Z.rows(); ++i)
      for (std::int64_t b = 0; b < B; ++b) sum(i, b) = Z(i, b) + over(i, b);
    // acc and Z + over each sum row_nnz + 1 terms: the usual bound with n = row_nnz + 1.
    const auto m = st::compare_spmm(W, X.view(), Z, Update::accumulate, acc.view(), sum.view(), 2.0);
    INFO(m.first);
    CHECK(m.count == 0);
    // Accumulating nothing (an all-empty W) leaves Y bit for bit as it was.
    const PaddedCSR<T, Index> empty(W.rows(), W.cols());
    Matrix<T> same = Z;
    spmm(empty, X.view(), same.view(), Update::accumulate);
    CHECK(st::bitwise_differences<T>(same.view(), Z.view()) == 0);
    spmm(empty, X.view(), same.view(), Update::overwrite);
    bool all_zero = true;
    for (std::int64_t i = 0; i < same.rows(); ++i)
      for (std::int64_t b = 0; b < B; ++b) all_zero = all_zero && same(i, b) == T(0);
    CHECK(all_zero);
  }
}

#ifdef _OPENMP
TEMPLATE_LIST_TEST_CASE("spmm is bitwise identical for 1, 2 and 3 threads", "[spmm][threads]", st::AllTypes) {
  using T = typename TestType::T;
  using Index = typename TestType::Index;
  const int saved = omp_get_max_threads();
  // Big enough that a kernel which parallelises only above a work threshold does so; rows
  // of very different lengths (full and empty ones) so an nnz-balanced partition is uneven.
  auto W = st::random_matrix<T, Index>(1200, 300, 0.05, 5);
  st::scramble(W, 5);
  for (std::int64_t B : {13, 64, 200}) {
    CAPTURE(B);
    CounterRng rng(5, static_cast<std::uint64_t>(B));
    st::Operand<T> X(W.cols(), B, st::Placement::strided, st::quiet_nan<T>());
    X.fill_random(rng);
    Matrix<T> Z(W.rows(), B);
    st::fill_uniform(Z, rng);
    for (Update mode : {Update::overwrite, Update::accumulate}) {
      CAPTURE(st::name(mode));
      std::vector<Matrix<T>> results;
      for (int threads : {1, 2, 3}) {
        omp_set_num_threads(threads);
        Matrix<T> Y = Z;
        spmm(W, X.cview(), Y.view(), mode);
        results.push_back(std::move(Y));
      }
      omp_set_num_threads(saved);
      CHECK(st::bitwise_differences<T>(results[0].view(), results[1].view()) == 0);
      CHECK(st::bitwise_differences<T>(results[0].view(), results[2].view()) == 0);
      // and the threaded result is right, not just reproducible
      Matrix<T> want = Z;
      reference::spmm(W, X.cview(), want.view(), mode);
      const auto m = st::compare_spmm(W, X.cview(), Z, mode, results[1].view(), want.view(), 2.0);
      INFO(m.first);
      CHECK(m.count == 0);
    }
  }
  omp_set_num_threads(saved);
}

TEMPLATE_LIST_TEST_CASE("spmm through a workspace last used by another matrix with the same partition key",
                        "[spmm][threads][workspace]", st::AllTypes) {
  using T = typename TestType::T;
  using Index = typename TestType::Index;
  // W1 has its first half of rows full and the rest empty, W2 the opposite: same topology
  // version, rows, nnz and storage size, which a cache keyed on those could not tell apart.
  // Nothing cached for W1 (row partition, column-block bounds: the small block budget makes
  // the kernel use them) may serve W2.
  const std::int64_t M = 2000, K = 64, B = 16;
  auto half_full = [&](bool first_half) {
    std::vector<std::int64_t> r, c;
    std::vector<T> v;
    for (std::int64_t i = 0; i < M; ++i)
      if ((i < M / 2) == first_half)
        for (std::int64_t k = 0; k < K; ++k) {
          r.push_back(i);
          c.push_back(k);
          v.push_back(static_cast<T>(((i * 7 + k * 3) % 17) - 8) / T(8));
        }
    return PaddedCSR<T, Index>::from_coo(M, K, std::span<const std::int64_t>(r), std::span<const std::int64_t>(c),
                                         std::span<const T>(v));
  };
  const auto W1 = half_full(true), W2 = half_full(false);
  REQUIRE(W1.topology_version() == W2.topology_version());
  REQUIRE(W1.nnz() == W2.nnz());
  REQUIRE(W1.storage_size() == W2.storage_size());
  CounterRng rng(12, 0);
  Matrix<T> X(K, B);
  st::fill_uniform(X, rng);
  const int saved = omp_get_max_threads();
  omp_set_num_threads(2);
  KernelWorkspace<T> ws;
  ws.column_block_bytes = 16 * static_cast<std::int64_t>(sizeof(T) * detail::simd_width<T>());
  REQUIRE((detail::simd_width<T>() == 1 || detail::spmm_column_blocks<T>(K, B, ws.column_block_bytes).count > 1));
  Matrix<T> Y1(M, B), Y2(M, B, st::quiet_nan<T>());
  spmm(W1, X.view(), Y1.view(), ws);
  spmm(W2, X.view(), Y2.view(), ws);
  omp_set_num_threads(saved);
  Matrix<T> want(M, B);
  reference::spmm(W2, X.view(), want.view());
  const auto m = st::compare_spmm(W2, X.view(), want, Update::overwrite, Y2.view(), want.view(), 2.0);
  INFO(m.first);
  CHECK(m.count == 0);
}
#endif

TEMPLATE_LIST_TEST_CASE("spmm rejects mismatched shapes with ShapeError and leaves Y alone", "[spmm]", st::AllTypes) {
  using T = typename TestType::T;
  using Index = typename TestType::Index;
  const auto W = st::random_matrix<T, Index>(6, 4, 0.5, 3);  // 6 x 4
  Matrix<T> X(4, 5, T(1)), Y(6, 5, T(7));
  Matrix<T> X_rows(5, 5, T(1)), Y_rows(7, 5, T(7)), Y_cols(6, 4, T(7)), Y_empty(0, 5), X_empty(0, 5);
  for (Update mode : {Update::overwrite, Update::accumulate}) {
    CAPTURE(st::name(mode));
    CHECK_THROWS_AS(spmm(W, X_rows.view(), Y.view(), mode), ShapeError);   // X rows != K
    CHECK_THROWS_AS(spmm(W, X.view(), Y_rows.view(), mode), ShapeError);   // Y rows != M
    CHECK_THROWS_AS(spmm(W, X.view(), Y_cols.view(), mode), ShapeError);   // Y cols != X cols
    CHECK_THROWS_AS(spmm(W, X.view(), Y_empty.view(), mode), ShapeError);  // Y has 0 rows
    CHECK_THROWS_AS(spmm(W, X_empty.view(), Y.view(), mode), ShapeError);  // X has 0 rows
  }
  bool untouched = true;
  for (std::int64_t i = 0; i < 6; ++i)
    for (std::int64_t b = 0; b < 5; ++b) untouched = untouched && Y(i, b) == T(7);
  CHECK(untouched);
  for (std::int64_t i = 0; i < 7; ++i)
    for (std::int64_t b = 0; b < 5; ++b) untouched = untouched && Y_rows(i, b) == T(7);
  CHECK(untouched);
}

// The fused epilogue must change nothing but the number of passes: bitwise the unfused
// sequence (spmm, then y + b[i], then the ReLU's x > 0 ? x : 0), on every case, with a bias
// that holds a NaN (the ReLU turns it into 0 either way) and values that cancel rows to zero.
TEMPLATE_LIST_TEST_CASE("spmm with a row epilogue is bitwise spmm, then the bias, then the ReLU", "[spmm][epilogue]",
                        st::AllTypes) {
  using T = typename TestType::T;
  using Index = typename TestType::Index;
  KernelWorkspace<T> ws;
  std::int64_t compared = 0, clamped = 0;
  for (const st::Case& c : st::kernel_cases(st::max_cols_for<Index>())) {
    CAPTURE(c);
    const auto W = st::case_matrix<T, Index>(c);
    CounterRng rng(c.seed, 0xE91);
    st::Operand<T> X(c.K, c.B, c.px, st::quiet_nan<T>());
    X.fill_random(rng);
    std::vector<T> bias(static_cast<std::size_t>(c.M));
    for (T& b : bias) b = static_cast<T>(rng.uniform(-0.5, 0.5));
    if (c.M > 1) bias[1] = st::quiet_nan<T>();
    Matrix<T> want(c.M, c.B);
    spmm(W, X.cview(), want.view());
    for (std::int64_t i = 0; i < c.M; ++i)
      for (std::int64_t b = 0; b < c.B; ++b) want(i, b) += bias[static_cast<std::size_t>(i)];
    for (FusedActivation act : {FusedActivation::none, FusedActivation::relu}) {
      CAPTURE(act == FusedActivation::relu);
      st::Operand<T> Y(c.M, c.B, c.py, T(-12345.5));
      Y.fill(st::quiet_nan<T>());  // overwrite: never read
      spmm(W, X.cview(), Y.view(), ws, RowEpilogue<T>{bias, act});
      bool same = true;
      for (std::int64_t i = 0; i < c.M; ++i)
        for (std::int64_t b = 0; b < c.B; ++b, ++compared) {
          T w = want(i, b);
          if (act == FusedActivation::relu) {
            clamped += !(w > T(0));
            w = w > T(0) ? w : T(0);
          }
          const T g = Y(i, b);
          same = same && (std::isnan(w) ? std::isnan(g) : std::memcmp(&g, &w, sizeof(T)) == 0);
        }
      CHECK(same);
      CHECK(Y.guard_violations() == 0);
    }
  }
  CHECK(compared > 20000);
  CHECK(clamped > 5000);  // the ReLU branch was exercised
}

TEMPLATE_LIST_TEST_CASE("spmm with a row epilogue: no bias is plain spmm; a bias of the wrong length is a ShapeError",
                        "[spmm][epilogue]", st::AllTypes) {
  using T = typename TestType::T;
  using Index = typename TestType::Index;
  const auto W = st::random_matrix<T, Index>(6, 40, 0.5, 3);
  CounterRng rng(3, 40);
  Matrix<T> X(40, 21), plain(6, 21), fused(6, 21), Y(6, 21, T(7));
  st::fill_uniform(X, rng);
  KernelWorkspace<T> ws;
  spmm(W, X.view(), plain.view());
  spmm(W, X.view(), fused.view(), ws, RowEpilogue<T>{});
  CHECK(st::bitwise_differences<T>(plain.view(), fused.view()) == 0);
  const std::vector<T> short_bias(5, T(1));
  CHECK_THROWS_AS(spmm(W, X.view(), Y.view(), ws, RowEpilogue<T>{short_bias, FusedActivation::relu}), ShapeError);
  // gelu is a backward-only activation (GELU::forward_keep_derivative computes the forward)
  CHECK_THROWS_AS(spmm(W, X.view(), Y.view(), ws, RowEpilogue<T>{{}, FusedActivation::gelu}), ArgumentError);
  CHECK(Y(0, 0) == T(7));
}

// Column blocks on every case, rows grouped by block and not (kernel_test_support.hpp:
// for_each_blocked_case), both modes, against the reference.
TEMPLATE_LIST_TEST_CASE("spmm over column blocks matches the reference, grouped rows or not", "[spmm][blocks]",
                        st::AllTypes) {
  using T = typename TestType::T;
  using Index = typename TestType::Index;
  std::int64_t ungrouped_rows = 0;
  const std::int64_t blocked = st::for_each_blocked_case<T, Index>(
      [&](const st::Case& c, std::int64_t budget, const detail::ColumnBlocks& blocks, const PaddedCSR<T, Index>& W,
          KernelWorkspace<T>& ws) {
        CAPTURE(c, budget);
        std::vector<std::int64_t> bounds(static_cast<std::size_t>(W.rows() * (blocks.count + 1)));
        blocks.bounds(W.col_indices().data(), W.row_starts(), W.row_nnzs(), 0, W.rows(), bounds.data());
        for (std::int64_t i = 0; i < W.rows(); ++i) ungrouped_rows += bounds[i * (blocks.count + 1)] < 0;
        for (Update mode : {Update::overwrite, Update::accumulate}) check_matrix(W, c, mode, &ws, 0xB10C);
      });
  if (detail::simd_width<T>() > 1) {  // the scalar kernels never block
    CHECK(blocked > 60);
    CHECK(ungrouped_rows > 20);  // the whole-row path ran too
  }
}

#ifdef _OPENMP
TEMPLATE_LIST_TEST_CASE("spmm over column blocks, with the epilogue, is bitwise identical for 1, 2 and 3 threads",
                        "[spmm][blocks][threads]", st::AllTypes) {
  using T = typename TestType::T;
  using Index = typename TestType::Index;
  auto W = st::random_matrix<T, Index>(900, 700, 0.05, 9);
  st::scramble(W, 9);
  const std::int64_t B = 40, budget = 4096;
  W.group_columns(detail::spmm_column_blocks<T>(W.cols(), B, budget).shift);
  CounterRng rng(9, 1);
  Matrix<T> X(W.cols(), B);
  st::fill_uniform(X, rng);
  std::vector<T> bias(static_cast<std::size_t>(W.rows()));
  for (T& b : bias) b = static_cast<T>(rng.uniform(-0.5, 0.5));
  const int saved = omp_get_max_threads();
  std::vector<Matrix<T>> results;
  for (int threads : {1, 2, 3}) {
    omp_set_num_threads(threads);
    KernelWorkspace<T> ws;
    ws.column_block_bytes = budget;
    Matrix<T> Y(W.rows(), B, st::quiet_nan<T>());
    spmm(W, X.view(), Y.view(), ws, RowEpilogue<T>{bias, FusedActivation::relu});
    results.push_back(std::move(Y));
  }
  omp_set_num_threads(saved);
  CHECK(st::bitwise_differences<T>(results[0].view(), results[1].view()) == 0);
  CHECK(st::bitwise_differences<T>(results[0].view(), results[2].view()) == 0);
  Matrix<T> want(W.rows(), B);
  reference::spmm(W, X.view(), want.view());
  std::int64_t off = 0;
  for (std::int64_t i = 0; i < W.rows(); ++i)
    for (std::int64_t b = 0; b < B; ++b) {
      const double w = std::max(0.0, double(want(i, b)) + double(bias[static_cast<std::size_t>(i)]));
      off += std::abs(double(results[1](i, b)) - w) > 1e-4 * (1.0 + std::abs(w));
    }
  CHECK(off == 0);
}
#endif

// An output that shares memory with an input would be read after the kernel overwrote part of
// it: such calls must fail before anything is written, naming the call and the two operands.
// Before the check, spmm(W, X, X) returned quietly with a result unlike the reference's.
TEMPLATE_TEST_CASE("spmm rejects an output that overlaps an input, and leaves it alone", "[spmm][overlap]", float,
                   double) {
  using T = TestType;
  using Catch::Matchers::Contains;
  auto W = st::random_matrix<T, std::int32_t>(8, 8, 0.5, 17, 0.0, 0.0);
  Matrix<T> buf(17, 6);
  CounterRng rng(5, 1);
  for (std::int64_t i = 0; i < buf.rows(); ++i)
    for (std::int64_t b = 0; b < buf.cols(); ++b) buf(i, b) = static_cast<T>(rng.uniform01() - 0.5);
  const Matrix<T> before = buf;
  const ConstMatrixView<T> X = std::as_const(buf).view().block(0, 0, 8, 6);
  for (std::int64_t shift : {0, 1, 7}) {  // Y is X, or X shifted down by some rows
    CAPTURE(shift);
    const MatrixView<T> Y = buf.view().block(shift, 0, 8, 6);
    CHECK_THROWS_AS(spmm(W, X, Y), ArgumentError);
    CHECK_THROWS_WITH(spmm(W, X, Y, Update::accumulate), Contains("sprig::spmm: Y overlaps X"));
    KernelWorkspace<T> ws;
    CHECK_THROWS_WITH(spmm(W, X, Y, ws, RowEpilogue<T>{}), Contains("sprig::spmm: Y overlaps X"));
  }
  // Y over W's own values, or over the bias of the epilogue.
  REQUIRE(W.storage_size() >= 8);
  const MatrixView<T> over_values(W.values().data(), 8, 1);
  Matrix<T> X1(8, 1, T(1));
  CHECK_THROWS_WITH(spmm(W, X1.view(), over_values), Contains("sprig::spmm: Y overlaps W's values"));
  Matrix<T> X2(8, 6, T(1));
  Matrix<T> Y2(8, 6);
  KernelWorkspace<T> ws;
  const RowEpilogue<T> in_y{std::span<const T>(Y2.data(), 8), FusedActivation::none};
  CHECK_THROWS_WITH(spmm(W, X2.view(), Y2.view(), ws, in_y), Contains("sprig::spmm: Y overlaps the bias"));
  bool untouched = true;
  for (std::int64_t i = 0; i < buf.rows(); ++i)
    for (std::int64_t b = 0; b < buf.cols(); ++b) untouched = untouched && st::same_bits(buf(i, b), before(i, b));
  CHECK(untouched);
  // Disjoint rows of one buffer are fine: Y right after X.
  const MatrixView<T> Y = buf.view().block(8, 0, 8, 6);
  spmm(W, X, Y);
  Matrix<T> want(8, 6);
  reference::spmm(W, X, want.view());
  bool close = true;
  for (std::int64_t i = 0; i < 8; ++i)
    for (std::int64_t b = 0; b < 6; ++b) close = close && std::abs(Y(i, b) - want(i, b)) <= T(1e-4);
  CHECK(close);
}
