// tests/test_narrow_dense.cpp — narrow_forward / narrow_backward (kernels/narrow_dense.hpp)
// against a double-precision oracle on random shapes: every row count 1..kNarrowMaxRows,
// batches around every SIMD width (tails), K from 0 up, operands strided and unaligned with
// guards around them, float and double, 1 to 3 threads. Also: the fused ReLU is bitwise the
// unfused result masked by hand (a GELU's derivative: multiplied), dW does not depend on whether dX is asked for, results do not
// depend on the thread count, and bad shapes throw.
#include "sprig/kernels/narrow_dense.hpp"

#include <cmath>
#include <cstdint>
#include <span>
#include <vector>

#include <catch2/catch.hpp>

#include "kernel_test_support.hpp"

#if SPRIG_HAS_OPENMP
#  include <omp.h>
#endif

using namespace sprig;
using namespace sprig::test;

namespace {

struct NarrowCase {
  std::int64_t m, K, B;
  Placement place;
  std::uint64_t seed;
};

std::vector<NarrowCase> narrow_cases() {
  std::vector<NarrowCase> cases;
  std::uint64_t seed = 1;
  const Placement places[] = {Placement::tight, Placement::strided, Placement::unaligned};
  for (std::int64_t m = 1; m <= kNarrowMaxRows; ++m)
    for (std::int64_t B : {1, 3, 4, 7, 8, 9, 15, 16, 17, 33, 64, 67})
      cases.push_back({m, 1 + (m * 7 + B) % 40, B, places[(m + B) % 3], seed++});
  cases.push_back({10, 0, 16, Placement::tight, seed++});      // K = 0: Y is the bias
  cases.push_back({3, 25, 0, Placement::strided, seed++});     // B = 0: dW is 0
  cases.push_back({12, 131, 67, Placement::strided, seed++});  // large enough for OpenMP
  cases.push_back({10, 300, 130, Placement::unaligned, seed++});
  return cases;
}

template <class T>
struct Operands {
  Operand<T> W, X, dY, Y, dW, dX;
  std::vector<T> bias;
  Operands(const NarrowCase& c, CounterRng& rng)
      : W(c.m, c.K, c.place, quiet_nan<T>()),
        X(c.K, c.B, c.place, quiet_nan<T>()),
        dY(c.m, c.B, c.place, quiet_nan<T>()),
        Y(c.m, c.B, c.place, T(-7)),
        dW(c.m, c.K, c.place, T(-7)),
        dX(c.K, c.B, c.place, T(-7)),
        bias(static_cast<std::size_t>(c.m)) {
    W.fill_random(rng);
    X.fill_random(rng);
    dY.fill_random(rng);
    for (T& b : bias) b = static_cast<T>(rng.uniform(-1.0, 1.0));
    // exact zeros and a negative zero in X: the ReLU mask must treat them as <= 0
    if (c.K > 0 && c.B > 0) {
      X(0, 0) = T(0);
      X(c.K - 1, c.B - 1) = -T(0);
    }
  }
};

template <class T>
void with_threads(int threads, auto&& fn) {
#if SPRIG_HAS_OPENMP
  const int saved = omp_get_max_threads();
  omp_set_num_threads(threads);
  fn();
  omp_set_num_threads(saved);
#else
  if (threads == 1) fn();
#endif
}

}  // namespace

TEMPLATE_TEST_CASE("narrow_forward equals act(W X + b) and does not depend on the thread count", "[kernels][narrow]",
                   float, double) {
  using T = TestType;
  for (const NarrowCase& c : narrow_cases()) {
    CAPTURE(c.m, c.K, c.B, name(c.place), c.seed);
    CounterRng rng(c.seed, 0x4A77, sizeof(T));
    Operands<T> o(c, rng);
    const std::span<const T> bias(o.bias);
    Matrix<T> first;
    for (const int threads : {1, 2, 3}) {
      with_threads<T>(threads, [&] { narrow_forward<T>(o.W.cview(), o.X.cview(), o.Y.view(), bias); });
      Mismatches bad;
      for (std::int64_t i = 0; i < c.m; ++i)
        for (std::int64_t j = 0; j < c.B; ++j) {
          double want = o.bias[static_cast<std::size_t>(i)], S = std::fabs(want);
          for (std::int64_t k = 0; k < c.K; ++k) {
            want += static_cast<double>(o.W(i, k)) * static_cast<double>(o.X(k, j));
            S += std::fabs(static_cast<double>(o.W(i, k)) * static_cast<double>(o.X(k, j)));
          }
          if (!within<T>(o.Y(i, j), static_cast<T>(want), static_cast<double>(c.K + 1), S, 2.0))
            bad.add("Y(", i, ",", j, ") = ", o.Y(i, j), " want ", want);
        }
      INFO(bad.first);
      CHECK(bad.count == 0);
      CHECK(o.Y.guard_violations() == 0);
      if (threads == 1)
        first = o.Y.copy();
      else
        CHECK(bitwise_differences<T>(first.view(), o.Y.copy().view()) == 0);
    }
    // the fused ReLU: bitwise max(0, the result above) with ReLU<T>'s semantics
    narrow_forward<T>(o.W.cview(), o.X.cview(), o.Y.view(), bias, FusedActivation::relu);
    std::int64_t differ = 0;
    for (std::int64_t i = 0; i < c.m; ++i)
      for (std::int64_t j = 0; j < c.B; ++j) differ += !same_bits(o.Y(i, j), first(i, j) > T(0) ? first(i, j) : T(0));
    CHECK(differ == 0);
    // no bias: the bias-free sum
    narrow_forward<T>(o.W.cview(), o.X.cview(), o.Y.view());
    if (c.K == 0 && c.B > 0) CHECK(o.Y(0, 0) == T(0));
  }
}

TEMPLATE_TEST_CASE("narrow_backward equals dY X^T and W^T dY, the ReLU mask bit for bit, at any thread count",
                   "[kernels][narrow]", float, double) {
  using T = TestType;
  for (const NarrowCase& c : narrow_cases()) {
    CAPTURE(c.m, c.K, c.B, name(c.place), c.seed);
    CounterRng rng(c.seed, 0xBAC4, sizeof(T));
    Operands<T> o(c, rng);
    Matrix<T> dW1, dX1;
    for (const int threads : {1, 2, 3}) {
      with_threads<T>(threads,
                      [&] { narrow_backward<T>(o.W.cview(), o.X.cview(), o.dY.cview(), o.dW.view(), o.dX.view()); });
      Mismatches bad;
      for (std::int64_t i = 0; i < c.m; ++i)
        for (std::int64_t k = 0; k < c.K; ++k) {
          double want = 0.0, S = 0.0;
          for (std::int64_t j = 0; j < c.B; ++j) {
            want += static_cast<double>(o.dY(i, j)) * static_cast<double>(o.X(k, j));
            S += std::fabs(static_cast<double>(o.dY(i, j)) * static_cast<double>(o.X(k, j)));
          }
          if (!within<T>(o.dW(i, k), static_cast<T>(want), static_cast<double>(c.B), S, 2.0))
            bad.add("dW(", i, ",", k, ") = ", o.dW(i, k), " want ", want);
        }
      for (std::int64_t k = 0; k < c.K; ++k)
        for (std::int64_t j = 0; j < c.B; ++j) {
          double want = 0.0, S = 0.0;
          for (std::int64_t i = 0; i < c.m; ++i) {
            want += static_cast<double>(o.W(i, k)) * static_cast<double>(o.dY(i, j));
            S += std::fabs(static_cast<double>(o.W(i, k)) * static_cast<double>(o.dY(i, j)));
          }
          if (!within<T>(o.dX(k, j), static_cast<T>(want), static_cast<double>(c.m), S, 2.0))
            bad.add("dX(", k, ",", j, ") = ", o.dX(k, j), " want ", want);
        }
      INFO(bad.first);
      CHECK(bad.count == 0);
      CHECK(o.dW.guard_violations() == 0);
      CHECK(o.dX.guard_violations() == 0);
      if (threads == 1) {
        dW1 = o.dW.copy();
        dX1 = o.dX.copy();
      } else {
        CHECK(bitwise_differences<T>(dW1.view(), o.dW.copy().view()) == 0);
        CHECK(bitwise_differences<T>(dX1.view(), o.dX.copy().view()) == 0);
      }
    }
    // dX masked for a ReLU below: the unmasked dX with relu_backward applied, bit for bit;
    // dW the same with the mask, and without dX at all
    narrow_backward<T>(o.W.cview(), o.X.cview(), o.dY.cview(), o.dW.view(), o.dX.view(), FusedActivation::relu);
    std::int64_t differ = 0, masked = 0;
    for (std::int64_t k = 0; k < c.K; ++k)
      for (std::int64_t j = 0; j < c.B; ++j) {
        differ += !same_bits(o.dX(k, j), relu_backward(o.X(k, j), dX1(k, j)));
        masked += o.X(k, j) <= T(0) && dX1(k, j) != T(0);
      }
    CHECK(differ == 0);
    if (c.K * c.B >= 8) CHECK(masked > 0);
    // dX multiplied by a GELU's derivative: the unmasked dX times it, bit for bit
    Operand<T> D(c.K, c.B, c.place, quiet_nan<T>());
    D.fill_random(rng);
    narrow_backward<T>(o.W.cview(), o.X.cview(), o.dY.cview(), o.dW.view(), o.dX.view(), FusedActivation::gelu,
                       D.cview());
    differ = 0;
    for (std::int64_t k = 0; k < c.K; ++k)
      for (std::int64_t j = 0; j < c.B; ++j) differ += !same_bits(o.dX(k, j), T(dX1(k, j) * D(k, j)));
    CHECK(differ == 0);
    CHECK(bitwise_differences<T>(dW1.view(), o.dW.copy().view()) == 0);
    o.dW.fill(T(5));
    narrow_backward<T>(o.W.cview(), o.X.cview(), o.dY.cview(), o.dW.view());
    CHECK(bitwise_differences<T>(dW1.view(), o.dW.copy().view()) == 0);
    CHECK(o.dW.guard_violations() == 0);
  }
}

TEST_CASE("narrow kernels reject shapes they do not take", "[kernels][narrow]") {
  Matrix<float> W(4, 6), X(6, 5), Y(4, 5), dW(4, 6), dX(6, 5), wide(kNarrowMaxRows + 1, 6), Yw(kNarrowMaxRows + 1, 5);
  Matrix<float> empty(0, 6), Y0(0, 5), X7(7, 5), Y3(4, 3), dW5(4, 5);
  const std::vector<float> bias3(3);
  CHECK_THROWS_AS(narrow_forward<float>(wide.view(), X.view(), Yw.view()), ShapeError);
  CHECK_THROWS_AS(narrow_forward<float>(empty.view(), X.view(), Y0.view()), ShapeError);
  CHECK_THROWS_AS(narrow_forward<float>(W.view(), X7.view(), Y.view()), ShapeError);
  CHECK_THROWS_AS(narrow_forward<float>(W.view(), X.view(), Y3.view()), ShapeError);
  CHECK_THROWS_AS(narrow_forward<float>(W.view(), X.view(), Y.view(), std::span<const float>(bias3)), ShapeError);
  CHECK_THROWS_AS(narrow_backward<float>(wide.view(), X.view(), Yw.view(), wide.view()), ShapeError);
  CHECK_THROWS_AS(narrow_backward<float>(W.view(), X.view(), Y.view(), dW5.view()), ShapeError);
  CHECK_THROWS_AS(narrow_backward<float>(W.view(), X.view(), Y3.view(), dW.view()), ShapeError);
  CHECK_THROWS_AS(narrow_backward<float>(W.view(), X.view(), Y.view(), dW.view(), X7.view()), ShapeError);
  CHECK_THROWS_AS(narrow_backward<float>(W.view(), X.view(), Y.view(), dW.view(), dX.view(), FusedActivation::gelu,
                                         Y3.view()),
                  ShapeError);
  CHECK_THROWS_AS(narrow_forward<float>(W.view(), X.view(), Y.view(), {}, FusedActivation::gelu), ArgumentError);
  CHECK_NOTHROW(narrow_backward<float>(W.view(), X.view(), Y.view(), dW.view(), dX.view()));
}

// An output over an input would be read after it was written (Y over X, dX over dY...):
// rejected before anything is written. Before the check, narrow_forward(W, X, X) returned
// quietly with a Y unlike W X.
TEST_CASE("narrow kernels reject an output that overlaps an input", "[kernels][narrow][overlap]") {
  using Catch::Matchers::Contains;
  Matrix<float> W(6, 6, 0.5f), X(6, 5, 1.f), Y(6, 5), dY(6, 5, 1.f), dW(6, 6), dX(6, 5);
  const std::vector<float> bias(6, 1.f);
  CHECK_THROWS_AS(narrow_forward<float>(W.view(), X.view(), X.view()), ArgumentError);
  CHECK_THROWS_WITH(narrow_forward<float>(W.view(), X.view(), X.view()), Contains("narrow_forward: Y overlaps X"));
  CHECK_THROWS_WITH(narrow_forward<float>(W.view(), X.view(), MatrixView<float>(W.data(), 6, 5)),
                    Contains("narrow_forward: Y overlaps W"));
  CHECK_THROWS_WITH(narrow_forward<float>(W.view(), X.view(), Y.view(), std::span<const float>(Y.data(), 6)),
                    Contains("narrow_forward: Y overlaps the bias"));
  CHECK_THROWS_WITH(narrow_backward<float>(W.view(), X.view(), dY.view(), dW.view(), dY.view()),
                    Contains("narrow_backward: dX overlaps dY"));
  CHECK_THROWS_WITH(narrow_backward<float>(W.view(), X.view(), dY.view(), dW.view(), X.view(), FusedActivation::relu),
                    Contains("narrow_backward: dX overlaps X"));
  CHECK_THROWS_WITH(narrow_backward<float>(W.view(), X.view(), dY.view(), W.view()),
                    Contains("narrow_backward: dW overlaps W"));
  CHECK_THROWS_WITH(narrow_backward<float>(W.view(), X.view(), dY.view(), dW.view(),
                                           MatrixView<float>(dW.data(), 6, 5)),
                    Contains("narrow_backward: dW overlaps dX"));
  bool untouched = true;
  for (std::int64_t i = 0; i < 6; ++i)
    for (std::int64_t j = 0; j < 5; ++j) untouched = untouched && X(i, j) == 1.f && dY(i, j) == 1.f;
  CHECK(untouched);
}
