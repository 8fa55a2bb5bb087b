# dst_update: cost of one SET / RigL update on a layer against one training step of it.
# RigL's dense-gradient blocks use a dense GEMM: the OpenMP build of OpenBLAS when present.
find_package(CLI11 QUIET)
include(SprigOpenBLAS)
if(CLI11_FOUND)
  add_executable(dst_update ${CMAKE_CURRENT_LIST_DIR}/dst_update.cpp)
  target_link_libraries(dst_update PRIVATE sprig::sprig sprig_dev_flags CLI11::CLI11)
  if(TARGET sprig::openblas_openmp)
    target_link_libraries(dst_update PRIVATE sprig::openblas_openmp)
  endif()
endif()
