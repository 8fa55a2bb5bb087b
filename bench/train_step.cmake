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
  # train_step: 16-bit column indices (all layers are at most 4096 wide); train_step_i32: 32-bit
  foreach(variant IN ITEMS train_step train_step_i32)
    add_executable(${variant} ${CMAKE_CURRENT_LIST_DIR}/train_step.cpp)
    target_include_directories(${variant} SYSTEM PRIVATE ${SPRIG_TRAIN_STEP_OPENBLAS_INCLUDE})
    target_compile_definitions(${variant} PRIVATE SPRIG_USE_CBLAS=1)
    target_link_libraries(${variant} PRIVATE sprig::sprig sprig_dev_flags OpenMP::OpenMP_CXX
                          ${SPRIG_TRAIN_STEP_OPENBLAS})
    if(TARGET CLI11::CLI11)
      target_link_libraries(${variant} PRIVATE CLI11::CLI11)
    endif()
  endforeach()
  target_compile_definitions(train_step_i32 PRIVATE SPRIG_TRAIN_STEP_INDEX_BITS=32)
  # smoke: every phase (dense and sparse steps, SET update, profile, one memory process) runs
  foreach(variant IN ITEMS train_step train_step_i32)
    add_test(NAME bench:${variant}_smoke
             COMMAND ${variant} --models mlp,ffn --sparsities 0,0.9 --threads 1 --rounds 1 --steps-per-round 2
                     --warmup 1 --set-updates 1 --delta-t 4 --profile 0.9 --profile-steps 2 --batch 16)
  endforeach()
else()
  message(STATUS "sprig: train_step skipped (needs CLI11, OpenMP and the OpenMP build of OpenBLAS)")
endif()

# train_step_portable: the same program with no BLAS linked (dense layers on sprig's portable
# GEMM): the time and resident memory of a process that trains only sparse models.
if(CLI11_FOUND AND OpenMP_CXX_FOUND)
  add_executable(train_step_portable ${CMAKE_CURRENT_LIST_DIR}/train_step.cpp)
  target_compile_definitions(train_step_portable PRIVATE SPRIG_TRAIN_STEP_BLAS=0)
  target_link_libraries(train_step_portable PRIVATE sprig::sprig sprig_dev_flags OpenMP::OpenMP_CXX)
  if(TARGET CLI11::CLI11)
    target_link_libraries(train_step_portable PRIVATE CLI11::CLI11)
  endif()
  add_test(NAME bench:train_step_portable_smoke
           COMMAND train_step_portable --models mlp,ffn --sparsities 0,0.9 --threads 1 --rounds 1 --steps-per-round 2
                   --warmup 1 --set-updates 1 --delta-t 4 --profile 0.9 --profile-steps 2 --batch 16)
endif()
