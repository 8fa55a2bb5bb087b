// bench/gemm_report.hpp — what the GEMM benchmarks (dense_gemm_bench, bf16_gemm_bench) report
// beside their times: a GFLOP/s counter, and the OpenBLAS kernel family in the run's context.
#pragma once

#include <benchmark/benchmark.h>

#include <cstdlib>
#include <string>

namespace sprig_bench {

// GFLOP/s of an (M, N, K) = (range 0, 1, 2) product: 2 M N K per iteration.
inline void set_gemm_rate(benchmark::State& state) {
  const double flops = 2.0 * static_cast<double>(state.range(0)) * state.range(1) * state.range(2);
  state.counters["GFLOP/s"] =
      benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
}

// Names OPENBLAS_CORETYPE in the report's context: some machines set it system-wide (Haswell,
// for older OpenBLAS builds), which holds OpenBLAS to kernels narrower than the CPU's (on a
// Zen 5, about 100 GFLOP/s instead of about 190), so an OpenBLAS row is read with it.
inline void name_openblas_coretype() {
  const char* coretype = std::getenv("OPENBLAS_CORETYPE");
  benchmark::AddCustomContext("OPENBLAS_CORETYPE",
                              coretype ? std::string(coretype) + " (set: OpenBLAS runs that kernel family)"
                                       : std::string("unset (OpenBLAS picks its kernels for this CPU)"));
}

}  // namespace sprig_bench

// BENCHMARK_MAIN with the OpenBLAS kernel family named in the report.
#define SPRIG_GEMM_BENCHMARK_MAIN()                                   \
  int main(int argc, char** argv) {                                   \
    sprig_bench::name_openblas_coretype();                            \
    benchmark::Initialize(&argc, argv);                               \
    if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1; \
    benchmark::RunSpecifiedBenchmarks();                              \
    benchmark::Shutdown();                                            \
    return 0;                                                         \
  }
