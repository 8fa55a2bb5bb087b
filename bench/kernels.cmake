# Kernel benchmarks: compare_kernels (sprig vs OpenBLAS sgemm and Eigen, needs CLI11, Eigen
# and the OpenMP build of OpenBLAS) and bench_kernels (Google Benchmark). Each target is
# added only when its packages are found, so a machine without them still configures.
find_package(benchmark QUIET)
find_package(Eigen3 3.4 QUIET NO_MODULE)
find_package(CLI11 QUIET)

# The OpenMP build of OpenBLAS (cmake/SprigOpenBLAS.cmake): with the pthreads build's spinning
# workers the 2-thread ratios would be false.
include(SprigOpenBLAS)

if(TARGET sprig::openblas_openmp AND TARGET Eigen3::Eigen AND CLI11_FOUND)
  add_executable(compare_kernels ${CMAKE_CURRENT_LIST_DIR}/compare_kernels.cpp)
  target_link_libraries(compare_kernels PRIVATE sprig::sprig sprig_dev_flags Eigen3::Eigen sprig::openblas_openmp)
  if(SPRIG_DISPATCH)
    sprig_dispatch(compare_kernels)
  endif()
  if(TARGET CLI11::CLI11)
    target_link_libraries(compare_kernels PRIVATE CLI11::CLI11)
  endif()
else()
  message(STATUS "sprig: compare_kernels skipped (needs the OpenMP build of OpenBLAS, Eigen 3.4 and CLI11)")
endif()

if(benchmark_FOUND)
  add_executable(bench_kernels ${CMAKE_CURRENT_LIST_DIR}/bench_kernels.cpp)
  target_link_libraries(bench_kernels PRIVATE sprig::sprig sprig_dev_flags benchmark::benchmark)
else()
  message(STATUS "sprig: bench_kernels skipped (needs Google Benchmark)")
endif()
