# bf16_gemm_bench: bf16_gemm's paths (portable, AVX512-BF16, AMX) against the fp32 GEMMs
# (sprig's portable one; OpenBLAS's sgemm when the OpenMP build is there). Needs Google
# Benchmark.
find_package(benchmark QUIET)
include(SprigOpenBLAS)

if(benchmark_FOUND)
  add_executable(bf16_gemm_bench ${CMAKE_CURRENT_LIST_DIR}/bf16_gemm.cpp)
  target_link_libraries(bf16_gemm_bench PRIVATE sprig::sprig sprig_dev_flags benchmark::benchmark)
  if(TARGET sprig::openblas_openmp)
    target_link_libraries(bf16_gemm_bench PRIVATE sprig::openblas_openmp)
  endif()
else()
  message(STATUS "sprig: bf16_gemm_bench skipped (needs Google Benchmark)")
endif()
