// tests/test_block_spmm.cpp — sprig::block_spmm (Y = W X, with and without the bias + ReLU
// epilogue) and sprig::block_spmm_transposed (dX = W^T dY) on BlockPaddedCSR, against the
// scalar oracles of block_reference.hpp, which are checked themselves against dense products
// of to_dense(). Block shapes 1x4, 4x1, 4x4, 8x1, 8x8 and 16x1 on every (T, Index) pair;
// shapes that are not multiples of the block; empty and full block rows; strided and
// unaligned operands with guards; matrices after insert/erase (padding and dead slots);
// overwrite and accumulate; reads of in-matrix entries of live blocks only; bitwise
// identical results for 1, 2 and 3 threads; shape and overlap errors.
#include "sprig/kernels/block_spmm.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <span>
#include <tuple>
#include <utility>
#include <vector>

#include "kernel_test_support.hpp"
#include "sprig/core/block_padded_csr.hpp"
#include "sprig/kernels/block_reference.hpp"
#include "with_threads.hpp"

using namespace sprig;
namespace st = sprig::test;

namespace {

template <class T_, class Index_, int R_, int C_>
struct BlockTypes {
  using T = T_;
  using Index = Index_;
  static constexpr int R = R_, C = C_;
};
template <class T, class Index>
using ShapesOf = std::tuple<BlockTypes<T, Index, 1, 4>, BlockTypes<T, Index, 4, 1>, BlockTypes<T, Index, 4, 4>,
                            BlockTypes<T, Index, 8, 1>, BlockTypes<T, Index, 8, 8>, BlockTypes<T, Index, 16, 1>>;
// Every block shape at (float, int32), and every other (T, Index) pair at 4x4: the index type
// only changes how a column is loaded, the value type the SIMD width, and each cross is a
// full set of kernel instantiations (all 36 took 7 minutes to compile, on every CI leg).
template <class T, class Index>
using MainShapeOf = std::tuple<BlockTypes<T, Index, 4, 4>>;
// The cross compiles in two translation units side by side: this file (every shape at
// (float, int32)) and tests/parts/test_block_spmm_2.cpp, which includes it with
// SPRIG_TEST_PART 2 (the other pairs).
#if SPRIG_TEST_PART == 2
using OtherPairBlockTypes = decltype(std::tuple_cat(
    MainShapeOf<float, std::int16_t>{}, MainShapeOf<float, std::int64_t>{}, MainShapeOf<double, std::int16_t>{},
    MainShapeOf<double, std::int32_t>{}, MainShapeOf<double, std::int64_t>{},
    std::tuple<BlockTypes<double, std::int16_t, 8, 1>, BlockTypes<double, std::int32_t, 1, 4>>{}));
#  define SPRIG_TEST_BLOCK_TYPES OtherPairBlockTypes
#else
using FloatInt32BlockTypes = ShapesOf<float, std::int32_t>;
#  define SPRIG_TEST_BLOCK_TYPES FloatInt32BlockTypes
#endif

template <class BT>
using BlockMatrix = BlockPaddedCSR<typename BT::T, typename BT::Index, BT::R, BT::C>;

std::int64_t blocks_of(std::int64_t n, std::int64_t b) { return (n + b - 1) / b; }

// One R x C block's values for block (bi, bj) of an M x K matrix: uniform in [-1, 1) (never 0)
// inside the matrix, 0 outside.
template <class T, int R, int C>
std::vector<T> random_block(std::int64_t M, std::int64_t K, std::int64_t bi, std::int64_t bj, CounterRng& rng) {
  std::vector<T> b(static_cast<std::size_t>(R * C), T(0));
  for (std::int64_t r = 0; r < R; ++r)
    for (std::int64_t c = 0; c < C; ++c)
      if (bi * R + r < M && bj * C + c < K) {
        const T v = static_cast<T>(rng.uniform(-1.0, 1.0));
        b[static_cast<std::size_t>(r * C + c)] = v == T(0) ? T(0.5) : v;
      }
  return b;
}

// A random M x K block matrix built from a dense one (a path independent of the kernels):
// each block row is empty (p 0.15), full (p 0.1) or holds each block with probability
// `density`. Scrambled: then about 4 random structural changes per block row (erase a live
// block, insert an absent one, or insert until the row outgrows its capacity and relocates),
// so storage holds padding and dead slots and rows out of storage order.
template <class BT>
BlockMatrix<BT> random_blocks(std::int64_t M, std::int64_t K, double density, std::uint64_t seed, bool scrambled) {
  using T = typename BT::T;
  constexpr int R = BT::R, C = BT::C;
  CounterRng rng(seed, 0xB10C);
  Matrix<T> dense(M, K);
  const std::int64_t br = blocks_of(M, R), bc = blocks_of(K, C);
  for (std::int64_t bi = 0; bi < br; ++bi) {
    const double u = rng.uniform01();
    if (u < 0.15) continue;
    const bool full = u < 0.25;
    for (std::int64_t bj = 0; bj < bc; ++bj)
      if (full || rng.uniform01() < density) {
        const auto b = random_block<T, R, C>(M, K, bi, bj, rng);
        for (std::int64_t r = 0; r < R && bi * R + r < M; ++r)
          for (std::int64_t c = 0; c < C && bj * C + c < K; ++c) dense(bi * R + r, bj * C + c) = b[r * C + c];
      }
  }
  auto W = BlockMatrix<BT>::from_dense(dense.view());
  if (!scrambled || br == 0 || bc == 0) return W;
  auto absent = [&](std::int64_t bi) -> std::int64_t {
    if (W.pattern().row_nnz(bi) >= bc) return -1;
    for (int attempt = 0; attempt < 8; ++attempt) {
      const auto bj = static_cast<std::int64_t>(rng.uniform_below(static_cast<std::uint64_t>(bc)));
      if (W.find_block(bi, bj) < 0) return bj;
    }
    for (std::int64_t bj = 0; bj < bc; ++bj)
      if (W.find_block(bi, bj) < 0) return bj;
    return -1;
  };
  auto insert_one = [&](std::int64_t bi) {
    const std::int64_t bj = absent(bi);
    if (bj < 0) return false;
    const auto b = random_block<T, R, C>(M, K, bi, bj, rng);
    W.insert_block(bi, bj, std::span<const T>(b));
    return true;
  };
  for (std::int64_t k = 0; k < 4 * br; ++k) {
    const auto bi = static_cast<std::int64_t>(rng.uniform_below(static_cast<std::uint64_t>(br)));
    const auto& P = W.pattern();
    switch (rng.uniform_below(4)) {
      case 0:
      case 1:
        if (P.row_nnz(bi) > 0) {
          const std::int64_t s =
              P.row_start(bi) + static_cast<std::int64_t>(rng.uniform_below(static_cast<std::uint64_t>(P.row_nnz(bi))));
          W.erase_block(bi, P.col_indices()[s]);
        }
        break;
      case 2: insert_one(bi); break;
      default: {
        const std::int64_t cap = P.row_capacity(bi);
        while (W.pattern().row_nnz(bi) <= cap && insert_one(bi)) {
        }
        break;
      }
    }
  }
  return W;
}

// |W| and |X|: the oracle on these gives S = sum |terms| per output element (the error bound).
template <class BT>
BlockMatrix<BT> abs_of(BlockMatrix<BT> W) {
  for (auto& v : W.values()) v = std::abs(v);
  return W;
}
template <class T>
Matrix<T> abs_of(ConstMatrixView<T> X) {
  Matrix<T> out(X.rows(), X.cols());
  for (std::int64_t i = 0; i < X.rows(); ++i)
    for (std::int64_t j = 0; j < X.cols(); ++j) out(i, j) = std::abs(X(i, j));
  return out;
}

// Checks got against want element by element with kernel_test_support's bound: n terms (the
// inner dimension, plus the old output for accumulate) and S = sum |terms| (S plus |Y0|).
template <class T>
st::Mismatches compare(ConstMatrixView<T> got, ConstMatrixView<T> want, ConstMatrixView<T> S, const Matrix<T>& Y0,
                       Update mode, std::int64_t inner) {
  st::Mismatches m;
  for (std::int64_t i = 0; i < want.rows(); ++i)
    for (std::int64_t b = 0; b < want.cols(); ++b) {
      double s = static_cast<double>(S(i, b)), n = static_cast<double>(inner);
      if (mode == Update::accumulate) {
        s += std::fabs(static_cast<double>(Y0(i, b)));
        n += 1;
      }
      if (!st::within<T>(got(i, b), want(i, b), std::max(n, 1.0), s, 2.0))
        m.add("(", i, ", ", b, ") = ", got(i, b), ", expected ", want(i, b), " (sum|terms| ", s, ")");
    }
  return m;
}

// One random case of a block shape class.
struct BlockCase {
  std::int64_t M, K, B;
  double density;
  st::Placement pin, pout;
  bool scrambled;
  std::uint64_t seed;
};
std::ostream& operator<<(std::ostream& out, const BlockCase& c) {
  return out << "M=" << c.M << " K=" << c.K << " B=" << c.B << " density=" << c.density << " in=" << st::name(c.pin)
             << " out=" << st::name(c.pout) << " scrambled=" << c.scrambled << " seed=" << c.seed;
}

// ~100 cases for R x C blocks: M and K up to 9 blocks and a few elements (mostly not
// multiples of R and C), zero extents, one block row / column, B over 1..65 and a few wide
// ones (several panels), densities from empty to full, every placement, half scrambled.
std::vector<BlockCase> block_cases(int R, int C) {
  std::vector<BlockCase> cases;
  CounterRng rng(static_cast<std::uint64_t>(R * 100 + C), 0xCA5E);
  const st::Placement places[] = {st::Placement::tight, st::Placement::strided, st::Placement::unaligned};
  auto pick = [&](std::int64_t lo, std::int64_t hi) {
    return lo + static_cast<std::int64_t>(rng.uniform_below(static_cast<std::uint64_t>(hi - lo + 1)));
  };
  std::uint64_t seed = 1;
  for (std::int64_t B = 1; B <= 65; ++B)
    cases.push_back({pick(1, 9 * R + 3), pick(1, 9 * C + 3), B, 0.05 + 0.6 * rng.uniform01(), places[B % 3],
                     places[(B / 3) % 3], B % 2 == 0, seed++});
  for (int k = 0; k < 20; ++k)
    cases.push_back({pick(1, 6 * R + 2), pick(1, 6 * C + 2), pick(1, 40), rng.uniform01(), places[k % 3],
                     places[(k + 1) % 3], k % 2 == 1, seed++});
  for (std::int64_t B : {80, 96, 128, 200})
    cases.push_back({pick(R, 5 * R), pick(20, 80), B, 0.3, places[B % 3], places[(B + 2) % 3], B != 128, seed++});
  const std::int64_t edge[][3] = {{0, 5, 7},   {5, 0, 7},  {0, 0, 3},  {6, 5, 0},          {1, 1, 1},
                                  {1, 40, 17}, {37, 1, 9}, {R, C, 16}, {R * 3, C * 2, 33}, {R + 1, C + 1, 8}};
  for (int k = 0; k < 10; ++k)
    cases.push_back({edge[k][0], edge[k][1], edge[k][2], 0.5, places[k % 3], places[(k + 2) % 3], k % 3 == 0, seed++});
  cases.push_back({5 * R + 1, 4 * C + 3, 19, 0.0, st::Placement::strided, st::Placement::unaligned, false, seed++});
  cases.push_back({5 * R + 1, 4 * C + 3, 21, 1.0, st::Placement::unaligned, st::Placement::strided, true, seed++});
  return cases;
}

// Forward and transposed products of one case, against the oracle, in one mode: X / dY with
// NaN around their views (a read outside them shows), Y / dX NaN (overwrite must ignore it)
// or random (accumulate) with a finite guard that must stay untouched.
template <class BT>
void check_case(const BlockMatrix<BT>& W, const BlockCase& c, Update mode, KernelWorkspace<typename BT::T>* ws,
                TransposeCache<typename BT::T, typename BT::Index>& cache) {
  using T = typename BT::T;
  REQUIRE_NOTHROW(W.check_invariants());
  const auto Wabs = abs_of<BT>(W);
  CounterRng rng(c.seed, 0x7E57);
  // Forward.
  {
    st::Operand<T> X(c.K, c.B, c.pin, st::quiet_nan<T>());
    X.fill_random(rng);
    st::Operand<T> Y(c.M, c.B, c.pout, T(-12345.5));
    if (mode == Update::overwrite)
      Y.fill(st::quiet_nan<T>());
    else
      Y.fill_random(rng);
    const Matrix<T> Y0 = Y.copy();
    Matrix<T> want = Y0, S(c.M, c.B);
    reference::block_spmm(W, X.cview(), want.view(), mode);
    reference::block_spmm(Wabs, abs_of<T>(X.cview()).view(), S.view());
    if (ws)
      block_spmm(W, X.cview(), Y.view(), *ws, mode);
    else
      block_spmm(W, X.cview(), Y.view(), mode);
    const auto m = compare<T>(Y.cview(), want.view(), S.view(), Y0, mode, c.K);
    INFO("forward " << m.first);
    CHECK(m.count == 0);
    CHECK(Y.guard_violations() == 0);
  }
  // Transposed.
  {
    st::Operand<T> dY(c.M, c.B, c.pout, st::quiet_nan<T>());
    dY.fill_random(rng);
    st::Operand<T> dX(c.K, c.B, c.pin, T(-12345.5));
    if (mode == Update::overwrite)
      dX.fill(st::quiet_nan<T>());
    else
      dX.fill_random(rng);
    const Matrix<T> X0 = dX.copy();
    Matrix<T> want = X0, S(c.K, c.B);
    reference::block_spmm_transposed(W, dY.cview(), want.view(), mode);
    reference::block_spmm_transposed(Wabs, abs_of<T>(dY.cview()).view(), S.view());
    if (ws)
      block_spmm_transposed(W, cache, dY.cview(), dX.view(), *ws, mode);
    else
      block_spmm_transposed(W, cache, dY.cview(), dX.view(), mode);
    const auto m = compare<T>(dX.cview(), want.view(), S.view(), X0, mode, c.M);
    INFO("transposed " << m.first);
    CHECK(m.count == 0);
    CHECK(dX.guard_violations() == 0);
  }
}

}  // namespace

TEMPLATE_LIST_TEST_CASE("the block oracles agree with dense products of to_dense()", "[block_spmm][reference]",
                        SPRIG_TEST_BLOCK_TYPES) {
  using T = typename TestType::T;
  constexpr int R = TestType::R, C = TestType::C;
  // The oracles must be right before the kernels are checked against them: compare them with
  // plain dense loops over W.to_dense() (a separate path: the dense matrix, not the blocks).
  for (std::uint64_t seed = 1; seed <= 6; ++seed) {
    const std::int64_t M = 3 * R + static_cast<std::int64_t>(seed % 3), K = 2 * C + static_cast<std::int64_t>(seed % 2),
                       B = 5 + static_cast<std::int64_t>(seed);
    const auto W = random_blocks<TestType>(M, K, 0.5, seed, seed % 2 == 0);
    CAPTURE(M, K, B, seed);
    const Matrix<T> D = W.to_dense();
    CounterRng rng(seed, 1);
    Matrix<T> X(K, B), dY(M, B);
    st::fill_uniform(X, rng);
    st::fill_uniform(dY, rng);
    Matrix<T> Y(M, B, st::quiet_nan<T>()), dX(K, B, st::quiet_nan<T>());
    reference::block_spmm(W, X.view(), Y.view());
    reference::block_spmm_transposed(W, dY.view(), dX.view());
    std::vector<T> grad(static_cast<std::size_t>(W.storage_size() * R * C), st::quiet_nan<T>());
    reference::block_sddmm(W, dY.view(), X.view(), std::span<T>(grad));
    const double tol = 64 * static_cast<double>(st::eps<T>) * static_cast<double>(std::max(K, M) * B + 1);
    std::int64_t bad = 0;
    for (std::int64_t i = 0; i < M; ++i)
      for (std::int64_t b = 0; b < B; ++b) {
        double y = 0;
        for (std::int64_t k = 0; k < K; ++k) y += static_cast<double>(D(i, k)) * static_cast<double>(X(k, b));
        bad += !(std::fabs(y - static_cast<double>(Y(i, b))) <= tol);
      }
    for (std::int64_t k = 0; k < K; ++k)
      for (std::int64_t b = 0; b < B; ++b) {
        double x = 0;
        for (std::int64_t i = 0; i < M; ++i) x += static_cast<double>(D(i, k)) * static_cast<double>(dY(i, b));
        bad += !(std::fabs(x - static_cast<double>(dX(k, b))) <= tol);
      }
    // grad: dY X^T at the in-matrix entries of live blocks, exactly 0 everywhere else.
    std::vector<std::uint8_t> seen(grad.size(), 0);
    W.for_each_block([&](std::int64_t bi, std::int64_t bj, std::int64_t s, const T*) {
      for (std::int64_t r = 0; r < R; ++r)
        for (std::int64_t c = 0; c < C; ++c) {
          const auto e = static_cast<std::size_t>(s * R * C + r * C + c);
          seen[e] = 1;
          if (bi * R + r >= M || bj * C + c >= K) {
            bad += grad[e] != T(0);
            continue;
          }
          double g = 0;
          for (std::int64_t b = 0; b < B; ++b)
            g += static_cast<double>(dY(bi * R + r, b)) * static_cast<double>(X(bj * C + c, b));
          bad += !(std::fabs(g - static_cast<double>(grad[e])) <= tol);
        }
    });
    for (std::size_t e = 0; e < grad.size(); ++e) bad += !seen[e] && grad[e] != T(0);
    CHECK(bad == 0);
    // Accumulate adds onto what is there.
    std::vector<T> twice = grad;
    reference::block_sddmm(W, dY.view(), X.view(), std::span<T>(twice), Update::accumulate);
    std::int64_t off = 0;
    for (std::size_t e = 0; e < grad.size(); ++e) off += twice[e] != grad[e] + grad[e];
    CHECK(off == 0);
  }
}

TEMPLATE_LIST_TEST_CASE("block_spmm and block_spmm_transposed match the oracle on random shapes", "[block_spmm]",
                        SPRIG_TEST_BLOCK_TYPES) {
  using T = typename TestType::T;
  using Index = typename TestType::Index;
  constexpr int R = TestType::R, C = TestType::C;
  // One workspace and one cache reused across every case (what a call leaves there must not
  // leak into the next, different one), and a fresh one per call on alternate cases.
  KernelWorkspace<T> ws;
  TransposeCache<T, Index> cache;
  std::int64_t scrambled = 0, with_dead = 0, with_padding = 0;
  for (const BlockCase& c : block_cases(R, C)) {
    const auto W = random_blocks<TestType>(c.M, c.K, c.density, c.seed, c.scrambled);
    if (c.scrambled && W.block_rows() > 2) {
      ++scrambled;
      with_dead += W.dead_slots() > 0;
    }
    with_padding += W.storage_size() > W.nnz_blocks();
    for (Update mode : {Update::overwrite, Update::accumulate}) {
      CAPTURE(c, st::name(mode));
      check_case<TestType>(W, c, mode, c.seed % 2 ? &ws : nullptr, cache);
    }
  }
  // The layouts the kernels must handle were really there.
  CHECK(with_dead * 2 >= scrambled);
  CHECK(with_padding > 10);
}

TEMPLATE_LIST_TEST_CASE("block kernels read only the in-matrix entries of live blocks", "[block_spmm]",
                        SPRIG_TEST_BLOCK_TYPES) {
  using T = typename TestType::T;
  using Index = typename TestType::Index;
  constexpr int R = TestType::R, C = TestType::C;
  // NaN in padding and dead slots and in the out-of-matrix entries of edge blocks (breaking
  // the storage invariant on purpose) must not change any result.
  const std::int64_t M = 5 * R + (R > 1 ? R / 2 + 1 : 0), K = 4 * C + (C > 1 ? C / 2 + 1 : 0);
  const auto clean = random_blocks<TestType>(M, K, 0.4, 31, true);
  REQUIRE(clean.storage_size() > clean.nnz_blocks());
  auto W = clean;
  std::vector<std::uint8_t> inside(static_cast<std::size_t>(W.storage_size() * R * C), 0);
  W.for_each_block([&](std::int64_t bi, std::int64_t bj, std::int64_t s, const T*) {
    for (std::int64_t r = 0; r < R; ++r)
      for (std::int64_t c = 0; c < C; ++c)
        inside[static_cast<std::size_t>(s * R * C + r * C + c)] = bi * R + r < M && bj * C + c < K;
  });
  std::int64_t poisoned = 0;
  for (std::size_t e = 0; e < inside.size(); ++e)
    if (!inside[e]) {
      W.values()[e] = st::quiet_nan<T>();
      ++poisoned;
    }
  REQUIRE(poisoned > 0);
  for (std::int64_t B : {1, 5, 8, 16, 31, 64, 65}) {
    CAPTURE(B);
    CounterRng rng(31, static_cast<std::uint64_t>(B));
    Matrix<T> X(K, B), dY(M, B);
    st::fill_uniform(X, rng);
    st::fill_uniform(dY, rng);
    Matrix<T> want(M, B), got(M, B), wantT(K, B), gotT(K, B);
    reference::block_spmm(clean, X.view(), want.view());
    block_spmm(W, X.view(), got.view());
    TransposeCache<T, Index> cache;
    reference::block_spmm_transposed(clean, dY.view(), wantT.view());
    block_spmm_transposed(W, cache, dY.view(), gotT.view());
    Matrix<T> S(M, B), ST(K, B);
    const auto Wabs = abs_of<TestType>(clean);
    reference::block_spmm(Wabs, abs_of<T>(X.view()).view(), S.view());
    reference::block_spmm_transposed(Wabs, abs_of<T>(dY.view()).view(), ST.view());
    const auto m = compare<T>(got.view(), want.view(), S.view(), want, Update::overwrite, K);
    const auto mt = compare<T>(gotT.view(), wantT.view(), ST.view(), wantT, Update::overwrite, M);
    INFO(m.first << " / " << mt.first);
    CHECK(m.count == 0);
    CHECK(mt.count == 0);
  }
}

TEMPLATE_LIST_TEST_CASE("block_spmm's bias + ReLU epilogue equals the product followed by both passes",
                        "[block_spmm][epilogue]", SPRIG_TEST_BLOCK_TYPES) {
  using T = typename TestType::T;
  constexpr int R = TestType::R, C = TestType::C;
  for (std::uint64_t seed = 1; seed <= 8; ++seed) {
    const std::int64_t M = 3 * R + static_cast<std::int64_t>(seed % 3), K = 5 * C + 1,
                       B = static_cast<std::int64_t>(seed * 9 % 67 + 1);
    const auto W = random_blocks<TestType>(M, K, 0.4, seed, seed % 2 == 0);
    CAPTURE(M, K, B, seed);
    CounterRng rng(seed, 2);
    st::Operand<T> X(K, B, st::Placement::unaligned, st::quiet_nan<T>());
    X.fill_random(rng);
    std::vector<T> bias(static_cast<std::size_t>(M));
    for (auto& b : bias) b = static_cast<T>(rng.uniform(-1.0, 1.0));
    // The plain product, then a bias pass and a ReLU pass: the epilogue must give these bits.
    Matrix<T> plain(M, B);
    block_spmm(W, X.cview(), plain.view());
    Matrix<T> with_bias = plain, with_relu = plain;
    for (std::int64_t i = 0; i < M; ++i)
      for (std::int64_t b = 0; b < B; ++b) {
        with_bias(i, b) = plain(i, b) + bias[static_cast<std::size_t>(i)];
        with_relu(i, b) = with_bias(i, b) > T(0) ? with_bias(i, b) : T(0);
      }
    KernelWorkspace<T> ws;
    st::Operand<T> Y(M, B, st::Placement::strided, T(-12345.5));
    Y.fill(st::quiet_nan<T>());
    block_spmm(W, X.cview(), Y.view(), ws, RowEpilogue<T>{std::span<const T>(bias), FusedActivation::relu});
    CHECK(st::bitwise_differences<T>(Y.cview(), with_relu.view()) == 0);
    CHECK(Y.guard_violations() == 0);
    Matrix<T> Yb(M, B, st::quiet_nan<T>());
    block_spmm(W, X.cview(), Yb.view(), RowEpilogue<T>{std::span<const T>(bias), FusedActivation::none});
    CHECK(st::bitwise_differences<T>(Yb.view(), with_bias.view()) == 0);
    Matrix<T> Yr(M, B, st::quiet_nan<T>());
    block_spmm(W, X.cview(), Yr.view(), ws, RowEpilogue<T>{{}, FusedActivation::relu});
    std::int64_t bad = 0;
    for (std::int64_t i = 0; i < M; ++i)
      for (std::int64_t b = 0; b < B; ++b) bad += !st::same_bits(Yr(i, b), plain(i, b) > T(0) ? plain(i, b) : T(0));
    CHECK(bad == 0);
    // And the plain product is right (the passes above are only as good as it is).
    Matrix<T> want(M, B), S(M, B);
    reference::block_spmm(W, X.cview(), want.view());
    reference::block_spmm(abs_of<TestType>(W), abs_of<T>(X.cview()).view(), S.view());
    const auto m = compare<T>(plain.view(), want.view(), S.view(), want, Update::overwrite, K);
    INFO(m.first);
    CHECK(m.count == 0);
  }
}

TEMPLATE_LIST_TEST_CASE("block kernels are bitwise identical for 1, 2 and 3 threads", "[block_spmm][threads]",
                        SPRIG_TEST_BLOCK_TYPES) {
  using T = typename TestType::T;
  using Index = typename TestType::Index;
  constexpr int R = TestType::R, C = TestType::C;
  // Well above the parallel threshold, with empty and full block rows (an uneven
  // nnz-balanced partition) and relocated rows; shapes not multiples of the block.
  const std::int64_t M = std::max(40 * R, 240) + 3, K = 300 / C * C + C / 2;
  const auto W = random_blocks<TestType>(M, K, 0.1, 5, true);
  REQUIRE(W.nnz_blocks() * R * C * 13 >= detail::kParallelMinWork);
  for (std::int64_t B : {13, 64, 200}) {
    CAPTURE(B);
    CounterRng rng(5, static_cast<std::uint64_t>(B));
    st::Operand<T> X(K, B, st::Placement::strided, st::quiet_nan<T>());
    X.fill_random(rng);
    st::Operand<T> dY(M, B, st::Placement::unaligned, st::quiet_nan<T>());
    dY.fill_random(rng);
    Matrix<T> Z(M, B), ZT(K, B);
    st::fill_uniform(Z, rng);
    st::fill_uniform(ZT, rng);
    std::vector<T> bias(static_cast<std::size_t>(M));
    for (auto& b : bias) b = static_cast<T>(rng.uniform(-1.0, 1.0));
    for (Update mode : {Update::overwrite, Update::accumulate}) {
      CAPTURE(st::name(mode));
      std::vector<Matrix<T>> fwd, bwd, epi;
      KernelWorkspace<T> ws;
      TransposeCache<T, Index> cache;
      // 1, 2 and 3 threads, then 1 and 2 with streaming stores (every output here,
      // stream_bytes = 0; Y, dX and E are aligned Matrix rows, so whole registers stream where
      // the kernels can): the same bits each time.
      const std::pair<int, std::int64_t> runs[] = {
          {1, ws.stream_bytes}, {2, ws.stream_bytes}, {3, ws.stream_bytes}, {1, 0}, {2, 0}};
      for (const auto& [threads, stream_bytes] : runs)
        sprig_test::with_threads(threads, [&] {
          ws.stream_bytes = stream_bytes;
          Matrix<T> Y = Z, dX = ZT, E(M, B);
          block_spmm(W, X.cview(), Y.view(), ws, mode);
          block_spmm_transposed(W, cache, dY.cview(), dX.view(), ws, mode);
          block_spmm(W, X.cview(), E.view(), ws, RowEpilogue<T>{std::span<const T>(bias), FusedActivation::relu});
          fwd.push_back(std::move(Y));
          bwd.push_back(std::move(dX));
          epi.push_back(std::move(E));
        });
      for (int k : {1, 2, 3, 4}) {
        CAPTURE(k);
        CHECK(st::bitwise_differences<T>(fwd[0].view(), fwd[k].view()) == 0);
        CHECK(st::bitwise_differences<T>(bwd[0].view(), bwd[k].view()) == 0);
        CHECK(st::bitwise_differences<T>(epi[0].view(), epi[k].view()) == 0);
      }
      // and the threaded results are right, not just reproducible
      Matrix<T> want = Z, wantT = ZT, S(M, B), ST(K, B);
      reference::block_spmm(W, X.cview(), want.view(), mode);
      reference::block_spmm_transposed(W, dY.cview(), wantT.view(), mode);
      const auto Wabs = abs_of<TestType>(W);
      reference::block_spmm(Wabs, abs_of<T>(X.cview()).view(), S.view());
      reference::block_spmm_transposed(Wabs, abs_of<T>(dY.cview()).view(), ST.view());
      const auto m = compare<T>(fwd[2].view(), want.view(), S.view(), Z, mode, K);
      const auto mt = compare<T>(bwd[2].view(), wantT.view(), ST.view(), ZT, mode, M);
      INFO(m.first << " / " << mt.first);
      CHECK(m.count == 0);
      CHECK(mt.count == 0);
    }
  }
}

TEMPLATE_LIST_TEST_CASE("block_spmm_transposed follows topology changes through its cache", "[block_spmm]",
                        SPRIG_TEST_BLOCK_TYPES) {
  using T = typename TestType::T;
  using Index = typename TestType::Index;
  constexpr int R = TestType::R, C = TestType::C;
  // A cache kept across structural changes and value changes of W (as a layer keeps it):
  // every call must see W's current pattern and values; another matrix must not be served
  // from the cache either.
  const std::int64_t M = 6 * R + 1, K = 5 * C + 2, B = 24;
  auto W = random_blocks<TestType>(M, K, 0.3, 8, false);
  const auto other = random_blocks<TestType>(M, K, 0.3, 9, false);
  TransposeCache<T, Index> cache;
  KernelWorkspace<T> ws;
  CounterRng rng(8, 3);
  Matrix<T> dY(M, B);
  st::fill_uniform(dY, rng);
  for (int step = 0; step < 6; ++step) {
    CAPTURE(step);
    if (step % 2 == 1) {  // values only
      for (auto& v : W.values()) v = v * T(-0.5);
    } else if (step > 0) {  // structure: erase one block, insert another
      const auto& P = W.pattern();
      for (std::int64_t bi = 0; bi < W.block_rows(); ++bi)
        if (P.row_nnz(bi) > 0) {
          W.erase_block(bi, P.col_indices()[P.row_start(bi)]);
          break;
        }
      for (std::int64_t bj = 0; bj < W.block_cols(); ++bj)
        if (W.find_block(step % W.block_rows(), bj) < 0) {
          const auto b = random_block<T, R, C>(M, K, step % W.block_rows(), bj, rng);
          W.insert_block(step % W.block_rows(), bj, std::span<const T>(b));
          break;
        }
    }
    for (const BlockMatrix<TestType>* m : {static_cast<const BlockMatrix<TestType>*>(&W), &other}) {
      Matrix<T> got(K, B, st::quiet_nan<T>()), want(K, B), S(K, B);
      block_spmm_transposed(*m, cache, dY.view(), got.view(), ws);
      reference::block_spmm_transposed(*m, dY.view(), want.view());
      reference::block_spmm_transposed(abs_of<TestType>(*m), abs_of<T>(dY.view()).view(), S.view());
      const auto mm = compare<T>(got.view(), want.view(), S.view(), want, Update::overwrite, M);
      INFO(mm.first);
      CHECK(mm.count == 0);
    }
  }
}

TEMPLATE_LIST_TEST_CASE("block kernels reject bad shapes, overlaps and epilogues and leave the output alone",
                        "[block_spmm][errors]", SPRIG_TEST_BLOCK_TYPES) {
  using T = typename TestType::T;
  using Index = typename TestType::Index;
  constexpr int R = TestType::R, C = TestType::C;
  const std::int64_t M = 2 * R + 1, K = 3 * C;
  const auto W = random_blocks<TestType>(M, K, 0.5, 4, false);
  TransposeCache<T, Index> cache;
  Matrix<T> X(K, 5, T(1)), Y(M, 5, T(7)), dY(M, 5, T(1)), dX(K, 5, T(7));
  Matrix<T> X_rows(K + 1, 5, T(1)), Y_rows(M - 1, 5, T(7)), Y_cols(M, 4, T(7));
  auto untouched = [](const Matrix<T>& m) {
    for (std::int64_t i = 0; i < m.rows(); ++i)
      for (std::int64_t j = 0; j < m.cols(); ++j)
        if (m(i, j) != T(7)) return false;
    return true;
  };
  for (Update mode : {Update::overwrite, Update::accumulate}) {
    CHECK_THROWS_AS(block_spmm(W, X_rows.view(), Y.view(), mode), ShapeError);
    CHECK_THROWS_AS(block_spmm(W, X.view(), Y_rows.view(), mode), ShapeError);
    CHECK_THROWS_AS(block_spmm(W, X.view(), Y_cols.view(), mode), ShapeError);
    CHECK_THROWS_AS(block_spmm_transposed(W, cache, X.view(), dX.view(), mode), ShapeError);  // dY K rows
    CHECK_THROWS_AS(block_spmm_transposed(W, cache, dY.view(), Y.view(), mode), ShapeError);  // dX M rows
    CHECK_THROWS_AS(block_spmm_transposed(W, cache, dY.view(), Y_cols.view(), mode), ShapeError);
  }
  CHECK(untouched(Y));
  CHECK(untouched(dX));
  CHECK(untouched(Y_rows));
  CHECK(untouched(Y_cols));
  // The message names the shapes.
  CHECK_THROWS_WITH(block_spmm(W, X_rows.view(), Y.view()),
                    Catch::Contains(std::to_string(K + 1) + "x5") &&
                        Catch::Contains(std::to_string(M) + "x" + std::to_string(K)));
  // Epilogue: a bias of the wrong length, gelu, a bias inside Y.
  std::vector<T> short_bias(static_cast<std::size_t>(M - 1), T(0));
  CHECK_THROWS_AS(block_spmm(W, X.view(), Y.view(), RowEpilogue<T>{std::span<const T>(short_bias)}), ShapeError);
  CHECK_THROWS_AS(block_spmm(W, X.view(), Y.view(), RowEpilogue<T>{{}, FusedActivation::gelu}), ArgumentError);
  Matrix<T> wide(M, 5 + M, T(7));
  CHECK_THROWS_AS(block_spmm(W, X.view(), wide.view().block(0, 0, M, 5),
                             RowEpilogue<T>{std::span<const T>(wide.data() + 5, static_cast<std::size_t>(M))}),
                  ArgumentError);
  CHECK(untouched(Y));
  // Overlaps: an output sharing memory with its input or with W's values.
  Matrix<T> big(M + K, 5, T(7));
  CHECK_THROWS_AS(block_spmm(W, big.view().block(0, 0, K, 5), big.view().block(K - 1, 0, M, 5)), ArgumentError);
  CHECK_THROWS_AS(block_spmm_transposed(W, cache, big.view().block(0, 0, M, 5), big.view().block(M - 1, 0, K, 5)),
                  ArgumentError);
  auto Wm = W;
  const std::int64_t need = M * 1;
  if (std::ssize(Wm.values()) >= need) {
    MatrixView<T> in_values(Wm.values().data(), M, 1, 1);
    Matrix<T> X1(K, 1, T(1));
    CHECK_THROWS_AS(block_spmm(Wm, X1.view(), in_values), ArgumentError);
  }
}

TEMPLATE_LIST_TEST_CASE("block_spmm on empty extents", "[block_spmm]", SPRIG_TEST_BLOCK_TYPES) {
  using T = typename TestType::T;
  using Index = typename TestType::Index;
  // Zero rows, zero columns or a zero batch: nothing to compute; overwrite of a K = 0 product
  // is all zeros, and accumulate leaves Y bit for bit as it was.
  TransposeCache<T, Index> cache;
  const std::int64_t shapes[][3] = {{0, 7, 4}, {7, 0, 4}, {7, 9, 0}};
  for (const auto& shape : shapes) {
    const std::int64_t M = shape[0], K = shape[1], B = shape[2];
    CAPTURE(M, K, B);
    const BlockMatrix<TestType> W(M, K);
    Matrix<T> X(K, B, T(1)), Y(M, B, T(3)), dY(M, B, T(1)), dX(K, B, T(3));
    block_spmm(W, X.view(), Y.view(), Update::accumulate);
    block_spmm_transposed(W, cache, dY.view(), dX.view(), Update::accumulate);
    bool same = true;
    for (std::int64_t i = 0; i < M; ++i)
      for (std::int64_t b = 0; b < B; ++b) same = same && Y(i, b) == T(3);
    for (std::int64_t i = 0; i < K; ++i)
      for (std::int64_t b = 0; b < B; ++b) same = same && dX(i, b) == T(3);
    CHECK(same);
    block_spmm(W, X.view(), Y.view());
    block_spmm_transposed(W, cache, dY.view(), dX.view());
    bool zero = true;
    for (std::int64_t i = 0; i < M; ++i)
      for (std::int64_t b = 0; b < B; ++b) zero = zero && Y(i, b) == T(0);
    for (std::int64_t i = 0; i < K; ++i)
      for (std::int64_t b = 0; b < B; ++b) zero = zero && dX(i, b) == T(0);
    CHECK(zero);
  }
}
