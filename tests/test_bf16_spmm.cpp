// tests/test_bf16_spmm.cpp — sprig::bf16_spmm (Y = W X) and bf16_spmm_transposed (dX = W^T dY)
// with bf16 weights (a shadow of W's float values) and bf16 inputs, float or bf16 outputs,
// against a reference summed in double from the same bf16 values, within the float
// accumulation bound gamma_{n} * S, n = row_nnz (+1 accumulating), plus one bf16 rounding
// for bf16 outputs (bf16_sparse_test_support.hpp); reads of live slots only; nothing written
// outside the output view; bitwise identical for 1 and 2 threads; refresh_bf16_values bit
// for bit the scalar conversion; shape and overlap errors.
#include "sprig/kernels/bf16_spmm.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <span>
#include <type_traits>
#include <vector>

#include "bf16_sparse_test_support.hpp"
#include "kernel_test_support.hpp"
#include "with_threads.hpp"

using namespace sprig;
namespace st = sprig::test;

namespace {

// The paths this process runs (a path it cannot run is reported NOT RUN, once per call).
std::vector<Bf16SpmmPath> paths_here() {
  std::vector<Bf16SpmmPath> out{Bf16SpmmPath::portable};
  if (bf16_spmm_available(Bf16SpmmPath::avx512_bf16))
    out.push_back(Bf16SpmmPath::avx512_bf16);
  else
    WARN("bf16_spmm avx512_bf16 path NOT RUN here: " << bf16_spmm_unavailable_reason(Bf16SpmmPath::avx512_bf16));
  return out;
}

// Checks out (the kernel's result over out0) against the double reference of op(W) in where
// op(W)[r, k] has the weights of `entries(r)` = (k, bf16 weight) pairs.
template <class Out, class Entries>
st::Mismatches compare(std::int64_t rows, const st::BfOperand<bfloat16>& in, const std::vector<Out>& out0, Update mode,
                       const st::BfOperand<Out>& out, Entries&& entries) {
  st::Mismatches m;
  const std::int64_t B = in.cols();
  for (std::int64_t r = 0; r < rows; ++r) {
    const auto e = entries(r);
    for (std::int64_t b = 0; b < B; ++b) {
      double want = 0, S = 0;
      for (const auto& [k, w] : e) {
        const double p = static_cast<double>(static_cast<float>(w)) * in.at(k, b);
        want += p;
        S += std::fabs(p);
      }
      double n = static_cast<double>(e.size());
      if (mode == Update::accumulate) {
        const double old = static_cast<float>(out0[static_cast<std::size_t>(r * B + b)]);
        want += old;
        S += std::fabs(old);
        n += 1;
      }
      double bound = st::float_sum_bound(std::max(n, 1.0), S);
      if constexpr (std::is_same_v<Out, bfloat16>) bound += std::ldexp(1.0, -8) * (std::fabs(want) + bound);
      const double got = out.at(r, b);
      if (!(std::fabs(got - want) <= bound))
        m.add("out(", r, ", ", b, ") = ", got, ", expected ", want, " (terms ", n, ", sum|terms| ", S, ")");
    }
  }
  return m;
}

template <ColumnIndex Index>
std::vector<std::vector<std::pair<std::int64_t, bfloat16>>> rows_of(const PaddedCSR<float, Index>& W,
                                                                    const std::vector<bfloat16>& shadow,
                                                                    bool transposed) {
  std::vector<std::vector<std::pair<std::int64_t, bfloat16>>> out(
      static_cast<std::size_t>(transposed ? W.cols() : W.rows()));
  W.for_each_live([&](std::int64_t i, std::int64_t c, float, std::int64_t s) {
    if (transposed)
      out[static_cast<std::size_t>(c)].emplace_back(i, shadow[static_cast<std::size_t>(s)]);
    else
      out[static_cast<std::size_t>(i)].emplace_back(c, shadow[static_cast<std::size_t>(s)]);
  });
  return out;
}

// Runs one kernel (forward or transposed) on one case with output type Out: the input bf16
// with NaN around its view, the output NaN (overwrite) or random (accumulate) with a finite
// guard around it, the shadow NaN at every non-live slot.
template <ColumnIndex Index, class Out>
void check_case(const PaddedCSR<float, Index>& W, const st::Case& c, Update mode, bool transposed,
                KernelWorkspace<float>& ws, TransposeCache<float, Index>& cache, Bf16SpmmPath path = bf16_spmm_path()) {
  CounterRng rng(c.seed, transposed ? 0xBF7 : 0xBF1);
  const std::int64_t in_rows = transposed ? W.rows() : W.cols(), out_rows = transposed ? W.cols() : W.rows();
  auto shadow = st::shadow_of(W);
  const auto owner = st::slot_rows(W);
  for (std::size_t s = 0; s < owner.size(); ++s)
    if (owner[s] < 0) shadow[s] = st::nan_of<bfloat16>();
  st::BfOperand<bfloat16> in(in_rows, c.B, c.px, st::nan_of<bfloat16>());
  in.fill_random(rng);
  st::BfOperand<Out> out(out_rows, c.B, c.py, static_cast<Out>(-12345.5f));
  if (mode == Update::overwrite)
    out.fill(st::nan_of<Out>());
  else
    out.fill_random(rng);
  const std::vector<Out> out0 = out.contents();
  if (transposed)
    bf16_spmm_transposed(W, std::span<const bfloat16>(shadow), cache, in.cview(), out.view(), ws, mode, path);
  else
    bf16_spmm(W, std::span<const bfloat16>(shadow), in.cview(), out.view(), ws, mode, path);
  const auto entries = rows_of(W, shadow, transposed);
  const auto m = compare(out_rows, in, out0, mode, out, [&](std::int64_t r) { return entries[r]; });
  INFO(m.first);
  CHECK(m.count == 0);
  CHECK(out.guard_violations() == 0);
}

template <ColumnIndex Index, class Out>
void check_random_cases(bool transposed) {
  KernelWorkspace<float> ws;
  for (const st::Case& c : st::kernel_cases(st::max_cols_for<Index>())) {
    const auto W = st::case_matrix<float, Index>(c);
    TransposeCache<float, Index> cache;
    for (const Bf16SpmmPath path : paths_here())
      for (Update mode : {Update::overwrite, Update::accumulate}) {
        CAPTURE(c, st::name(mode), transposed, path_name(path));
        check_case<Index, Out>(W, c, mode, transposed, ws, cache, path);
      }
  }
}

}  // namespace

TEMPLATE_TEST_CASE("bf16_spmm (float Y) matches the reference on random shapes, placements and layouts", "[bf16_spmm]",
                   std::int16_t, std::int32_t, std::int64_t) {
  check_random_cases<TestType, float>(false);
}

TEMPLATE_TEST_CASE("bf16_spmm (bf16 Y) matches the reference on random shapes, placements and layouts", "[bf16_spmm]",
                   std::int16_t, std::int32_t, std::int64_t) {
  check_random_cases<TestType, bfloat16>(false);
}

TEMPLATE_TEST_CASE("bf16_spmm_transposed (float dX) matches the reference on random shapes and layouts", "[bf16_spmm]",
                   std::int16_t, std::int32_t, std::int64_t) {
  check_random_cases<TestType, float>(true);
}

TEMPLATE_TEST_CASE("bf16_spmm_transposed (bf16 dX) matches the reference on random shapes and layouts", "[bf16_spmm]",
                   std::int16_t, std::int32_t, std::int64_t) {
  check_random_cases<TestType, bfloat16>(true);
}

TEST_CASE("bf16_spmm on scrambled matrices and with small column blocks over grouped rows", "[bf16_spmm]") {
  for (std::uint64_t seed = 1; seed <= 3; ++seed)
    for (std::int64_t budget : {std::int64_t{64}, std::int64_t{1024}, std::int64_t{1} << 19}) {
      auto W = st::scrambled_matrix<float, std::int32_t>(40, 70, 0.2, seed);
      KernelWorkspace<float> ws;
      ws.column_block_bytes = budget;
      TransposeCache<float, std::int32_t> cache;
      for (bool grouped : {false, true}) {
        if (grouped) W.group_columns(2);
        for (std::int64_t B : {1, 31, 32, 33, 100, 300})
          for (Update mode : {Update::overwrite, Update::accumulate})
            for (bool transposed : {false, true}) {
              CAPTURE(seed, budget, grouped, B, st::name(mode), transposed);
              const st::Case c{W.rows(), W.cols(), B, 0.2, st::Placement::strided, st::Placement::unaligned,
                               true,     seed};
              for (const Bf16SpmmPath path : paths_here()) {
                CAPTURE(path_name(path));
                check_case<std::int32_t, float>(W, c, mode, transposed, ws, cache, path);
                check_case<std::int32_t, bfloat16>(W, c, mode, transposed, ws, cache, path);
              }
            }
      }
    }
}

TEST_CASE("bf16_spmm and bf16_spmm_transposed give the same bits on 1 and 2 threads", "[bf16_spmm]") {
  // Large enough for the kernels to split rows over 2 threads (kParallelMinWork), several panels.
  for (std::int64_t B : {48, 300, 1030}) {
    CAPTURE(B);
    auto W = st::random_matrix<float, std::int32_t>(260, 300, 0.05, 5 + static_cast<std::uint64_t>(B));
    const auto shadow = st::shadow_of(W);
    CounterRng rng(21, static_cast<std::uint64_t>(B));
    st::BfOperand<bfloat16> X(W.cols(), B, st::Placement::unaligned, st::nan_of<bfloat16>());
    st::BfOperand<bfloat16> dY(W.rows(), B, st::Placement::strided, st::nan_of<bfloat16>());
    X.fill_random(rng);
    dY.fill_random(rng);
    for (const Bf16SpmmPath path : paths_here())
      for (Update mode : {Update::overwrite, Update::accumulate}) {
        CAPTURE(st::name(mode), path_name(path));
        std::vector<float> y1, y2, dx1, dx2;
        std::vector<bfloat16> yb1, yb2;
        for (int threads : {1, 2}) {
          st::BfOperand<float> Y(W.rows(), B, st::Placement::tight, 0.0f), dX(W.cols(), B, st::Placement::tight, 0.0f);
          st::BfOperand<bfloat16> Yb(W.rows(), B, st::Placement::tight, bfloat16{});
          CounterRng orng(3, 3);
          Y.fill_random(orng);
          dX.fill_random(orng);
          Yb.fill_random(orng);
          KernelWorkspace<float> ws;
          TransposeCache<float, std::int32_t> cache;
          sprig_test::with_threads(threads, [&] {
            bf16_spmm(W, std::span<const bfloat16>(shadow), X.cview(), Y.view(), ws, mode, path);
            bf16_spmm(W, std::span<const bfloat16>(shadow), X.cview(), Yb.view(), ws, mode, path);
            bf16_spmm_transposed(W, std::span<const bfloat16>(shadow), cache, dY.cview(), dX.view(), ws, mode, path);
          });
          (threads == 1 ? y1 : y2) = Y.contents();
          (threads == 1 ? yb1 : yb2) = Yb.contents();
          (threads == 1 ? dx1 : dx2) = dX.contents();
        }
        CHECK(st::bitwise_differences_of(y1, y2) == 0);
        CHECK(st::bitwise_differences_of(yb1, yb2) == 0);
        CHECK(st::bitwise_differences_of(dx1, dx2) == 0);
      }
  }
}

// The x_derivative form (dX = bf16(D * W^T dY), one column block) against the float dX of
// the plain form times D afterwards, then rounded: bit for bit where the plain form runs one
// block too (every case here with the default budget); into a separate dX and in place over
// D; the same bits with a tiny column-block budget (the scaled form ignores it) and on 2
// threads (large enough to split).
template <ColumnIndex Index>
void check_scaled_dx(Bf16SpmmPath path) {
  std::vector<st::Case> cases = st::kernel_cases(st::max_cols_for<Index>());
  cases.push_back({260, 300, 1030, 0.05, st::Placement::strided, st::Placement::tight, true, 41});
  for (const st::Case& c : cases) {
    CAPTURE(c);
    const auto W = st::case_matrix<float, Index>(c);
    const auto shadow = st::shadow_of(W);
    const std::span<const bfloat16> v(shadow);
    CounterRng rng(c.seed, 0xD5);
    st::BfOperand<bfloat16> dY(W.rows(), c.B, c.px, st::nan_of<bfloat16>());
    dY.fill_random(rng);
    const std::int64_t K = W.cols();
    const auto n = static_cast<std::size_t>(K * c.B);
    std::vector<bfloat16> d(n);
    for (auto& x : d) x = bfloat16(static_cast<float>(rng.uniform(-2.0, 2.0)));
    const ConstMatrixView<bfloat16> D(d.data(), K, c.B);
    KernelWorkspace<float> ws, tiny;
    tiny.column_block_bytes = 256;
    TransposeCache<float, Index> cache;
    std::vector<float> plain(n);
    bf16_spmm_transposed(W, v, cache, dY.cview(), MatrixView<float>(plain.data(), K, c.B), ws, Update::overwrite, path);
    std::vector<bfloat16> out(n, st::nan_of<bfloat16>()), small(n, st::nan_of<bfloat16>()), two = out, over = d;
    bf16_spmm_transposed(W, v, cache, dY.cview(), MatrixView<bfloat16>(out.data(), K, c.B), D, ws, path);
    bf16_spmm_transposed(W, v, cache, dY.cview(), MatrixView<bfloat16>(small.data(), K, c.B), D, tiny, path);
    sprig_test::with_threads(2, [&] {
      bf16_spmm_transposed(W, v, cache, dY.cview(), MatrixView<bfloat16>(two.data(), K, c.B), D, ws, path);
    });
    const MatrixView<bfloat16> in_place(over.data(), K, c.B);
    bf16_spmm_transposed(W, v, cache, dY.cview(), in_place, ConstMatrixView<bfloat16>(in_place), ws, path);
    std::int64_t differ = 0;
    for (std::size_t e = 0; e < n; ++e) {
      const std::uint16_t want = bfloat16(plain[e] * static_cast<float>(d[e])).bits;
      differ += (out[e].bits != want) + (small[e].bits != want) + (two[e].bits != want) + (over[e].bits != want);
    }
    CHECK(differ == 0);
  }
}

TEST_CASE("bf16_spmm_transposed with x_derivative: the plain dX times D, rounded, bit for bit", "[bf16_spmm]") {
  for (const Bf16SpmmPath path : paths_here()) {
    CAPTURE(path_name(path));
    check_scaled_dx<std::int32_t>(path);
    check_scaled_dx<std::int16_t>(path);
  }
}

TEST_CASE("bf16_spmm_transposed with x_derivative checks its shape and overlaps", "[bf16_spmm]") {
  const auto W = st::random_matrix<float, std::int32_t>(12, 10, 0.4, 3);
  const auto shadow = st::shadow_of(W);
  const std::span<const bfloat16> v(shadow);
  KernelWorkspace<float> ws;
  TransposeCache<float, std::int32_t> cache;
  std::vector<bfloat16> dy(12 * 8, bfloat16(1.0f)), dx(10 * 8), d(10 * 9, bfloat16(1.0f));
  const ConstMatrixView<bfloat16> dY(dy.data(), 12, 8);
  const MatrixView<bfloat16> dX(dx.data(), 10, 8);
  CHECK_THROWS_AS(bf16_spmm_transposed(W, v, cache, dY, dX, ConstMatrixView<bfloat16>(d.data(), 10, 9), ws),
                  ShapeError);
  // D one element off dX: a partial overlap
  const MatrixView<bfloat16> shifted(d.data() + 1, 10, 8);
  CHECK_THROWS_AS(bf16_spmm_transposed(W, v, cache, dY, shifted, ConstMatrixView<bfloat16>(d.data(), 10, 8), ws),
                  ArgumentError);
  // dX over dY is refused as in the plain form
  std::vector<bfloat16> big(12 * 8, bfloat16(1.0f));
  CHECK_THROWS_AS(bf16_spmm_transposed(W, v, cache, ConstMatrixView<bfloat16>(big.data(), 12, 8),
                                       MatrixView<bfloat16>(big.data(), 10, 8),
                                       ConstMatrixView<bfloat16>(d.data(), 10, 8), ws),
                  ArgumentError);
}

TEST_CASE("bf16_spmm_transposed follows W's topology changes through its cache", "[bf16_spmm]") {
  auto W = st::random_matrix<float, std::int32_t>(30, 20, 0.3, 77);
  TransposeCache<float, std::int32_t> cache;
  KernelWorkspace<float> ws;
  for (int round = 0; round < 3; ++round) {
    CAPTURE(round);
    if (round > 0) st::scramble(W, 100 + static_cast<std::uint64_t>(round));
    const st::Case c{W.rows(), W.cols(), 300, 0.3, st::Placement::tight, st::Placement::tight, true, 9};
    check_case<std::int32_t, float>(W, c, Update::overwrite, true, ws, cache);
  }
}

TEST_CASE("refresh_bf16_values rounds every slot as the scalar conversion does", "[bf16_spmm]") {
  auto W = st::scrambled_matrix<float, std::int32_t>(25, 40, 0.3, 4);
  auto vals = W.values();
  // Ties, halfway points, infinities, NaN and subnormals among the values.
  const float specials[] = {
      1.00390625f, 1.01171875f, -3.0e38f,           std::numeric_limits<float>::infinity(), 1e-40f, -1e-45f,
      0.0f,        -0.0f,       st::nan_of<float>()};
  for (std::size_t k = 0; k < std::size(specials) && k < vals.size(); ++k) vals[k * 3] = specials[k];
  std::vector<bfloat16> shadow(static_cast<std::size_t>(W.storage_size()));
  refresh_bf16_values(W, std::span<bfloat16>(shadow));
  std::int64_t differ = 0;
  for (std::size_t s = 0; s < shadow.size(); ++s) differ += shadow[s].bits != detail::bfloat16_bits_of(vals[s]);
  CHECK(differ == 0);
  CHECK_THROWS_AS(refresh_bf16_values(W, std::span<bfloat16>(shadow).first(shadow.size() - 1)), ShapeError);
  auto S = W;
  S.drop_values();
  CHECK_THROWS_AS(refresh_bf16_values(S, std::span<bfloat16>(shadow)), ArgumentError);
}

TEST_CASE("bf16_spmm runs on a structure-only W (the weights come from the shadow)", "[bf16_spmm]") {
  auto W = st::random_matrix<float, std::int32_t>(17, 23, 0.4, 12);
  const auto shadow = st::shadow_of(W);
  auto S = W;
  S.drop_values();
  CounterRng rng(1, 2);
  st::BfOperand<bfloat16> X(23, 40, st::Placement::tight, bfloat16{});
  X.fill_random(rng);
  st::BfOperand<float> Y1(17, 40, st::Placement::tight, 0.0f), Y2(17, 40, st::Placement::tight, 0.0f);
  KernelWorkspace<float> ws;
  bf16_spmm(W, std::span<const bfloat16>(shadow), X.cview(), Y1.view(), ws);
  bf16_spmm(S, std::span<const bfloat16>(shadow), X.cview(), Y2.view(), ws);
  CHECK(st::bitwise_differences_of(Y1.contents(), Y2.contents()) == 0);
}

TEST_CASE("bf16_spmm checks shapes, the shadow's length and overlap", "[bf16_spmm]") {
  auto W = st::random_matrix<float, std::int32_t>(6, 7, 0.5, 9);
  const auto shadow = st::shadow_of(W);
  const std::span<const bfloat16> v(shadow);
  std::vector<bfloat16> x(7 * 4), dy(6 * 4), yb(6 * 4);
  std::vector<float> y(6 * 4), dx(7 * 4);
  KernelWorkspace<float> ws;
  TransposeCache<float, std::int32_t> cache;
  const ConstMatrixView<bfloat16> X(x.data(), 7, 4), dY(dy.data(), 6, 4);
  const MatrixView<float> Y(y.data(), 6, 4), dX(dx.data(), 7, 4);
  CHECK_THROWS_AS(bf16_spmm(W, v, dY, Y, ws), ShapeError);
  CHECK_THROWS_AS(bf16_spmm(W, v, X, dX, ws), ShapeError);
  CHECK_THROWS_AS(bf16_spmm(W, v.first(v.size() - 1), X, Y, ws), ShapeError);
  CHECK_THROWS_AS(bf16_spmm_transposed(W, v, cache, X, dX, ws), ShapeError);
  CHECK_THROWS_AS(bf16_spmm_transposed(W, v.first(1), cache, dY, dX, ws), ShapeError);
  CHECK_THROWS_WITH(bf16_spmm(W, v, dY, Y, ws), Catch::Contains("sprig::bf16_spmm"));
  // A bf16 output over its own input.
  CHECK_THROWS_AS(bf16_spmm(W, v, ConstMatrixView<bfloat16>(yb.data(), 7, 3), MatrixView<bfloat16>(yb.data(), 6, 3),
                            ws),
                  ArgumentError);
  // A float output over the shadow, and over the input.
  std::vector<float> big(static_cast<std::size_t>(W.storage_size()) + 64);
  auto* alias = reinterpret_cast<bfloat16*>(big.data());
  CHECK_THROWS_AS(bf16_spmm(W, std::span<const bfloat16>(alias, static_cast<std::size_t>(W.storage_size())), X,
                            MatrixView<float>(big.data(), 6, 4), ws),
                  ArgumentError);
  CHECK_THROWS_AS(bf16_spmm_transposed(W, v, cache, ConstMatrixView<bfloat16>(alias, 6, 4),
                                       MatrixView<float>(big.data(), 7, 4), ws),
                  ArgumentError);
  // Empty outputs are no-ops.
  CHECK_NOTHROW(bf16_spmm(W, v, ConstMatrixView<bfloat16>(x.data(), 7, 0), MatrixView<float>(y.data(), 6, 0), ws));
}

namespace {

// bf16_spmm with the epilogue (bias, relu) against bf16_spmm (overwrite, float Y) followed by
// the bias and ReLU passes done here in float, bit for bit; a bf16 Y is that float rounded
// once. An empty bias (none) is checked too.
template <ColumnIndex Index>
void check_epilogue(const PaddedCSR<float, Index>& W, std::int64_t B, KernelWorkspace<float>& ws, std::uint64_t seed,
                    Bf16SpmmPath path) {
  const auto shadow = st::shadow_of(W);
  const std::span<const bfloat16> v(shadow);
  CounterRng rng(seed, 0xE1);
  st::BfOperand<bfloat16> X(W.cols(), B, st::Placement::unaligned, st::nan_of<bfloat16>());
  X.fill_random(rng);
  std::vector<float> bias(static_cast<std::size_t>(W.rows()));
  for (auto& b : bias) b = static_cast<float>(rng.uniform(-0.5, 0.5));
  st::BfOperand<float> plain(W.rows(), B, st::Placement::tight, 0.0f), whole(W.rows(), B, st::Placement::tight, 0.0f);
  bf16_spmm(W, v, X.cview(), plain.view(), ws, Update::overwrite, path);
  KernelWorkspace<float> one_block;  // a bf16 Y is summed in one column block: the float Y of one
  bf16_spmm(W, v, X.cview(), whole.view(), one_block, Update::overwrite, path);
  for (const bool with_bias : {false, true})
    for (const FusedActivation act : {FusedActivation::none, FusedActivation::relu}) {
      CAPTURE(with_bias, act == FusedActivation::relu);
      const RowEpilogue<float> epi{with_bias ? std::span<const float>(bias) : std::span<const float>(), act};
      std::vector<float> want;
      std::vector<bfloat16> want_b;
      const auto finish = [&](float y, std::int64_t i) {
        if (with_bias) y += bias[static_cast<std::size_t>(i)];
        return act == FusedActivation::relu ? (y > 0.0f ? y : 0.0f) : y;
      };
      for (std::int64_t i = 0; i < W.rows(); ++i)
        for (std::int64_t j = 0; j < B; ++j) {
          want.push_back(finish(plain(i, j), i));
          want_b.push_back(bfloat16(finish(whole(i, j), i)));
        }
      st::BfOperand<float> Y(W.rows(), B, st::Placement::strided, -7.0f);
      st::BfOperand<bfloat16> Yb(W.rows(), B, st::Placement::unaligned, bfloat16(-7.0f));
      Y.fill(st::nan_of<float>());
      Yb.fill(st::nan_of<bfloat16>());
      bf16_spmm(W, v, X.cview(), Y.view(), ws, epi, path);
      bf16_spmm(W, v, X.cview(), Yb.view(), ws, epi, path);
      CHECK(st::bitwise_differences_of(Y.contents(), want) == 0);
      CHECK(st::bitwise_differences_of(Yb.contents(), want_b) == 0);
      CHECK(Y.guard_violations() == 0);
      CHECK(Yb.guard_violations() == 0);
    }
}

}  // namespace

TEST_CASE("bf16_spmm's epilogue is bitwise a bias pass and a ReLU pass after the product", "[bf16_spmm]") {
  for (const Bf16SpmmPath path : paths_here()) {
    CAPTURE(path_name(path));
    KernelWorkspace<float> ws;
    for (const st::Case& c : st::kernel_cases(st::max_cols_for<std::int32_t>())) {
      CAPTURE(c);
      check_epilogue(st::case_matrix<float, std::int32_t>(c), c.B, ws, c.seed, path);
    }
    // Column blocks over grouped rows (the bias with each row's last block), and 2 threads.
    for (std::int64_t budget : {std::int64_t{64}, std::int64_t{1024}}) {
      auto W = st::scrambled_matrix<float, std::int16_t>(40, 70, 0.2, 3);
      W.group_columns(2);
      KernelWorkspace<float> small;
      small.column_block_bytes = budget;
      for (std::int64_t B : {1, 33, 300}) {
        CAPTURE(budget, B);
        check_epilogue(W, B, small, 11, path);
      }
    }
    auto W = st::random_matrix<float, std::int32_t>(260, 300, 0.05, 8);
    sprig_test::with_threads(2, [&] { check_epilogue(W, 1030, ws, 12, path); });
  }
}

// The paths' documented difference: a subnormal input stays subnormal in the portable sum and
// is read as zero by vdpbf16ps; an unavailable path is refused, naming why.
TEST_CASE("bf16_spmm paths: subnormals kept (portable) or flushed (avx512_bf16), unavailable refused", "[bf16_spmm]") {
  auto W = PaddedCSR<float, std::int32_t>::from_dense(Matrix<float>(1, 3, 1.0f).view());
  const auto shadow = st::shadow_of(W);
  bfloat16 tiny;
  tiny.bits = 0x0001;  // the smallest subnormal, 2^-133
  std::vector<bfloat16> x(3 * 32, bfloat16(0.0f));
  x[0] = tiny;
  std::vector<float> y(32);
  KernelWorkspace<float> ws;
  const auto run = [&](Bf16SpmmPath path) {
    bf16_spmm(W, std::span<const bfloat16>(shadow), ConstMatrixView<bfloat16>(x.data(), 3, 32),
              MatrixView<float>(y.data(), 1, 32), ws, Update::overwrite, path);
    return y[0];
  };
  CHECK(run(Bf16SpmmPath::portable) == static_cast<float>(tiny));
  if (bf16_spmm_available(Bf16SpmmPath::avx512_bf16)) {
    CHECK(run(Bf16SpmmPath::avx512_bf16) == 0.0f);
  } else {
    WARN("bf16_spmm avx512_bf16 path NOT RUN here: " << bf16_spmm_unavailable_reason(Bf16SpmmPath::avx512_bf16));
    CHECK_THROWS_AS(run(Bf16SpmmPath::avx512_bf16), ArgumentError);
  }
}

TEST_CASE("bf16_spmm's epilogue checks the bias and the activation", "[bf16_spmm]") {
  auto W = st::random_matrix<float, std::int32_t>(6, 7, 0.5, 9);
  const auto shadow = st::shadow_of(W);
  const std::span<const bfloat16> v(shadow);
  std::vector<bfloat16> x(7 * 4);
  std::vector<float> y(6 * 4), bias(6), short_bias(5);
  KernelWorkspace<float> ws;
  const ConstMatrixView<bfloat16> X(x.data(), 7, 4);
  const MatrixView<float> Y(y.data(), 6, 4);
  CHECK_THROWS_AS(bf16_spmm(W, v, X, Y, ws, RowEpilogue<float>{short_bias, FusedActivation::none}), ShapeError);
  CHECK_THROWS_AS(bf16_spmm(W, v, X, Y, ws, RowEpilogue<float>{bias, FusedActivation::gelu}), ArgumentError);
  CHECK_THROWS_AS(bf16_spmm(W, v, X, Y, ws, RowEpilogue<float>{std::span<const float>(y.data(), 6)}), ArgumentError);
  CHECK_THROWS_WITH(bf16_spmm(W, v, X, Y, ws, RowEpilogue<float>{short_bias}), Catch::Contains("bias has 5 entries"));
  CHECK_NOTHROW(bf16_spmm(W, v, X, Y, ws, RowEpilogue<float>{bias, FusedActivation::relu}));
}
