// The optimizers' element-wise kernels (kernels/optimizer_update.hpp) against plain loops of
// the formulas in double, and their determinism: an element's bits do not depend on where a
// range starts or ends (thread chunks and rows split parameters anywhere).
#include <sprig/kernels/optimizer_update.hpp>

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include <sprig/core/rng.hpp>

#include "value_test_support.hpp"

using namespace sprig;
using namespace sprig::detail;

namespace {

using test::random_values;
using test::same_bits;

// Relative tolerance of a few roundings in T.
template <class T>
double tolerance() {
  return 16 * static_cast<double>(std::numeric_limits<T>::epsilon());
}

template <class T>
struct AdamWState {
  std::vector<T> w, g, m, v, counts;
};

template <class T>
AdamWState<T> adamw_state(std::size_t n, std::uint64_t seed) {
  AdamWState<T> s{random_values<T>(n, seed, -1, 1), random_values<T>(n, seed + 1, -0.1, 0.1),
                  random_values<T>(n, seed + 2, -0.01, 0.01), random_values<T>(n, seed + 3, 0, 0.001),
                  std::vector<T>(n)};
  for (std::size_t i = 0; i < n; ++i) {
    if (i % 7 == 3) s.m[i] = s.v[i] = T(0);  // a slot born at this step
    s.counts[i] = static_cast<T>(i % 9);
  }
  return s;
}

}  // namespace

TEMPLATE_TEST_CASE("adamw_update follows the formula and splits anywhere bitwise", "[kernel][optim]", float, double) {
  using T = TestType;
  const AdamWStep<T> k{T(1e-3), T(0.9), T(0.999), T(1e-8), T(1) - T(1e-3) * T(0.1)};
  const T c1 = T(1) / (T(1) - std::pow(T(0.9), T(5))), c2 = T(1) / (T(1) - std::pow(T(0.999), T(5)));
  for (std::size_t n : {0, 1, 5, 16, 17, 100, 1001}) {
    const AdamWState<T> start = adamw_state<T>(n, 10 + n);
    AdamWState<T> whole = start;
    adamw_update_on<KernelArch>(k, c1, c2, whole.w.data(), whole.g.data(), whole.m.data(), whole.v.data(),
                                static_cast<std::int64_t>(n));
    for (std::size_t i = 0; i < n; ++i) {
      const double g = start.g[i], b1 = k.beta1, b2 = k.beta2;
      const double m = b1 * start.m[i] + (1 - b1) * g, v = b2 * start.v[i] + (1 - b2) * g * g;
      const double w = start.w[i] * static_cast<double>(k.shrink) -
                       static_cast<double>(k.lr) * (m * c1) / (std::sqrt(v * c2) + static_cast<double>(k.eps));
      // m's two terms may cancel: its error is relative to their size, not to m's
      const double m_scale = std::fabs(b1 * start.m[i]) + std::fabs((1 - b1) * g);
      REQUIRE(whole.m[i] == Approx(m).epsilon(0).margin(tolerance<T>() * m_scale));
      REQUIRE(whole.v[i] == Approx(v).epsilon(tolerance<T>()).margin(1e-30));
      REQUIRE(whole.w[i] == Approx(w).epsilon(tolerance<T>()));
    }
    for (std::size_t cut : {std::size_t{1}, std::size_t{3}, n / 2, n > 0 ? n - 1 : 0}) {
      if (cut > n) continue;
      AdamWState<T> split = start;
      adamw_update_on<KernelArch>(k, c1, c2, split.w.data(), split.g.data(), split.m.data(), split.v.data(),
                                  static_cast<std::int64_t>(cut));
      adamw_update_on<KernelArch>(k, c1, c2, split.w.data() + cut, split.g.data() + cut, split.m.data() + cut,
                                  split.v.data() + cut, static_cast<std::int64_t>(n - cut));
      INFO("n " << n << ", cut at " << cut);
      REQUIRE(same_bits(split.w, whole.w));
      REQUIRE(same_bits(split.m, whole.m));
      REQUIRE(same_bits(split.v, whole.v));
    }
  }
}

TEMPLATE_TEST_CASE("adamw_counted_update restarts fresh slots, saturates counts, splits bitwise", "[kernel][optim]",
                   float, double) {
  using T = TestType;
  const AdamWStep<T> k{T(1e-3), T(0.9), T(0.999), T(1e-8), T(1)};
  const T top = T(6);
  std::vector<T> c1(7), c2(7);
  for (int j = 1; j <= 6; ++j) {
    c1[j] = T(1) / (T(1) - std::pow(T(0.9), T(j)));
    c2[j] = T(1) / (T(1) - std::pow(T(0.999), T(j)));
  }
  // counts spread (each register mixes them), equal but for a fresh slot every 37th (whole
  // registers of one count beside mixed ones), and all saturated
  for (const int pattern : {0, 1, 2})
    for (std::size_t n : {0, 1, 7, 16, 33, 500}) {
      INFO("pattern " << pattern << ", n " << n);
      AdamWState<T> start = adamw_state<T>(n, 30 + n);
      for (std::size_t i = 0; pattern > 0 && i < n; ++i) {
        start.counts[i] = pattern == 1 ? T(2) : top;
        if (start.m[i] == T(0) && start.v[i] == T(0)) start.m[i] = T(0.005);
        if (pattern == 1 && i % 37 == 5) start.m[i] = start.v[i] = T(0);
      }
      AdamWState<T> whole = start;
      adamw_counted_update_on<KernelArch>(k, c1.data(), c2.data(), top, whole.w.data(), whole.g.data(), whole.m.data(),
                                          whole.v.data(), whole.counts.data(), static_cast<std::int64_t>(n));
      for (std::size_t i = 0; i < n; ++i) {
        const bool fresh = start.m[i] == T(0) && start.v[i] == T(0);
        const T count = fresh ? T(1) : std::min(start.counts[i] + T(1), top);
        REQUIRE(whole.counts[i] == count);
        const auto j = static_cast<std::size_t>(count);
        const double g = start.g[i], b1 = k.beta1, b2 = k.beta2;
        const double m = b1 * start.m[i] + (1 - b1) * g, v = b2 * start.v[i] + (1 - b2) * g * g;
        const double w =
            start.w[i] - static_cast<double>(k.lr) * (m * c1[j]) / (std::sqrt(v * c2[j]) + static_cast<double>(k.eps));
        REQUIRE(whole.w[i] == Approx(w).epsilon(tolerance<T>()));
      }
      const std::size_t cut = n / 3;
      AdamWState<T> split = start;
      for (auto [b, e] : {std::pair{std::size_t{0}, cut}, std::pair{cut, n}})
        adamw_counted_update_on<KernelArch>(k, c1.data(), c2.data(), top, split.w.data() + b, split.g.data() + b,
                                            split.m.data() + b, split.v.data() + b, split.counts.data() + b,
                                            static_cast<std::int64_t>(e - b));
      REQUIRE(same_bits(split.w, whole.w));
      REQUIRE(same_bits(split.counts, whole.counts));
    }
}

TEMPLATE_TEST_CASE("zero_moments finds a slot with m and v both zero, anywhere, and nothing else", "[kernel][optim]",
                   float, double) {
  using T = TestType;
  CHECK_FALSE(zero_moments_on<KernelArch>(static_cast<const T*>(nullptr), static_cast<const T*>(nullptr), 0));
  for (const std::int64_t n : {1, 3, 15, 16, 17, 31, 33, 63, 64, 65, 100, 257}) {
    INFO("n " << n);
    std::vector<T> m(static_cast<std::size_t>(n)), v(m.size());
    for (std::int64_t i = 0; i < n; ++i) {  // no zero: every value at least 1e-30 in magnitude
      m[static_cast<std::size_t>(i)] = T((i % 3 == 0 ? -1 : 1) * (1e-30 + 0.01 * static_cast<double>(i)));
      v[static_cast<std::size_t>(i)] = T(1e-30 + 0.02 * static_cast<double>(i));
    }
    CHECK_FALSE(zero_moments_on<KernelArch>(m.data(), v.data(), n));
    for (std::int64_t at = 0; at < n; ++at) {
      const auto a = static_cast<std::size_t>(at);
      const T m0 = m[a], v0 = v[a];
      m[a] = T(0);  // m alone, v alone, a NaN beside a zero: no
      CHECK_FALSE(zero_moments_on<KernelArch>(m.data(), v.data(), n));
      m[a] = m0;
      v[a] = T(0);
      CHECK_FALSE(zero_moments_on<KernelArch>(m.data(), v.data(), n));
      m[a] = std::numeric_limits<T>::quiet_NaN();
      CHECK_FALSE(zero_moments_on<KernelArch>(m.data(), v.data(), n));
      m[a] = at % 2 == 0 ? T(0) : -T(0);  // both, either sign: yes, and not outside the range
      CHECK(zero_moments_on<KernelArch>(m.data(), v.data(), n));
      CHECK(zero_moments_on<KernelArch>(m.data() + at, v.data() + at, n - at));
      CHECK_FALSE(zero_moments_on<KernelArch>(m.data(), v.data(), at));
      CHECK_FALSE(zero_moments_on<KernelArch>(m.data() + at + 1, v.data() + at + 1, n - at - 1));
      m[a] = m0;
      v[a] = v0;
    }
  }
}

TEMPLATE_TEST_CASE("sgd_update: plain, momentum and Nesterov follow the formulas and split bitwise", "[kernel][optim]",
                   float, double) {
  using T = TestType;
  for (SGDKind kind : {SGDKind::plain, SGDKind::momentum, SGDKind::nesterov}) {
    const SGDStep<T> k{T(0.05), T(0.9), T(1e-4), kind};
    for (std::size_t n : {0, 1, 9, 64, 77}) {
      const std::vector<T> w0 = random_values<T>(n, 50 + n, -1, 1), g = random_values<T>(n, 51 + n, -1, 1),
                           b0 = random_values<T>(n, 52 + n, -1, 1);
      std::vector<T> w = w0, b = b0;
      sgd_update_on<KernelArch>(k, w.data(), g.data(), b.data(), static_cast<std::int64_t>(n));
      for (std::size_t i = 0; i < n; ++i) {
        const double gd = g[i] + static_cast<double>(k.weight_decay) * w0[i];
        const double bn = static_cast<double>(k.momentum) * b0[i] + gd;
        const double step = kind == SGDKind::plain      ? gd
                            : kind == SGDKind::momentum ? bn
                                                        : gd + static_cast<double>(k.momentum) * bn;
        REQUIRE(w[i] == Approx(w0[i] - static_cast<double>(k.lr) * step).epsilon(tolerance<T>()).margin(1e-6));
        if (kind != SGDKind::plain) REQUIRE(b[i] == Approx(bn).epsilon(tolerance<T>()).margin(1e-6));
        if (kind == SGDKind::plain) REQUIRE(b[i] == b0[i]);  // untouched
      }
      std::vector<T> ws = w0, bs = b0;
      const std::size_t cut = n / 2 + 1 > n ? n : n / 2 + 1;
      sgd_update_on<KernelArch>(k, ws.data(), g.data(), bs.data(), static_cast<std::int64_t>(cut));
      sgd_update_on<KernelArch>(k, ws.data() + cut, g.data() + cut, bs.data() + cut,
                                static_cast<std::int64_t>(n - cut));
      REQUIRE(same_bits(ws, w));
      REQUIRE(same_bits(bs, b));
    }
  }
}
