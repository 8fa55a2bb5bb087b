// sprig's portable fp32 GEMM (kernels/dense_gemm.hpp's gemm without CBLAS) against OpenBLAS's sgemm in the
// three forms the library calls, at the shapes it calls them with; GFLOP/s (2 M N K per call,
// C overwritten, packing inside the timed call):
//   NN  (1024, 128, 1024)  a dense 1024 x 1024 layer's forward Y = W X at batch 128
//   TN  (1024, 128, 1024)  its input gradient dX = W^T dY
//   NT  (1024, 1024, 128)  its weight gradient dW = dY X^T
//   NT  (334, 784, 128)    a RigL update's streamed dense-gradient block, 784-input layer
//   NT  (409, 640, 1024)   the same for a GPT projection at mini40m (640 inputs, B T = 1024)
//   NN  (65, 1024, 640)    a char GPT's 65-row head
// Threads from OMP_NUM_THREADS (the portable path shares out op(B)'s panels; OpenBLAS's OpenMP
// build its own way):
//   env -u OPENBLAS_CORETYPE OMP_NUM_THREADS=1 ./dense_gemm_bench --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
#include <sprig/kernels/dense_gemm.hpp>

#include <benchmark/benchmark.h>

#include "gemm_report.hpp"

#include <cstdint>
#include <random>

#if defined(SPRIG_OPENBLAS)
#  include <cblas.h>
#endif

namespace {

using sprig::Trans;

// op(A) is M x K and op(B) K x N, stored as the form (range 3: 0 NN, 1 TN, 2 NT) says.
struct Operands {
  Trans ta, tb;
  sprig::Matrix<float> A, B, C;
  Operands(std::int64_t M, std::int64_t N, std::int64_t K, std::int64_t form)
      : ta(form == 1 ? Trans::yes : Trans::no),
        tb(form == 2 ? Trans::yes : Trans::no),
        A(ta == Trans::no ? M : K, ta == Trans::no ? K : M),
        B(tb == Trans::no ? K : N, tb == Trans::no ? N : K),
        C(M, N) {
    std::mt19937 rng(42);
    std::uniform_real_distribution<float> d(-1.0f, 1.0f);
    for (std::int64_t i = 0; i < A.rows(); ++i)
      for (std::int64_t k = 0; k < A.cols(); ++k) A(i, k) = d(rng);
    for (std::int64_t i = 0; i < B.rows(); ++i)
      for (std::int64_t k = 0; k < B.cols(); ++k) B(i, k) = d(rng);
  }
};

void portable(benchmark::State& state) {
  const std::int64_t M = state.range(0), N = state.range(1), K = state.range(2);
  Operands op(M, N, K, state.range(3));
  for (auto _ : state) {
    sprig::detail::gemm_portable<float>(op.ta, op.tb, M, N, K, 1.0f, op.A.view(), op.B.view(), 0.0f, op.C.view());
    benchmark::DoNotOptimize(op.C.data());
  }
  sprig_bench::set_gemm_rate(state);
}

#if defined(SPRIG_OPENBLAS)
void openblas(benchmark::State& state) {
  const int M = static_cast<int>(state.range(0)), N = static_cast<int>(state.range(1)),
            K = static_cast<int>(state.range(2));
  Operands op(M, N, K, state.range(3));
  const auto ta = op.ta == Trans::no ? CblasNoTrans : CblasTrans, tb = op.tb == Trans::no ? CblasNoTrans : CblasTrans;
  for (auto _ : state) {
    cblas_sgemm(CblasRowMajor, ta, tb, M, N, K, 1.0f, op.A.data(), static_cast<int>(op.A.stride()), op.B.data(),
                static_cast<int>(op.B.stride()), 0.0f, op.C.data(), static_cast<int>(op.C.stride()));
    benchmark::DoNotOptimize(op.C.data());
  }
  sprig_bench::set_gemm_rate(state);
}
#endif

void shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"M", "N", "K", "form"});
  b->Args({1024, 128, 1024, 0})->Args({1024, 128, 1024, 1})->Args({1024, 1024, 128, 2});
  b->Args({334, 784, 128, 2})->Args({409, 640, 1024, 2})->Args({65, 1024, 640, 0});
  b->Unit(benchmark::kMillisecond)->UseRealTime();
}

BENCHMARK(portable)->Name("fp32/portable")->Apply(shapes);
#if defined(SPRIG_OPENBLAS)
BENCHMARK(openblas)->Name("fp32/openblas")->Apply(shapes);
#endif

}  // namespace

SPRIG_GEMM_BENCHMARK_MAIN()
