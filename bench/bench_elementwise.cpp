// bench_elementwise: the optimizers' element-wise updates (kernels/optimizer_update.hpp)
// against the plain loops they replaced, which GCC leaves scalar at -O2. One thread; the
// parameter is mini40m's largest (an FFN matrix, 640 x 2560), dense, and a 90%-sparse one's
// live slots (1/10 of it).
//   OMP_NUM_THREADS=1 bench_elementwise --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include <sprig/core/rng.hpp>
#include <sprig/kernels/optimizer_update.hpp>

namespace {

struct State {
  std::vector<float> w, g, m, v;
  explicit State(std::int64_t n) : w(n), g(n), m(n), v(n) {
    sprig::CounterRng rng(1);
    for (std::int64_t i = 0; i < n; ++i) {
      w[i] = static_cast<float>(rng.uniform(-1, 1));
      g[i] = static_cast<float>(rng.uniform(-0.1, 0.1));
      m[i] = static_cast<float>(rng.uniform(-0.01, 0.01));
      v[i] = static_cast<float>(rng.uniform(0, 0.001));
    }
  }
};

const sprig::detail::AdamWStep<float> kStep{1e-3f, 0.9f, 0.999f, 1e-8f, 1.0f - 1e-4f};
constexpr float kC1 = 1.5f, kC2 = 20.0f;

// The loop optim/adamw.hpp ran before the kernel (its update_global).
void adamw_plain_loop(State& s) {
  const auto& k = kStep;
  float* __restrict wp = s.w.data();
  const float* __restrict gp = s.g.data();
  float* __restrict mp = s.m.data();
  float* __restrict vp = s.v.data();
  for (std::size_t i = 0; i < s.w.size(); ++i) {
    const float g = gp[i];
    mp[i] = k.beta1 * mp[i] + (1.0f - k.beta1) * g;
    vp[i] = k.beta2 * vp[i] + (1.0f - k.beta2) * g * g;
    wp[i] = wp[i] * k.shrink - k.lr * (mp[i] * kC1) / (std::sqrt(vp[i] * kC2) + k.eps);
  }
}

void BM_adamw_plain_loop(benchmark::State& st) {
  State s(st.range(0));
  for (auto _ : st) {
    adamw_plain_loop(s);
    benchmark::DoNotOptimize(s.w.data());
  }
  st.SetItemsProcessed(st.iterations() * st.range(0));
}

void BM_adamw_kernel(benchmark::State& st) {
  State s(st.range(0));
  const auto kernel = sprig::detail::adamw_update_kernel<float>();
  for (auto _ : st) {
    kernel(kStep, kC1, kC2, s.w.data(), s.g.data(), s.m.data(), s.v.data(), st.range(0));
    benchmark::DoNotOptimize(s.w.data());
  }
  st.SetItemsProcessed(st.iterations() * st.range(0));
}

}  // namespace

BENCHMARK(BM_adamw_plain_loop)->Arg(640 * 2560)->Arg(640 * 256);
BENCHMARK(BM_adamw_kernel)->Arg(640 * 2560)->Arg(640 * 256);
BENCHMARK_MAIN();
