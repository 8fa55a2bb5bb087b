// Optimizer steps on parameters large enough to run on OpenMP threads give the same bits
// with 1 and 2 threads, and match a one-range-at-a-time scalar loop (no slot skipped or
// updated twice), for SGD (momentum, Nesterov) and AdamW, sparse and dense.
#include <sprig/core/rng.hpp>
#include <sprig/optim/adamw.hpp>
#include <sprig/optim/sgd.hpp>

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <vector>

#if SPRIG_HAS_OPENMP
#  include <omp.h>
#endif

using namespace sprig;

namespace {

template <class Opt>
void run_steps(Opt opt, SparseParameter<float, std::int32_t>& sp, DenseParameter<float>& dp, int steps) {
  for (int t = 0; t < steps; ++t) {
    CounterRng rng(40 + static_cast<std::uint64_t>(t));
    for (auto& g : sp.grad) g = float(rng.uniform(-1.0, 1.0));
    for (auto& g : dp.grad) g = float(rng.uniform(-1.0, 1.0));
    opt.begin_step();
    opt.update(sp);
    opt.update(dp);
  }
}

template <class MakeOpt>
void check_thread_invariance(MakeOpt make) {
  // 700 x 800 at density 0.2: ~112k live slots, above the threading threshold
  auto W = PaddedCSR<float, std::int32_t>::random_density(700, 800, 0.2, 9);
  const SparseParameter<float, std::int32_t> sp0(W);
  DenseParameter<float> dp0(300, 300);
  CounterRng rng(2);
  for (auto& v : dp0.value) v = float(rng.uniform(-1.0, 1.0));
  auto run = [&](int threads) {
#if SPRIG_HAS_OPENMP
    const int saved = omp_get_max_threads();
    omp_set_num_threads(threads);
#else
    (void)threads;
#endif
    auto sp = sp0;
    auto dp = dp0;
    run_steps(make(), sp, dp, 3);
#if SPRIG_HAS_OPENMP
    omp_set_num_threads(saved);
#endif
    return std::pair{std::vector<float>(sp.matrix.values().begin(), sp.matrix.values().end()), dp.value};
  };
  const auto one = run(1), two = run(2);
  REQUIRE(one.first == two.first);
  REQUIRE(one.second == two.second);
  // every live slot moved, padding still exactly 0
  const auto& W0 = sp0.matrix;
  std::int64_t moved = 0, live = 0;
  for (std::int64_t i = 0; i < W0.rows(); ++i)
    for (std::int64_t s = W0.row_start(i); s < W0.row_start(i) + W0.row_capacity(i); ++s) {
      const bool is_live = s < W0.row_start(i) + W0.row_nnz(i);
      if (is_live) {
        ++live;
        moved += one.first[static_cast<std::size_t>(s)] != W0.values()[s];
      } else {
        REQUIRE(one.first[static_cast<std::size_t>(s)] == 0.0f);
      }
    }
  CHECK(moved == live);
  std::int64_t dense_moved = 0;
  for (std::size_t k = 0; k < dp0.value.size(); ++k) dense_moved += one.second[k] != dp0.value[k];
  CHECK(dense_moved == std::ssize(dp0.value));
}

}  // namespace

TEST_CASE("SGD with momentum: same bits with 1 and 2 threads, every live slot updated", "[optim][threads]") {
  check_thread_invariance([] { return SGD<float>({.lr = 0.05, .momentum = 0.9, .weight_decay = 0.01}); });
  check_thread_invariance(
      [] { return SGD<float>({.lr = 0.05, .momentum = 0.9, .weight_decay = 0.0, .nesterov = true}); });
}

TEST_CASE("AdamW: same bits with 1 and 2 threads, every live slot updated", "[optim][threads]") {
  check_thread_invariance([] { return AdamW<float>({.lr = 0.01, .weight_decay = 0.05}); });
}
