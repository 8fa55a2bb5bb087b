// tests/test_transpose.cpp — sprig::transpose (W^T plus the slot permutation) against
// reference::transpose_entries and the dense transpose, involution, the Index range check,
// and TransposeCache's rebuild/refresh behaviour, including dX = W^T dY through spmm; and
// spmm_transposed (dX = W^T dY reading W's current values through the cached permutation)
// against the reference on the transpose.
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
#include "sprig/kernels/spmm_transposed.hpp"

#ifdef _OPENMP
#  include <omp.h>
#endif

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
      wrong += r.cols[q] != w[q].row;  // ascending row of W, as documented
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
  out.emplace_back(9, 14);                                                   // empty
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

// One Transposed rebuilt for matrices of growing and shrinking size (a model's shared cache):
// transpose_into writes every slot, live and padding, so each result is the fresh transpose.
TEMPLATE_LIST_TEST_CASE("transpose_into reused across matrices of other sizes gives the fresh transpose", "[transpose]",
                        st::AllTypes) {
  using T = typename TestType::T;
  using Index = typename TestType::Index;
  auto mats = sample_matrices<T, Index>();
  const std::size_t n = mats.size();
  for (std::size_t k = 0; k < n; ++k) mats.push_back(mats[n - 1 - k]);  // then back down
  for (const bool with_values : {true, false}) {
    Transposed<T, Index> reused;
    for (const double ratio : {0.0, 0.5})
      for (const auto& W : mats) {
        CAPTURE(with_values, ratio, W.rows(), W.cols(), W.nnz());
        transpose_into(W, reused, ratio, with_values);
        Transposed<T, Index> fresh;
        transpose_into(W, fresh, ratio, with_values);
        reused.matrix.check_invariants();
        CHECK(reused.source_slot == fresh.source_slot);
        CHECK(std::ranges::equal(reused.matrix.col_indices(), fresh.matrix.col_indices()));
        CHECK(std::ranges::equal(reused.matrix.row_starts(), fresh.matrix.row_starts()));
        CHECK(std::ranges::equal(reused.matrix.values(), fresh.matrix.values(), st::same_bits<T>));
        if (with_values) check_transposed(W, reused);
      }
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
  const std::vector<SourceSlot> source_before = cache.transposed().source_slot;
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
      for (T& v : W.values()) v = v * T(0.5) - T(0.125) * (v != T(0));    // value change: refresh
    if (round == 2) W.insert(0, st::absent_column(W, 0, pick), T(-0.5));  // rebuild
    for (std::int64_t B : {1, 8, 17, 64}) {
      CAPTURE(B);
      CounterRng rng(23, static_cast<std::uint64_t>(B));
      Matrix<T> dY(W.rows(), B);
      st::fill_uniform(dY, rng);
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

namespace {

// dX from spmm_transposed against reference::spmm on a freshly built transpose(W), with the
// spmm error bound (each element sums the live entries of one column of W).
template <Value T, ColumnIndex Index>
st::Mismatches check_spmm_transposed(const PaddedCSR<T, Index>& W, TransposeCache<T, Index>& cache, const st::Case& c,
                                     Update mode, KernelWorkspace<T>* ws, std::uint64_t salt,
                                     std::int64_t& guard_violations) {
  CounterRng rng(c.seed, salt);
  st::Operand<T> dY(W.rows(), c.B, c.px, st::quiet_nan<T>());
  dY.fill_random(rng);
  st::Operand<T> dX(W.cols(), c.B, c.py, T(-4242.25));
  if (mode == Update::overwrite)
    dX.fill(st::quiet_nan<T>());
  else
    dX.fill_random(rng);
  const Matrix<T> dX0 = dX.copy();
  const auto Tr = transpose(W);
  Matrix<T> want = dX0;
  reference::spmm(Tr.matrix, dY.cview(), want.view(), mode);
  if (ws)
    spmm_transposed(W, cache, dY.cview(), dX.view(), *ws, mode);
  else
    spmm_transposed(W, cache, dY.cview(), dX.view(), mode);
  guard_violations += dX.guard_violations();
  return st::compare_spmm(Tr.matrix, dY.cview(), dX0, mode, dX.cview(), want.view(), 2.0);
}

}  // namespace

TEMPLATE_LIST_TEST_CASE(
    "spmm_transposed matches the reference W^T dY, with stale cache values and after topology changes",
    "[transpose][spmm_transposed]", st::AllTypes) {
  using T = typename TestType::T;
  using Index = typename TestType::Index;
  KernelWorkspace<T> shared_ws;  // reused across every case and matrix
  int k = 0;
  for (const st::Case& c : st::kernel_cases(st::max_cols_for<Index>())) {
    if (c.M > st::max_cols_for<Index>()) continue;  // W^T would have more columns than Index holds
    for (Update mode : {Update::overwrite, Update::accumulate}) {
      CAPTURE(c, st::name(mode));
      auto W = st::case_matrix<T, Index>(c);
      TransposeCache<T, Index> cache;
      KernelWorkspace<T>* ws = (k++ % 2) ? &shared_ws : nullptr;
      std::int64_t guard = 0;
      {
        INFO("first call: the cache is built");
        const auto m = check_spmm_transposed(W, cache, c, mode, ws, 1, guard);
        INFO(m.first);
        CHECK(m.count == 0);
      }
      {
        // New values, same topology, no cache.get(W) in between: dX must use the new ones.
        for (T& v : W.values()) v = v * T(-0.5) + T(0.375) * (v != T(0));
        INFO("after a value-only change of W");
        const auto m = check_spmm_transposed(W, cache, c, mode, ws, 2, guard);
        INFO(m.first);
        CHECK(m.count == 0);
      }
      if (W.rows() > 0 && W.cols() > 0) {
        CounterRng pick(c.seed, 3);
        const std::int64_t r = static_cast<std::int64_t>(pick.uniform_below(static_cast<std::uint64_t>(W.rows())));
        if (W.row_nnz(r) > 0) W.erase_slot(r, W.row_start(r));
        const std::int64_t col = st::absent_column(W, r, pick);
        if (col >= 0) W.insert(r, col, T(0.625));
        INFO("after an erase and an insert");
        const auto m = check_spmm_transposed(W, cache, c, mode, ws, 3, guard);
        INFO(m.first);
        CHECK(m.count == 0);
      }
      CHECK(guard == 0);
    }
  }
}

TEMPLATE_LIST_TEST_CASE("TransposeCache: structure only under spmm_transposed, values on get(), rebuilds in place",
                        "[transpose][cache][spmm_transposed]", st::AllTypes) {
  using T = typename TestType::T;
  using Index = typename TestType::Index;
  auto W = st::random_matrix<T, Index>(40, 24, 0.3, 9);
  TransposeCache<T, Index> cache;
  Matrix<T> dY(40, 16), dX(24, 16);
  CounterRng fill(4);
  st::fill_uniform(dY, fill);
  spmm_transposed(W, cache, ConstMatrixView<T>(dY.view()), dX.view());  // one batch panel
  REQUIRE(cache.rebuilds() == 1);
  // the SIMD build takes the fused path, which needs no W^T values; the scalar one refreshes them
  constexpr bool fused = detail::kSimdFor<T>;
  CHECK(cache.transposed().matrix.values().empty() == fused);
  CHECK(std::ssize(cache.transposed().source_slot) == cache.transposed().matrix.storage_size());
  const std::int64_t structure_bytes = cache.memory_bytes();
  // get(): the values appear, current, and the cache is exactly W^T
  cache.get(W);
  CHECK(cache.rebuilds() == 1);
  check_transposed(W, cache.transposed());
  if (fused)  // the values array is the 4 (8) bytes per slot the fused path saved
    CHECK(cache.memory_bytes() >= structure_bytes + cache.transposed().matrix.storage_size() * std::int64_t(sizeof(T)));
  else
    CHECK(cache.memory_bytes() == structure_bytes);
  // A topology change that keeps nnz (a drop and a grow, as in a DST update): the rebuild
  // refills the same arrays, values included since get() has been used
  const T* values_before = cache.transposed().matrix.values().data();
  const Index* cols_before = cache.transposed().matrix.col_indices().data();
  const SourceSlot* source_before = cache.transposed().source_slot.data();
  CounterRng pick(5);
  std::int64_t r = 0;
  while (W.row_nnz(r) == 0) ++r;
  W.erase_slot(r, W.row_start(r));
  std::int64_t g = 0, col = -1;
  while ((col = st::absent_column(W, g, pick)) < 0) ++g;
  W.insert(g, col, T(0.5));
  spmm_transposed(W, cache, ConstMatrixView<T>(dY.view()), dX.view());
  CHECK(cache.rebuilds() == 2);
  CHECK(cache.transposed().matrix.values().data() == values_before);
  CHECK(cache.transposed().matrix.col_indices().data() == cols_before);
  CHECK(cache.transposed().source_slot.data() == source_before);
  check_transposed(W, cache.transposed());  // values kept current by the rebuild
  // and the result equals the dense W^T dY
  std::vector<double> want(24 * 16, 0.0);
  W.for_each_live([&](std::int64_t i, std::int64_t k, T v, std::int64_t) {
    for (std::int64_t b = 0; b < 16; ++b) want[k * 16 + b] += double(v) * double(dY(i, b));
  });
  for (std::int64_t k = 0; k < 24; ++k)
    for (std::int64_t b = 0; b < 16; ++b) CHECK(double(dX(k, b)) == Approx(want[k * 16 + b]).margin(1e-5));
}

TEMPLATE_LIST_TEST_CASE("spmm_transposed over several batch panels: the bits of spmm on get(W), no values kept",
                        "[transpose][cache][spmm_transposed]", st::AllTypes) {
  using T = typename TestType::T;
  using Index = typename TestType::Index;
  auto W = st::random_matrix<T, Index>(70, 90, 0.2, 17);
  st::scramble(W, 17);  // relocated rows: W's slots are not in W^T's order
  KernelWorkspace<T> ws, ws_ref;
  TransposeCache<T, Index> cache, ref_cache;
  constexpr bool simd = detail::kSimdFor<T>;
  for (std::int64_t B : {200, 301, 1024}) {  // past SPRIG_SPMM_T_FUSED_PANELS: the values are gathered
    CAPTURE(B);
    CounterRng rng(17, static_cast<std::uint64_t>(B));
    Matrix<T> dY(W.rows(), B), dX(W.cols(), B), want(W.cols(), B);
    st::fill_uniform(dY, rng);
    for (int round = 0; round < 2; ++round) {
      CAPTURE(round);
      if (round == 1)  // new values, same topology: the next call must read them
        for (T& v : W.values()) v = v * T(-0.75) + T(0.25) * (v != T(0));
      spmm_transposed(W, cache, ConstMatrixView<T>(dY.view()), dX.view(), ws);
      spmm(ref_cache.get(W), ConstMatrixView<T>(dY.view()), want.view(), ws_ref);
      CHECK(st::bitwise_differences<T>(dX.view(), want.view()) == 0);
      // the SIMD path gathers into the workspace; only the scalar one refreshes the cache
      CHECK(cache.transposed().matrix.values().empty() == simd);
    }
  }
}

#ifdef _OPENMP
TEMPLATE_LIST_TEST_CASE("spmm_transposed is bitwise identical for 1, 2 and 3 threads",
                        "[transpose][spmm_transposed][threads]", st::AllTypes) {
  using T = typename TestType::T;
  using Index = typename TestType::Index;
  const int saved = omp_get_max_threads();
  auto W = st::random_matrix<T, Index>(300, 1200, 0.05, 31);
  st::scramble(W, 31);
  const auto Tr = transpose(W);
  for (std::int64_t B : {13, 64, 200}) {
    CAPTURE(B);
    CounterRng rng(31, static_cast<std::uint64_t>(B));
    Matrix<T> dY(W.rows(), B), Z(W.cols(), B);
    st::fill_uniform(dY, rng);
    st::fill_uniform(Z, rng);
    for (Update mode : {Update::overwrite, Update::accumulate}) {
      CAPTURE(st::name(mode));
      std::vector<Matrix<T>> results;
      for (int threads : {1, 2, 3}) {
        omp_set_num_threads(threads);
        TransposeCache<T, Index> cache;
        Matrix<T> dX = Z;
        spmm_transposed(W, cache, dY.view(), dX.view(), mode);
        results.push_back(std::move(dX));
      }
      omp_set_num_threads(saved);
      CHECK(st::bitwise_differences<T>(results[0].view(), results[1].view()) == 0);
      CHECK(st::bitwise_differences<T>(results[0].view(), results[2].view()) == 0);
      Matrix<T> want = Z;
      reference::spmm(Tr.matrix, dY.view(), want.view(), mode);
      const auto m = st::compare_spmm(Tr.matrix, dY.view(), Z, mode, results[1].view(), want.view(), 2.0);
      INFO(m.first);
      CHECK(m.count == 0);
    }
  }
  omp_set_num_threads(saved);
}
#endif

TEMPLATE_LIST_TEST_CASE("TransposeCache refresh of a large matrix (threaded gather) is exact", "[transpose][cache]",
                        st::AllTypes) {
  using T = typename TestType::T;
  using Index = typename TestType::Index;
  auto W = st::random_matrix<T, Index>(500, 400, 0.4, 57);
  REQUIRE(W.storage_size() >= (std::int64_t{1} << 16));  // above the size where the gather is split
#ifdef _OPENMP
  const int saved = omp_get_max_threads();
  omp_set_num_threads(2);
#endif
  TransposeCache<T, Index> cache;
  cache.get(W);
  for (T& v : W.values()) v = v * T(2) - T(1) * (v != T(0));
  cache.get(W);
#ifdef _OPENMP
  omp_set_num_threads(saved);
#endif
  CHECK(cache.rebuilds() == 1);
  CHECK(cache.refreshes() == 1);
  check_transposed(W, cache.transposed());
}

TEMPLATE_LIST_TEST_CASE("spmm_transposed rejects mismatched shapes with ShapeError", "[transpose][spmm_transposed]",
                        st::AllTypes) {
  using T = typename TestType::T;
  using Index = typename TestType::Index;
  const auto W = st::random_matrix<T, Index>(6, 4, 0.5, 3);  // 6 x 4: dY is 6 x B, dX is 4 x B
  TransposeCache<T, Index> cache;
  Matrix<T> dY(6, 5, T(1)), dX(4, 5, T(7));
  Matrix<T> dY_rows(4, 5), dX_rows(6, 5), dX_cols(4, 6), dX_empty(0, 5);
  for (Update mode : {Update::overwrite, Update::accumulate}) {
    CAPTURE(st::name(mode));
    CHECK_THROWS_AS(spmm_transposed(W, cache, dY_rows.view(), dX.view(), mode), ShapeError);
    CHECK_THROWS_AS(spmm_transposed(W, cache, dY.view(), dX_rows.view(), mode), ShapeError);
    CHECK_THROWS_AS(spmm_transposed(W, cache, dY.view(), dX_cols.view(), mode), ShapeError);
    CHECK_THROWS_AS(spmm_transposed(W, cache, dY.view(), dX_empty.view(), mode), ShapeError);
  }
  bool untouched = true;
  for (std::int64_t i = 0; i < 4; ++i)
    for (std::int64_t b = 0; b < 5; ++b) untouched = untouched && dX(i, b) == T(7);
  CHECK(untouched);
}

TEMPLATE_LIST_TEST_CASE("TransposeCache rebuilds for another matrix with the same version, shape and nnz",
                        "[transpose][cache]", st::AllTypes) {
  using T = typename TestType::T;
  using Index = typename TestType::Index;
  // A layer's weight replaced by another of the same shape and density: equal
  // topology_version, rows, cols and nnz, different topology. A cache keyed on those would
  // keep the old W^T and compute a wrong dX (PaddedCSR::topology_key tells them apart).
  auto W1 = PaddedCSR<T, Index>::random_density(40, 50, 0.2, 1);
  auto W2 = PaddedCSR<T, Index>::random_density(40, 50, 0.2, 2);
  REQUIRE(W1.topology_version() == W2.topology_version());
  REQUIRE(W1.nnz() == W2.nnz());
  CounterRng rng(3, 4);
  Matrix<T> dY(40, 9);
  st::fill_uniform(dY, rng);
  TransposeCache<T, Index> cache;
  for (const std::int64_t budget : {std::int64_t{1} << 40, std::int64_t{256}}) {  // W^T in one block, in many
    CAPTURE(budget);
    KernelWorkspace<T> ws;
    ws.column_block_bytes = budget;
    Matrix<T> dX(50, 9);
    const std::int64_t before = cache.rebuilds();
    spmm_transposed(W1, cache, dY.view(), dX.view(), ws);
    spmm_transposed(W2, cache, dY.view(), dX.view(), ws);
    CHECK(cache.rebuilds() == before + 2);
    const Matrix<T> D = W2.to_dense();
    std::int64_t off = 0;
    for (std::int64_t c = 0; c < 50; ++c)
      for (std::int64_t b = 0; b < 9; ++b) {
        double want = 0.0, mag = 0.0;
        for (std::int64_t i = 0; i < 40; ++i) {
          want += double(D(i, c)) * double(dY(i, b));
          mag += std::abs(double(D(i, c)) * double(dY(i, b)));
        }
        off += std::abs(double(dX(c, b)) - want) > 1e-5 * (1.0 + mag);
      }
    CHECK(off == 0);
  }
}

// dX over dY (or over W's values, which the fused path gathers while it writes dX) would be
// read after it was written: rejected before anything is written. Before the check,
// spmm_transposed(W, cache, dY, dY) returned quietly with a dX unlike the reference's.
TEMPLATE_TEST_CASE("spmm_transposed rejects a dX that overlaps dY or W's values", "[transpose][overlap]", float,
                   double) {
  using T = TestType;
  using Catch::Matchers::Contains;
  auto W = st::random_matrix<T, std::int32_t>(8, 8, 0.5, 29, 0.0, 0.0);
  TransposeCache<T, std::int32_t> cache;
  Matrix<T> dY(8, 8, T(1));
  for (std::int64_t i = 0; i < 8; ++i) dY(i, i) = T(3);
  const Matrix<T> dY0 = dY;
  for (Update mode : {Update::overwrite, Update::accumulate}) {
    CHECK_THROWS_AS(spmm_transposed(W, cache, dY.view(), dY.view(), mode), ArgumentError);
    CHECK_THROWS_WITH(spmm_transposed(W, cache, dY.view(), dY.view(), mode),
                      Contains("sprig::spmm_transposed: dX overlaps dY"));
  }
  REQUIRE(W.storage_size() >= 8);
  Matrix<T> dY1(8, 1, T(1));
  CHECK_THROWS_WITH(spmm_transposed(W, cache, dY1.view(), MatrixView<T>(W.values().data(), 8, 1)),
                    Contains("sprig::spmm_transposed: dX overlaps W's values"));
  bool untouched = true;
  for (std::int64_t i = 0; i < 8; ++i)
    for (std::int64_t b = 0; b < 8; ++b) untouched = untouched && dY(i, b) == dY0(i, b);
  CHECK(untouched);
}

TEST_CASE("A structure-only W transposes its structure; asking for its values is an error", "[transpose]") {
  using M = sprig::PaddedCSR<float, std::int32_t>;
  M valued = M::random_density(9, 13, 0.3, 4);
  M W = valued;
  W.drop_values();
  sprig::Transposed<float, std::int32_t> out;
  REQUIRE_THROWS_AS(sprig::transpose_into(W, out, 0.0, true), sprig::ArgumentError);
  sprig::transpose_into(W, out, 0.0, false);
  const auto ref = sprig::transpose(valued);
  REQUIRE(out.source_slot == ref.source_slot);
  REQUIRE(std::equal(out.matrix.col_indices().begin(), out.matrix.col_indices().end(), ref.matrix.col_indices().begin(),
                     ref.matrix.col_indices().end()));
  // a cache that held another matrix's values syncs to the structure-only one without them
  sprig::TransposeCache<float, std::int32_t> cache;
  cache.get(valued);
  REQUIRE_THROWS_AS(cache.get(W), sprig::ArgumentError);
  const auto& t = cache.sync_topology(W);
  REQUIRE(t.source_slot == ref.source_slot);
  REQUIRE_THROWS_AS(cache.refresh_values(W), sprig::ArgumentError);
}
