// tests/test_reference.cpp — the oracles themselves: sprig::reference on hand-computed tiny
// cases (small integers and halves, so every result is exact in float), and on random
// matrices against a dense long double computation through PaddedCSR::to_dense().
#include "sprig/kernels/reference.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <vector>

#include "kernel_test_support.hpp"

using namespace sprig;
namespace st = sprig::test;

namespace {

// W (3 x 4):           X (4 x 3):        dY (3 x 3):
//  [ 0   2  0 -1 ]      [  1 2 3 ]        [  1 0 2   ]
//  [ 0   0  0  0 ]      [  4 5 6 ]        [  5 5 5   ]
//  [.5   3 -4  0 ]      [  7 8 9 ]        [ -1 1 0.5 ]
//                       [ -1 0 1 ]
// W X   = [ 9 10 11 ; 0 0 0 ; -15.5 -16 -16.5 ]
// dW at the live entries, dot(dY[i,:], X[c,:]):
//   (0,1) 4 + 12 = 16     (0,3) -1 + 2 = 1
//   (2,0) -1 + 2 + 1.5 = 2.5    (2,1) -4 + 5 + 3 = 4    (2,2) -7 + 8 + 4.5 = 5.5
template <Value T, ColumnIndex Index>
PaddedCSR<T, Index> tiny_w() {
  const std::vector<std::int64_t> r = {2, 0, 2, 0, 2};  // deliberately not in row order
  const std::vector<std::int64_t> c = {1, 3, 0, 1, 2};
  const std::vector<T> v = {T(3), T(-1), T(0.5), T(2), T(-4)};
  return PaddedCSR<T, Index>::from_coo(3, 4, std::span<const std::int64_t>(r), std::span<const std::int64_t>(c),
                                       std::span<const T>(v));
}
template <Value T>
Matrix<T> from_rows(std::int64_t rows, std::int64_t cols, std::initializer_list<double> v) {
  Matrix<T> m(rows, cols);
  auto it = v.begin();
  for (std::int64_t i = 0; i < rows; ++i)
    for (std::int64_t j = 0; j < cols; ++j) m(i, j) = static_cast<T>(*it++);
  return m;
}

}  // namespace

TEMPLATE_LIST_TEST_CASE("reference::spmm on a hand-computed case", "[reference]", st::AllTypes) {
  using T = typename TestType::T;
  using Index = typename TestType::Index;
  const auto W = tiny_w<T, Index>();
  const auto X = from_rows<T>(4, 3, {1, 2, 3, 4, 5, 6, 7, 8, 9, -1, 0, 1});
  const auto want = from_rows<T>(3, 3, {9, 10, 11, 0, 0, 0, -15.5, -16, -16.5});

  Matrix<T> Y(3, 3, st::quiet_nan<T>());  // overwrite never reads Y
  reference::spmm(W, X.view(), Y.view());
  CHECK(st::bitwise_differences<T>(Y.view(), want.view()) == 0);

  Matrix<T> Ya(3, 3, T(1));
  reference::spmm(W, X.view(), Ya.view(), Update::accumulate);
  const auto want_acc = from_rows<T>(3, 3, {10, 11, 12, 1, 1, 1, -14.5, -15, -15.5});
  CHECK(st::bitwise_differences<T>(Ya.view(), want_acc.view()) == 0);

  // The same product on a strided, offset block of a larger X and Y.
  Matrix<T> Xbig(6, 8, T(100)), Ybig(5, 7, T(-7));
  for (std::int64_t k = 0; k < 4; ++k)
    for (std::int64_t b = 0; b < 3; ++b) Xbig(k + 1, b + 2) = X(k, b);
  reference::spmm(W, Xbig.view().block(1, 2, 4, 3), Ybig.view().block(2, 1, 3, 3));
  std::int64_t wrong = 0;
  for (std::int64_t i = 0; i < 5; ++i)
    for (std::int64_t b = 0; b < 7; ++b) {
      const bool inside = i >= 2 && b >= 1 && b < 4;
      wrong += inside ? Ybig(i, b) != want(i - 2, b - 1) : Ybig(i, b) != T(-7);
    }
  CHECK(wrong == 0);
}

TEMPLATE_LIST_TEST_CASE("reference::sddmm on a hand-computed case", "[reference]", st::AllTypes) {
  using T = typename TestType::T;
  using Index = typename TestType::Index;
  const auto W = tiny_w<T, Index>();
  const auto X = from_rows<T>(4, 3, {1, 2, 3, 4, 5, 6, 7, 8, 9, -1, 0, 1});
  const auto dY = from_rows<T>(3, 3, {1, 0, 2, 5, 5, 5, -1, 1, 0.5});
  const struct {
    std::int64_t i, c;
    double g;
  } want[] = {{0, 1, 16}, {0, 3, 1}, {2, 0, 2.5}, {2, 1, 4}, {2, 2, 5.5}};
  REQUIRE(W.nnz() == 5);
  REQUIRE(W.storage_size() > W.nnz());  // there is padding to check

  std::vector<T> g(static_cast<std::size_t>(W.storage_size()), st::quiet_nan<T>());
  reference::sddmm(W, dY.view(), X.view(), std::span<T>(g));
  std::vector<std::uint8_t> live(g.size(), 0);
  for (const auto& e : want) {
    const std::int64_t s = W.find(e.i, e.c);
    REQUIRE(s >= 0);
    live[static_cast<std::size_t>(s)] = 1;
    CAPTURE(e.i, e.c);
    CHECK(g[static_cast<std::size_t>(s)] == T(e.g));
  }
  for (std::size_t s = 0; s < g.size(); ++s)
    if (!live[s]) CHECK(g[s] == T(0));

  std::vector<T> ga(g.size(), T(10));
  reference::sddmm(W, dY.view(), X.view(), std::span<T>(ga), Update::accumulate);
  for (std::size_t s = 0; s < g.size(); ++s) CHECK(ga[s] == (live[s] ? g[s] + T(10) : T(10)));
}

TEMPLATE_LIST_TEST_CASE("reference::transpose_entries on a hand-computed case", "[reference]", st::AllTypes) {
  using T = typename TestType::T;
  using Index = typename TestType::Index;
  const auto W = tiny_w<T, Index>();
  const auto cols = reference::transpose_entries(W);
  REQUIRE(cols.size() == 4);
  // Column c of W as (row, value), rows ascending.
  const std::vector<std::vector<std::pair<std::int64_t, double>>> want = {
      {{2, 0.5}}, {{0, 2}, {2, 3}}, {{2, -4}}, {{0, -1}}};
  for (std::size_t c = 0; c < 4; ++c) {
    CAPTURE(c);
    REQUIRE(cols[c].size() == want[c].size());
    for (std::size_t q = 0; q < want[c].size(); ++q) {
      CHECK(cols[c][q].row == want[c][q].first);
      CHECK(cols[c][q].value == T(want[c][q].second));
      CHECK(cols[c][q].slot == W.find(want[c][q].first, static_cast<std::int64_t>(c)));
    }
  }
}

TEMPLATE_LIST_TEST_CASE("reference kernels agree with a dense long double computation", "[reference]", st::AllTypes) {
  using T = typename TestType::T;
  using Index = typename TestType::Index;
  // Each result is a sum of n products in T: within gamma_n S <= n eps S of the exact value
  // (kernel_test_support.hpp), n = live entries of the row (spmm) or B (sddmm).
  for (std::uint64_t seed = 1; seed <= 6; ++seed) {
    auto W = st::random_matrix<T, Index>(23 + 3 * static_cast<std::int64_t>(seed), 31, 0.3, seed);
    if (seed % 2 == 0) st::scramble(W, seed);
    const std::int64_t B = 5 + 7 * static_cast<std::int64_t>(seed);
    CAPTURE(seed, W.rows(), W.cols(), B);
    CounterRng rng(seed, 17);
    st::Operand<T> X(W.cols(), B, st::Placement::unaligned, st::quiet_nan<T>());
    st::Operand<T> dY(W.rows(), B, st::Placement::strided, st::quiet_nan<T>());
    X.fill_random(rng);
    dY.fill_random(rng);
    const Matrix<T> D = W.to_dense();

    Matrix<T> Y(W.rows(), B, st::quiet_nan<T>());
    reference::spmm(W, X.cview(), Y.view());
    std::int64_t wrong = 0;
    for (std::int64_t i = 0; i < W.rows(); ++i)
      for (std::int64_t b = 0; b < B; ++b) {
        long double exact = 0, S = 0;
        for (std::int64_t c = 0; c < W.cols(); ++c) {
          const long double p = static_cast<long double>(D(i, c)) * static_cast<long double>(X(c, b));
          exact += p;
          S += std::fabs(p);
        }
        const long double n = static_cast<long double>(W.row_nnz(i));
        wrong += !(std::fabs(static_cast<long double>(Y(i, b)) - exact) <= n * st::eps<T> * S);
      }
    CHECK(wrong == 0);

    std::vector<T> g(static_cast<std::size_t>(W.storage_size()), st::quiet_nan<T>());
    reference::sddmm(W, dY.cview(), X.cview(), std::span<T>(g));
    std::int64_t wrong_g = 0, live = 0;
    const auto owner = st::slot_rows(W);
    for (std::int64_t i = 0; i < W.rows(); ++i)
      for (std::int64_t c = 0; c < W.cols(); ++c) {
        const std::int64_t s = W.find(i, c);
        if (s < 0) continue;  // D(i, c) == 0 there
        ++live;
        long double exact = 0, S = 0;
        for (std::int64_t b = 0; b < B; ++b) {
          const long double p = static_cast<long double>(dY(i, b)) * static_cast<long double>(X(c, b));
          exact += p;
          S += std::fabs(p);
        }
        wrong_g += !(std::fabs(static_cast<long double>(g[static_cast<std::size_t>(s)]) - exact) <=
                     static_cast<long double>(B) * st::eps<T> * S);
      }
    CHECK(live == W.nnz());
    CHECK(wrong_g == 0);
    std::int64_t nonzero_padding = 0;
    for (std::size_t s = 0; s < g.size(); ++s) nonzero_padding += owner[s] < 0 && g[s] != T(0);
    CHECK(nonzero_padding == 0);
  }
}

TEMPLATE_LIST_TEST_CASE("reference kernels reject mismatched shapes", "[reference]", st::AllTypes) {
  using T = typename TestType::T;
  using Index = typename TestType::Index;
  const auto W = tiny_w<T, Index>();  // 3 x 4
  Matrix<T> X(4, 2), Y(3, 2), dY(3, 2), bad_X(5, 2), bad_Y(3, 3);
  std::vector<T> g(static_cast<std::size_t>(W.storage_size())), bad_g(g.size() + 1);
  CHECK_THROWS_AS(reference::spmm(W, bad_X.view(), Y.view()), ShapeError);
  CHECK_THROWS_AS(reference::spmm(W, X.view(), bad_Y.view()), ShapeError);
  CHECK_THROWS_AS(reference::sddmm(W, dY.view(), bad_X.view(), std::span<T>(g)), ShapeError);
  CHECK_THROWS_AS(reference::sddmm(W, bad_Y.view(), X.view(), std::span<T>(g)), ShapeError);
  CHECK_THROWS_AS(reference::sddmm(W, dY.view(), X.view(), std::span<T>(bad_g)), ShapeError);
}
