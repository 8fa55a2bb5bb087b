#include "sprig/optim/clip.hpp"

#include "sprig/core/padded_csr.hpp"
#include "sprig/core/rng.hpp"
#include "sprig/nn/linear.hpp"
#include "sprig/nn/sequential.hpp"
#include "sprig/nn/sparse_linear.hpp"

#include <catch2/catch.hpp>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "observed_new.hpp"
#include "with_threads.hpp"

static std::atomic<long> g_allocations{0};
void sprig_test_observe_new(std::size_t) noexcept { g_allocations.fetch_add(1, std::memory_order_relaxed); }

namespace {

using Catch::Matchers::Contains;

template <class T>
using Model = sprig::Sequential<T, std::int32_t>;

template <class T>
sprig::SparseLinear<T, std::int32_t>& sparse_of(Model<T>& m) {
  return std::get<sprig::SparseLinear<T, std::int32_t>>(m.layer(0));
}
template <class T>
sprig::Linear<T>& dense_of(Model<T>& m) {
  return std::get<sprig::Linear<T>>(m.layer(1));
}

// Sets every non-live gradient slot of a sparse parameter to NaN: entries that must be
// neither counted nor scaled.
template <class P>
void poison_non_live(P& p) {
  std::vector<bool> live(p.grad.size(), false);
  p.matrix.for_each_live(
      [&](std::int64_t, std::int64_t, auto, std::int64_t s) { live[static_cast<std::size_t>(s)] = true; });
  for (std::size_t s = 0; s < live.size(); ++s)
    if (!live[s]) p.grad[s] = std::numeric_limits<typename P::value_type>::quiet_NaN();
}

// A 4 -> 3 sparse layer, then a 3 -> 2 dense one, gradients set by hand to a global norm
// of exactly 5:
//   sparse W live (0,0) (0,2) (2,3): grads 1, 2, 2          -> 9   ((2,1) erased: a dead slot)
//   sparse b: 0, 2, 2                                       -> 8
//   dense W 2x3: all 1                                      -> 6
//   dense b: 1, 1                                           -> 2   total 25
template <class T>
Model<T> hand_model() {
  sprig::Matrix<T> dense(3, 4, T(0));
  dense(0, 0) = 1;
  dense(0, 2) = 2;
  dense(2, 1) = 3;
  dense(2, 3) = 4;
  auto w = sprig::PaddedCSR<T, std::int32_t>::from_dense(dense.view(), T(0), 1.0);
  Model<T> m;
  m.add(sprig::SparseLinear<T, std::int32_t>(std::move(w)));
  m.add(sprig::Linear<T>(3, 2, 1));
  auto& sp = sparse_of(m);
  REQUIRE(sp.weight.matrix.erase(2, 1));
  REQUIRE(sp.weight.matrix.nnz() == 3);
  REQUIRE(sp.weight.matrix.storage_size() > 3);  // padding and the dead slot exist
  poison_non_live(sp.weight);
  sp.weight.grad[static_cast<std::size_t>(sp.weight.matrix.find(0, 0))] = 1;
  sp.weight.grad[static_cast<std::size_t>(sp.weight.matrix.find(0, 2))] = 2;
  sp.weight.grad[static_cast<std::size_t>(sp.weight.matrix.find(2, 3))] = 2;
  sp.bias.grad = {0, 2, 2};
  auto& d = dense_of(m);
  d.weight.grad.assign(6, T(1));
  d.bias.grad = {1, 1};
  return m;
}

// All gradient entries in for_each_parameter order (non-live slots included, as they are).
template <class M>
std::vector<double> all_grads(M& m) {
  std::vector<double> out;
  m.for_each_parameter([&](auto& p) {
    for (auto g : p.grad) out.push_back(static_cast<double>(g));
  });
  return out;
}

bool same_bits(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (!(a[i] == b[i] || (std::isnan(a[i]) && std::isnan(b[i])))) return false;
  return true;
}

}  // namespace

TEMPLATE_TEST_CASE("grad_norm and clip_grad_norm against a hand-computed norm", "[optim][clip]", float, double) {
  using T = TestType;
  auto m = hand_model<T>();
  CHECK(sprig::grad_norm(m) == 5.0);  // sqrt(25), exact; the NaN padding is not counted

  // above max_norm: every live entry times max_norm / (5 + 1e-6), rounded to T once
  const auto before = all_grads(m);
  CHECK(sprig::clip_grad_norm(m, 2.0) == 5.0);
  const T c = static_cast<T>(2.0 / (5.0 + 1e-6));
  auto& sp = sparse_of(m);
  CHECK(sp.weight.grad[static_cast<std::size_t>(sp.weight.matrix.find(0, 0))] == T(1) * c);
  CHECK(sp.weight.grad[static_cast<std::size_t>(sp.weight.matrix.find(0, 2))] == T(2) * c);
  CHECK(sp.weight.grad[static_cast<std::size_t>(sp.weight.matrix.find(2, 3))] == T(2) * c);
  CHECK(sp.bias.grad[0] == T(0));
  CHECK(sp.bias.grad[1] == T(2) * c);
  for (T g : dense_of(m).weight.grad) CHECK(g == c);
  for (T g : dense_of(m).bias.grad) CHECK(g == c);
  // non-live slots untouched (still NaN)
  std::int64_t poisoned = 0;
  for (T g : sp.weight.grad) poisoned += std::isnan(g) ? 1 : 0;
  CHECK(poisoned == sp.weight.matrix.storage_size() - 3);
  CHECK(sprig::grad_norm(m) == Approx(2.0 * 5.0 / (5.0 + 1e-6)).epsilon(1e-6));

  // below max_norm: nothing changes, bit for bit
  auto m2 = hand_model<T>();
  CHECK(sprig::clip_grad_norm(m2, 5.5) == 5.0);
  CHECK(same_bits(all_grads(m2), before));
  CHECK(sprig::clip_grad_norm(m2, 1e30) == 5.0);
  CHECK(same_bits(all_grads(m2), before));

  // at max_norm exactly: as torch, scaled by 5 / (5 + 1e-6) < 1
  CHECK(sprig::clip_grad_norm(m2, 5.0) == 5.0);
  CHECK(dense_of(m2).bias.grad[0] == static_cast<T>(5.0 / (5.0 + 1e-6)));
}

TEMPLATE_TEST_CASE("clip_grad_norm rejects bad max_norm and non-finite gradients, scaling nothing", "[optim][clip]",
                   float, double) {
  using T = TestType;
  auto m = hand_model<T>();
  const auto before = all_grads(m);
  for (double bad : {0.0, -1.0, std::numeric_limits<double>::infinity(), std::nan("")}) {
    CHECK_THROWS_AS(sprig::clip_grad_norm(m, bad), sprig::ArgumentError);
  }
  CHECK_THROWS_WITH(sprig::clip_grad_norm(m, -1.5), Contains("max_norm -1.5") && Contains("finite and > 0"));
  CHECK_THROWS_WITH(sprig::clip_grad_norm(m, 0.0), Contains("max_norm 0"));

  // an infinity in the dense weight (parameter 2: sparse W, sparse b, dense W, dense b)
  dense_of(m).weight.grad[4] = std::numeric_limits<T>::infinity();
  CHECK(std::isinf(sprig::grad_norm(m)));
  CHECK_THROWS_WITH(sprig::clip_grad_norm(m, 1.0),
                    Contains("norm is inf") && Contains("parameter 2") && Contains("nothing was scaled"));
  dense_of(m).weight.grad[4] = T(1);
  CHECK(same_bits(all_grads(m), before));

  // a NaN in the sparse bias (parameter 1)
  sparse_of(m).bias.grad[2] = std::numeric_limits<T>::quiet_NaN();
  CHECK(std::isnan(sprig::grad_norm(m)));
  CHECK_THROWS_WITH(sprig::clip_grad_norm(m, 1.0), Contains("norm is nan") && Contains("parameter 1"));
  sparse_of(m).bias.grad[2] = T(2);
  CHECK(same_bits(all_grads(m), before));
  CHECK(sprig::clip_grad_norm(m, 1.0) == 5.0);  // fine again

  // a gradient not aligned with its weight's slots
  auto m3 = hand_model<T>();
  sparse_of(m3).weight.grad.pop_back();
  CHECK_THROWS_AS(sprig::grad_norm(m3), sprig::ShapeError);
  CHECK_THROWS_WITH(sprig::clip_grad_norm(m3, 1.0), Contains("clip_grad_norm") && Contains("slots"));
}

TEST_CASE("clip_grad_norm: a sum of squares that overflows double is reported as such", "[optim][clip]") {
  auto m = hand_model<double>();
  // each parameter's sum finite (about 1e308), their total not
  dense_of(m).weight.grad.assign(6, 0.0);
  dense_of(m).weight.grad[0] = 1e154;
  dense_of(m).bias.grad = {1e154, 0.0};
  CHECK(std::isinf(sprig::grad_norm(m)));
  CHECK_THROWS_WITH(sprig::clip_grad_norm(m, 1.0), Contains("overflows"));
  CHECK(dense_of(m).bias.grad[0] == 1e154);
}

TEST_CASE("clip_grad_norm on a large model: naive reference, live slots only, bitwise for 1, 2, 3 threads",
          "[optim][clip][threads]") {
  using T = float;
  auto build = [] {
    Model<T> m;
    m.add(sprig::SparseLinear<T, std::int32_t>(700, 300, {.density = 0.6, .seed = 3}));  // ~126k live
    m.add(sprig::Linear<T>(300, 257, 4));                                                // 77100 dense
    sprig::CounterRng rng(11, 1);
    m.for_each_parameter([&](auto& p) {
      for (auto& g : p.grad) g = static_cast<T>(rng.normal() * 1e-2);
    });
    poison_non_live(sparse_of(m).weight);
    return m;
  };
  auto m = build();
  REQUIRE(sparse_of(m).weight.matrix.storage_size() >= sprig::detail::kParallelMinWork);
  REQUIRE(dense_of(m).weight.size() >= sprig::detail::kParallelMinWork);

  // naive reference: live entries only, one long double accumulator, rows in order
  long double ref = 0.0L;
  auto& sw = sparse_of(m).weight;
  sw.matrix.for_each_live([&](std::int64_t, std::int64_t, T, std::int64_t s) {
    ref += static_cast<long double>(sw.grad[static_cast<std::size_t>(s)]) * sw.grad[static_cast<std::size_t>(s)];
  });
  for (T g : sparse_of(m).bias.grad) ref += static_cast<long double>(g) * g;
  for (T g : dense_of(m).weight.grad) ref += static_cast<long double>(g) * g;
  for (T g : dense_of(m).bias.grad) ref += static_cast<long double>(g) * g;
  const double expected = std::sqrt(static_cast<double>(ref));
  CHECK(sprig::grad_norm(m) == Approx(expected).epsilon(1e-12));

  std::vector<double> norms, clipped_norms;
  std::vector<std::vector<double>> grads;
  for (int threads : {1, 2, 3}) {
    auto mt = build();
    sprig_test::with_threads(threads, [&] {
      norms.push_back(sprig::grad_norm(mt));
      const double n = sprig::clip_grad_norm(mt, 0.25 * expected);
      CHECK(n == norms.back());
      clipped_norms.push_back(sprig::grad_norm(mt));
    });
    grads.push_back(all_grads(mt));
  }
  for (std::size_t k = 1; k < norms.size(); ++k) {
    CHECK(norms[k] == norms[0]);
    CHECK(clipped_norms[k] == clipped_norms[0]);
    CHECK(same_bits(grads[k], grads[0]));
  }
  CHECK(clipped_norms[0] == Approx(0.25 * expected).epsilon(1e-6));
}

TEST_CASE("clip_grad_norm allocates nothing", "[optim][clip]") {
  auto m = hand_model<float>();
  Model<float> big;
  big.add(sprig::SparseLinear<float, std::int32_t>(700, 300, {.density = 0.6, .seed = 3}));
  big.add(sprig::Linear<float>(300, 257, 4));
  big.for_each_parameter([](auto& p) { std::fill(p.grad.begin(), p.grad.end(), 1.0f); });
  (void)sprig::clip_grad_norm(big, 1.0);  // a first parallel region may start the thread pool
  const long before = g_allocations.load();
  (void)sprig::clip_grad_norm(m, 1.0);
  (void)sprig::clip_grad_norm(big, 1.0);
  (void)sprig::grad_norm(big);
  CHECK(g_allocations.load() - before == 0);
}

TEST_CASE("check_finite: a NaN or infinite loss or norm is a DivergenceError naming it and the step", "[optim][clip]") {
  static_assert(std::is_base_of_v<sprig::Error, sprig::DivergenceError>);
  CHECK(sprig::check_finite(2.5, "loss", 7) == 2.5);
  CHECK(sprig::check_finite(-1e300, "loss", 0) == -1e300);
  CHECK(sprig::check_finite(std::numeric_limits<double>::denorm_min(), "loss", 0) > 0.0);
  const double bad[] = {std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity(),
                        -std::numeric_limits<double>::infinity()};
  for (double v : bad) {
    try {
      (void)sprig::check_finite(v, "gradient norm", 42);
      FAIL("no DivergenceError for " << v);
    } catch (const sprig::DivergenceError& e) {
      CHECK(e.quantity() == "gradient norm");
      CHECK(e.step() == 42);
      CHECK((std::isnan(v) ? std::isnan(e.value()) : e.value() == v));
      CHECK_THAT(e.what(), Contains("gradient norm is ") && Contains(" at step 42") && Contains("diverged"));
    }
  }
  // a float loss (as SoftmaxCrossEntropy<float> returns) converts exactly
  CHECK_THROWS_AS(sprig::check_finite(std::numeric_limits<float>::quiet_NaN(), "loss", 1), sprig::DivergenceError);
  CHECK_THROWS_AS(sprig::check_finite(std::numeric_limits<float>::infinity(), "loss", 1), sprig::Error);
}
