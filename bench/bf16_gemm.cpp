// bf16_gemm's paths against the fp32 GEMMs at transformer shapes (M, N, K) = (640, 1024, 640),
// (2560, 1024, 640), (640, 1024, 2560): C[M x N] = A[M x K] B[K x N], overwrite, row-major, in
// GFLOP/s (2 M N K per call; every path's packing is inside the timed call).
//   fp32/portable     sprig's portable fp32 loop nest (dense_gemm.hpp, no CBLAS)
//   fp32/openblas     cblas_sgemm (the OpenMP build of OpenBLAS; only when it is linked)
//   bf16/<path>       bf16_gemm on that path; a path this CPU lacks is skipped with an error
//                     row that says why (never a time)
// Run it on one thread, OPENBLAS_CORETYPE unset (OpenBLAS then picks its kernels for the CPU):
//   env -u OPENBLAS_CORETYPE OMP_NUM_THREADS=1 ./bf16_gemm_bench --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
// Debian 12's OpenBLAS 0.3.21 is built without bfloat16 (no cblas_sbgemm symbol), so there is
// no BLAS bf16 GEMM to put beside them.
#include <sprig/kernels/bf16_gemm.hpp>

#include <benchmark/benchmark.h>

#include "gemm_report.hpp"

#include <cstdint>
#include <random>
#include <string>

#include <sprig/kernels/dense_gemm.hpp>

#if defined(SPRIG_OPENBLAS)
#  include <cblas.h>
#endif

namespace {

struct Operands {
  sprig::Matrix<float> A, B, C;
  std::vector<sprig::bfloat16> Ab, Bb;
  Operands(std::int64_t M, std::int64_t N, std::int64_t K) : A(M, K), B(K, N), C(M, N) {
    std::mt19937 rng(42);
    std::uniform_real_distribution<float> d(-1.0f, 1.0f);
    for (std::int64_t i = 0; i < M; ++i)
      for (std::int64_t k = 0; k < K; ++k) A(i, k) = d(rng);
    for (std::int64_t k = 0; k < K; ++k)
      for (std::int64_t j = 0; j < N; ++j) B(k, j) = d(rng);
    Ab.resize(static_cast<std::size_t>(M * K));
    Bb.resize(static_cast<std::size_t>(K * N));
    sprig::to_bfloat16(std::span<const float>(A.data(), Ab.size()), std::span<sprig::bfloat16>(Ab));
    sprig::to_bfloat16(std::span<const float>(B.data(), Bb.size()), std::span<sprig::bfloat16>(Bb));
  }
};

void fp32_portable(benchmark::State& state) {
  const std::int64_t M = state.range(0), N = state.range(1), K = state.range(2);
  Operands op(M, N, K);
  for (auto _ : state) {
    sprig::detail::gemm_portable<float>(sprig::Trans::no, sprig::Trans::no, M, N, K, 1.0f, op.A.view(), op.B.view(),
                                        0.0f, op.C.view());
    benchmark::DoNotOptimize(op.C.data());
  }
  sprig_bench::set_gemm_rate(state);
}

#if defined(SPRIG_OPENBLAS)
void fp32_openblas(benchmark::State& state) {
  const int M = static_cast<int>(state.range(0)), N = static_cast<int>(state.range(1)),
            K = static_cast<int>(state.range(2));
  Operands op(M, N, K);
  for (auto _ : state) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, N, K, 1.0f, op.A.data(), K, op.B.data(), N, 0.0f,
                op.C.data(), N);
    benchmark::DoNotOptimize(op.C.data());
  }
  sprig_bench::set_gemm_rate(state);
}
#endif

void bf16(benchmark::State& state, sprig::Bf16GemmPath path) {
  if (!sprig::bf16_gemm_available(path)) {
    state.SkipWithError(("not run: " + sprig::bf16_gemm_unavailable_reason(path)).c_str());
    return;
  }
  const std::int64_t M = state.range(0), N = state.range(1), K = state.range(2);
  Operands op(M, N, K);
  const sprig::ConstMatrixView<sprig::bfloat16> A(op.Ab.data(), M, K), B(op.Bb.data(), K, N);
  for (auto _ : state) {
    sprig::bf16_gemm(A, B, op.C.view(), sprig::Update::overwrite, path);
    benchmark::DoNotOptimize(op.C.data());
  }
  sprig_bench::set_gemm_rate(state);
}

void shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"M", "N", "K"});
  b->Args({640, 1024, 640})->Args({2560, 1024, 640})->Args({640, 1024, 2560});
  b->Unit(benchmark::kMillisecond)->UseRealTime();
}

BENCHMARK(fp32_portable)->Name("fp32/portable")->Apply(shapes);
#if defined(SPRIG_OPENBLAS)
BENCHMARK(fp32_openblas)->Name("fp32/openblas")->Apply(shapes);
#endif
BENCHMARK_CAPTURE(bf16, portable, sprig::Bf16GemmPath::portable)->Name("bf16/portable")->Apply(shapes);
BENCHMARK_CAPTURE(bf16, avx512_bf16, sprig::Bf16GemmPath::avx512_bf16)->Name("bf16/avx512_bf16")->Apply(shapes);
BENCHMARK_CAPTURE(bf16, amx, sprig::Bf16GemmPath::amx)->Name("bf16/amx")->Apply(shapes);

}  // namespace

SPRIG_GEMM_BENCHMARK_MAIN()
