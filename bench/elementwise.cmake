# bench_elementwise (Google Benchmark): the element-wise passes of a training step (the
# optimizers' updates) as sprig runs them against the plain loops they replaced, side by side.
find_package(benchmark QUIET)
if(benchmark_FOUND)
  add_executable(bench_elementwise ${CMAKE_CURRENT_LIST_DIR}/bench_elementwise.cpp)
  target_link_libraries(bench_elementwise PRIVATE sprig::sprig sprig_dev_flags benchmark::benchmark)
endif()
