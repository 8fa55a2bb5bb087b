// tests/dispatch/test_kernels.cpp — a dispatching build (kernels/dispatch.hpp) runs the sparse
// kernels of the target it was told to: built for the x86-64 baseline with SPRIG_DISPATCH and
// sprig_dispatch(), run once per target this CPU executes (SPRIG_KERNEL_ARCH, set by
// tests/dispatch.cmake), each against the scalar oracles (kernels/reference.hpp).
#include <cmath>
#include <cstdlib>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <catch2/catch.hpp>

#include "../bf16_sparse_test_support.hpp"
#include "../kernel_test_support.hpp"
#include "sprig/kernels/bf16_sddmm.hpp"
#include "sprig/kernels/bf16_spmm.hpp"
#include "sprig/kernels/dispatch.hpp"
#include "sprig/kernels/elementwise.hpp"
#include "sprig/kernels/gelu.hpp"
#include "sprig/kernels/narrow_dense.hpp"
#include "sprig/kernels/optimizer_update.hpp"
#include "sprig/kernels/reference.hpp"
#include "sprig/kernels/sddmm.hpp"
#include "sprig/kernels/sddmm_dx.hpp"
#include "sprig/kernels/spmm.hpp"
#include "sprig/kernels/spmm_transposed.hpp"
#include "sprig/kernels/transpose.hpp"

#if !defined(SPRIG_DISPATCH)
#  error "tests/dispatch/test_kernels.cpp is built with SPRIG_DISPATCH (tests/dispatch.cmake)"
#endif

using namespace sprig;
using namespace sprig::test;

namespace {

// The target this run was asked for: SPRIG_KERNEL_ARCH, or the widest the CPU runs.
std::string_view expected_target() {
  const char* forced = std::getenv("SPRIG_KERNEL_ARCH");
  if (forced && *forced) return forced;
  return runnable_kernel_archs().front();
}

template <class T>
Matrix<T> random_dense(std::int64_t rows, std::int64_t cols, std::uint64_t seed) {
  Matrix<T> m(rows, cols);
  CounterRng rng(seed, 0xD15);
  fill_uniform(m, rng);
  return m;
}

// Cases for the kernels: kernel_cases' shapes (every batch tail, edges, long rows, the Index
// limit) with K capped so a case runs in milliseconds under every target.
template <ColumnIndex Index>
std::vector<Case> dispatch_cases() {
  return kernel_cases(std::min<std::int64_t>(max_cols_for<Index>(), 6000));
}

}  // namespace

TEST_CASE("the kernels run on the target asked for", "[dispatch]") {
  const std::string_view target = expected_target();
  INFO("SPRIG_KERNEL_ARCH target " << target);
  CHECK(std::string_view(kernel_arch()) == detail::dispatch_target_arch(target));
  const auto runnable = runnable_kernel_archs();
  REQUIRE(!runnable.empty());
  CHECK(std::find(runnable.begin(), runnable.end(), target) != runnable.end());
  // A target below AVX2 on a CPU with AVX2 + FMA says so.
  CHECK(kernel_arch_warning().empty() == (target != "sse4_2" || !detail::cpu_runs_avx2()));
}

TEST_CASE("set_kernel_arch names what it refuses and keeps the kernels in use", "[dispatch]") {
  const std::string before = kernel_arch();
  CHECK_THROWS_AS(set_kernel_arch("avx1024"), ArgumentError);
  CHECK_THROWS_WITH(set_kernel_arch("neon"), Catch::Contains("unknown kernel architecture 'neon'"));
  CHECK(kernel_arch() == before);
  set_kernel_arch("");
  CHECK(std::string_view(kernel_arch()) == detail::dispatch_target_arch(runnable_kernel_archs().front()));
  set_kernel_arch(expected_target());
  CHECK(kernel_arch() == before);
}

TEMPLATE_LIST_TEST_CASE("dispatched spmm and spmm_transposed match the oracle", "[dispatch]", AllTypes) {
  using T = typename TestType::T;
  using Index = typename TestType::Index;
  for (const Case& c : dispatch_cases<Index>()) {
    INFO(c << " on " << kernel_arch());
    const auto W = case_matrix<T, Index>(c);
    const auto X = random_dense<T>(c.K, c.B, c.seed);
    const auto Y0 = random_dense<T>(c.M, c.B, c.seed + 1);
    for (const Update mode : {Update::overwrite, Update::accumulate}) {
      Matrix<T> want = Y0, got = Y0;
      reference::spmm(W, X.view(), want.view(), mode);
      for (const std::int64_t budget : {std::int64_t{64}, detail::kColumnBlockBytes}) {
        KernelWorkspace<T> ws;
        ws.column_block_bytes = budget;
        got = Y0;
        spmm(W, X.view(), got.view(), ws, mode);
        const auto m = compare_spmm(W, X.view(), Y0, mode, got.view(), want.view(), 2.0);
        INFO("spmm " << name(mode) << ", block budget " << budget << ": " << m.first);
        CHECK(m.count == 0);
      }
      // W^T dY against the oracle on W's transpose
      const auto Wt = transpose(W).matrix;
      const auto dY = random_dense<T>(c.M, c.B, c.seed + 2);
      const auto dX0 = random_dense<T>(c.K, c.B, c.seed + 3);
      Matrix<T> dx_want = dX0, dx_got = dX0;
      reference::spmm(Wt, dY.view(), dx_want.view(), mode);
      TransposeCache<T, Index> cache;
      spmm_transposed(W, cache, dY.view(), dx_got.view(), mode);
      const auto mt = compare_spmm(Wt, dY.view(), dX0, mode, dx_got.view(), dx_want.view(), 2.0);
      INFO("spmm_transposed " << name(mode) << ": " << mt.first);
      CHECK(mt.count == 0);
    }
  }
}

TEMPLATE_LIST_TEST_CASE("dispatched sddmm and sddmm_dx match the oracle", "[dispatch]", AllTypes) {
  using T = typename TestType::T;
  using Index = typename TestType::Index;
  for (const Case& c : dispatch_cases<Index>()) {
    INFO(c << " on " << kernel_arch());
    const auto W = case_matrix<T, Index>(c);
    const auto X = random_dense<T>(c.K, c.B, c.seed);
    const auto dY = random_dense<T>(c.M, c.B, c.seed + 1);
    const std::size_t S = static_cast<std::size_t>(W.storage_size());
    std::vector<T> g0(S);
    for (std::size_t s = 0; s < S; ++s) g0[s] = T(0.25) * static_cast<T>(s % 7);
    for (const Update mode : {Update::overwrite, Update::accumulate}) {
      std::vector<T> want = g0, got = g0;
      reference::sddmm(W, dY.view(), X.view(), std::span<T>(want), mode);
      sddmm(W, dY.view(), X.view(), std::span<T>(got), mode);
      const auto m = compare_sddmm(W, dY.view(), X.view(), std::span<const T>(g0), mode, std::span<const T>(got),
                                   std::span<const T>(want), 2.0);
      INFO("sddmm " << name(mode) << ": " << m.first);
      CHECK(m.count == 0);
    }
    // sddmm_dx: the gradient bit for bit as sddmm's on the same target, dX as W^T dY
    std::vector<T> g_sddmm(S), g_dx(S);
    sddmm(W, dY.view(), X.view(), std::span<T>(g_sddmm));
    Matrix<T> dX(c.K, c.B), dx_want(c.K, c.B);
    TransposeCache<T, Index> cache;
    KernelWorkspace<T> ws, wst;
    sddmm_dx(W, cache, dY.view(), X.view(), std::span<T>(g_dx), dX.view(), ws, wst);
    CHECK(bitwise_differences<T>(std::span<const T>(g_dx), std::span<const T>(g_sddmm)) == 0);
    const auto Wt = transpose(W).matrix;
    reference::spmm(Wt, dY.view(), dx_want.view());
    const auto m = compare_spmm(Wt, dY.view(), Matrix<T>(c.K, c.B), Update::overwrite, dX.view(), dx_want.view(), 2.0);
    INFO("sddmm_dx dX: " << m.first);
    CHECK(m.count == 0);
  }
}

TEMPLATE_TEST_CASE("dispatched narrow dense kernels match a direct sum", "[dispatch]", float, double) {
  using T = TestType;
  for (const std::int64_t m : {1, 3, 10, 12})
    for (const std::int64_t B : {1, 7, 16, 33, 130}) {
      const std::int64_t K = 45;
      INFO("m " << m << ", K " << K << ", B " << B << " on " << kernel_arch());
      const auto W = random_dense<T>(m, K, 11 + m);
      const auto X = random_dense<T>(K, B, 13 + B);
      const auto dY = random_dense<T>(m, B, 17 + B);
      std::vector<T> bias(static_cast<std::size_t>(m));
      for (std::int64_t i = 0; i < m; ++i) bias[static_cast<std::size_t>(i)] = T(0.125) * static_cast<T>(i);
      Matrix<T> Y(m, B), dW(m, K), dX(K, B);
      narrow_forward<T>(W.view(), X.view(), Y.view(), std::span<const T>(bias));
      narrow_backward<T>(W.view(), X.view(), dY.view(), dW.view(), dX.view());
      std::int64_t bad = 0;
      for (std::int64_t i = 0; i < m; ++i)
        for (std::int64_t j = 0; j < B; ++j) {
          double want = bias[static_cast<std::size_t>(i)], S = std::fabs(want);
          for (std::int64_t k = 0; k < K; ++k) {
            want += static_cast<double>(W(i, k)) * static_cast<double>(X(k, j));
            S += std::fabs(static_cast<double>(W(i, k)) * static_cast<double>(X(k, j)));
          }
          bad += !within<T>(Y(i, j), static_cast<T>(want), static_cast<double>(K + 1), S, 2.0);
        }
      for (std::int64_t i = 0; i < m; ++i)
        for (std::int64_t k = 0; k < K; ++k) {
          double want = 0, S = 0;
          for (std::int64_t j = 0; j < B; ++j) {
            want += static_cast<double>(dY(i, j)) * static_cast<double>(X(k, j));
            S += std::fabs(static_cast<double>(dY(i, j)) * static_cast<double>(X(k, j)));
          }
          bad += !within<T>(dW(i, k), static_cast<T>(want), static_cast<double>(B), S, 2.0);
        }
      for (std::int64_t k = 0; k < K; ++k)
        for (std::int64_t j = 0; j < B; ++j) {
          double want = 0, S = 0;
          for (std::int64_t i = 0; i < m; ++i) {
            want += static_cast<double>(W(i, k)) * static_cast<double>(dY(i, j));
            S += std::fabs(static_cast<double>(W(i, k)) * static_cast<double>(dY(i, j)));
          }
          bad += !within<T>(dX(k, j), static_cast<T>(want), static_cast<double>(m), S, 2.0);
        }
      CHECK(bad == 0);
    }
}

TEMPLATE_TEST_CASE("dispatched optimizer updates follow their formulas", "[dispatch]", float, double) {
  using T = TestType;
  const std::int64_t n = 37;  // two whole registers and a tail on every target
  const auto w0 = random_dense<T>(1, n, 21), g = random_dense<T>(1, n, 22), m0 = random_dense<T>(1, n, 23);
  Matrix<T> v0(1, n);
  for (std::int64_t i = 0; i < n; ++i) v0(0, i) = m0(0, i) * m0(0, i);  // v >= 0
  const double tol = 16 * static_cast<double>(std::numeric_limits<T>::epsilon());
  INFO("on " << kernel_arch());
  {
    const detail::AdamWStep<T> k{T(0.01), T(0.9), T(0.999), T(1e-8), T(0.999)};
    Matrix<T> w = w0, m = m0, v = v0;
    detail::adamw_update_kernel<T>()(k, T(2), T(3), w.row(0), g.row(0), m.row(0), v.row(0), n);
    std::int64_t bad = 0;
    for (std::int64_t i = 0; i < n; ++i) {
      const double gi = g(0, i), mi = 0.9 * m0(0, i) + (1 - 0.9) * gi, vi = 0.999 * v0(0, i) + (1 - 0.999) * gi * gi;
      const double wi = w0(0, i) * static_cast<double>(k.shrink) - 0.01 * (mi * 2) / (std::sqrt(vi * 3) + 1e-8);
      bad += std::fabs(w(0, i) - wi) > tol * (std::fabs(wi) + 1e-2);
      bad += std::fabs(m(0, i) - mi) > tol * (std::fabs(0.9 * m0(0, i)) + std::fabs(0.1 * gi));
    }
    CHECK(bad == 0);
  }
  {
    const detail::SGDStep<T> k{T(0.05), T(0.9), T(0.001), detail::SGDKind::nesterov};
    Matrix<T> w = w0, b = m0;
    detail::sgd_update_kernel<T>()(k, w.row(0), g.row(0), b.row(0), n);
    std::int64_t bad = 0;
    for (std::int64_t i = 0; i < n; ++i) {
      const double gd = g(0, i) + 0.001 * w0(0, i), bn = 0.9 * m0(0, i) + gd, wi = w0(0, i) - 0.05 * (gd + 0.9 * bn);
      bad += std::fabs(w(0, i) - wi) > tol * 4;
      bad += std::fabs(b(0, i) - bn) > tol * 4;
    }
    CHECK(bad == 0);
  }
}

// The element-wise kernels (elementwise.hpp) on 13 rows x 37 columns: two whole registers
// and a partial one on every target. Tolerance: sums in double, then a few roundings in T.
template <class T>
struct LayerNormCase {
  static constexpr std::int64_t d = 13, n = 37;
  Matrix<T> X = random_dense<T>(d, n, 31), dY = random_dense<T>(d, n, 32), Y{d, n}, dX{d, n};
  Matrix<T> gain = random_dense<T>(1, d, 33), bias = random_dense<T>(1, d, 34);
  std::vector<T> mean = std::vector<T>(n), rstd = std::vector<T>(n);
  double tol = 64 * static_cast<double>(std::numeric_limits<T>::epsilon());
  void forward() {
    detail::layer_norm_forward_kernel<T>()(
        {X.data(), X.stride(), gain.data(), bias.data(), Y.data(), Y.stride(), mean.data(), rstd.data(), d, n, 1e-5});
  }
  // xhat of column j in double from the kernel's mean and rstd
  double xhat(std::int64_t i, std::int64_t j) const {
    return (static_cast<double>(X(i, j)) - static_cast<double>(mean[j])) * static_cast<double>(rstd[j]);
  }
};

TEMPLATE_TEST_CASE("dispatched layer_norm_forward follows its formula", "[dispatch]", float, double) {
  LayerNormCase<TestType> c;
  INFO("on " << kernel_arch());
  c.forward();
  std::int64_t bad = 0;
  for (std::int64_t j = 0; j < c.n; ++j) {
    double s = 0, q = 0;
    for (std::int64_t i = 0; i < c.d; ++i) s += c.X(i, j);
    s /= c.d;
    for (std::int64_t i = 0; i < c.d; ++i) q += (c.X(i, j) - s) * (c.X(i, j) - s);
    const double r = 1 / std::sqrt(q / c.d + 1e-5);
    bad += std::fabs(c.mean[j] - s) > c.tol;
    bad += std::fabs(c.rstd[j] - r) > c.tol * r;
    for (std::int64_t i = 0; i < c.d; ++i)
      bad += std::fabs(c.Y(i, j) - ((c.X(i, j) - s) * r * c.gain(0, i) + c.bias(0, i))) > c.tol * (1 + 2 * r);
  }
  CHECK(bad == 0);
}

TEMPLATE_TEST_CASE("dispatched layer_norm_backward follows its formula", "[dispatch]", float, double) {
  using T = TestType;
  LayerNormCase<T> c;
  INFO("on " << kernel_arch());
  c.forward();
  detail::layer_norm_backward_kernel<T>()({c.X.data(), c.X.stride(), c.dY.data(), c.dY.stride(), c.gain.data(),
                                           c.mean.data(), c.rstd.data(), c.dX.data(), c.dX.stride(), c.d, c.n});
  std::int64_t bad = 0;
  for (std::int64_t j = 0; j < c.n; ++j) {
    double m1 = 0, m2 = 0;
    for (std::int64_t i = 0; i < c.d; ++i) {
      m1 += c.gain(0, i) * static_cast<double>(c.dY(i, j)) / c.d;
      m2 += c.gain(0, i) * static_cast<double>(c.dY(i, j)) * c.xhat(i, j) / c.d;
    }
    const double r = c.rstd[j];
    for (std::int64_t i = 0; i < c.d; ++i) {
      const double want = r * (c.gain(0, i) * static_cast<double>(c.dY(i, j)) - m1 - c.xhat(i, j) * m2);
      bad += std::fabs(c.dX(i, j) - want) > c.tol * r * (1 + std::fabs(c.xhat(i, j)));
    }
  }
  CHECK(bad == 0);
}

TEMPLATE_TEST_CASE("dispatched layer_norm_dy_xhat follows its formula", "[dispatch]", float, double) {
  using T = TestType;
  const std::int64_t n = 37;
  const auto x = random_dense<T>(4, n, 41);  // rows: x, dy, mean, rstd
  Matrix<T> out(1, n);
  INFO("on " << kernel_arch());
  detail::layer_norm_dy_xhat_kernel<T>()(x.row(0), x.row(1), x.row(2), x.row(3), out.row(0), n);
  std::int64_t bad = 0;
  for (std::int64_t j = 0; j < n; ++j) bad += out(0, j) != x(1, j) * ((x(0, j) - x(2, j)) * x(3, j));
  CHECK(bad == 0);
}

TEMPLATE_TEST_CASE("dispatched add_arrays follows its formula", "[dispatch]", float, double) {
  using T = TestType;
  const std::int64_t n = 37;
  const auto a = random_dense<T>(2, n, 42);
  Matrix<T> y(1, n);
  INFO("on " << kernel_arch());
  detail::add_arrays_kernel<T>()(a.row(0), a.row(1), y.row(0), n);
  std::int64_t bad = 0;
  for (std::int64_t j = 0; j < n; ++j) bad += y(0, j) != a(0, j) + a(1, j);
  CHECK(bad == 0);
}

TEMPLATE_TEST_CASE("dispatched sum_squares and scale_array follow their formulas", "[dispatch]", float, double) {
  using T = TestType;
  const std::int64_t n = 77;
  const auto a = random_dense<T>(1, n, 43);
  INFO("on " << kernel_arch());
  long double want = 0;
  for (std::int64_t j = 0; j < n; ++j) want += static_cast<long double>(a(0, j)) * a(0, j);
  const double got = detail::sum_squares_kernel<T>()(a.row(0), n);
  CHECK(std::fabs(static_cast<long double>(got) - want) <= 1e-14L * want);
  std::vector<T> scaled(a.row(0), a.row(0) + n);
  detail::scale_array_kernel<T>()(scaled.data(), T(0.5), n);
  std::int64_t bad = 0;
  for (std::int64_t j = 0; j < n; ++j) bad += scaled[j] != a(0, j) * T(0.5);
  CHECK(bad == 0);
}

TEMPLATE_TEST_CASE("dispatched gelu passes follow the formula", "[dispatch]", float, double) {
  using T = TestType;
  const std::int64_t n = 77;
  const auto a = random_dense<T>(2, n, 44);  // rows: x, dy
  INFO("on " << kernel_arch());
  std::vector<T> y(n), z(a.row(0), a.row(0) + n), y2(n), dx(n);
  detail::gelu_forward_kernel<T>()(a.row(0), y.data(), n);
  detail::gelu_keep_derivative_kernel<T>()(z.data(), y2.data(), n);
  detail::gelu_backward_kernel<T>()(a.row(0), a.row(1), dx.data(), n);
  std::int64_t bad = 0;
  const double tol = 16 * static_cast<double>(std::numeric_limits<T>::epsilon());
  for (std::int64_t j = 0; j < n; ++j) {
    const double x = a(0, j), u = 0.7978845608028654 * (x + 0.044715 * x * x * x), t = std::tanh(u);
    const double g = 0.5 * x * (1 + t);
    const double d = 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * 0.7978845608028654 * (1 + 3 * 0.044715 * x * x);
    bad += std::fabs(y[j] - g) > tol * (1 + std::fabs(g));
    bad += y2[j] != y[j];
    bad += std::fabs(z[j] - d) > tol * (1 + std::fabs(d));
    bad += std::fabs(dx[j] - a(1, j) * d) > tol * (1 + std::fabs(a(1, j) * d));
  }
  CHECK(bad == 0);
}

TEST_CASE("dispatched bf16 gelu passes: the float passes' results rounded", "[dispatch][bf16]") {
  const std::int64_t n = 77;                     // whole registers and a tail on every target
  const auto a = random_dense<float>(2, n, 45);  // rows: z, dx
  INFO("on " << kernel_arch());
  std::vector<float> z(a.row(0), a.row(0) + n), y(n);
  detail::gelu_keep_derivative_kernel<float>()(z.data(), y.data(), n);  // z: gelu'
  std::vector<bfloat16> y16(n), d16(n), dy16(n);
  detail::gelu_keep_derivative_bf16_kernel<float>()(a.row(0), y16.data(), d16.data(), n);
  detail::gelu_scale_bf16_kernel<float>()(d16.data(), a.row(1), dy16.data(), n);
  std::vector<float> dx(a.row(1), a.row(1) + n);
  detail::gelu_scale_widened_kernel<float>()(d16.data(), dx.data(), n);
  std::int64_t bad = 0;
  for (std::int64_t j = 0; j < n; ++j) {
    bad += y16[j].bits != bfloat16(y[j]).bits;
    bad += d16[j].bits != bfloat16(z[j]).bits;
    const float scaled = a(1, j) * static_cast<float>(d16[j]);
    bad += dx[j] != scaled;
    bad += dy16[j].bits != bfloat16(scaled).bits;
  }
  CHECK(bad == 0);
}

TEST_CASE("every runnable target gives the oracle's results on one matrix", "[dispatch]") {
  // One float case on each target in turn, then back to the one this run was asked for.
  const auto W = random_matrix<float, std::int32_t>(96, 300, 0.1, 7, 0.1, 0.1);
  const auto X = random_dense<float>(300, 64, 8);
  Matrix<float> want(96, 64);
  reference::spmm(W, X.view(), want.view());
  for (const std::string_view target : runnable_kernel_archs()) {
    set_kernel_arch(target);
    INFO("target " << target);
    CHECK(std::string_view(kernel_arch()) == detail::dispatch_target_arch(target));
    Matrix<float> got(96, 64);
    spmm(W, X.view(), got.view());
    CHECK(compare_spmm(W, X.view(), Matrix<float>(96, 64), Update::overwrite, got.view(), want.view(), 2.0).count == 0);
  }
  set_kernel_arch(expected_target());
}

// The bf16 kernels on the target asked for (their portable code; bf16_spmm_transposed's
// x_derivative form bit for bit its float dX times D), and bf16_sddmm's
// AVX512-BF16 path beside its portable path on the same inputs, each against a double
// reference from the same bf16 values within the float accumulation bound
// (bf16_sparse_test_support.hpp). A path this CPU lacks is reported as NOT RUN.
TEMPLATE_TEST_CASE("dispatched bf16 kernels match a double reference, every bf16_sddmm path", "[dispatch]",
                   std::int16_t, std::int32_t) {
  using Index = TestType;
  const bool fast = bf16_sddmm_available(Bf16SddmmPath::avx512_bf16);
  if (!fast)
    WARN("bf16_sddmm avx512_bf16 path NOT RUN here: " << bf16_sddmm_unavailable_reason(Bf16SddmmPath::avx512_bf16));
  for (const Case& c : dispatch_cases<Index>()) {
    INFO(c << " on " << kernel_arch());
    const auto W = case_matrix<float, Index>(c);
    const auto shadow = shadow_of(W);
    CounterRng rng(c.seed, 0xD16);
    BfOperand<bfloat16> X(c.K, c.B, c.px, nan_of<bfloat16>()), dY(c.M, c.B, c.py, nan_of<bfloat16>());
    X.fill_random(rng);
    dY.fill_random(rng);
    KernelWorkspace<float> ws;
    TransposeCache<float, Index> cache;
    std::vector<float> y(static_cast<std::size_t>(c.M * c.B)), dx(static_cast<std::size_t>(c.K * c.B));
    bf16_spmm(W, std::span<const bfloat16>(shadow), X.cview(), MatrixView<float>(y.data(), c.M, c.B), ws);
    bf16_spmm_transposed(W, std::span<const bfloat16>(shadow), cache, dY.cview(),
                         MatrixView<float>(dx.data(), c.K, c.B), ws);
    std::vector<double> y_want(y.size()), y_S(y.size()), dx_want(dx.size()), dx_S(dx.size());
    std::vector<double> y_n(static_cast<std::size_t>(c.M)), dx_n(static_cast<std::size_t>(c.K));
    W.for_each_live([&](std::int64_t i, std::int64_t k, float, std::int64_t s) {
      const double w = static_cast<float>(shadow[static_cast<std::size_t>(s)]);
      y_n[static_cast<std::size_t>(i)] += 1;
      dx_n[static_cast<std::size_t>(k)] += 1;
      for (std::int64_t b = 0; b < c.B; ++b) {
        y_want[static_cast<std::size_t>(i * c.B + b)] += w * X.at(k, b);
        y_S[static_cast<std::size_t>(i * c.B + b)] += std::fabs(w * X.at(k, b));
        dx_want[static_cast<std::size_t>(k * c.B + b)] += w * dY.at(i, b);
        dx_S[static_cast<std::size_t>(k * c.B + b)] += std::fabs(w * dY.at(i, b));
      }
    });
    std::int64_t bad = 0;
    for (std::size_t e = 0; e < y.size(); ++e)
      bad += !(std::fabs(y[e] - y_want[e]) <= float_sum_bound(std::max(1.0, y_n[e / std::size_t(c.B)]), y_S[e]));
    for (std::size_t e = 0; e < dx.size(); ++e)
      bad += !(std::fabs(dx[e] - dx_want[e]) <= float_sum_bound(std::max(1.0, dx_n[e / std::size_t(c.B)]), dx_S[e]));
    CHECK(bad == 0);
    // dX through a GELU's derivative D in the store: the float dX times D, rounded, bit for bit
    std::vector<bfloat16> d(dx.size()), scaled(dx.size(), nan_of<bfloat16>());
    for (auto& v : d) v = bfloat16(static_cast<float>(rng.uniform(-2.0, 2.0)));
    bf16_spmm_transposed(W, std::span<const bfloat16>(shadow), cache, dY.cview(),
                         MatrixView<bfloat16>(scaled.data(), c.K, c.B), ConstMatrixView<bfloat16>(d.data(), c.K, c.B),
                         ws);
    std::int64_t off = 0;
    for (std::size_t e = 0; e < dx.size(); ++e)
      off += scaled[e].bits != bfloat16(dx[e] * static_cast<float>(d[e])).bits;
    CHECK(off == 0);
    for (const Bf16SddmmPath path : {Bf16SddmmPath::portable, Bf16SddmmPath::avx512_bf16}) {
      if (path == Bf16SddmmPath::avx512_bf16 && !fast) continue;
      INFO("bf16_sddmm " << path_name(path));
      std::vector<float> g(static_cast<std::size_t>(W.storage_size()), nan_of<float>());
      bf16_sddmm(W, dY.cview(), X.cview(), std::span<float>(g), ws, Update::overwrite, path);
      std::int64_t wrong = 0;
      W.for_each_live([&](std::int64_t i, std::int64_t k, float, std::int64_t s) {
        double want = 0, S = 0;
        for (std::int64_t b = 0; b < c.B; ++b) {
          want += dY.at(i, b) * X.at(k, b);
          S += std::fabs(dY.at(i, b) * X.at(k, b));
        }
        wrong += !(std::fabs(g[static_cast<std::size_t>(s)] - want) <= float_sum_bound(std::max<double>(1, c.B), S));
      });
      CHECK(wrong == 0);
    }
  }
}
