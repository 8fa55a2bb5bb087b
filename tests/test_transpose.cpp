// tests/test_transpose.cpp — sprig::transpose (W^T plus the slot permutation) against
// reference::transpose_entries and the dense transpose, involution, the Index range check,
// and TransposeCache's rebuild/refresh behaviour, including dX = W^T dY through spmm.
#include "sprig/kernels/transpose.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <tuple>
#include <vector>

#include "kernel_test_support.hpp"
#include "sprig/kernels/reference.hpp"
#include "sprig/kernels/spmm.hpp"

using namespace sprig;
namespace st = sprig::test;

namespace {

// Checks that Tr is W^T: shape, invariants, every entry of reference::transpose_entries in
// ascending row order with the same value bits and source slot, -1 for non-live slots, and
// equality with the dense transpose.
template <Value T, ColumnIndex Index>
void check_transposed(const PaddedCSR<T, Index>& W, const Transposed<T, Index>& Tr) {
  const auto& M = Tr.matrix;
  REQUIRE(M.rows() == W.cols());
  REQUIRE(M.cols() == W.rows());
  REQUIRE_NOTHROW(M.check_invariants());
  CHECK(M.nnz() == W.nnz());
  REQUIRE(std::ssize(Tr.source_slot) == M.storage_size());

  const auto want = reference::transpose_entries(W);
  const auto wvals = W.values();
  const auto wcols = W.col_indices();
  std::int64_t wrong = 0;
  std::vector<std::uint8_t> live(static_cast<std::size_t>(M.storage_size()), 0);
  for (std::int64_t c = 0; c < M.rows(); ++c) {
    const auto r = M.row(c);
    const auto& w = want[static_cast<std::size_t>(c)];
    if (r.cols.size() != w.size()) {
      ++wrong;
      continue;
    }
    for (std::size_t q = 0; q < w.size(); ++q) {
      const std::int64_t t = r.start + static_cast<std::int64_t>(q);
      live[static_cast<std::size_t>(t)] = 1;
      const std::int64_t src = Tr.source_slot[static_cast<std::size_t>(t)];
      wrong += r.cols[q] != w[q].row;                     // ascending row of W, as documented
      wrong += !st::same_bits(r.values[q], w[q].value);
      wrong += src != w[q].slot;
      // and the slot really holds this entry in W
      wrong += src < 0 || src >= W.storage_size() || wcols[src] != c || !st::same_bits(wvals[src], r.values[q]);
    }
  }
  CHECK(wrong == 0);
  std::int64_t bad_padding = 0;
  for (std::size_t t = 0; t < live.size(); ++t) bad_padding += !live[t] && Tr.source_slot[t] != -1;
  CHECK(bad_padding == 0);

  const Matrix<T> dense = W.to_dense();
  const Matrix<T> dense_t = M.to_dense();
  std::int64_t dense_wrong = 0;
  for (std::int64_t i = 0; i < W.rows(); ++i)
    for (std::int64_t c = 0; c < W.cols(); ++c) dense_wrong += !st::same_bits(dense(i, c), dense_t(c, i));
  CHECK(dense_wrong == 0);
}

template <Value T, ColumnIndex Index>
std::vector<PaddedCSR<T, Index>> sample_matrices() {
  std::vector<PaddedCSR<T, Index>> out;
  const std::int64_t shapes[][2] = {{0, 0}, {0, 6}, {6, 0}, {1, 1}, {1, 30}, {30, 1}, {17, 23}, {64, 40}};
  std::uint64_t seed = 11;
  for (const auto& s : shapes) {
    out.push_back(st::random_matrix<T, Index>(s[0], s[1], 0.3, seed++));
    auto scrambled = st::random_matrix<T, Index>(s[0], s[1], 0.3, seed++);
    st::scramble(scrambled, seed);
    out.push_back(std::move(scrambled));
  }
  out.push_back(st::random_matrix<T, Index>(9, 14, 1.0, seed++, 0.0, 0.0));  // dense
  out.emplace_back(9, 14);                                                      // empty
  return out;
}

// dX = W^T dY computed densely in long double from W.to_dense(): the exact value to within
// long double rounding, and S = sum |terms| per element for the error bound.
template <Value T, ColumnIndex Index>
void dense_transposed_product(const PaddedCSR<T, Index>& W, const Matrix<T>& dY, std::vector<long double>& exact,
                              std::vector<long double>& S, std::vector<double>& n) {
  const Matrix<T> D = W.to_dense();
  const std::int64_t K = W.cols(), B = dY.cols();
  exact.assign(static_cast<std::size_t>(K * B), 0.0L);
  S.assign(exact.size(), 0.0L);
  n.assign(exact.size(), 0.0);
  for (std::int64_t c = 0; c < K; ++c)
    for (std::int64_t i = 0; i < W.rows(); ++i) {
      if (D(i, c) == T(0)) continue;
      for (std::int64_t b = 0; b < B; ++b) {
        const long double p = static_cast<long double>(D(i, c)) * static_cast<long double>(dY(i, b));
        exact[static_cast<std::size_t>(c * B + b)] += p;
        S[static_cast<std::size_t>(c * B + b)] += std::fabs(p);
        n[static_cast<std::size_t>(c * B + b)] += 1;
      }
    }
}

}  // namespace

TEMPLATE_LIST_TEST_CASE("transpose holds exactly W's entries and maps its slots back to W", "[transpose]",
                        st::AllTypes) {
  using T = typename TestType::T;
  using Index = typename TestType::Index;
  for (const auto& W : sample_matrices<T, Index>()) {
    CAPTURE(W.rows(), W.cols(), W.nnz(), W.dead_slots());
    check_transposed(W, transpose(W));
    check_transposed(W, transpose(W, 0.5));  // with padding in every row of W^T
  }
}

TEMPLATE_LIST_TEST_CASE("transpose is an involution", "[transpose]", st::AllTypes) {
  using T = typename TestType::T;
  using Index = typename TestType::Index;
  for (const auto& W : sample_matrices<T, Index>()) {
    CAPTURE(W.rows(), W.cols(), W.nnz());
    const auto Tr = transpose(W);
    const auto TT = transpose(Tr.matrix);
    REQUIRE(TT.matrix.rows() == W.rows());
    REQUIRE(TT.matrix.cols() == W.cols());
    REQUIRE_NOTHROW(TT.matrix.check_invariants());
    const Matrix<T> a = W.to_dense(), b = TT.matrix.to_dense();
    CHECK(st::bitwise_differences<T>(a.view(), b.view()) == 0);
    // Composing the two permutations lands on the W slot of the same entry.
    std::int64_t wrong = 0;
    TT.matrix.for_each_live([&](std::int64_t i, std::int64_t c, T v, std::int64_t s) {
      const std::int64_t t = TT.source_slot[static_cast<std::size_t>(s)];
      const std::int64_t w = t < 0 ? -1 : Tr.source_slot[static_cast<std::size_t>(t)];
      wrong += w < 0 || w != W.find(i, c) || !st::same_bits(W.values()[w], v);
    });
    CHECK(wrong == 0);
  }
}

TEST_CASE("transpose rejects W whose row count the Index type cannot hold as columns", "[transpose]") {
  // int16_t indexes columns 0 .. 32767, so W^T can have at most 32768 columns.
  PaddedCSR<float, std::int16_t> ok(32768, 3);
  ok.insert(32767, 2, 1.5f);
  ok.insert(0, 0, -2.0f);
  const auto Tr = transpose(ok);
  CHECK(Tr.matrix.cols() == 32768);
  CHECK(Tr.matrix.find(2, 32767) >= 0);
  check_transposed(ok, Tr);

  const PaddedCSR<float, std::int16_t> too_tall(40000, 3);
  CHECK_THROWS_AS(transpose(too_tall), sprig::Error);
  CHECK_THROWS_WITH(transpose(too_tall), Catch::Contains("40000"));
  const PaddedCSR<double, std::int16_t> one_over(32769, 2);
  CHECK_THROWS_AS(transpose(one_over), sprig::Error);
  CHECK_THROWS_WITH(transpose(one_over), Catch::Contains("32769"));
  // int32_t has no such problem at this size.
  const PaddedCSR<float, std::int32_t> wide(40000, 3);
  CHECK(transpose(wide).matrix.cols() == 40000);
}

TEMPLATE_LIST_TEST_CASE("TransposeCache refreshes values, rebuilds on topology change", "[transpose][cache]",
                        st::AllTypes) {
  using T = typename TestType::T;
  using Index = typename TestType::Index;
  auto W = st::random_matrix<T, Index>(30, 20, 0.25, 5);
  TransposeCache<T, Index> cache;
  CHECK(cache.rebuilds() == 0);
  CHECK(cache.refreshes() == 0);

  cache.get(W);
  CHECK(cache.rebuilds() == 1);
  CHECK(cache.refreshes() == 0);
  check_transposed(W, cache.transposed());
  CHECK(cache.memory_bytes() >= cache.transposed().matrix.memory_bytes());

  // Nothing changed: a value refresh, not a rebuild.
  cache.get(W);
  CHECK(cache.rebuilds() == 1);
  CHECK(cache.refreshes() == 1);

  // Value-only change: same topology version, refreshed in place with the same structure.
  const std::uint64_t version = W.topology_version();
  const std::vector<Index> cols_before(cache.transposed().matrix.col_indices().begin(),
                                       cache.transposed().matrix.col_indices().end());
  const std::vector<std::int64_t> source_before = cache.transposed().source_slot;
  for (T& v : W.values()) v = v * T(-3) + T(0.25) * (v != T(0));  // padding stays 0
  REQUIRE(W.topology_version() == version);
  REQUIRE_NOTHROW(W.check_invariants());
  cache.get(W);
  CHECK(cache.rebuilds() == 1);
  CHECK(cache.refreshes() == 2);
  check_transposed(W, cache.transposed());
  CHECK(std::equal(cols_before.begin(), cols_before.end(), cache.transposed().matrix.col_indices().begin(),
                   cache.transposed().matrix.col_indices().end()));
  CHECK(cache.transposed().source_slot == source_before);

  // Structural changes rebuild, and the rebuilt W^T is current.
  std::int64_t expected_rebuilds = 1;
  auto expect_rebuild = [&](const char* what) {
    CAPTURE(what);
    cache.get(W);
    ++expected_rebuilds;
    CHECK(cache.rebuilds() == expected_rebuilds);
    CHECK(cache.refreshes() == 2);
    check_transposed(W, cache.transposed());
  };
  CounterRng pick(1);
  W.insert(3, st::absent_column(W, 3, pick), T(0.75));
  expect_rebuild("insert");
  REQUIRE(W.row_nnz(4) > 0);
  W.erase_slot(4, W.row_start(4));
  expect_rebuild("erase_slot");
  {
    const std::int64_t r = 7;
    CounterRng rng(2);
    while (W.row_nnz(r) < W.row_capacity(r)) W.insert(r, st::absent_column(W, r, rng), T(1));
    const std::int64_t start = W.row_start(r);
    W.insert(r, st::absent_column(W, r, rng), T(2));  // full row: relocates
    REQUIRE(W.row_start(r) != start);
    REQUIRE(W.dead_slots() > 0);
  }
  expect_rebuild("insert with relocation");
  W.compact();
  expect_rebuild("compact");
  cache.invalidate();
  expect_rebuild("invalidate");
}

TEMPLATE_LIST_TEST_CASE("dX = spmm(cache.get(W), dY) equals the dense W^T dY, before and after a refresh",
                        "[transpose][cache][spmm]", st::AllTypes) {
  using T = typename TestType::T;
  using Index = typename TestType::Index;
  auto W = st::random_matrix<T, Index>(37, 29, 0.2, 23);
  st::scramble(W, 23);
  TransposeCache<T, Index> cache;
  CounterRng pick(3);
  for (int round = 0; round < 3; ++round) {
    CAPTURE(round);
    if (round == 1)
      for (T& v : W.values()) v = v * T(0.5) - T(0.125) * (v != T(0));  // value change: refresh
    if (round == 2) W.insert(0, st::absent_column(W, 0, pick), T(-0.5));  // rebuild
    for (std::int64_t B : {1, 8, 17, 64}) {
      CAPTURE(B);
      CounterRng rng(23, static_cast<std::uint64_t>(B));
      Matrix<T> dY(W.rows(), B);
      for (std::int64_t i = 0; i < W.rows(); ++i)
        for (std::int64_t b = 0; b < B; ++b) dY(i, b) = static_cast<T>(rng.uniform(-1.0, 1.0));
      Matrix<T> dX(W.cols(), B, st::quiet_nan<T>());
      spmm(cache.get(W), dY.view(), dX.view());
      std::vector<long double> exact, S;
      std::vector<double> n;
      dense_transposed_product(W, dY, exact, S, n);
      std::int64_t wrong = 0;
      for (std::int64_t c = 0; c < W.cols(); ++c)
        for (std::int64_t b = 0; b < B; ++b) {
          const auto k = static_cast<std::size_t>(c * B + b);
          // A sum of n products in T against the exact value: within gamma_n S <= n eps S
          // (header of kernel_test_support.hpp); an empty column (S = 0) must give exactly 0.
          const long double err = std::fabs(static_cast<long double>(dX(c, b)) - exact[k]);
          wrong += !(err <= n[k] * static_cast<long double>(st::eps<T>) * S[k]);
        }
      CHECK(wrong == 0);
    }
  }
  CHECK(cache.rebuilds() == 2);
  CHECK(cache.refreshes() == 4 * 3 - 2);
}
