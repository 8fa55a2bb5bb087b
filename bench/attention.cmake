# bench_attention: CausalSelfAttention (nn/attention.hpp) against the previous implementation
# (tests/attention_reference.hpp), forward and backward side by side (Google Benchmark).
find_package(benchmark QUIET)
find_package(OpenMP QUIET COMPONENTS CXX)
if(benchmark_FOUND)
  add_executable(bench_attention ${CMAKE_CURRENT_LIST_DIR}/bench_attention.cpp)
  target_link_libraries(bench_attention PRIVATE sprig::sprig sprig_dev_flags benchmark::benchmark)
  target_include_directories(bench_attention PRIVATE ${PROJECT_SOURCE_DIR}/tests)  # the reference
  if(OpenMP_CXX_FOUND)
    target_link_libraries(bench_attention PRIVATE OpenMP::OpenMP_CXX)
  endif()
  # smoke: each of the four benchmarks runs (one short repetition)
  add_test(NAME bench:attention_smoke COMMAND bench_attention --benchmark_min_time=0.01)
else()
  message(STATUS "sprig: bench_attention skipped (needs Google Benchmark)")
endif()
