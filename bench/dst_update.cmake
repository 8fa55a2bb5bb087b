# dst_update: cost of one SET / RigL update on a layer against one training step of it.
# RigL's dense-gradient blocks use a dense GEMM: the OpenMP build of OpenBLAS when present.
find_package(CLI11 QUIET)
find_library(SPRIG_DST_UPDATE_OPENBLAS NAMES openblas
  PATHS /usr/lib/${CMAKE_LIBRARY_ARCHITECTURE}/openblas-openmp NO_DEFAULT_PATH)
find_path(SPRIG_DST_UPDATE_OPENBLAS_INCLUDE cblas.h
  PATHS /usr/include/${CMAKE_LIBRARY_ARCHITECTURE}/openblas-openmp NO_DEFAULT_PATH)
if(CLI11_FOUND)
  add_executable(dst_update ${CMAKE_CURRENT_LIST_DIR}/dst_update.cpp)
  target_link_libraries(dst_update PRIVATE sprig::sprig sprig_dev_flags CLI11::CLI11)
  if(SPRIG_DST_UPDATE_OPENBLAS AND SPRIG_DST_UPDATE_OPENBLAS_INCLUDE)
    target_include_directories(dst_update SYSTEM PRIVATE ${SPRIG_DST_UPDATE_OPENBLAS_INCLUDE})
    target_compile_definitions(dst_update PRIVATE SPRIG_USE_CBLAS=1 SPRIG_OPENBLAS=1)
    target_link_libraries(dst_update PRIVATE ${SPRIG_DST_UPDATE_OPENBLAS})
  endif()
endif()
