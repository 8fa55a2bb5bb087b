// bench_kernels — Google Benchmark timings of sprig's kernels on a few shapes: spmm (forward),
// dX on the cached transpose (spmm_transposed, and cache.get + spmm), sddmm (weight
// gradient), sddmm_dx (weight gradient and dX in one pass over W^T), and the transpose rebuild
// and value refresh on their own. Counters: GFLOP/s of useful work (2 * nnz * B) and nnz.
// Threads follow OMP_NUM_THREADS.
// BM_row_stream is the ceiling the kernels are held against: the multiply-adds of a kernel
// that reads one B-wide row of a K-row operand per live weight, with nothing else (no index
// or value loads, no epilogue), so its GFLOP/s is what the machine's cache hierarchy allows
// for that access pattern (see its comment); BM_fma_peak is the FMA units' rate with no
// memory at all.
#include <sprig/kernels/sddmm.hpp>
#include <sprig/kernels/sddmm_dx.hpp>
#include <sprig/kernels/spmm.hpp>
#include <sprig/kernels/spmm_transposed.hpp>
#include <sprig/kernels/transpose.hpp>
#include <sprig/nn/sequential.hpp>

#include <algorithm>
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

// Uniform in [-1, 1); stride 0 packs the rows.
sprig::Matrix<float> random_matrix(std::int64_t rows, std::int64_t cols, std::uint64_t seed, std::int64_t stride = 0) {
  sprig::Matrix<float> m(rows, cols, stride > 0 ? stride : cols, 0.0f);
  std::mt19937_64 g(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (std::int64_t i = 0; i < rows; ++i)
    for (std::int64_t j = 0; j < cols; ++j) m(i, j) = u(g);
  return m;
}

// `products`: how many nnz x B products one iteration computes (2 for sddmm_dx).
void set_counters(benchmark::State& state, const W32& W, std::int64_t B, int products = 1) {
  state.counters["nnz"] = double(W.nnz());
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * products * double(W.nnz()) * double(B) * 1e-9,
                                                 benchmark::Counter::kIsIterationInvariantRate);
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

// Both products of a layer's backward (grad at the live slots and dX = W^T dY): sddmm_dx's
// one pass over W^T where sddmm_dx_one_pass allows it (the batch one register tile, dY within
// one column block, at most 2 threads), else its two kernels. GFLOP/s counts the two products.
void BM_sddmm_dx(benchmark::State& state) {
  const auto& W = weights(state.range(0), state.range(1), state.range(2));
  const std::int64_t B = state.range(3);
  const auto dY = random_matrix(W.rows(), B, 5);
  const auto X = random_matrix(W.cols(), B, 6);
  sprig::Matrix<float> dX(W.cols(), B);
  std::vector<float> grad(static_cast<std::size_t>(W.storage_size()));
  sprig::TransposeCache<float, std::int32_t> cache;
  cache.get(W);
  sprig::KernelWorkspace<float> ws, wst;
  for (auto _ : state) {
    sprig::sddmm_dx(W, cache, dY, X, std::span<float>(grad), dX.view(), ws, wst);
    benchmark::DoNotOptimize(grad.data());
    benchmark::DoNotOptimize(dX.data());
    benchmark::ClobberMemory();
  }
  set_counters(state, W, B, 2);
}

// spmm or sddmm with the column-block budget set per workspace (KernelWorkspace::
// column_block_bytes; the default is SPRIG_COLUMN_BLOCK_BYTES), to choose that budget for a
// machine: which block width is fastest depends on the core, not only on its L2 size (see
// bench/results/column_blocks_zen4.md). W's rows come sorted from random init, so grouped
// for every block width. Args: M, K, B, budget (KiB); density 0.1.
template <class Kernel>
void block_budget_benchmark(benchmark::State& state, Kernel&& kernel) {
  const auto& W = weights(state.range(0), state.range(1), 100);
  const std::int64_t B = state.range(2);
  const auto X = random_matrix(W.cols(), B, 1);
  const auto dY = random_matrix(W.rows(), B, 3);
  sprig::Matrix<float> Y(W.rows(), B);
  std::vector<float> grad(static_cast<std::size_t>(W.storage_size()));
  sprig::KernelWorkspace<float> ws;
  ws.column_block_bytes = state.range(3) * 1024;
  for (auto _ : state) {
    kernel(W, X, dY, Y.view(), std::span<float>(grad), ws);
    benchmark::DoNotOptimize(Y.data());
    benchmark::DoNotOptimize(grad.data());
    benchmark::ClobberMemory();
  }
  set_counters(state, W, B);
  state.counters["blocks"] = double(sprig::detail::spmm_column_blocks<float>(W.cols(), B, ws.column_block_bytes).count);
}

void BM_spmm_block_budget(benchmark::State& state) {
  block_budget_benchmark(state, [](const auto& W, const auto& X, const auto&, auto Y, auto, auto& ws) {
    sprig::spmm(W, X, Y, ws);
  });
}

void BM_sddmm_block_budget(benchmark::State& state) {
  block_budget_benchmark(state, [](const auto& W, const auto& X, const auto& dY, auto, auto grad, auto& ws) {
    sprig::sddmm(W, dY, X, grad, ws);
  });
}

#if SPRIG_KERNEL_SIMD
// Y row += w * X[c, 0:R*N] for `weights_per_row` random rows c of X, the tile in registers
// (spmm_tile's inner loop with the columns and weights taken from registers, not memory).
template <int R>
void row_stream(const float* X, std::int64_t stride, const std::vector<std::int32_t>& rows,
                std::int64_t weights_per_row, float* out) {
  using Bt = sprig::detail::Batch<float>;
  constexpr std::int64_t N = Bt::size;
  constexpr std::int64_t D = SPRIG_SPMM_PREFETCH;
  const auto n = static_cast<std::int64_t>(rows.size());
  for (std::int64_t r0 = 0; r0 + weights_per_row <= n; r0 += weights_per_row) {
    Bt acc[2][R];
    for (auto& chain : acc)
      for (auto& a : chain) a = Bt(0.0f);
    for (std::int64_t q = r0; q < r0 + weights_per_row; q += 2) {
      if (q + D + 1 < n)
        for (int k = 0; k < 2; ++k)
          sprig::detail::prefetch_row_start<R * N * 4>(X + static_cast<std::int64_t>(rows[q + D + k]) * stride);
      for (int k = 0; k < 2; ++k) {
        const float* x = X + static_cast<std::int64_t>(rows[q + k]) * stride;
        const Bt w(k == 0 ? 0.5f : 0.25f);
        for (int r = 0; r < R; ++r) acc[k][r] = xsimd::fma(w, Bt::load_unaligned(x + r * N), acc[k][r]);
      }
    }
    for (int r = 0; r < R; ++r) (acc[0][r] + acc[1][r] + Bt::load_unaligned(out + r * N)).store_unaligned(out + r * N);
  }
}

// The ceiling of a one-row-per-weight kernel. Args: K (rows of X), B (batch, a multiple of
// the SIMD width N). X is K x B with the row stride Sequential gives activations (an odd
// number of cache lines); 100 weights per output row, their rows drawn uniformly from K, 2
// chains of up to 8 registers; wider batches run in panels of 8 registers, one after the
// other, as the kernels do (panels.hpp). Whether X stays in L1 (K * stride * 4 <= ~24 KiB),
// L2 (the train_step MLP: K = 784 or 1024, 441-576 KiB) or spills to L3 (the FFN's
// 4096 x 128 hidden activation, 2.3 MiB) sets the rate. GFLOP/s counts 2 * B per weight, as
// the kernels' do.
void BM_row_stream(benchmark::State& state) {
  using Bt = sprig::detail::Batch<float>;
  constexpr std::int64_t N = Bt::size;
  const std::int64_t K = state.range(0), B = state.range(1);
  if (B % N != 0 || B < N) {
    state.SkipWithError("B must be a positive multiple of the SIMD width");
    return;
  }
  const std::int64_t stride = sprig::Sequential<float>::activation_stride(B);
  const auto X = random_matrix(K, B, 7, stride);
  constexpr std::int64_t weights_per_row = 100, total = 100000;
  std::vector<std::int32_t> rows(total);
  std::mt19937 g(11);
  std::uniform_int_distribution<std::int32_t> pick(0, static_cast<std::int32_t>(K - 1));
  for (auto& r : rows) r = pick(g);
  std::vector<float> out(static_cast<std::size_t>(B));
  const std::int64_t regs = B / N;
  for (auto _ : state) {
    for (std::int64_t r0 = 0; r0 < regs; r0 += 8) {
      const float* xp = X.data() + r0 * N;
      float* op = out.data() + r0 * N;
      switch (std::min<std::int64_t>(8, regs - r0)) {
        case 1: row_stream<1>(xp, stride, rows, weights_per_row, op); break;
        case 2: row_stream<2>(xp, stride, rows, weights_per_row, op); break;
        case 3: row_stream<3>(xp, stride, rows, weights_per_row, op); break;
        case 4: row_stream<4>(xp, stride, rows, weights_per_row, op); break;
        case 5: row_stream<5>(xp, stride, rows, weights_per_row, op); break;
        case 6: row_stream<6>(xp, stride, rows, weights_per_row, op); break;
        case 7: row_stream<7>(xp, stride, rows, weights_per_row, op); break;
        default: row_stream<8>(xp, stride, rows, weights_per_row, op); break;
      }
    }
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * double(total) * double(B) * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["ns/weight"] = benchmark::Counter(double(total) * 1e-9, benchmark::Counter::kIsIterationInvariantRate |
                                                                             benchmark::Counter::kInvert);
}

// The compute ceiling beside BM_row_stream's memory one: 12 independent chains of register
// multiply-adds (enough to cover the FMA latency on every ISA sprig targets), no memory.
void BM_fma_peak(benchmark::State& state) {
  using Bt = sprig::detail::Batch<float>;
  constexpr int chains = 12;
  constexpr std::int64_t steps = 100000;
  Bt acc[chains];
  for (int k = 0; k < chains; ++k) acc[k] = Bt(0.001f * static_cast<float>(k + 1));  // distinct: no CSE
  const Bt m(0.999f), a(0.001f);
  for (auto _ : state) {
    for (std::int64_t i = 0; i < steps; ++i)
      for (int k = 0; k < chains; ++k) acc[k] = xsimd::fma(m, acc[k], a);
    for (auto& v : acc) benchmark::DoNotOptimize(v);
  }
  state.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * chains * steps * double(Bt::size) * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}
#endif

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
  // the two layers of bench/train_step's feed-forward block at its batch, and at the shard
  // of it that each of 2 or 4 data-parallel ranks computes (bench/dist_step)
  for (std::int64_t B : {32, 64, 128}) {
    b->Args({4096, 1024, 100, B});
    b->Args({1024, 4096, 100, B});
  }
  b->Unit(benchmark::kMillisecond);
}

// The train_step shapes (X of K = 784 to 4096 rows of 512 bytes), 64 KiB to 1 MiB blocks.
void block_budget_args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"M", "K", "B", "KiB"});
  b->ArgsProduct({{1024}, {784, 1024, 4096}, {128}, {64, 128, 256, 512, 1024}});
  b->ArgsProduct({{4096}, {1024}, {128}, {64, 128, 256, 512, 1024}});
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
BENCHMARK(BM_sddmm_dx)->Apply(kernel_args);
BENCHMARK(BM_spmm_block_budget)->Apply(block_budget_args);
BENCHMARK(BM_sddmm_block_budget)->Apply(block_budget_args);
#if SPRIG_KERNEL_SIMD
BENCHMARK(BM_row_stream)
    ->ArgNames({"K", "B"})
    ->Args({32, 128})
    ->Args({784, 128})
    ->Args({1024, 128})
    ->Args({4096, 128})
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_fma_peak)->Unit(benchmark::kMillisecond);
#endif
BENCHMARK(BM_transpose_rebuild)->Apply(transpose_args);
BENCHMARK(BM_transpose_refresh)->Apply(transpose_args);

BENCHMARK_MAIN();
