# Kernel benchmarks: compare_kernels (sprig vs OpenBLAS sgemm and Eigen, needs CLI11, Eigen
# and the OpenMP build of OpenBLAS) and bench_kernels (Google Benchmark). Each target is
# added only when its packages are found, so a machine without them still configures.
find_package(benchmark QUIET)
find_package(Eigen3 3.4 QUIET NO_MODULE)
find_package(CLI11 QUIET)

# The OpenMP build of OpenBLAS (Debian: libopenblas-openmp-dev). The pthreads build's idle
# workers spin after each call and fight OpenMP kernels for the cores, falsifying 2-thread
# ratios, so it is never picked up from the default library path.
if(NOT SPRIG_OPENBLAS_OPENMP_LIBRARY)
  find_library(SPRIG_OPENBLAS_OPENMP_LIBRARY NAMES openblas
    PATHS /usr/lib/${CMAKE_LIBRARY_ARCHITECTURE}/openblas-openmp /usr/lib/openblas-openmp
    NO_DEFAULT_PATH)
endif()
if(NOT SPRIG_OPENBLAS_OPENMP_INCLUDE_DIR)
  find_path(SPRIG_OPENBLAS_OPENMP_INCLUDE_DIR cblas.h
    PATHS /usr/include/${CMAKE_LIBRARY_ARCHITECTURE}/openblas-openmp /usr/include/openblas-openmp
    NO_DEFAULT_PATH)
endif()

if(SPRIG_OPENBLAS_OPENMP_LIBRARY AND SPRIG_OPENBLAS_OPENMP_INCLUDE_DIR AND TARGET Eigen3::Eigen AND CLI11_FOUND)
  add_executable(compare_kernels ${CMAKE_CURRENT_LIST_DIR}/compare_kernels.cpp)
  target_include_directories(compare_kernels SYSTEM PRIVATE ${SPRIG_OPENBLAS_OPENMP_INCLUDE_DIR})
  target_link_libraries(compare_kernels PRIVATE sprig::sprig sprig_dev_flags Eigen3::Eigen ${SPRIG_OPENBLAS_OPENMP_LIBRARY})
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
