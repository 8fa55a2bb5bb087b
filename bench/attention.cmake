# bench_attention: CausalSelfAttention (nn/attention.hpp) against the previous implementation
# (nn/attention_reference.hpp), forward and backward side by side (Google Benchmark).
find_package(benchmark QUIET)
find_package(OpenMP QUIET COMPONENTS CXX)
if(benchmark_FOUND)
  add_executable(bench_attention ${CMAKE_CURRENT_LIST_DIR}/bench_attention.cpp)
  target_link_libraries(bench_attention PRIVATE sprig::sprig sprig_dev_flags benchmark::benchmark)
  if(OpenMP_CXX_FOUND)
    target_link_libraries(bench_attention PRIVATE OpenMP::OpenMP_CXX)
  endif()
else()
  message(STATUS "sprig: bench_attention skipped (needs Google Benchmark)")
endif()
