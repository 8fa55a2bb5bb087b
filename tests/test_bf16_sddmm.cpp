// tests/test_bf16_sddmm.cpp — sprig::bf16_sddmm (grad[s] = dot(dY[i,:], X[c,:]) at live slots,
// dY and X bf16, grad float) on every path this CPU runs, against a reference summed in double
// from the same bf16 inputs, within the float accumulation bound gamma_{B+1} * (|g_old| + sum
// |dy x|) (bf16_sparse_test_support.hpp); the paths against each other on the same inputs;
// bitwise identical for 1 and 2 threads within a path and for any column-block budget; overwrite
// zeroes padding and dead slots, accumulate leaves them; shape, overlap and path errors.
// A path the CPU lacks is reported with WARN as NOT RUN, never passed.
#include "sprig/kernels/bf16_sddmm.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <span>
#include <vector>

#include "bf16_sparse_test_support.hpp"
#include "kernel_test_support.hpp"
#include "with_threads.hpp"

using namespace sprig;
namespace st = sprig::test;

namespace {

constexpr Bf16SddmmPath kPaths[] = {Bf16SddmmPath::portable, Bf16SddmmPath::avx512_bf16};

// WARNs that `path` does not run here and why; true when it runs.
bool runs(Bf16SddmmPath path) {
  if (bf16_sddmm_available(path)) return true;
  WARN("bf16_sddmm " << path_name(path) << " path NOT RUN here: " << bf16_sddmm_unavailable_reason(path));
  return false;
}

std::vector<float> random_floats(std::int64_t n, CounterRng& rng) {
  std::vector<float> v(static_cast<std::size_t>(n));
  for (float& x : v) x = static_cast<float>(rng.uniform(-2.0, 2.0));
  return v;
}

// grad after the kernel (got) against the double reference: live slots within the bound,
// non-live slots 0 (overwrite) or their old bits (accumulate).
template <ColumnIndex Index>
st::Mismatches compare(const PaddedCSR<float, Index>& W, const st::BfOperand<bfloat16>& dY,
                       const st::BfOperand<bfloat16>& X, const std::vector<float>& g0, Update mode,
                       const std::vector<float>& got, double factor = 1.0) {
  st::Mismatches m;
  const auto owner = st::slot_rows(W);
  const auto cols = W.col_indices();
  for (std::size_t s = 0; s < owner.size(); ++s) {
    if (owner[s] < 0) {
      const bool ok = mode == Update::overwrite ? got[s] == 0.0f : st::same_bits_any(got[s], g0[s]);
      if (!ok) m.add("non-live slot ", s, " holds ", got[s]);
      continue;
    }
    const std::int64_t i = owner[s], c = cols[s];
    double want = 0, S = 0;
    for (std::int64_t b = 0; b < X.cols(); ++b) {
      const double p = dY.at(i, b) * X.at(c, b);
      want += p;
      S += std::fabs(p);
    }
    double n = static_cast<double>(X.cols());
    if (mode == Update::accumulate) {
      want += g0[s];
      S += std::fabs(g0[s]);
      n += 1;
    }
    if (!(std::fabs(got[s] - want) <= factor * st::float_sum_bound(std::max(n, 1.0), S)))
      m.add("grad[", s, "] (row ", i, ", col ", c, ") = ", got[s], ", expected ", want, " (B ", X.cols(),
            ", sum|terms| ", S, ")");
  }
  return m;
}

struct Run {
  std::vector<float> g0, got;
};

// One case on one path: dY, X bf16 with NaN around their views; grad NaN (overwrite) or
// random (accumulate).
template <ColumnIndex Index>
void check_case(const PaddedCSR<float, Index>& W, const st::Case& c, Update mode, Bf16SddmmPath path,
                KernelWorkspace<float>& ws) {
  CounterRng rng(c.seed, 0xBF5DD);
  st::BfOperand<bfloat16> dY(W.rows(), c.B, c.px, st::nan_of<bfloat16>());
  st::BfOperand<bfloat16> X(W.cols(), c.B, c.py, st::nan_of<bfloat16>());
  dY.fill_random(rng);
  X.fill_random(rng);
  const std::vector<float> g0 =
      mode == Update::overwrite ? std::vector<float>(static_cast<std::size_t>(W.storage_size()), st::nan_of<float>())
                                : random_floats(W.storage_size(), rng);
  std::vector<float> got = g0;
  bf16_sddmm(W, dY.cview(), X.cview(), std::span<float>(got), ws, mode, path);
  const auto m = compare(W, dY, X, g0, mode, got);
  INFO(m.first);
  CHECK(m.count == 0);
}

template <ColumnIndex Index>
void check_random_cases(Bf16SddmmPath path) {
  KernelWorkspace<float> ws;
  for (const st::Case& c : st::kernel_cases(st::max_cols_for<Index>()))
    for (Update mode : {Update::overwrite, Update::accumulate}) {
      CAPTURE(c, st::name(mode), path_name(path));
      check_case<Index>(st::case_matrix<float, Index>(c), c, mode, path, ws);
    }
}

}  // namespace

TEST_CASE("bf16_sddmm names its paths and picks the fastest available", "[bf16_sddmm]") {
  CHECK(bf16_sddmm_available(Bf16SddmmPath::portable));
  CHECK(std::string(path_name(Bf16SddmmPath::portable)) == "portable");
  CHECK(std::string(path_name(Bf16SddmmPath::avx512_bf16)) == "avx512_bf16");
  const Bf16SddmmPath best = bf16_sddmm_path();
  CHECK(bf16_sddmm_available(best));
  if (bf16_sddmm_available(Bf16SddmmPath::avx512_bf16)) CHECK(best == Bf16SddmmPath::avx512_bf16);
  WARN("bf16_sddmm takes the " << path_name(best) << " path on this machine (kernels: " << kernel_arch() << ")");
}

TEMPLATE_TEST_CASE("bf16_sddmm portable path matches the reference on random shapes, placements and layouts",
                   "[bf16_sddmm]", std::int16_t, std::int32_t, std::int64_t) {
  check_random_cases<TestType>(Bf16SddmmPath::portable);
}

TEMPLATE_TEST_CASE("bf16_sddmm AVX512-BF16 path matches the reference on random shapes, placements and layouts",
                   "[bf16_sddmm]", std::int16_t, std::int32_t, std::int64_t) {
  if (runs(Bf16SddmmPath::avx512_bf16)) check_random_cases<TestType>(Bf16SddmmPath::avx512_bf16);
}

TEST_CASE("bf16_sddmm paths agree with each other on the same inputs", "[bf16_sddmm]") {
  if (!runs(Bf16SddmmPath::avx512_bf16)) return;
  for (std::int64_t B : {1, 2, 3, 15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 255, 257, 1000}) {
    CAPTURE(B);
    const auto W = st::scrambled_matrix<float, std::int32_t>(30, 41, 0.3, static_cast<std::uint64_t>(B));
    CounterRng rng(7, static_cast<std::uint64_t>(B));
    st::BfOperand<bfloat16> dY(W.rows(), B, st::Placement::unaligned, st::nan_of<bfloat16>());
    st::BfOperand<bfloat16> X(W.cols(), B, st::Placement::strided, st::nan_of<bfloat16>());
    dY.fill_random(rng);
    X.fill_random(rng);
    std::vector<float> fast(static_cast<std::size_t>(W.storage_size())), portable(fast.size());
    KernelWorkspace<float> ws;
    bf16_sddmm(W, dY.cview(), X.cview(), std::span<float>(fast), ws, Update::overwrite, Bf16SddmmPath::avx512_bf16);
    bf16_sddmm(W, dY.cview(), X.cview(), std::span<float>(portable), ws, Update::overwrite, Bf16SddmmPath::portable);
    // Each within gamma S of the exact value, so within 2 gamma S of each other.
    const auto m = compare(W, dY, X, std::vector<float>(fast.size(), 0.0f), Update::overwrite, fast);
    CHECK(m.count == 0);
    std::int64_t apart = 0;
    W.for_each_live([&](std::int64_t i, std::int64_t c, float, std::int64_t s) {
      double S = 0;
      for (std::int64_t b = 0; b < B; ++b) S += std::fabs(dY.at(i, b) * X.at(c, b));
      apart += !(std::fabs(double(fast[s]) - double(portable[s])) <= 2 * st::float_sum_bound(double(B), S));
    });
    CHECK(apart == 0);
    // Both zero every non-live slot the same way.
    const auto owner = st::slot_rows(W);
    for (std::size_t s = 0; s < owner.size(); ++s)
      if (owner[s] < 0) REQUIRE((fast[s] == 0.0f && portable[s] == 0.0f));
  }
}

TEST_CASE("bf16_sddmm gives the same bits on 1 and 2 threads and for any column-block budget, per path",
          "[bf16_sddmm]") {
  for (Bf16SddmmPath path : kPaths) {
    if (!runs(path)) continue;
    CAPTURE(path_name(path));
    for (std::int64_t B : {33, 200, 513}) {
      CAPTURE(B);
      // Large enough for the kernel to split its rows over 2 threads (kParallelMinWork).
      auto W = st::random_matrix<float, std::int32_t>(300, 700, 0.05, 99 + static_cast<std::uint64_t>(B));
      CounterRng rng(11, static_cast<std::uint64_t>(B));
      st::BfOperand<bfloat16> dY(W.rows(), B, st::Placement::tight, st::nan_of<bfloat16>());
      st::BfOperand<bfloat16> X(W.cols(), B, st::Placement::unaligned, st::nan_of<bfloat16>());
      dY.fill_random(rng);
      X.fill_random(rng);
      for (Update mode : {Update::overwrite, Update::accumulate}) {
        CAPTURE(st::name(mode));
        const std::vector<float> g0 = random_floats(W.storage_size(), rng);
        std::vector<float> one = g0, two = g0, blocked = g0;
        KernelWorkspace<float> ws1, ws2, wsb;
        sprig_test::with_threads(1,
                                 [&] { bf16_sddmm(W, dY.cview(), X.cview(), std::span<float>(one), ws1, mode, path); });
        sprig_test::with_threads(2,
                                 [&] { bf16_sddmm(W, dY.cview(), X.cview(), std::span<float>(two), ws2, mode, path); });
        CHECK(st::bitwise_differences_of(one, two) == 0);
        // Small column blocks over rows grouped by block: the dots do not depend on the block.
        auto grouped = W;
        wsb.column_block_bytes = 1024;
        const auto blocks = detail::bf16_column_blocks(32, W.cols(), B, wsb.column_block_bytes, detail::kMaxPanelRegs);
        REQUIRE(blocks.count > 1);
        grouped.group_columns(blocks.shift);
        // grouping moves slots: compare through (row, col)
        std::vector<float> gb(static_cast<std::size_t>(grouped.storage_size()), 0.0f);
        if (mode == Update::accumulate)
          grouped.for_each_live(
              [&](std::int64_t i, std::int64_t c, float, std::int64_t s) { gb[s] = g0[W.find(i, c)]; });
        sprig_test::with_threads(2, [&] {
          bf16_sddmm(grouped, dY.cview(), X.cview(), std::span<float>(gb), wsb, mode, path);
        });
        std::int64_t differ = 0;
        grouped.for_each_live([&](std::int64_t i, std::int64_t c, float, std::int64_t s) {
          differ += !st::same_bits_any(gb[s], one[W.find(i, c)]);
        });
        CHECK(differ == 0);
      }
    }
  }
}

TEST_CASE("bf16_sddmm on a scrambled matrix: storage out of row order, dead slots", "[bf16_sddmm]") {
  for (Bf16SddmmPath path : kPaths) {
    if (!runs(path)) continue;
    KernelWorkspace<float> ws;
    for (std::uint64_t seed = 1; seed <= 3; ++seed) {
      const auto W = st::scrambled_matrix<float, std::int16_t>(40, 30, 0.2, seed);
      for (std::int64_t B : {1, 7, 32, 33, 65})
        for (Update mode : {Update::overwrite, Update::accumulate}) {
          CAPTURE(path_name(path), seed, B, st::name(mode));
          check_case<std::int16_t>(
              W, st::Case{W.rows(), W.cols(), B, 0.2, st::Placement::unaligned, st::Placement::strided, true, seed},
              mode, path, ws);
        }
    }
  }
}

TEST_CASE("bf16_sddmm propagates NaN and infinity from its inputs", "[bf16_sddmm]") {
  for (Bf16SddmmPath path : kPaths) {
    if (!runs(path)) continue;
    CAPTURE(path_name(path));
    auto W = st::random_matrix<float, std::int32_t>(8, 9, 1.0, 5, 0.0, 1.0);  // dense
    const std::int64_t B = 40;
    CounterRng rng(3, 4);
    st::BfOperand<bfloat16> dY(8, B, st::Placement::tight, bfloat16{});
    st::BfOperand<bfloat16> X(9, B, st::Placement::tight, bfloat16{});
    dY.fill_random(rng);
    X.fill_random(rng);
    dY(2, 37) = st::nan_of<bfloat16>();
    X(4, 5) = bfloat16(std::numeric_limits<float>::infinity());
    std::vector<float> g(static_cast<std::size_t>(W.storage_size()));
    KernelWorkspace<float> ws;
    bf16_sddmm(W, dY.cview(), X.cview(), std::span<float>(g), ws, Update::overwrite, path);
    W.for_each_live([&](std::int64_t i, std::int64_t c, float, std::int64_t s) {
      CAPTURE(i, c);
      if (i == 2)
        CHECK(std::isnan(g[s]));
      else if (c == 4)
        CHECK(std::isinf(g[s]));
      else
        CHECK(std::isfinite(g[s]));
    });
  }
}

TEST_CASE("bf16_sddmm with B = 0 or no live weights zeroes grad (overwrite) or leaves it", "[bf16_sddmm]") {
  auto W = st::random_matrix<float, std::int32_t>(5, 6, 0.5, 8);
  KernelWorkspace<float> ws;
  std::vector<bfloat16> none;
  std::vector<float> g(static_cast<std::size_t>(W.storage_size()), 3.0f);
  bf16_sddmm(W, ConstMatrixView<bfloat16>(none.data(), 5, 0), ConstMatrixView<bfloat16>(none.data(), 6, 0),
             std::span<float>(g), ws, Update::accumulate);
  for (float v : g) CHECK(v == 3.0f);
  bf16_sddmm(W, ConstMatrixView<bfloat16>(none.data(), 5, 0), ConstMatrixView<bfloat16>(none.data(), 6, 0),
             std::span<float>(g), ws);
  for (float v : g) CHECK(v == 0.0f);
}

TEST_CASE("bf16_sddmm checks shapes, overlap and the requested path", "[bf16_sddmm]") {
  auto W = st::random_matrix<float, std::int32_t>(6, 7, 0.5, 9);
  std::vector<bfloat16> dy(6 * 4), x(7 * 4);
  std::vector<float> g(static_cast<std::size_t>(W.storage_size()));
  KernelWorkspace<float> ws;
  const ConstMatrixView<bfloat16> dY(dy.data(), 6, 4), X(x.data(), 7, 4);
  CHECK_THROWS_AS(bf16_sddmm(W, X, X, std::span<float>(g), ws), ShapeError);
  CHECK_THROWS_AS(bf16_sddmm(W, dY, ConstMatrixView<bfloat16>(x.data(), 7, 3), std::span<float>(g), ws), ShapeError);
  CHECK_THROWS_AS(bf16_sddmm(W, dY, X, std::span<float>(g).first(g.size() - 1), ws), ShapeError);
  // grad over X's bytes.
  std::vector<float> shared(static_cast<std::size_t>(W.storage_size()) + 64);
  const ConstMatrixView<bfloat16> Xin(reinterpret_cast<const bfloat16*>(shared.data()), 7, 4);
  CHECK_THROWS_AS(bf16_sddmm(W, dY, Xin, std::span<float>(shared.data(), g.size()), ws), ArgumentError);
  CHECK_THROWS_WITH(bf16_sddmm(W, X, X, std::span<float>(g), ws), Catch::Contains("sprig::bf16_sddmm"));
  if (!bf16_sddmm_available(Bf16SddmmPath::avx512_bf16))
    CHECK_THROWS_AS(bf16_sddmm(W, dY, X, std::span<float>(g), ws, Update::overwrite, Bf16SddmmPath::avx512_bf16),
                    ArgumentError);
  else
    CHECK_NOTHROW(bf16_sddmm(W, dY, X, std::span<float>(g), ws, Update::overwrite, Bf16SddmmPath::avx512_bf16));
}
