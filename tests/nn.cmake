# The dense GEMM (include/sprig/kernels/dense_gemm.hpp) has two paths: portable loops (every test)
# and CBLAS when SPRIG_USE_CBLAS is defined. test_dense_gemm_cblas builds the gemm test a
# second time against OpenBLAS (the OpenMP build, cmake/SprigOpenBLAS.cmake) when it is
# installed.
if(TARGET test_dense_gemm)
  include(SprigOpenBLAS)
  if(TARGET sprig::openblas_openmp)
    add_executable(test_dense_gemm_cblas ${CMAKE_CURRENT_SOURCE_DIR}/test_dense_gemm.cpp)
    target_link_libraries(test_dense_gemm_cblas PRIVATE sprig::sprig sprig_dev_flags Catch2::Catch2WithMain
                          sprig::openblas_openmp)
    catch_discover_tests(test_dense_gemm_cblas TEST_PREFIX "test_dense_gemm_cblas:" PROPERTIES LABELS unit)
  endif()
endif()
