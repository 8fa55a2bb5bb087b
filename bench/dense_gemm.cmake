# dense_gemm_bench: sprig's portable fp32 GEMM against OpenBLAS's sgemm (when the OpenMP build
# is there) in its three forms at the library's shapes. Needs Google Benchmark.
find_package(benchmark QUIET)
include(SprigOpenBLAS)

if(benchmark_FOUND)
  add_executable(dense_gemm_bench ${CMAKE_CURRENT_LIST_DIR}/dense_gemm.cpp)
  target_link_libraries(dense_gemm_bench PRIVATE sprig::sprig sprig_dev_flags benchmark::benchmark)
  if(TARGET sprig::openblas_openmp)
    target_link_libraries(dense_gemm_bench PRIVATE sprig::openblas_openmp)
  endif()
else()
  message(STATUS "sprig: dense_gemm_bench skipped (needs Google Benchmark)")
endif()
