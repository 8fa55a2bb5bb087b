# train_step: one end-to-end training step, sparse (sprig) against dense (sprig::Linear on
# OpenBLAS). Needs CLI11, OpenMP and the OpenMP build of OpenBLAS (Debian:
# libopenblas-openmp-dev): the pthreads build's idle workers spin and fight sprig's OpenMP
# kernels for the cores. The library path is linked by full path, so CMake puts its folder in
# the build RPATH and the loader takes this build rather than whatever the libopenblas.so.0
# alternative points to (`ldd train_step` shows it; the program prints the mapped file too).
find_package(CLI11 QUIET)
find_package(OpenMP QUIET COMPONENTS CXX)
find_library(SPRIG_TRAIN_STEP_OPENBLAS NAMES openblas
  PATHS /usr/lib/${CMAKE_LIBRARY_ARCHITECTURE}/openblas-openmp /usr/lib/openblas-openmp
  NO_DEFAULT_PATH)
find_path(SPRIG_TRAIN_STEP_OPENBLAS_INCLUDE cblas.h
  PATHS /usr/include/${CMAKE_LIBRARY_ARCHITECTURE}/openblas-openmp /usr/include/openblas-openmp
  NO_DEFAULT_PATH)

if(SPRIG_TRAIN_STEP_OPENBLAS AND SPRIG_TRAIN_STEP_OPENBLAS_INCLUDE AND CLI11_FOUND AND OpenMP_CXX_FOUND)
  add_executable(train_step ${CMAKE_CURRENT_LIST_DIR}/train_step.cpp)
  target_include_directories(train_step SYSTEM PRIVATE ${SPRIG_TRAIN_STEP_OPENBLAS_INCLUDE})
  target_compile_definitions(train_step PRIVATE SPRIG_USE_CBLAS=1)
  target_link_libraries(train_step PRIVATE sprig::sprig sprig_dev_flags OpenMP::OpenMP_CXX
                        ${SPRIG_TRAIN_STEP_OPENBLAS})
  if(TARGET CLI11::CLI11)
    target_link_libraries(train_step PRIVATE CLI11::CLI11)
  endif()
else()
  message(STATUS "sprig: train_step skipped (needs CLI11, OpenMP and the OpenMP build of OpenBLAS)")
endif()
