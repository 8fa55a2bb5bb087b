// tests/test_sddmm.cpp — sprig::sddmm (grad[s] = dot(dY[i,:], X[c,:]) at live slots) against
// the scalar reference on every (T, Index) pair and the shapes of kernel_test_support.hpp;
// overwrite zeroes padding and dead slots, accumulate leaves them alone; bitwise identical
// results for any OpenMP thread count; shape checks.
#include "sprig/kernels/sddmm.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#ifdef _OPENMP
#  include <omp.h>
#endif

#include "kernel_test_support.hpp"
#include "sprig/kernels/reference.hpp"

using namespace sprig;
namespace st = sprig::test;

namespace {

template <Value T>
std::vector<T> random_vector(std::int64_t n, CounterRng& rng) {
  std::vector<T> v(static_cast<std::size_t>(n));
  for (T& x : v) x = static_cast<T>(rng.uniform(-1.0, 1.0));
  return v;
}

// One case: dY (M x B) and X (K x B) random with NaN around their views; grad starts NaN
// everywhere (overwrite: must be ignored, padding and dead slots must come out 0) or random
// (accumulate: non-live slots must keep their bits).
// With `ws`, through the overload that takes a caller-owned workspace.
template <Value T, ColumnIndex Index>
void check_case(const st::Case& c, Update mode, KernelWorkspace<T>* ws = nullptr) {
  const auto W = st::case_matrix<T, Index>(c);
  REQUIRE_NOTHROW(W.check_invariants());
  CounterRng rng(c.seed, 0x5DD);
  st::Operand<T> dY(c.M, c.B, c.px, st::quiet_nan<T>());
  st::Operand<T> X(c.K, c.B, c.py, st::quiet_nan<T>());
  dY.fill_random(rng);
  X.fill_random(rng);
  const std::vector<T> g0 = mode == Update::overwrite
                                ? std::vector<T>(static_cast<std::size_t>(W.storage_size()), st::quiet_nan<T>())
                                : random_vector<T>(W.storage_size(), rng);
  std::vector<T> want = g0, got = g0;
  reference::sddmm(W, dY.cview(), X.cview(), std::span<T>(want), mode);

  if (ws)
    sddmm(W, dY.cview(), X.cview(), std::span<T>(got), *ws, mode);
  else
    sddmm(W, dY.cview(), X.cview(), std::span<T>(got), mode);

  const auto m = st::compare_sddmm(W, dY.cview(), X.cview(), std::span<const T>(g0), mode, std::span<const T>(got),
                                   std::span<const T>(want), 2.0);
  INFO(m.first);
  CHECK(m.count == 0);
}

}  // namespace

TEMPLATE_LIST_TEST_CASE("sddmm matches the reference on random shapes, placements and layouts", "[sddmm]",
                        st::AllTypes) {
  using T = typename TestType::T;
  using Index = typename TestType::Index;
  for (const st::Case& c : st::kernel_cases(st::max_cols_for<Index>()))
    for (Update mode : {Update::overwrite, Update::accumulate}) {
      CAPTURE(c, st::name(mode));
      check_case<T, Index>(c, mode);
    }
}

TEMPLATE_LIST_TEST_CASE("sddmm with one workspace reused across all shapes and matrices", "[sddmm][workspace]",
                        st::AllTypes) {
  using T = typename TestType::T;
  using Index = typename TestType::Index;
  KernelWorkspace<T> ws;
  for (const st::Case& c : st::kernel_cases(st::max_cols_for<Index>()))
    for (Update mode : {Update::overwrite, Update::accumulate}) {
      CAPTURE(c, st::name(mode));
      check_case<T, Index>(c, mode, &ws);
    }
}

TEMPLATE_LIST_TEST_CASE("sddmm on a scrambled matrix: storage out of row order, dead slots", "[sddmm]", st::AllTypes) {
  using T = typename TestType::T;
  using Index = typename TestType::Index;
  for (std::uint64_t seed = 1; seed <= 4; ++seed) {
    const auto W = st::scrambled_matrix<T, Index>(40, 30, 0.2, seed);
    CAPTURE(seed);
    for (std::int64_t B : {1, 7, 16, 33}) {
      CAPTURE(B);
      for (Update mode : {Update::overwrite, Update::accumulate}) {
        CAPTURE(st::name(mode));
        CounterRng rng(seed, static_cast<std::uint64_t>(B));
        st::Operand<T> dY(W.rows(), B, st::Placement::unaligned, st::quiet_nan<T>());
        st::Operand<T> X(W.cols(), B, st::Placement::strided, st::quiet_nan<T>());
        dY.fill_random(rng);
        X.fill_random(rng);
        // Every slot, dead ones included, starts at a non-zero value.
        const std::vector<T> g0 = random_vector<T>(W.storage_size(), rng);
        std::vector<T> want = g0, got = g0;
        reference::sddmm(W, dY.cview(), X.cview(), std::span<T>(want), mode);
        sddmm(W, dY.cview(), X.cview(), std::span<T>(got), mode);
        const auto m = st::compare_sddmm(W, dY.cview(), X.cview(), std::span<const T>(g0), mode,
                                         std::span<const T>(got), std::span<const T>(want), 2.0);
        INFO(m.first);
        CHECK(m.count == 0);
      }
    }
  }
}

TEMPLATE_LIST_TEST_CASE("sddmm writes only grad: W's values, even NaN in padding, play no part", "[sddmm]",
                        st::AllTypes) {
  using T = typename TestType::T;
  using Index = typename TestType::Index;
  auto W = st::random_matrix<T, Index>(17, 23, 0.3, 41);
  st::scramble(W, 41);
  const auto clean = W;
  REQUIRE(st::poison_non_live_values(W) > 0);
  for (std::int64_t B : {1, 9, 32, 50}) {
    CAPTURE(B);
    CounterRng rng(41, static_cast<std::uint64_t>(B));
    st::Operand<T> dY(W.rows(), B, st::Placement::tight, st::quiet_nan<T>());
    st::Operand<T> X(W.cols(), B, st::Placement::unaligned, st::quiet_nan<T>());
    dY.fill_random(rng);
    X.fill_random(rng);
    std::vector<T> want(static_cast<std::size_t>(W.storage_size())), got(want.size(), st::quiet_nan<T>());
    reference::sddmm(clean, dY.cview(), X.cview(), std::span<T>(want));
    sddmm(W, dY.cview(), X.cview(), std::span<T>(got));
    const std::vector<T> g0(want.size(), st::quiet_nan<T>());
    const auto m = st::compare_sddmm(clean, dY.cview(), X.cview(), std::span<const T>(g0), Update::overwrite,
                                     std::span<const T>(got), std::span<const T>(want), 2.0);
    INFO(m.first);
    CHECK(m.count == 0);
  }
}

TEMPLATE_LIST_TEST_CASE("sddmm of a one-hot batch picks single products exactly", "[sddmm]", st::AllTypes) {
  using T = typename TestType::T;
  using Index = typename TestType::Index;
  // With dY[i,:] = e_b (one non-zero, at batch position b) every dot product has a single
  // non-zero term, so grad[s] must equal X(c, b) exactly, whatever the summation order;
  // for each b separately, so every lane of a SIMD tail is exercised.
  const auto W = st::random_matrix<T, Index>(5, 12, 0.5, 8);
  const std::int64_t B = 37;
  CounterRng rng(8, 1);
  Matrix<T> X(W.cols(), B);
  st::fill_uniform(X, rng);
  std::int64_t wrong = 0;
  for (std::int64_t hot = 0; hot < B; ++hot) {
    Matrix<T> dY(W.rows(), B, T(0));
    for (std::int64_t i = 0; i < W.rows(); ++i) dY(i, hot) = T(1);
    std::vector<T> grad(static_cast<std::size_t>(W.storage_size()), st::quiet_nan<T>());
    sddmm(W, dY.view(), X.view(), std::span<T>(grad));
    W.for_each_live([&](std::int64_t, std::int64_t c, T, std::int64_t s) { wrong += grad[s] != X(c, hot); });
  }
  CHECK(wrong == 0);
}

#ifdef _OPENMP
TEMPLATE_LIST_TEST_CASE("sddmm is bitwise identical for 1, 2 and 3 threads", "[sddmm][threads]", st::AllTypes) {
  using T = typename TestType::T;
  using Index = typename TestType::Index;
  const int saved = omp_get_max_threads();
  auto W = st::random_matrix<T, Index>(1200, 300, 0.05, 6);
  st::scramble(W, 6);
  for (std::int64_t B : {13, 64, 200}) {
    CAPTURE(B);
    CounterRng rng(6, static_cast<std::uint64_t>(B));
    st::Operand<T> dY(W.rows(), B, st::Placement::strided, st::quiet_nan<T>());
    st::Operand<T> X(W.cols(), B, st::Placement::unaligned, st::quiet_nan<T>());
    dY.fill_random(rng);
    X.fill_random(rng);
    const std::vector<T> g0 = random_vector<T>(W.storage_size(), rng);
    for (Update mode : {Update::overwrite, Update::accumulate}) {
      CAPTURE(st::name(mode));
      std::vector<std::vector<T>> results;
      for (int threads : {1, 2, 3}) {
        omp_set_num_threads(threads);
        std::vector<T> g = g0;
        sddmm(W, dY.cview(), X.cview(), std::span<T>(g), mode);
        results.push_back(std::move(g));
      }
      omp_set_num_threads(saved);
      CHECK(st::bitwise_differences<T>(std::span<const T>(results[0]), std::span<const T>(results[1])) == 0);
      CHECK(st::bitwise_differences<T>(std::span<const T>(results[0]), std::span<const T>(results[2])) == 0);
      // and the threaded result is right, not just reproducible
      std::vector<T> want = g0;
      reference::sddmm(W, dY.cview(), X.cview(), std::span<T>(want), mode);
      const auto m = st::compare_sddmm(W, dY.cview(), X.cview(), std::span<const T>(g0), mode,
                                       std::span<const T>(results[1]), std::span<const T>(want), 2.0);
      INFO(m.first);
      CHECK(m.count == 0);
    }
  }
  omp_set_num_threads(saved);
}

TEMPLATE_LIST_TEST_CASE("sddmm through a workspace last used by another matrix with the same partition key",
                        "[sddmm][threads][workspace]", st::AllTypes) {
  using T = typename TestType::T;
  using Index = typename TestType::Index;
  // W1: first half of the rows full, the rest empty; W2 the opposite. Same topology version,
  // rows, nnz and storage size: a partition cached for W1 may be reused for W2, which may
  // unbalance the threads but must not drop or repeat a row.
  const std::int64_t M = 2000, K = 64, B = 16;
  auto half_full = [&](bool first_half) {
    std::vector<std::int64_t> r, c;
    std::vector<T> v;
    for (std::int64_t i = 0; i < M; ++i)
      if ((i < M / 2) == first_half)
        for (std::int64_t k = 0; k < K; ++k) {
          r.push_back(i);
          c.push_back(k);
          v.push_back(T(1));
        }
    return PaddedCSR<T, Index>::from_coo(M, K, std::span<const std::int64_t>(r), std::span<const std::int64_t>(c),
                                         std::span<const T>(v));
  };
  const auto W1 = half_full(true), W2 = half_full(false);
  REQUIRE(W1.topology_version() == W2.topology_version());
  REQUIRE(W1.nnz() == W2.nnz());
  REQUIRE(W1.storage_size() == W2.storage_size());
  CounterRng rng(13, 0);
  Matrix<T> dY(M, B), X(K, B);
  st::fill_uniform(dY, rng);
  st::fill_uniform(X, rng);
  const int saved = omp_get_max_threads();
  omp_set_num_threads(2);
  KernelWorkspace<T> ws;
  std::vector<T> g1(static_cast<std::size_t>(W1.storage_size())), g2(g1.size(), st::quiet_nan<T>());
  sddmm(W1, dY.view(), X.view(), std::span<T>(g1), ws);
  sddmm(W2, dY.view(), X.view(), std::span<T>(g2), ws);
  omp_set_num_threads(saved);
  std::vector<T> want(g1.size());
  reference::sddmm(W2, dY.view(), X.view(), std::span<T>(want));
  const std::vector<T> g0(g1.size(), st::quiet_nan<T>());
  const auto m = st::compare_sddmm(W2, dY.view(), X.view(), std::span<const T>(g0), Update::overwrite,
                                   std::span<const T>(g2), std::span<const T>(want), 2.0);
  INFO(m.first);
  CHECK(m.count == 0);
}
#endif

TEMPLATE_LIST_TEST_CASE("sddmm rejects mismatched shapes with ShapeError and leaves grad alone", "[sddmm]",
                        st::AllTypes) {
  using T = typename TestType::T;
  using Index = typename TestType::Index;
  const auto W = st::random_matrix<T, Index>(6, 4, 0.5, 3);  // 6 x 4
  Matrix<T> dY(6, 5, T(1)), X(4, 5, T(1));
  Matrix<T> dY_rows(7, 5, T(1)), X_rows(3, 5, T(1)), X_cols(4, 6, T(1)), dY_cols(6, 4, T(1));
  std::vector<T> grad(static_cast<std::size_t>(W.storage_size()), T(7));
  std::vector<T> short_grad(grad.size() - 1, T(7)), long_grad(grad.size() + 1, T(7));
  for (Update mode : {Update::overwrite, Update::accumulate}) {
    CAPTURE(st::name(mode));
    CHECK_THROWS_AS(sddmm(W, dY_rows.view(), X.view(), std::span<T>(grad), mode), ShapeError);  // dY rows != M
    CHECK_THROWS_AS(sddmm(W, dY.view(), X_rows.view(), std::span<T>(grad), mode), ShapeError);  // X rows != K
    CHECK_THROWS_AS(sddmm(W, dY.view(), X_cols.view(), std::span<T>(grad), mode), ShapeError);  // batch differs
    CHECK_THROWS_AS(sddmm(W, dY_cols.view(), X.view(), std::span<T>(grad), mode), ShapeError);  // batch differs
    CHECK_THROWS_AS(sddmm(W, dY.view(), X.view(), std::span<T>(short_grad), mode), ShapeError);
    CHECK_THROWS_AS(sddmm(W, dY.view(), X.view(), std::span<T>(long_grad), mode), ShapeError);
  }
  bool untouched = true;
  for (T g : grad) untouched = untouched && g == T(7);
  for (T g : short_grad) untouched = untouched && g == T(7);
  for (T g : long_grad) untouched = untouched && g == T(7);
  CHECK(untouched);
}

// Column blocks on every case (kernel_test_support.hpp: for_each_blocked_case): a dot does not
// depend on the block it is computed in, so the result is bitwise the unblocked one, for rows
// grouped by block and rows that are not (done whole).
TEMPLATE_LIST_TEST_CASE("sddmm over column blocks is bitwise sddmm without them, grouped rows or not",
                        "[sddmm][blocks]", st::AllTypes) {
  using T = typename TestType::T;
  using Index = typename TestType::Index;
  std::int64_t compared = 0;
  const std::int64_t blocked =
      st::for_each_blocked_case<T, Index>([&](const st::Case& c, std::int64_t budget, const detail::ColumnBlocks&,
                                              const PaddedCSR<T, Index>& W, KernelWorkspace<T>& ws) {
        CAPTURE(c, budget);
        CounterRng rng(c.seed, 0xB10D);
        st::Operand<T> dY(c.M, c.B, c.px, st::quiet_nan<T>());
        st::Operand<T> X(c.K, c.B, c.py, st::quiet_nan<T>());
        dY.fill_random(rng);
        X.fill_random(rng);
        for (Update mode : {Update::overwrite, Update::accumulate}) {
          const std::vector<T> g0 = random_vector<T>(W.storage_size(), rng);
          std::vector<T> plain = g0, got = g0, want = g0;
          sddmm(W, dY.cview(), X.cview(), std::span<T>(plain), mode);  // default budget: one block here
          sddmm(W, dY.cview(), X.cview(), std::span<T>(got), ws, mode);
          reference::sddmm(W, dY.cview(), X.cview(), std::span<T>(want), mode);
          bool same = true;
          for (std::size_t q = 0; q < got.size(); ++q, ++compared)
            same = same && std::memcmp(&got[q], &plain[q], sizeof(T)) == 0;
          CHECK(same);
          const auto m = st::compare_sddmm(W, dY.cview(), X.cview(), std::span<const T>(g0), mode,
                                           std::span<const T>(got), std::span<const T>(want), 2.0);
          INFO(m.first);
          CHECK(m.count == 0);
        }
      });
  if (detail::simd_width<T>() > 1) CHECK(blocked > 60);
  CHECK(compared > 0);
}

// grad written over an input (X, dY or W's own values) would change the dots still to come:
// rejected before anything is written. Before the check, sddmm with grad inside X returned
// quietly with gradients unlike the reference's.
TEMPLATE_TEST_CASE("sddmm rejects a grad that overlaps an input, and leaves it alone", "[sddmm][overlap]", float,
                   double) {
  using T = TestType;
  using Catch::Matchers::Contains;
  auto W = st::random_matrix<T, std::int32_t>(8, 8, 0.5, 19, 0.0, 0.0);
  const auto S = static_cast<std::size_t>(W.storage_size());
  std::vector<T> buf(S + 8 * 8, T(0));
  CounterRng rng(3, 2);
  for (T& v : buf) v = static_cast<T>(rng.uniform01() - 0.5);
  const std::vector<T> before = buf;
  const ConstMatrixView<T> X(buf.data(), 8, 8);  // grad starts inside X
  Matrix<T> dY(8, 8, T(1));
  const std::span<T> grad(buf.data() + 8, S);
  CHECK_THROWS_AS(sddmm(W, dY.view(), X, grad), ArgumentError);
  CHECK_THROWS_WITH(sddmm(W, dY.view(), X, grad, Update::accumulate), Contains("sprig::sddmm: grad overlaps X"));
  CHECK_THROWS_WITH(sddmm(W, X, dY.view(), grad), Contains("sprig::sddmm: grad overlaps dY"));
  CHECK(buf == before);
  CHECK_THROWS_WITH(sddmm(W, dY.view(), dY.view(), W.values()), Contains("sprig::sddmm: grad overlaps W's values"));
  // grad right after X in the same buffer is fine.
  const ConstMatrixView<T> X_first(buf.data() + S, 8, 8);
  const std::span<T> g(buf.data(), S);
  const Matrix<T> Xc = [&] {
    Matrix<T> m(8, 8);
    for (std::int64_t i = 0; i < 8; ++i)
      for (std::int64_t b = 0; b < 8; ++b) m(i, b) = X_first(i, b);
    return m;
  }();
  sddmm(W, dY.view(), X_first, g);
  std::vector<T> want(S);
  reference::sddmm(W, dY.view(), Xc.view(), std::span<T>(want));
  bool close = true;
  for (std::size_t s = 0; s < S; ++s) close = close && std::abs(g[s] - want[s]) <= T(1e-4);
  CHECK(close);
}
