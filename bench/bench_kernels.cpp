// bench_kernels — Google Benchmark timings of sprig's kernels on a few shapes: spmm (forward),
// dX on the cached transpose (spmm_transposed, and cache.get + spmm), sddmm (weight
// gradient), and the transpose rebuild and value refresh on their own. Counters: GFLOP/s of useful work
// (2 * nnz * B) and nnz. Threads follow OMP_NUM_THREADS.
#include <sprig/kernels/sddmm.hpp>
#include <sprig/kernels/spmm.hpp>
#include <sprig/kernels/spmm_transposed.hpp>
#include <sprig/kernels/transpose.hpp>

#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <span>
#include <tuple>
#include <vector>

#include <benchmark/benchmark.h>

namespace {

using W32 = sprig::PaddedCSR<float, std::int32_t>;

// One weight matrix per (M, K, density in permille), built once: random init at 4096 x 4096
// takes longer than many benchmark iterations.
const W32& weights(std::int64_t M, std::int64_t K, std::int64_t permille) {
  static std::map<std::tuple<std::int64_t, std::int64_t, std::int64_t>, std::unique_ptr<W32>> cache;
  auto& slot = cache[{M, K, permille}];
  if (!slot) slot = std::make_unique<W32>(W32::random_density(M, K, double(permille) / 1000.0, 42));
  return *slot;
}

sprig::Matrix<float> random_matrix(std::int64_t rows, std::int64_t cols, std::uint64_t seed) {
  sprig::Matrix<float> m(rows, cols);
  std::mt19937_64 g(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (std::int64_t i = 0; i < rows; ++i)
    for (std::int64_t j = 0; j < cols; ++j) m(i, j) = u(g);
  return m;
}

void set_counters(benchmark::State& state, const W32& W, std::int64_t B) {
  state.counters["nnz"] = double(W.nnz());
  state.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * double(W.nnz()) * double(B) * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

// Args: M, K, density (permille), B.
void BM_spmm(benchmark::State& state) {
  const auto& W = weights(state.range(0), state.range(1), state.range(2));
  const std::int64_t B = state.range(3);
  const auto X = random_matrix(W.cols(), B, 1);
  sprig::Matrix<float> Y(W.rows(), B);
  sprig::KernelWorkspace<float> ws;
  for (auto _ : state) {
    sprig::spmm(W, X, Y.view(), ws);
    benchmark::DoNotOptimize(Y.data());
    benchmark::ClobberMemory();
  }
  set_counters(state, W, B);
}

// dX = W^T dY on a warm transpose cache, computed by dx(W, cache, dY, dX, ws).
template <class Dx>
void dx_benchmark(benchmark::State& state, Dx&& dx) {
  const auto& W = weights(state.range(0), state.range(1), state.range(2));
  const std::int64_t B = state.range(3);
  const auto dY = random_matrix(W.rows(), B, 2);
  sprig::Matrix<float> dX(W.cols(), B);
  sprig::TransposeCache<float, std::int32_t> cache;
  cache.get(W);
  sprig::KernelWorkspace<float> ws;
  for (auto _ : state) {
    dx(W, cache, dY, dX.view(), ws);
    benchmark::DoNotOptimize(dX.data());
    benchmark::ClobberMemory();
  }
  set_counters(state, W, B);
}

// Through spmm_transposed (W's values read through the permutation).
void BM_spmm_transposed(benchmark::State& state) {
  dx_benchmark(state, [](const auto& W, auto& cache, const auto& dY, auto dX, auto& ws) {
    sprig::spmm_transposed(W, cache, dY, dX, ws);
  });
}

// The plain way: cache.get(W) (value refresh) then spmm.
void BM_spmm_cache_get(benchmark::State& state) {
  dx_benchmark(state, [](const auto& W, auto& cache, const auto& dY, auto dX, auto& ws) {
    sprig::spmm(cache.get(W), dY, dX, ws);
  });
}

void BM_sddmm(benchmark::State& state) {
  const auto& W = weights(state.range(0), state.range(1), state.range(2));
  const std::int64_t B = state.range(3);
  const auto dY = random_matrix(W.rows(), B, 3);
  const auto X = random_matrix(W.cols(), B, 4);
  std::vector<float> grad(static_cast<std::size_t>(W.storage_size()));
  sprig::KernelWorkspace<float> ws;
  for (auto _ : state) {
    sprig::sddmm(W, dY, X, std::span<float>(grad), ws);
    benchmark::DoNotOptimize(grad.data());
    benchmark::ClobberMemory();
  }
  set_counters(state, W, B);
}

// Args: M, K, density (permille).
void BM_transpose_rebuild(benchmark::State& state) {
  const auto& W = weights(state.range(0), state.range(1), state.range(2));
  sprig::TransposeCache<float, std::int32_t> cache;
  for (auto _ : state) {
    cache.rebuild(W);
    benchmark::DoNotOptimize(&cache.transposed());
  }
  state.counters["nnz"] = double(W.nnz());
}

void BM_transpose_refresh(benchmark::State& state) {
  const auto& W = weights(state.range(0), state.range(1), state.range(2));
  sprig::TransposeCache<float, std::int32_t> cache;
  cache.rebuild(W);
  for (auto _ : state) {
    cache.refresh_values(W);
    benchmark::DoNotOptimize(&cache.transposed());
    benchmark::ClobberMemory();
  }
  state.counters["nnz"] = double(W.nnz());
}

void kernel_args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"M", "K", "permille", "B"});
  for (std::int64_t B : {32, 128, 512}) {
    b->Args({1024, 1024, 100, B});
    b->Args({4096, 4096, 100, B});
    b->Args({2560, 640, 100, B});
    b->Args({4096, 4096, 20, B});
  }
  b->Unit(benchmark::kMillisecond);
}

void transpose_args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"M", "K", "permille"});
  b->Args({1024, 1024, 100});
  b->Args({4096, 4096, 100});
  b->Args({4096, 4096, 20});
  b->Unit(benchmark::kMillisecond);
}

}  // namespace

BENCHMARK(BM_spmm)->Apply(kernel_args);
BENCHMARK(BM_spmm_transposed)->Apply(kernel_args);
BENCHMARK(BM_spmm_cache_get)->Apply(kernel_args);
BENCHMARK(BM_sddmm)->Apply(kernel_args);
BENCHMARK(BM_transpose_rebuild)->Apply(transpose_args);
BENCHMARK(BM_transpose_refresh)->Apply(transpose_args);

BENCHMARK_MAIN();
