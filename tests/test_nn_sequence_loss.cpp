// The sequence cross-entropy of a language model is SoftmaxCrossEntropy on the logits
// [V x (B*T)], column b*T + t predicting target token t of sequence b: its mean over all
// columns is the mean over all B*T positions. Checked here against plain loops.
#include "sprig/nn/softmax_cross_entropy.hpp"

#include <cmath>
#include <cstdint>
#include <type_traits>
#include <vector>

#include <catch2/catch.hpp>

#include "test_nn_gradcheck.hpp"

using namespace sprig;
using sprig_test::random_matrix;

namespace {

using LD = long double;

constexpr std::int64_t kV = 11, kB = 3, kT = 5, kN = kB * kT;

// Target token ids in [0, V) for B sequences of T tokens, column b*T + t.
std::vector<std::int32_t> targets(std::uint64_t seed) {
  CounterRng rng(seed, 3);
  std::vector<std::int32_t> y(static_cast<std::size_t>(kN));
  for (auto& v : y) v = static_cast<std::int32_t>(rng.uniform_below(kV));
  return y;
}

// -log softmax(Z[:, n])[y[n]] as a plain loop in long double, shifted by the column maximum
// only when asked (so the plain one is the textbook formula).
template <class T>
LD position_loss(ConstMatrixView<T> Z, std::int64_t n, std::int32_t y, bool shift) {
  LD m = 0;
  if (shift) {
    m = Z(0, n);
    for (std::int64_t v = 1; v < Z.rows(); ++v) m = std::max<LD>(m, Z(v, n));
  }
  LD s = 0;
  for (std::int64_t v = 0; v < Z.rows(); ++v) s += std::exp(LD(Z(v, n)) - m);
  return m + std::log(s) - LD(Z(y, n));
}

}  // namespace

TEST_CASE("Sequence cross-entropy: the mean over all B*T positions, and its gradient", "[nn][loss][gradcheck]") {
  auto Z = random_matrix<double>(kV, kN, 61, -3.0, 3.0);
  const auto y = targets(62);
  SoftmaxCrossEntropy<double> ce;
  Matrix<double> dZ(kV, kN);
  const double loss = ce.forward_backward(Z.view(), y, dZ.view());
  // the plain loop: sequences b, positions t
  LD total = 0, mean_of_sequence_means = 0;
  for (std::int64_t b = 0; b < kB; ++b) {
    LD seq = 0;
    for (std::int64_t t = 0; t < kT; ++t)
      seq += position_loss<double>(Z.view(), b * kT + t, y[std::size_t(b * kT + t)], false);
    total += seq;
    mean_of_sequence_means += seq / kT;
  }
  CHECK(loss == Approx(double(total / kN)).epsilon(1e-14));
  CHECK(loss == Approx(double(mean_of_sequence_means / kB)).epsilon(1e-14));
  CHECK(ce.forward(Z.view(), y) == loss);
  // dZ = (softmax - onehot) / (B*T), every position weighted 1/(B*T)
  for (std::int64_t n = 0; n < kN; ++n) {
    LD s = 0;
    for (std::int64_t v = 0; v < kV; ++v) s += std::exp(LD(Z(v, n)));
    for (std::int64_t v = 0; v < kV; ++v) {
      const LD want = (std::exp(LD(Z(v, n))) / s - (v == y[std::size_t(n)] ? 1 : 0)) / kN;
      REQUIRE(std::abs(dZ(v, n) - double(want)) <= 1e-15);
    }
  }
  // and by central differences on every logit
  const std::vector<double> g(dZ.data(), dZ.data() + kV * kN);
  sprig_test::check_gradient([&] { return double(ce.forward(Z.view(), y)); }, std::span<double>(Z.data(), g.size()), g,
                             sprig_test::some_indices(g.size(), g.size()));
}

TEST_CASE("Sequence cross-entropy in float agrees with the double loop", "[nn][loss]") {
  const auto Zd = random_matrix<double>(kV, kN, 63, -4.0, 4.0);
  Matrix<float> Z(kV, kN), dZ(kV, kN);
  for (std::int64_t v = 0; v < kV; ++v)
    for (std::int64_t n = 0; n < kN; ++n) Z(v, n) = float(Zd(v, n));
  const auto y = targets(64);
  SoftmaxCrossEntropy<float> ce;
  const float loss = ce.forward_backward(Z.view(), y, dZ.view());
  LD total = 0;
  for (std::int64_t n = 0; n < kN; ++n) total += position_loss<float>(Z.view(), n, y[std::size_t(n)], false);
  CHECK(loss == Approx(double(total / kN)).epsilon(1e-6));
  for (std::int64_t n = 0; n < kN; ++n) {
    double col = 0;
    for (std::int64_t v = 0; v < kV; ++v) col += dZ(v, n);
    REQUIRE(std::abs(col) <= 1e-7);  // softmax sums to 1, minus the one-hot
  }
}

TEMPLATE_TEST_CASE("Sequence cross-entropy with logits of 1e4 stays finite and exact", "[nn][loss]", float, double) {
  using T = TestType;
  // exp(1e4) overflows every floating type: only the shifted form survives
  Matrix<T> Z(kV, kN), dZ(kV, kN);
  CounterRng rng(65);
  for (std::int64_t v = 0; v < kV; ++v)
    for (std::int64_t n = 0; n < kN; ++n) Z(v, n) = static_cast<T>(1e4 * rng.uniform(-1.0, 1.0));
  auto y = targets(66);
  for (std::int64_t v = 0; v < kV; ++v) {
    Z(v, 0) = T(1e4);                        // a tie at the maximum: loss log(V)
    Z(v, 1) = v == y[1] ? T(1e4) : T(-1e4);  // a sure prediction: loss 0
    Z(v, 2) = v == y[2] ? T(-1e4) : T(1e4);  // a sure miss: loss 2e4 + log(V - 1)
  }
  SoftmaxCrossEntropy<T> ce;
  const T loss = ce.forward_backward(Z.view(), y, dZ.view());
  REQUIRE(std::isfinite(loss));
  LD total = 0;
  for (std::int64_t n = 0; n < kN; ++n) total += position_loss<T>(Z.view(), n, y[std::size_t(n)], true);
  CHECK(double(loss) == Approx(double(total / kN)).epsilon(std::is_same_v<T, float> ? 1e-6 : 1e-14));
  CHECK(position_loss<T>(Z.view(), 0, y[0], true) == Approx(std::log(LD(kV))));
  CHECK(position_loss<T>(Z.view(), 1, y[1], true) == 0);
  const T inv_n = T(1) / T(kN);
  for (std::int64_t n = 0; n < kN; ++n) {
    for (std::int64_t v = 0; v < kV; ++v) {
      REQUIRE(std::isfinite(dZ(v, n)));
      REQUIRE(dZ(v, n) >= -inv_n);
      REQUIRE(dZ(v, n) <= inv_n);
    }
  }
  for (std::int64_t v = 0; v < kV; ++v) {
    CHECK(dZ(v, 0) == Approx(double(((v == y[0] ? -1.0L : 0.0L) + 1.0L / kV) / kN)));
    CHECK(dZ(v, 1) == 0);  // exp(-2e4) underflows to 0 and the label's 1 - 1 cancels exactly
  }
}
