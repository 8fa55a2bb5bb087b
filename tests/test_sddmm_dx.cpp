// tests/test_sddmm_dx.cpp — sprig::sddmm_dx (weight gradient and dX = W^T dY in one pass over
// W^T) on every (T, Index) pair and the shapes of kernel_test_support.hpp: bitwise equal to
// sddmm (overwrite) followed by spmm_transposed (overwrite), within the error bound of the
// scalar references, padding and dead slots 0, nothing outside dX's view written; the one
// pass really runs where it should; bitwise identical for 1, 2 and 3 threads; a stale cache
// after topology changes; shape checks; with FusedActivation::relu, dX masked as the ReLU's
// backward masks it (both paths).
#include "sprig/kernels/sddmm_dx.hpp"

#include <catch2/catch.hpp>

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

// The one pass runs on one thread only; the tests that want it set one thread.
struct OneThread {
#ifdef _OPENMP
  int saved = omp_get_max_threads();
  OneThread() { omp_set_num_threads(1); }
  ~OneThread() { omp_set_num_threads(saved); }
#endif
};

// sddmm_dx against the two kernels (bitwise) and the references (error bound) on one case.
// Returns whether the one pass ran.
template <Value T, ColumnIndex Index>
bool check_case(const st::Case& c) {
  const auto W = st::case_matrix<T, Index>(c);
  CounterRng rng(c.seed, 0x5DD0);
  st::Operand<T> dY(c.M, c.B, c.px, st::quiet_nan<T>());
  st::Operand<T> X(c.K, c.B, c.py, st::quiet_nan<T>());
  dY.fill_random(rng);
  X.fill_random(rng);
  const std::vector<T> g0(static_cast<std::size_t>(W.storage_size()), st::quiet_nan<T>());

  std::vector<T> got = g0, two = g0;
  st::Operand<T> dX(c.K, c.B, c.py, T(-7));
  st::Operand<T> dX_two(c.K, c.B, c.py, T(-7));
  TransposeCache<T, Index> cache, cache_two;
  KernelWorkspace<T> ws, wst;
  const bool one_pass = detail::sddmm_dx_one_pass(W, c.B, ws, wst);
  sddmm_dx(W, cache, dY.cview(), X.cview(), std::span<T>(got), dX.view(), ws, wst);
  sddmm(W, dY.cview(), X.cview(), std::span<T>(two), Update::overwrite);
  spmm_transposed(W, cache_two, dY.cview(), dX_two.view(), Update::overwrite);

  CHECK(st::bitwise_differences<T>(std::span<const T>(got), std::span<const T>(two)) == 0);
  CHECK(st::bitwise_differences<T>(dX.cview(), dX_two.cview()) == 0);
  CHECK(dX.guard_violations() == 0);

  std::vector<T> want = g0;
  reference::sddmm(W, dY.cview(), X.cview(), std::span<T>(want), Update::overwrite);
  const auto mg = st::compare_sddmm(W, dY.cview(), X.cview(), std::span<const T>(g0), Update::overwrite,
                                    std::span<const T>(got), std::span<const T>(want), 2.0);
  INFO(mg.first);
  CHECK(mg.count == 0);
  const auto Wt = transpose(W);
  Matrix<T> zero(c.K, c.B), want_dx(c.K, c.B);
  reference::spmm(Wt.matrix, dY.cview(), want_dx.view(), Update::overwrite);
  const auto mx = st::compare_spmm(Wt.matrix, dY.cview(), zero, Update::overwrite, dX.cview(), want_dx.view(), 2.0);
  INFO(mx.first);
  CHECK(mx.count == 0);

  // With relu, dX is masked where X <= 0 (X as a ReLU's output: zeros, positives; here also
  // negatives, -0 and a NaN, which the mask treats as the ReLU's backward does); the weight
  // gradient is untouched. Bitwise against the unmasked dX masked by hand.
  st::Operand<T> Xr = X;
  for (std::int64_t i = 0; i < c.K; ++i)
    for (std::int64_t j = 0; j < c.B; ++j) {
      const std::int64_t e = i * c.B + j;
      if (e % 5 == 0)
        Xr(i, j) = T(0);
      else if (e % 7 == 0)
        Xr(i, j) = -T(0);
      else if (e == 3)
        Xr(i, j) = st::quiet_nan<T>();
    }
  std::vector<T> got_relu = g0, got_plain = g0;
  st::Operand<T> dX_relu(c.K, c.B, c.py, T(-7)), dX_plain(c.K, c.B, c.py, T(-7));
  TransposeCache<T, Index> cache_relu, cache_plain;
  KernelWorkspace<T> ws_r, wst_r, ws_p, wst_p;
  sddmm_dx(W, cache_relu, dY.cview(), Xr.cview(), std::span<T>(got_relu), dX_relu.view(), ws_r, wst_r,
           FusedActivation::relu);
  sddmm_dx(W, cache_plain, dY.cview(), Xr.cview(), std::span<T>(got_plain), dX_plain.view(), ws_p, wst_p);
  CHECK(st::bitwise_differences<T>(std::span<const T>(got_relu), std::span<const T>(got_plain)) == 0);
  std::int64_t masked = 0, kept = 0, wrong = 0;
  for (std::int64_t i = 0; i < c.K; ++i)
    for (std::int64_t j = 0; j < c.B; ++j) {
      const T x = Xr(i, j), d = dX_plain(i, j), r = dX_relu(i, j);
      const T want_r = x > T(0) ? d : T(0);
      wrong += std::memcmp(&r, &want_r, sizeof(T)) != 0;
      (x > T(0) ? kept : masked) += 1;
    }
  CHECK(wrong == 0);
  if (c.K * c.B >= 16) {
    CHECK(masked > 0);
    CHECK(kept > 0);
  }
  CHECK(dX_relu.guard_violations() == 0);

  // With gelu, dX is multiplied by x_derivative element by element (negative, zero and NaN
  // derivatives too): bitwise the plain dX times it; the weight gradient is untouched.
  st::Operand<T> D(c.K, c.B, c.px, st::quiet_nan<T>());
  for (std::int64_t i = 0; i < c.K; ++i)
    for (std::int64_t j = 0; j < c.B; ++j) {
      const std::int64_t e = i * c.B + j;
      D(i, j) = e % 6 == 0 ? T(0)
                : e == 4   ? st::quiet_nan<T>()
                           : static_cast<T>(1.1 - 0.01 * static_cast<double>(e % 130));
    }
  std::vector<T> got_gelu = g0;
  st::Operand<T> dX_gelu(c.K, c.B, c.py, T(-7));
  TransposeCache<T, Index> cache_gelu;
  KernelWorkspace<T> ws_g, wst_g;
  sddmm_dx(W, cache_gelu, dY.cview(), X.cview(), std::span<T>(got_gelu), dX_gelu.view(), ws_g, wst_g,
           FusedActivation::gelu, D.cview());
  CHECK(st::bitwise_differences<T>(std::span<const T>(got_gelu), std::span<const T>(got)) == 0);
  std::int64_t wrong_g = 0;
  for (std::int64_t i = 0; i < c.K; ++i)
    for (std::int64_t j = 0; j < c.B; ++j) {
      const T want_g = dX(i, j) * D(i, j), r = dX_gelu(i, j);
      wrong_g += std::memcmp(&r, &want_g, sizeof(T)) != 0;
    }
  CHECK(wrong_g == 0);
  CHECK(dX_gelu.guard_violations() == 0);
  if (c.K > 0 && c.B > 0) {
    Matrix<T> small(c.K, c.B + 1);
    CHECK_THROWS_AS(sddmm_dx(W, cache_gelu, dY.cview(), X.cview(), std::span<T>(got_gelu), dX_gelu.view(), ws_g, wst_g,
                             FusedActivation::gelu, small.view()),
                    ShapeError);
  }
  return one_pass;
}

}  // namespace

TEMPLATE_LIST_TEST_CASE("sddmm_dx is bitwise sddmm + spmm_transposed and within the references' bound", "[sddmm_dx]",
                        st::AllTypes) {
  using T = typename TestType::T;
  using Index = typename TestType::Index;
  OneThread one;
  std::int64_t one_pass = 0;
  for (const st::Case& c : st::kernel_cases(st::max_cols_for<Index>())) {
    CAPTURE(c);
    one_pass += check_case<T, Index>(c);
  }
  // Batches of whole registers up to 8 of them are among the cases (B = 16, 32, 48, 64 for
  // float on AVX-512): the one pass must have run on some of them.
  if (detail::kSimdFor<T>) CHECK(one_pass > 0);
}

TEMPLATE_LIST_TEST_CASE("sddmm_dx takes the one pass for a batch of whole registers", "[sddmm_dx]", st::AllTypes) {
  using T = typename TestType::T;
  using Index = typename TestType::Index;
  OneThread one;
  const std::int64_t N = static_cast<std::int64_t>(detail::simd_width<T>());
  auto W = st::random_matrix<T, Index>(90, 150, 0.1, 5);
  st::scramble(W, 5);  // storage out of row order, dead slots
  KernelWorkspace<T> ws, wst;
  if (detail::kSimdFor<T>) {
    CHECK(detail::sddmm_dx_one_pass(W, 2 * N, ws, wst));
    CHECK(detail::sddmm_dx_one_pass(W, 8 * N, ws, wst));
    CHECK_FALSE(detail::sddmm_dx_one_pass(W, 9 * N, ws, wst));      // more than one register tile
    CHECK_FALSE(detail::sddmm_dx_one_pass(W, 2 * N + 1, ws, wst));  // a batch tail
  } else {
    CHECK_FALSE(detail::sddmm_dx_one_pass(W, 2 * N, ws, wst));
  }
  for (std::int64_t B : {2 * N, 8 * N, 2 * N + 1}) {
    CAPTURE(B);
    const bool ran =
        check_case<T, Index>(st::Case{90, 150, B, 0.1, st::Placement::strided, st::Placement::unaligned, true, 5});
    CHECK(ran == (detail::kSimdFor<T> && B % N == 0));
  }
}

TEMPLATE_LIST_TEST_CASE("sddmm_dx follows topology changes of W (stale transpose cache)", "[sddmm_dx]", st::AllTypes) {
  using T = typename TestType::T;
  using Index = typename TestType::Index;
  OneThread one;
  const std::int64_t B = 4 * static_cast<std::int64_t>(detail::simd_width<T>());
  auto W = st::random_matrix<T, Index>(40, 70, 0.2, 9);
  CounterRng rng(9, 1);
  Matrix<T> dY(W.rows(), B), X(W.cols(), B), dX(W.cols(), B), dX_two(W.cols(), B);
  st::fill_uniform(dY, rng);
  st::fill_uniform(X, rng);
  TransposeCache<T, Index> cache;  // kept across the changes, as SparseLinear keeps it
  KernelWorkspace<T> ws, wst;
  for (int round = 0; round < 3; ++round) {
    CAPTURE(round);
    std::vector<T> got(static_cast<std::size_t>(W.storage_size())), two = got;
    sddmm_dx(W, cache, dY.view(), X.view(), std::span<T>(got), dX.view(), ws, wst);
    TransposeCache<T, Index> fresh;
    sddmm(W, dY.view(), X.view(), std::span<T>(two), Update::overwrite);
    spmm_transposed(W, fresh, dY.view(), dX_two.view(), Update::overwrite);
    CHECK(st::bitwise_differences<T>(std::span<const T>(got), std::span<const T>(two)) == 0);
    CHECK(st::bitwise_differences<T>(dX.view(), dX_two.view()) == 0);
    st::scramble(W, 100 + static_cast<std::uint64_t>(round));  // erase, insert, relocate
    for (T& v : W.values()) v = static_cast<T>(v * T(0.5));    // and new values
  }
}

#ifdef _OPENMP
TEMPLATE_LIST_TEST_CASE("sddmm_dx is bitwise identical for 1, 2 and 3 threads", "[sddmm_dx][threads]", st::AllTypes) {
  using T = typename TestType::T;
  using Index = typename TestType::Index;
  const int saved = omp_get_max_threads();
  auto W = st::random_matrix<T, Index>(300, 1200, 0.05, 31);
  st::scramble(W, 31);
  const std::int64_t N = static_cast<std::int64_t>(detail::simd_width<T>());
  for (std::int64_t B : {std::int64_t{13}, 4 * N, 8 * N})
    for (FusedActivation act : {FusedActivation::none, FusedActivation::relu, FusedActivation::gelu}) {
      CAPTURE(B, static_cast<int>(act));
      CounterRng rng(31, static_cast<std::uint64_t>(B));
      Matrix<T> dY(W.rows(), B), X(W.cols(), B), D(W.cols(), B);
      st::fill_uniform(dY, rng);
      st::fill_uniform(X, rng);  // both signs: the ReLU mask keeps some and drops some
      st::fill_uniform(D, rng);
      const ConstMatrixView<T> derivative = act == FusedActivation::gelu ? D.view() : ConstMatrixView<T>{};
      std::vector<std::vector<T>> grads;
      std::vector<Matrix<T>> dxs;
      for (int threads : {1, 2, 3}) {
        omp_set_num_threads(threads);
        TransposeCache<T, Index> cache;
        KernelWorkspace<T> ws, wst;
        std::vector<T> g(static_cast<std::size_t>(W.storage_size()));
        Matrix<T> dX(W.cols(), B);
        sddmm_dx(W, cache, dY.view(), X.view(), std::span<T>(g), dX.view(), ws, wst, act, derivative);
        // whole registers on up to kOnePassMaxThreads: the one pass, split over the threads
        // (a batch tail or more threads: the two kernels)
        CHECK(detail::sddmm_dx_one_pass(W, B, ws, wst) ==
              (detail::kSimdFor<T> && B % N == 0 && threads <= detail::kOnePassMaxThreads));
        grads.push_back(std::move(g));
        dxs.push_back(std::move(dX));
      }
      omp_set_num_threads(saved);
      for (int k : {1, 2}) {
        CHECK(st::bitwise_differences<T>(std::span<const T>(grads[0]), std::span<const T>(grads[k])) == 0);
        CHECK(st::bitwise_differences<T>(dxs[0].view(), dxs[k].view()) == 0);
      }
    }
  omp_set_num_threads(saved);
}
#endif

TEMPLATE_LIST_TEST_CASE("sddmm_dx rejects mismatched shapes with ShapeError", "[sddmm_dx]", st::AllTypes) {
  using T = typename TestType::T;
  using Index = typename TestType::Index;
  const auto W = st::random_matrix<T, Index>(6, 9, 0.4, 3);
  TransposeCache<T, Index> cache;
  KernelWorkspace<T> ws, wst;
  Matrix<T> dY(6, 4), X(9, 4), dX(9, 4), bad_dY(5, 4), bad_X(8, 4), bad_dX(9, 3);
  std::vector<T> g(static_cast<std::size_t>(W.storage_size())), short_g(g.size() - 1);
  const std::vector<T> g_before = g;
  CHECK_THROWS_AS(sddmm_dx(W, cache, bad_dY.view(), X.view(), std::span<T>(g), dX.view(), ws, wst), ShapeError);
  CHECK_THROWS_AS(sddmm_dx(W, cache, dY.view(), bad_X.view(), std::span<T>(g), dX.view(), ws, wst), ShapeError);
  CHECK_THROWS_AS(sddmm_dx(W, cache, dY.view(), X.view(), std::span<T>(g), bad_dX.view(), ws, wst), ShapeError);
  CHECK_THROWS_AS(sddmm_dx(W, cache, dY.view(), X.view(), std::span<T>(short_g), dX.view(), ws, wst), ShapeError);
  CHECK(g == g_before);
}

// Outputs (grad, dX) over inputs (dY, X, x_derivative, W's values) or over each other would
// be read or rewritten after the pass wrote them: rejected before anything is written. Before
// the check, sddmm_dx with dX = dY returned quietly with a dX unlike the reference's.
TEMPLATE_TEST_CASE("sddmm_dx rejects outputs that overlap an input or each other", "[sddmm_dx][overlap]", float,
                   double) {
  using T = TestType;
  using Catch::Matchers::Contains;
  auto W = st::random_matrix<T, std::int32_t>(8, 8, 0.5, 23, 0.0, 0.0);
  const auto S = static_cast<std::size_t>(W.storage_size());
  REQUIRE(S <= 64);  // grad fits inside dY or X below
  Matrix<T> dY(8, 8), X(8, 8), dX(8, 8), D(8, 8, T(1));
  CounterRng rng(7, 3);
  for (Matrix<T>* m : {&dY, &X})
    for (std::int64_t i = 0; i < 8; ++i)
      for (std::int64_t b = 0; b < 8; ++b) (*m)(i, b) = static_cast<T>(rng.uniform01() - 0.5);
  const Matrix<T> dY0 = dY, X0 = X;
  std::vector<T> grad(S), big(S + 64);
  TransposeCache<T, std::int32_t> cache;
  KernelWorkspace<T> ws, wst;
  const auto call = [&](ConstMatrixView<T> dy, ConstMatrixView<T> x, std::span<T> g, MatrixView<T> dx,
                        FusedActivation act = FusedActivation::none,
                        ConstMatrixView<T> xd = {}) { sddmm_dx(W, cache, dy, x, g, dx, ws, wst, act, xd); };
  CHECK_THROWS_AS(call(dY.view(), X.view(), std::span<T>(grad), dY.view()), ArgumentError);
  CHECK_THROWS_WITH(call(dY.view(), X.view(), std::span<T>(grad), dY.view()),
                    Contains("sprig::sddmm_dx: dX overlaps dY"));
  CHECK_THROWS_WITH(call(dY.view(), X.view(), std::span<T>(grad), X.view(), FusedActivation::relu),
                    Contains("sprig::sddmm_dx: dX overlaps X"));
  CHECK_THROWS_WITH(call(dY.view(), X.view(), std::span<T>(grad), D.view(), FusedActivation::gelu, D.view()),
                    Contains("sprig::sddmm_dx: dX overlaps x_derivative"));
  CHECK_THROWS_WITH(call(dY.view(), X.view(), std::span<T>(dY.data(), S), dX.view()),
                    Contains("sprig::sddmm_dx: grad overlaps dY"));
  CHECK_THROWS_WITH(call(dY.view(), X.view(), std::span<T>(X.data(), S), dX.view()),
                    Contains("sprig::sddmm_dx: grad overlaps X"));
  const MatrixView<T> dX_in_big(big.data() + S - 8, 8, 8);
  CHECK_THROWS_WITH(call(dY.view(), X.view(), std::span<T>(big.data(), S), dX_in_big),
                    Contains("sprig::sddmm_dx: grad overlaps dX"));
  CHECK_THROWS_WITH(call(dY.view(), X.view(), W.values(), dX.view()),
                    Contains("sprig::sddmm_dx: grad overlaps W's values"));
  bool untouched = true;
  for (std::int64_t i = 0; i < 8; ++i)
    for (std::int64_t b = 0; b < 8; ++b)
      untouched = untouched && st::same_bits(dY(i, b), dY0(i, b)) && st::same_bits(X(i, b), X0(i, b));
  CHECK(untouched);
  // dX right after grad in one buffer is fine.
  const MatrixView<T> dX_after(big.data() + S, 8, 8);
  REQUIRE_NOTHROW(call(dY.view(), X.view(), std::span<T>(big.data(), S), dX_after));
}
