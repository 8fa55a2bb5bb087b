# PaddedCSR benchmarks: bench_padded_csr (Google Benchmark: random insert/delete, init,
# compact on 4096 x 4096 at density 0.1) and memory_table (dense vs CSR vs Padded-CSR
# bytes, Markdown). memory_table needs nothing but sprig.
add_executable(memory_table ${CMAKE_CURRENT_LIST_DIR}/memory_table.cpp)
target_link_libraries(memory_table PRIVATE sprig::sprig sprig_dev_flags)

find_package(benchmark QUIET)
if(benchmark_FOUND)
  add_executable(bench_padded_csr ${CMAKE_CURRENT_LIST_DIR}/bench_padded_csr.cpp)
  target_link_libraries(bench_padded_csr PRIVATE sprig::sprig sprig_dev_flags benchmark::benchmark)
else()
  message(STATUS "sprig: bench_padded_csr skipped (needs Google Benchmark)")
endif()

if(SPRIG_BUILD_TESTS)
  # memory_table exits 1 when PaddedCSR::memory() disagrees with the format's formula.
  add_test(NAME bench:memory_table COMMAND memory_table)
  set_tests_properties(bench:memory_table PROPERTIES LABELS bench)
endif()
