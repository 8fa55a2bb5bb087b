// The dense layers' vectorised passes (kernels/elementwise.hpp) against plain loops of their
// formulas in double, at column counts that leave every kind of partial register (1, 3, 17,
// 100, 1001), and their determinism: a column's bits do not depend on where a range starts,
// and the layers that call them give the same bits at 1 and 2 threads.
#include <sprig/kernels/elementwise.hpp>

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <algorithm>
#include <limits>
#include <numeric>
#include <vector>

#include <sprig/core/rng.hpp>

#include "value_test_support.hpp"
#include <sprig/nn/layer_norm.hpp>
#include <sprig/nn/residual.hpp>

#include "with_threads.hpp"

using namespace sprig;
using namespace sprig::detail;

namespace {

using test::random_values;
using test::same_bits;

constexpr std::int64_t kCols[] = {1, 3, 17, 100, 1001};
constexpr std::int64_t kRows[] = {1, 3, 17, 100};

// A [d x n] operand stored with a row stride of n + 5 (a sub-view of a wider matrix).
template <class T>
struct Strided {
  std::int64_t d, n, ld;
  std::vector<T> v;
  Strided(std::int64_t rows, std::int64_t cols, std::uint64_t seed, double lo, double hi)
      : d(rows),
        n(cols),
        ld(cols + 5),
        v(random_values<T>(static_cast<std::size_t>(rows * (cols + 5)), seed, lo, hi)) {}
  T& operator()(std::int64_t i, std::int64_t j) { return v[static_cast<std::size_t>(i * ld + j)]; }
};

}  // namespace

// Tolerances, for u = T's epsilon: the sums run in double (error about d u_double relative to
// the sum of magnitudes), then one rounding to T; Y and dX are a handful of T operations on
// those (each one rounding, relative to the magnitudes of its terms). (d + 8) u times the
// magnitudes covers both T = float (rounding to T dominates) and T = double (the d-term sums).
TEMPLATE_TEST_CASE("layer_norm_forward and _backward follow their formulas in double", "[elementwise][layer_norm]",
                   float, double) {
  using T = TestType;
  const double u = static_cast<double>(std::numeric_limits<T>::epsilon());
  for (const std::int64_t d : kRows)
    for (const std::int64_t n : kCols) {
      CAPTURE(d, n);
      Strided<T> X(d, n, 1, -1.0, 2.0), Y(d, n, 2, 0, 0), dY(d, n, 3, -1, 1), dX(d, n, 4, 0, 0);
      const auto gain = random_values<T>(d, 5, 0.5, 1.5), bias = random_values<T>(d, 6, -0.5, 0.5);
      std::vector<T> mean(n), rstd(n);
      const double eps = 1e-5;
      layer_norm_forward_kernel<T>()(
          {X.v.data(), X.ld, gain.data(), bias.data(), Y.v.data(), Y.ld, mean.data(), rstd.data(), d, n, eps});
      layer_norm_backward_kernel<T>()(
          {X.v.data(), X.ld, dY.v.data(), dY.ld, gain.data(), mean.data(), rstd.data(), dX.v.data(), dX.ld, d, n});
      const double c = static_cast<double>(d + 8) * u;
      std::int64_t bad = 0;
      for (std::int64_t j = 0; j < n; ++j) {
        double s = 0, a = 0, q = 0;
        for (std::int64_t i = 0; i < d; ++i) s += X(i, j), a += std::fabs(X(i, j));
        s /= static_cast<double>(d);
        for (std::int64_t i = 0; i < d; ++i) q += (X(i, j) - s) * (X(i, j) - s);
        const double r = 1 / std::sqrt(q / static_cast<double>(d) + eps);
        bad += std::fabs(mean[j] - s) > c * a / static_cast<double>(d);
        bad += std::fabs(rstd[j] - r) > c * r;
        // backward from the kernel's own mean and rstd (what the layer keeps)
        const double m = mean[j], rs = rstd[j];
        double m1 = 0, m2 = 0, a1 = 0, a2 = 0;
        for (std::int64_t i = 0; i < d; ++i) {
          const double gd = gain[i] * static_cast<double>(dY(i, j)), xh = (X(i, j) - m) * rs;
          m1 += gd, m2 += gd * xh, a1 += std::fabs(gd), a2 += std::fabs(gd * xh);
        }
        m1 /= static_cast<double>(d), m2 /= static_cast<double>(d);
        a1 /= static_cast<double>(d), a2 /= static_cast<double>(d);
        for (std::int64_t i = 0; i < d; ++i) {
          const double xh = (X(i, j) - m) * rs, y = xh * gain[i] + bias[i];
          bad += std::fabs(Y(i, j) - y) > c * ((std::fabs(X(i, j)) + std::fabs(m)) * rs * gain[i] + std::fabs(bias[i]));
          const double gd = gain[i] * static_cast<double>(dY(i, j)), dx = rs * (gd - m1 - xh * m2);
          const double mag =
              rs * (std::fabs(gd) + a1 + (std::fabs(X(i, j)) + std::fabs(m)) * rs * (std::fabs(m2) + a2));
          bad += std::fabs(dX(i, j) - dx) > c * mag;
        }
      }
      CHECK(bad == 0);
    }
}

TEMPLATE_TEST_CASE("layer_norm kernels: a column's bits do not depend on where the range starts",
                   "[elementwise][layer_norm]", float, double) {
  using T = TestType;
  const std::int64_t d = 17, n = 1001;
  Strided<T> X(d, n, 11, -3, 2), Y(d, n, 0, 0, 0), Y2(d, n, 0, 0, 0), dY(d, n, 12, -1, 1), dX(d, n, 0, 0, 0),
      dX2(d, n, 0, 0, 0);
  const auto gain = random_values<T>(d, 13, 0.5, 1.5), bias = random_values<T>(d, 14, -0.5, 0.5);
  std::vector<T> mean(n), rstd(n), mean2(n), rstd2(n);
  const auto fwd = layer_norm_forward_kernel<T>();
  const auto bwd = layer_norm_backward_kernel<T>();
  fwd({X.v.data(), X.ld, gain.data(), bias.data(), Y.v.data(), Y.ld, mean.data(), rstd.data(), d, n, 1e-5});
  bwd({X.v.data(), X.ld, dY.v.data(), dY.ld, gain.data(), mean.data(), rstd.data(), dX.v.data(), dX.ld, d, n});
  // the same columns in ranges of odd lengths starting anywhere
  for (std::int64_t c0 = 0, len = 1; c0 < n; c0 += len, len = len * 3 % 37 + 1) {
    const std::int64_t w = std::min(len, n - c0);
    fwd({X.v.data() + c0, X.ld, gain.data(), bias.data(), Y2.v.data() + c0, Y2.ld, mean2.data() + c0, rstd2.data() + c0,
         d, w, 1e-5});
    bwd({X.v.data() + c0, X.ld, dY.v.data() + c0, dY.ld, gain.data(), mean.data() + c0, rstd.data() + c0,
         dX2.v.data() + c0, dX2.ld, d, w});
  }
  CHECK(same_bits(mean.data(), mean2.data(), mean.size()));
  CHECK(same_bits(rstd.data(), rstd2.data(), rstd.size()));
  for (std::int64_t i = 0; i < d; ++i) {
    CHECK(same_bits(&Y(i, 0), &Y2(i, 0), std::size_t(n)));
    CHECK(same_bits(&dX(i, 0), &dX2(i, 0), std::size_t(n)));
  }
}

TEMPLATE_TEST_CASE("layer_norm_dy_xhat and add_arrays equal their scalar loops bitwise", "[elementwise]", float,
                   double) {
  // one multiply-subtract-multiply and one addition per element: no rounding choice to make
  using T = TestType;
  for (const std::int64_t n : kCols) {
    CAPTURE(n);
    const auto x = random_values<T>(n, 21, -2, 2), dy = random_values<T>(n, 22, -1, 1),
               m = random_values<T>(n, 23, -0.5, 0.5), r = random_values<T>(n, 24, 0.5, 3);
    std::vector<T> got(n), want(n), sum(n), sum_want(n);
    layer_norm_dy_xhat_kernel<T>()(x.data(), dy.data(), m.data(), r.data(), got.data(), n);
    add_arrays_kernel<T>()(x.data(), dy.data(), sum.data(), n);
    for (std::int64_t j = 0; j < n; ++j) {
      want[j] = dy[j] * ((x[j] - m[j]) * r[j]);
      sum_want[j] = x[j] + dy[j];
    }
    CHECK(same_bits(got.data(), want.data(), got.size()));
    CHECK(same_bits(sum.data(), sum_want.data(), sum.size()));
    std::vector<T> in_place = x;  // y = a: add_into's form
    add_arrays_kernel<T>()(dy.data(), in_place.data(), in_place.data(), n);
    CHECK(same_bits(in_place.data(), sum_want.data(), sum.size()));
  }
}

TEMPLATE_TEST_CASE("sum_squares: within gamma_n of the exact sum, bits independent of alignment", "[elementwise][clip]",
                   float, double) {
  using T = TestType;
  CHECK(sum_squares_kernel<T>()(nullptr, 0) == 0.0);
  // every n up to 2 full passes of the widest kernel's 4 registers (AVX-512 float: 128), so
  // every tail length is met, then longer ones
  std::vector<std::int64_t> sizes(130);
  std::iota(sizes.begin(), sizes.end(), std::int64_t{1});
  sizes.insert(sizes.end(), {1001, 4099});
  for (const std::int64_t n : sizes) {
    CAPTURE(n);
    const auto v = random_values<T>(static_cast<std::size_t>(n + 3), 31, -3, 3);
    // oracle: long double over the exact squares of the values
    long double want = 0;
    for (std::int64_t j = 0; j < n; ++j) want += static_cast<long double>(v[j]) * static_cast<long double>(v[j]);
    const double got = sum_squares_kernel<T>()(v.data(), n);
    // every term is >= 0, so any order of n double additions is within gamma_n of the sum
    const long double eps = std::numeric_limits<double>::epsilon() / 2;
    CHECK(std::fabs(static_cast<long double>(got) - want) <= (n * eps / (1 - n * eps)) * want);
    // integers: every partial sum is exact, whatever the order
    std::vector<T> ints(static_cast<std::size_t>(n));
    long long exact = 0;
    for (std::int64_t j = 0; j < n; ++j) {
      ints[j] = static_cast<T>(j % 7 - 3);
      exact += static_cast<long long>(j % 7 - 3) * (j % 7 - 3);
    }
    CHECK(sum_squares_kernel<T>()(ints.data(), n) == static_cast<double>(exact));
    // the same values at other addresses (1 to 3 elements further): the same bits
    for (int shift = 1; shift <= 3; ++shift) {
      std::vector<T> moved(static_cast<std::size_t>(n + shift));
      std::copy(v.begin(), v.begin() + n, moved.begin() + shift);
      const double again = sum_squares_kernel<T>()(moved.data() + shift, n);
      CHECK(std::memcmp(&again, &got, sizeof got) == 0);
    }
  }
}

TEMPLATE_TEST_CASE("scale_array equals its scalar loop bitwise", "[elementwise][clip]", float, double) {
  using T = TestType;
  for (const std::int64_t n : kCols) {
    CAPTURE(n);
    auto got = random_values<T>(static_cast<std::size_t>(n), 32, -2, 2);
    std::vector<T> want = got;
    const T c = T(0.3713);
    for (auto& w : want) w *= c;
    scale_array_kernel<T>()(got.data(), c, n);
    CHECK(same_bits(got.data(), want.data(), got.size()));
  }
}

TEMPLATE_TEST_CASE("LayerNorm and residual_add on the kernels: same bits at 1 and 2 threads", "[elementwise][threads]",
                   float, double) {
  using T = TestType;
  const std::int64_t d = 100, N = 1001;  // d x N above kParallelMinWork: the passes split
  REQUIRE(d * N >= detail::kParallelMinWork);
  Matrix<T> X(d, N), R(d, N), dY(d, N);
  CounterRng rng(31);
  for (std::int64_t i = 0; i < d; ++i)
    for (std::int64_t j = 0; j < N; ++j) {
      X(i, j) = static_cast<T>(rng.uniform(-2, 3));
      R(i, j) = static_cast<T>(rng.uniform(-1, 1));
      dY(i, j) = static_cast<T>(rng.uniform(-1, 1));
    }
  auto run = [&](int threads) {
    std::vector<Matrix<T>> out;
    sprig_test::with_threads(threads, [&] {
      Matrix<T> S(d, N), Y(d, N), dX(d, N);
      residual_add<T>(X.view(), R.view(), S.view());
      LayerNorm<T> ln(d);
      ln.forward(S.view(), Y.view());
      ln.backward(S.view(), dY.view(), dX.view());
      add_into<T>(dY.view(), dX.view());
      Matrix<T> g(d, 2);
      for (std::int64_t i = 0; i < d; ++i) g(i, 0) = ln.gain.grad[i], g(i, 1) = ln.bias.grad[i];
      out = {S, Y, dX, g};
    });
    return out;
  };
  const auto one = run(1), two = run(2);
  for (std::size_t k = 0; k < one.size(); ++k) {
    CAPTURE(k);
    for (std::int64_t i = 0; i < one[k].rows(); ++i)
      CHECK(same_bits(one[k].view().row(i), two[k].view().row(i), std::size_t(one[k].cols())));
  }
}
